//! How unsettled a stream's leadership is: leader changes within a sliding window.

use std::collections::VecDeque;
use std::time::Duration;

/// The leader changes of one stream seen within the last `window`. Only the changes inside
/// the window are kept, and a watcher sees at most one per look, so it stays small.
pub struct Churn {
    window: Duration,
    changes: VecDeque<Duration>,
    last: Option<String>,
}

impl Churn {
    pub fn new(window: Duration) -> Self {
        Self { window, changes: VecDeque::new(), last: None }
    }

    /// Feeds the leader seen at `now` (any clock that only moves forward). When it differs
    /// from the last leader seen, returns how many changes the window ending now holds,
    /// this one included. A first leader, or none (an election), is not a change: A, none,
    /// B is one change.
    pub fn saw(&mut self, now: Duration, leader: &str) -> Option<u64> {
        if leader.is_empty() {
            return None;
        }
        let changed = self.last.as_deref().is_some_and(|l| l != leader);
        if self.last.as_deref() != Some(leader) {
            self.last = Some(leader.to_string());
        }
        while self.changes.front().is_some_and(|t| now.saturating_sub(*t) > self.window) {
            self.changes.pop_front();
        }
        if !changed {
            return None;
        }
        self.changes.push_back(now);
        Some(self.changes.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_changes_within_the_window_only() {
        let s = Duration::from_secs;
        let mut churn = Churn::new(s(60));
        assert_eq!(churn.saw(s(0), "n1"), None, "a first leader is no change");
        assert_eq!(churn.saw(s(1), "n1"), None);
        assert_eq!(churn.saw(s(2), ""), None, "an election is no change");
        assert_eq!(churn.saw(s(3), "n2"), Some(1), "n1, none, n2 is one change");
        assert_eq!(churn.saw(s(10), "n3"), Some(2));
        assert_eq!(churn.saw(s(20), "n1"), Some(3));
        assert_eq!(churn.saw(s(30), "n2"), Some(4));
        assert_eq!(churn.saw(s(65), "n3"), Some(4), "the change at 3 s has left the window");
        assert_eq!(churn.saw(s(200), "n3"), None);
        assert_eq!(churn.saw(s(201), "n1"), Some(1), "everything before left the window");
    }
}
