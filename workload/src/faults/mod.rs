//! Faults for local runs: the injector and its schedule, its two executors (`local`: a local
//! cluster's processes and proxied links, see `cluster/`; `docker`: node containers through
//! the Docker API), disk faults on a stopped node's store, the fault log, and the
//! quiet-period requests that pause it (as `$ANTITHESIS_STOP_FAULTS` pauses Antithesis).

pub mod disk;
pub mod docker;
pub mod injector;
pub mod local;
pub mod log;
pub mod quiet;
pub mod targets;

pub use quiet::QuietRequests;
