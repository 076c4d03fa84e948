//! The property catalog and the pure checkers of the JetStream workload.
//!
//! Nothing here does I/O or reads a clock: drivers feed observations in, checkers say which
//! property (if any) an observation violates. That keeps every judgment unit-testable and
//! the drivers free of rules.

pub mod catalog;
pub mod confirm;
pub mod durable;
pub mod known;
pub mod leaders;
pub mod liveness;
pub mod operations;
pub mod outage;
pub mod outcomes;
pub mod payload;
pub mod publish;
pub mod ranges;
pub mod read;
pub mod replicas;
pub mod scale;
pub mod verdict;

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

impl Outcome {
    /// The answer to "did it hold everywhere?" from two answers: a failure anywhere fails
    /// it, else a question unanswered anywhere leaves it unknown.
    pub fn and(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Failed, _) | (_, Outcome::Failed) => Outcome::Failed,
            (Outcome::Unknown, _) | (_, Outcome::Unknown) => Outcome::Unknown,
            _ => Outcome::Held,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::Outcome::{self, *};

    #[test]
    fn a_failure_anywhere_fails_and_an_unanswered_question_is_never_held() {
        let all = [Held, Failed, Unknown];
        for a in all {
            for b in all {
                let want = if a == Failed || b == Failed { Failed } else if a == Unknown || b == Unknown { Unknown } else { Held };
                assert_eq!(Outcome::and(a, b), want, "{a:?} and {b:?}");
            }
        }
    }
}
