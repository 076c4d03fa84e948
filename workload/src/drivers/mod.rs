//! The tasks that act on the cluster while a run goes on.
pub mod monitor;
pub mod publisher;
pub mod reader;
pub mod scaler;
