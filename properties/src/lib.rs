//! The property catalog and the pure checkers of the JetStream workload.
//!
//! Nothing here does I/O or reads a clock: drivers feed observations in, checkers say which
//! property (if any) an observation violates. That keeps every judgment unit-testable and
//! the drivers free of rules.

pub mod catalog;
pub mod confirm;
pub mod durable;
pub mod liveness;
pub mod operations;
pub mod payload;
pub mod publish;
pub mod read;
pub mod replicas;
pub mod scale;

pub use catalog::{Kind, Property};

/// The three ends of a question the workload asks (Jepsen's valid? true / false /
/// unknown): it held, it failed, or it could not be answered at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Held,
    Failed,
    Unknown,
}

/// An observation that breaks a property, with the values that show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub property: Property,
    pub details: serde_json::Value,
}

impl Violation {
    pub fn new(property: Property, details: serde_json::Value) -> Self {
        Self { property, details }
    }
}
