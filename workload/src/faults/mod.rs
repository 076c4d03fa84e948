//! Faults for local runs: the proxied network, node containers through the Docker API, disk
//! faults on a stopped node's store, the injector and its schedule, and the quiet-period
//! requests that pause it (as `$ANTITHESIS_STOP_FAULTS` pauses Antithesis).

pub mod disk;
pub mod docker;
pub mod forge;
pub mod injector;
pub mod lazyfs;
pub mod proxy;
pub mod quiet;
pub mod targets;

pub use quiet::QuietRequests;
