//! Where the workload's choices come from. One place decides: under Antithesis every
//! choice is a call into its random source, so each is a point where Antithesis can branch a
//! timeline (seeding one PRNG from it once would replay the same schedule in every branch).
//! Elsewhere a PRNG seeded from `--seed` (or from a random seed, printed and reported) makes
//! a run reproducible choice for choice. A given `--seed` always wins.

use antithesis_sdk::random::AntithesisRng;
use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};
use serde_json::{json, Value};
use std::time::Duration;

/// The origin of every choice in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Antithesis's random source, call by call.
    Antithesis,
    /// A PRNG per purpose, seeded from this.
    Seeded(u64),
}

impl Source {
    /// `seed` is `--seed`. Without it, Antithesis's source when running under Antithesis
    /// (the SDK finds its library there) or when `WORKLOAD_RANDOM=antithesis` asks for it,
    /// else a random seed.
    pub fn decide(seed: Option<u64>) -> Source {
        match seed {
            Some(seed) => Source::Seeded(seed),
            None if under_antithesis() => Source::Antithesis,
            None => Source::Seeded(antithesis_sdk::random::get_random()),
        }
    }

    /// The seed of a seeded source; under Antithesis one draw from its source (payload
    /// contents and the run id need no branching, only reproducing from the report).
    pub fn seed(self) -> u64 {
        match self {
            Source::Seeded(seed) => seed,
            Source::Antithesis => antithesis_sdk::random::get_random(),
        }
    }

    /// The choices of one purpose (kept apart from the others' when seeded).
    pub fn chooser(self, purpose: Purpose) -> Chooser {
        self.salted(purpose.salt())
    }

    /// The choices of one purpose for stream `i` of a run: stream 0 draws as a run of one
    /// stream does, so a seed means what it meant.
    pub fn stream_chooser(self, purpose: Purpose, i: usize) -> Chooser {
        self.salted(purpose.salt() ^ ((i as u64) << 32))
    }

    fn salted(self, salt: u64) -> Chooser {
        match self {
            Source::Antithesis => Chooser { seeded: None },
            Source::Seeded(seed) => Chooser { seeded: Some(StdRng::seed_from_u64(seed ^ salt)) },
        }
    }
}

/// What a run of choices is for. Seeded, each purpose has a PRNG of its own, so adding a
/// choice to one changes no other's draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The local fault injector's schedule and targets.
    Faults,
    /// A composer driver's knobs (payload size, publishes in flight, initial replicas).
    Knobs,
    /// How long a composer driver drives.
    DriverDuration,
    /// The durable consumer's acks left out on purpose.
    Durable,
    /// The operator's operations and their arguments.
    Operator,
    /// The composer stepdown command's targets and pauses.
    Stepdowns,
}

impl Purpose {
    /// The salt each purpose has always had: a given seed makes the choices it made before.
    fn salt(self) -> u64 {
        match self {
            Purpose::Faults => 0xFA,
            Purpose::Knobs => 0xC0B,
            Purpose::DriverDuration => 0xD0,
            Purpose::Durable => 0xD0AB1E,
            Purpose::Operator => 0x5CA1E,
            Purpose::Stepdowns => 0x0BE,
        }
    }
}

fn under_antithesis() -> bool {
    std::env::var("WORKLOAD_RANDOM").is_ok_and(|v| v == "antithesis") || std::path::Path::new("/usr/lib/libvoidstar.so").exists()
}

/// A random number generator for one purpose that also names its choices: when steered by
/// Antithesis each named choice is sent to the SDK's output as a `workload_choice` event, so
/// a report shows what each branch chose.
pub struct Chooser {
    /// None: every draw is a call into Antithesis's source.
    seeded: Option<StdRng>,
}

impl Chooser {
    /// One of `options`.
    pub fn pick<T: Copy + serde::Serialize>(&mut self, what: &str, options: &[T]) -> T {
        let choice = options[self.gen_range(0..options.len())];
        self.tell(what, json!(choice));
        choice
    }

