//! Talking to nats-server: the JetStream API with its error codes and the client
//! connection, the monitoring endpoints, each node's own replica state, and who leads what.

pub mod jsapi;
pub mod monitor;
pub mod replicas;
pub mod view;
