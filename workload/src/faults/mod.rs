//! Faults for local runs: the proxied network, node containers through the Docker API, the
//! injector and its schedule, and the quiet-period requests that pause it (as
//! `$ANTITHESIS_STOP_FAULTS` pauses Antithesis).

pub mod docker;
pub mod forge;
pub mod injector;
pub mod proxy;
pub mod quiet;
pub mod targets;

pub use quiet::QuietRequests;
