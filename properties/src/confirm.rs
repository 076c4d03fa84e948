//! Confirming a bad observation over time before calling it a violation.
//!
//! During faults a server can answer for a moment from a stale view: a restarting node that
//! has not loaded the stream yet, a deposed leader in a minority partition. An observation
//! like "stream not found" or "message absent" only counts once it has been made without a
//! single good observation in between for at least `hold` (and at least `min_bad` times).
//! A streak that outlives a blip (a sixth of `hold`) asks once for faults to pause, so most
//! of the confirmation happens without faults.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Confirm {
    hold: Duration,
    min_bad: u32,
    bad_since: Option<Duration>,
    bad_count: u32,
    quiet_asked: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confirmation {
    Good,
    /// Bad so far, not yet for long enough: observe again. `ask_quiet` is true once per
    /// streak, when it has outlived a blip: the caller asks for faults to pause.
    Pending { ask_quiet: bool },
    /// Bad for at least `hold` with no good observation in between.
    Confirmed { bad_for: Duration },
}

impl Confirm {
    pub fn new(hold: Duration, min_bad: u32) -> Self {
        Self { hold, min_bad, bad_since: None, bad_count: 0, quiet_asked: false }
    }

    /// Bad observations in the current streak (1 right after the first).
    pub fn bad_count(&self) -> u32 {
        self.bad_count
    }

    /// Starts over, e.g. after a confirmed streak was reported.
    pub fn reset(&mut self) {
        self.bad_since = None;
        self.bad_count = 0;
        self.quiet_asked = false;
    }

    /// Records one observation made at `now` (any monotonic clock offset).
    pub fn observe(&mut self, now: Duration, bad: bool) -> Confirmation {
        if !bad {
            self.reset();
            return Confirmation::Good;
        }
        let since = *self.bad_since.get_or_insert(now);
        self.bad_count += 1;
        let bad_for = now.saturating_sub(since);
        if bad_for >= self.hold && self.bad_count >= self.min_bad {
            return Confirmation::Confirmed { bad_for };
        }
        let ask_quiet = !self.quiet_asked && bad_for >= self.hold / 6;
        self.quiet_asked |= ask_quiet;
        Confirmation::Pending { ask_quiet }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_observation_resets_and_a_long_bad_streak_confirms() {
        let s = Duration::from_secs;
        let mut c = Confirm::new(s(30), 3);
        let pending = Confirmation::Pending { ask_quiet: false };
        assert_eq!(c.observe(s(0), true), pending);
        assert_eq!(c.observe(s(4), true), pending, "a blip does not stop faults");
        assert_eq!(c.observe(s(5), true), Confirmation::Pending { ask_quiet: true });
        assert_eq!(c.observe(s(29), true), pending, "quiet is asked once per streak");
        assert_eq!(c.observe(s(29), false), Confirmation::Good);
        assert_eq!(c.observe(s(40), true), pending);
        assert_eq!(c.observe(s(80), true), Confirmation::Pending { ask_quiet: true }, "only two bad observations");
        assert_eq!(c.observe(s(81), true), Confirmation::Confirmed { bad_for: s(41) });
    }
}
