//! Bounded liveness windows (seed 001): an operation that keeps failing is retried with
//! backoff for at most `window`; when only `quiet` of it is left, faults are asked to pause
//! for `quiet`, so every window ends with a fault-free stretch. Failing after that is a
//! liveness failure. The fault-free stretch is measured from the request, not from the
//! quiet point: a try that was still waiting for an answer when the quiet point passed asks
//! a little late, and the window then lasts until `quiet` after the request (a window is
//! never judged on less than `quiet` without faults). Time is passed in, so the rule is
//! testable without a clock.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowConfig {
    pub window: Duration,
    pub quiet: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(120),
            quiet: Duration::from_secs(30),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// One window, opened at the first failure of an operation.
#[derive(Clone, Debug)]
pub struct Window {
    cfg: WindowConfig,
    opened_at: Duration,
    failures: u32,
    /// When faults were asked to pause (none yet).
    quiet_at: Option<Duration>,
}

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Try again after this pause.
    Retry(Duration),
    /// Ask for `quiet` seconds without faults, then try again after the pause.
    RequestQuiet { quiet: Duration, retry_after: Duration },
    /// The window is used up: the operation failed its liveness property.
    Expired { elapsed: Duration, failures: u32 },
}

impl Window {
    pub fn open(cfg: WindowConfig, now: Duration) -> Self {
        Self { cfg, opened_at: now, failures: 0, quiet_at: None }
    }

    pub fn elapsed(&self, now: Duration) -> Duration {
        now.saturating_sub(self.opened_at)
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The operation made progress at `now`: the window starts over from there, so a
    /// window measures time without progress, not total time (a long read that keeps
    /// moving never runs out). The backoff stays where it was: a long catch-up is polled
    /// at the slow pace, not ten times a second.
    pub fn progressed(&mut self, now: Duration) {
        self.opened_at = now;
        self.quiet_at = None;
    }

    /// Records a failure at `now` and says what comes next.
    pub fn failed(&mut self, now: Duration) -> Next {
        self.failures += 1;
        let elapsed = self.elapsed(now);
        let doubling = self.failures.saturating_sub(1).min(16);
        let pause = self.cfg.backoff_min.saturating_mul(1 << doubling).min(self.cfg.backoff_max);
        if self.quiet_at.is_none() && elapsed + self.cfg.quiet >= self.cfg.window {
            self.quiet_at = Some(now);
            return Next::RequestQuiet { quiet: self.cfg.quiet, retry_after: pause.min(self.left(now)) };
        }
        if self.left(now).is_zero() {
            return Next::Expired { elapsed, failures: self.failures };
        }
        // Never sleep past the end of the window: the last try happens at the deadline.
        Next::Retry(pause.min(self.left(now)))
    }

    /// Time until the window ends: the window's length, and `quiet` after the request.
    fn left(&self, now: Duration) -> Duration {
        let end = (self.opened_at + self.cfg.window).max(self.quiet_at.map_or(Duration::ZERO, |q| q + self.cfg.quiet));
        end.saturating_sub(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    #[test]
    fn backoff_grows_then_quiet_is_requested_once_then_expires() {
        let mut w = Window::open(WindowConfig::default(), s(10));
        assert_eq!(w.failed(s(10)), Next::Retry(Duration::from_millis(100)));
        assert_eq!(w.failed(s(11)), Next::Retry(Duration::from_millis(200)));
        assert_eq!(w.failed(s(12)), Next::Retry(Duration::from_millis(400)));
        assert_eq!(w.failed(s(50)), Next::Retry(Duration::from_millis(800)));
        assert!(matches!(w.failed(s(100)), Next::RequestQuiet { quiet, .. } if quiet == s(30)));
        assert_eq!(w.failed(s(101)), Next::Retry(s(2)));
        assert_eq!(w.failed(s(129)), Next::Retry(s(1)), "never sleeps past the deadline");
        assert_eq!(w.failed(s(130)), Next::Expired { elapsed: s(120), failures: 8 });
    }

    #[test]
    fn a_late_quiet_request_still_gets_its_whole_quiet_before_the_window_ends() {
        let mut w = Window::open(WindowConfig::default(), s(0));
        assert_eq!(w.failed(s(80)), Next::Retry(Duration::from_millis(100)));
        // The next try waited 25 s for an answer: the quiet point passed meanwhile.
        assert!(matches!(w.failed(s(105)), Next::RequestQuiet { quiet, .. } if quiet == s(30)));
        assert_eq!(w.failed(s(120)), Next::Retry(Duration::from_millis(400)), "past 120 s, but only 15 s without faults");
        assert_eq!(w.failed(s(134)), Next::Retry(Duration::from_millis(800)));
        assert_eq!(w.failed(Duration::from_millis(134_900)), Next::Retry(Duration::from_millis(100)), "never sleeps past 30 s after the request");
        assert!(matches!(w.failed(s(135)), Next::Expired { elapsed, .. } if elapsed == s(135)));
        // A single try longer than the whole window asks for quiet before it is judged.
        let mut w = Window::open(WindowConfig::default(), s(0));
        assert!(matches!(w.failed(s(200)), Next::RequestQuiet { .. }));
        assert!(matches!(w.failed(s(231)), Next::Expired { .. }));
    }

    #[test]
    fn progress_starts_the_window_over() {
        let mut w = Window::open(WindowConfig::default(), s(0));
        assert!(matches!(w.failed(s(100)), Next::RequestQuiet { .. }));
        w.progressed(s(110));
        assert_eq!(w.failed(s(130)), Next::Retry(Duration::from_millis(200)), "20 s since the progress: no quiet yet, the backoff goes on");
        assert!(matches!(w.failed(s(200)), Next::RequestQuiet { .. }), "a fresh quiet point");
        assert!(matches!(w.failed(s(231)), Next::Expired { .. }));
    }
}
