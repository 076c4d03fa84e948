//! Faults for local runs: the injector and its schedule (through the cluster's proxied links
//! and power-loss layer, see `cluster/`), node containers through the Docker API, disk faults
//! on a stopped node's store, and the quiet-period requests that pause it (as
//! `$ANTITHESIS_STOP_FAULTS` pauses Antithesis).

pub mod disk;
pub mod docker;
pub mod injector;
pub mod quiet;
pub mod targets;

pub use quiet::QuietRequests;
