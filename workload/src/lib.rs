#![recursion_limit = "256"]
//! The workload as a library (the binary is `main.rs`; the tests drive both). Folders from
//! the bottom up: foundations (`config`, `random`, `round`, `logs`, `history`, `sdk`), `nats/` (the
//! server's APIs), `cluster/` (local nodes and the layers faults act through), `faults/`,
//! `context/` (what a stream's drivers share), `drivers/`, `report/`, `run/` (a run, its
//! final verification, the Test Composer commands), `tools/` (bench, matrix). Each imports
//! only those before it: docs/architecture.md.

pub mod config;
pub mod logs;
pub mod random;
pub mod round;
pub mod history;
pub mod sdk;

pub mod nats;
pub mod cluster;
pub mod faults;
pub mod context;
pub mod drivers;
pub mod report;
pub mod run;
pub mod tools;
