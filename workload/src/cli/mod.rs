//! The command line of the `workload` binary: what each command takes (`args`), how flags
//! and a composer driver's drawn knobs change the settings (`settings`), what a command
//! that drives a workload does (`execute`), and the commands that read a saved run or run
//! others (`offline`).

pub mod args;
pub mod execute;
pub mod offline;
pub mod settings;

use std::process::ExitCode;

/// A property failed (with --allow-known: one no known server issue explains).
pub const EXIT_PROPERTY_FAILED: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
/// The run could not be carried out (infrastructure).
pub const EXIT_INFRA: u8 = 3;
/// Nothing failed, but some safety question could not be answered (verdict "unknown").
pub const EXIT_UNKNOWN: u8 = 4;

pub fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(EXIT_USAGE)
}