    /// True with probability `p`.
    pub fn chance(&mut self, what: &str, p: f64) -> bool {
        let yes = self.gen_bool(p.clamp(0.0, 1.0));
        self.tell(what, json!(yes));
        yes
    }

    /// How many events pass before the next one that happens with probability `p` each
    /// (a geometric draw): one choice per occurrence instead of one per event, for events as
    /// frequent as deliveries, whose every draw would otherwise be an SDK call and an event.
    /// `u64::MAX` when `p` is 0.
    pub fn gap(&mut self, what: &str, p: f64) -> u64 {
        let p = p.clamp(0.0, 1.0);
        let gap = if p <= 0.0 {
            u64::MAX
        } else if p >= 1.0 {
            0
        } else {
            // 1 - u is in (0, 1], so the logarithm is finite.
            let u: f64 = self.gen();
            ((1.0 - u).ln() / (1.0 - p).ln()).floor().min(u64::MAX as f64) as u64
        };
        self.tell(what, json!(gap));
        gap
    }

    /// A duration in `[lo, hi]`.
    pub fn between(&mut self, what: &str, lo: Duration, hi: Duration) -> Duration {
        let d = lo + hi.saturating_sub(lo).mul_f64(self.gen::<f64>());
        self.tell(what, json!(d.as_secs_f64()));
        d
    }

    fn tell(&self, what: &str, value: Value) {
        if self.seeded.is_none() {
            antithesis_sdk::lifecycle::send_event("workload_choice", &json!({ "what": what, "value": value }));
        }
    }
}

impl RngCore for Chooser {
    fn next_u32(&mut self) -> u32 {
        match &mut self.seeded {
            Some(r) => r.next_u32(),
            None => AntithesisRng.next_u32(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        match &mut self.seeded {
            Some(r) => r.next_u64(),
            None => AntithesisRng.next_u64(),
        }
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        match &mut self.seeded {
            Some(r) => r.fill_bytes(dest),
            None => AntithesisRng.fill_bytes(dest),
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_reproduces_every_choice_and_purposes_differ() {
        let draw = |mut c: Chooser| (0..20).map(|_| c.pick("n", &[1, 2, 3, 4, 5])).collect::<Vec<_>>();
        let s = Source::Seeded(7);
        assert_eq!(draw(s.chooser(Purpose::Operator)), draw(s.chooser(Purpose::Operator)));
        assert_ne!(draw(s.chooser(Purpose::Operator)), draw(s.chooser(Purpose::Durable)));
        assert_eq!(draw(s.chooser(Purpose::Operator)), draw(s.stream_chooser(Purpose::Operator, 0)), "stream 0 draws as a run of one stream");
        assert_ne!(draw(s.stream_chooser(Purpose::Operator, 0)), draw(s.stream_chooser(Purpose::Operator, 1)));
        assert_eq!(Source::decide(Some(9)), Source::Seeded(9), "a given seed always wins");
        assert_eq!(Source::Seeded(9).seed(), 9);
    }

    #[test]
    fn choices_stay_in_range() {
        let mut c = Source::Antithesis.chooser(Purpose::Faults);
        for _ in 0..100 {
            let d = c.between("d", Duration::from_secs(1), Duration::from_secs(2));
            assert!((Duration::from_secs(1)..=Duration::from_secs(2)).contains(&d));
        }
        assert!(!c.chance("never", 0.0));
        assert_eq!(c.gap("never", 0.0), u64::MAX);
        assert_eq!(c.gap("always", 1.0), 0);
    }

    #[test]
    fn gaps_make_the_same_rate_as_a_draw_per_event() {
        let mut c = Source::Seeded(3).chooser(Purpose::Faults);
        let p = 0.001;
        let (mut events, mut hits) = (0u64, 0u64);
        while hits < 2_000 {
            events += c.gap("g", p) + 1;
            hits += 1;
        }
        let rate = hits as f64 / events as f64;
        assert!((rate - p).abs() < p * 0.1, "rate {rate}");
    }
}
