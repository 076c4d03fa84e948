//! Outages around operations: how long writes stopped (no new ack), reads stopped (nothing
//! verified while there was more to read) and the durable consumer's deliveries stopped
//! (nothing delivered while it owed messages), around each operation on the stream. Seed
//! 001 promises that with 2.15 streams and consumers stay available while they are scaled
//! up or down, and that consumers do not stall after they are moved: this measures it.
//!
//! The meter is fed samples of three counters and the times operations were requested. Each
//! outage belongs to one operation: the latest requested before it began (or within
//! [`SLACK`] after: a request is logged a moment after it is sent), and at most
//! [`OBSERVE_AFTER`] before; an outage with no such operation belongs to none. An
//! operation's record holds the longest outage of each activity that belongs to it (and the
//! shorter ones, each judged too), and is closed [`OBSERVE_AFTER`] after its request, or,
//! while an outage of its own is under way, when that ends (at most `limit` later). Pure:
//! times are passed in.

use serde::Serialize;
use std::time::Duration;

/// How long after a request an outage that begins still belongs to the operation.
pub const OBSERVE_AFTER: Duration = Duration::from_secs(30);
/// How long before its request an outage may begin and still belong to an operation.
pub const SLACK: Duration = Duration::from_secs(1);

/// What stops in an outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Activity {
    /// No publish acknowledged.
    Write,
    /// The ordered reader verified nothing while the stream held more than it had read.
    Read,
    /// The durable consumer was delivered nothing while it owed acknowledged messages.
    Durable,
}

pub const ACTIVITIES: [Activity; 3] = [Activity::Write, Activity::Read, Activity::Durable];

/// One look at the counters.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub t: Duration,
    /// Acks so far (the publisher's count) and the last acknowledged sequence.
    pub acked: u64,
    pub last_acked: u64,
    /// Messages the ordered reader verified.
    pub verified: u64,
    /// Deliveries to the durable consumer, and the highest sequence it received (none: no
    /// durable consumer). Owed is what lies above that: a hole below it stalls nothing and
    /// is `durable-every-message-delivered`'s question (a skip never delivered would
    /// otherwise make every pause of the publisher a durable outage).
    pub durable: Option<(u64, u64)>,
}

/// A stretch without progress, in seconds from the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Span {
    pub from_s: f64,
    pub to_s: f64,
    /// Still under way when it was measured (the run ended, or the watch's limit).
    pub ongoing: bool,
}

impl Span {
    pub fn secs(&self) -> f64 {
        self.to_s - self.from_s
    }
}

/// What one operation met.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpOutages {
    pub op: String,
    pub requested_s: f64,
    /// The longest outage of each activity around it (none: it never stopped).
    pub write: Option<Span>,
    pub read: Option<Span>,
    pub durable: Option<Span>,
    /// Its other outages, shorter than the longest of their activity: each is judged too
    /// (a long stall a longer one displaced would otherwise go unjudged).
    pub shorter: Vec<(Activity, Span)>,
    /// Its own request and the later ones on the stream, (op, seconds), as they stood when
    /// it closed: its outages are judged between them ([`judged_stretch`]).
    pub requests: Vec<(String, f64)>,
}

impl OpOutages {
    /// Every outage of its own: the longest of each activity, then the shorter ones.
    pub fn all(&self) -> impl Iterator<Item = (Activity, Span)> + '_ {
        ACTIVITIES.into_iter().filter_map(|a| self.get(a).map(|s| (a, s))).chain(self.shorter.iter().copied())
    }

    pub fn get(&self, a: Activity) -> Option<Span> {
        match a {
            Activity::Write => self.write,
            Activity::Read => self.read,
            Activity::Durable => self.durable,
        }
    }

    fn slot(&mut self, a: Activity) -> &mut Option<Span> {
        match a {
            Activity::Write => &mut self.write,
            Activity::Read => &mut self.read,
            Activity::Durable => &mut self.durable,
        }
    }
}

/// One activity: when it last moved, and whether it is stopped now.
#[derive(Clone, Debug, Default)]
struct Track {
    value: u64,
    last_progress: Duration,
    /// Stopped since (with work pending).
    stopped_since: Option<Duration>,
}

impl Track {
    /// Feeds one sample; returns an outage that just ended.
    fn observe(&mut self, t: Duration, value: u64, pending: bool) -> Option<Span> {
        let moved = value > self.value;
        self.value = value;
        if moved || !pending {
            self.last_progress = t;
            let ended = self.stopped_since.take().map(|from| span(from, t, false));
            return ended;
        }
        if self.stopped_since.is_none() {
            self.stopped_since = Some(self.last_progress);
        }
        None
    }

    fn ongoing(&self, t: Duration) -> Option<Span> {
        self.stopped_since.map(|from| span(from, t, true))
    }
}

fn span(from: Duration, to: Duration, ongoing: bool) -> Span {
    Span { from_s: from.as_secs_f64(), to_s: to.as_secs_f64(), ongoing }
}

struct Watch {
    out: OpOutages,
    at: Duration,
}

pub struct OutageMeter {
    tracks: [Track; 3],
    /// Operations not yet closed, oldest first, and the latest one closed (an outage that
    /// begins after it still belongs to it; a later one belongs to none).
    watches: Vec<Watch>,
    /// How long a watch waits for an outage of its own under way to end.
    limit: Duration,
    started: bool,
}

impl OutageMeter {
    /// `limit`: how long past [`OBSERVE_AFTER`] an outage under way is waited for.
    pub fn new(limit: Duration) -> Self {
        Self { tracks: Default::default(), watches: Vec::new(), limit, started: false }
    }

    /// An operation was requested at `at`.
    pub fn operation(&mut self, op: &str, at: Duration) {
        let out = OpOutages { op: op.to_string(), requested_s: at.as_secs_f64(), write: None, read: None, durable: None, shorter: Vec::new(), requests: Vec::new() };
        self.watches.push(Watch { out, at });
    }

    /// The operation an outage beginning at `from` belongs to (an index into `watches`).
    fn owner(&self, from: Duration) -> Option<usize> {
        let i = self.watches.iter().rposition(|w| w.at <= from + SLACK)?;
        (from <= self.watches[i].at + OBSERVE_AFTER).then_some(i)
    }

    fn attribute(&mut self, a: Activity, s: Span) {
        if let Some(i) = self.owner(Duration::from_secs_f64(s.from_s)) {
            let out = &mut self.watches[i].out;
            let slot = out.slot(a);
            let shorter = match *slot {
                Some(old) if old.from_s == s.from_s => {
                    // The same outage measured again: the longer measure stands.
                    *slot = Some(if s.secs() > old.secs() { s } else { old });
                    return;
                }
                Some(old) if s.secs() > old.secs() => slot.replace(s),
                Some(_) => Some(s),
                None => {
                    *slot = Some(s);
                    None
                }
            };
            out.shorter.extend(shorter.map(|old| (a, old)));
        }
    }

    /// Feeds one sample; returns the operations whose records closed.
    pub fn sample(&mut self, p: Progress) -> Vec<OpOutages> {
        let (delivered, received) = p.durable.unwrap_or((0, p.last_acked));
        let feeds = [(p.acked, true), (p.verified, p.verified < p.last_acked), (delivered, received < p.last_acked)];
        if !self.started {
            // The first sample sets where each counter stands.
            self.started = true;
            for (track, (value, _)) in self.tracks.iter_mut().zip(feeds) {
                *track = Track { value, last_progress: p.t, stopped_since: None };
            }
            return Vec::new();
        }
        for (i, (value, pending)) in feeds.into_iter().enumerate() {
            if let Some(ended) = self.tracks[i].observe(p.t, value, pending) {
                self.attribute(ACTIVITIES[i], ended);
            }
        }
        let mut closed = Vec::new();
        while let Some(w) = self.watches.first() {
            let own_under_way = self.tracks.iter().any(|t| t.stopped_since.is_some_and(|from| self.owner(from) == Some(0)));
            let due = w.at + OBSERVE_AFTER;
            if p.t < due + SLACK || (own_under_way && p.t < due + self.limit) {
                break;
            }
            // Closing: what of its own is still under way is measured to now.
            for (i, activity) in ACTIVITIES.into_iter().enumerate() {
                if let Some(s) = self.tracks[i].ongoing(p.t).filter(|s| self.owner(Duration::from_secs_f64(s.from_s)) == Some(0)) {
                    self.attribute(activity, s);
                }
            }
            closed.push(self.close_first());
        }
        closed
    }

    /// Removes the oldest watch, its record holding the requests from its own on.
    fn close_first(&mut self) -> OpOutages {
        let requests = self.watches.iter().map(|w| (w.out.op.clone(), w.at.as_secs_f64())).collect();
        OpOutages { requests, ..self.watches.remove(0).out }
    }

    /// Closes every operation's record at `t` (the run ends): outages under way are
    /// measured to `t`.
    pub fn close_all(&mut self, t: Duration) -> Vec<OpOutages> {
        for (i, activity) in ACTIVITIES.into_iter().enumerate() {
            if let Some(s) = self.tracks[i].ongoing(t) {
                self.attribute(activity, s);
            }
        }
        (0..self.watches.len()).map(|_| self.close_first()).collect()
    }
}

/// Seconds after a fault's end within which an outage that begins is still the fault's:
/// healing starts elections of its own (a CI run with Docker faults had the durable consumer
/// stop 0.9 s after a node's isolation ended, for 12 s).
pub const RECOVERY_GRACE_S: f64 = 2.0;

/// The part of `span` from its start until a fault is in force, as (from, to) seconds:
/// `faults` holds the stretches with faults in force (from, to; none: to the end). An
/// outage that begins while a fault is in force, or within [`RECOVERY_GRACE_S`] of its
/// end, is the fault's, even where it outlasts it (recovery takes what it takes); one that
/// begins otherwise is the operation's until a fault comes (empty when it is the fault's).
pub fn fault_free_start(span: &Span, faults: &[(f64, Option<f64>)]) -> (f64, f64) {
    let from = span.from_s;
    if faults.iter().any(|(start, end)| *start <= from && end.is_none_or(|e| e + RECOVERY_GRACE_S >= from)) {
        return (from, from);
    }
    let next = faults.iter().map(|(start, _)| *start).filter(|s| *s > from).fold(f64::INFINITY, f64::min);
    (from, span.to_s.min(next))
}

/// What of an outage is judged against the bound, as (from, to) seconds: the longest
/// stretch of its fault-free part ([`fault_free_start`]) between two requests that changed
/// the stream (`requests`, seconds; refused and no-op ones are not among them). An outage
/// that spans several such requests is charged to none of them past the next: what stopped
/// after a scale and went on through three moves is each one's for the stretch until the
/// next, and a bound exceeded must be exceeded after one of them alone (a CI run moving a
/// stream every 0.5-1 s had writes stop 10-16 s across six moves and scales; 2.15.1 drops
/// a publish in flight as a one-replica group is replaced, which its later releases fix,
/// nats-server#8766). A request within [`SLACK`] of the outage's start is its start.
pub fn judged_stretch(span: &Span, faults: &[(f64, Option<f64>)], requests: &[f64]) -> (f64, f64) {
    let (from, to) = fault_free_start(span, faults);
    let mut cuts: Vec<f64> = requests.iter().copied().filter(|r| *r > from + SLACK.as_secs_f64() && *r < to).collect();
    cuts.sort_by(f64::total_cmp);
    let mut best = (from, cuts.first().copied().unwrap_or(to));
    for (i, start) in cuts.iter().enumerate() {
        let end = cuts.get(i + 1).copied().unwrap_or(to);
        if end - start > best.1 - best.0 {
            best = (*start, end);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    /// Samples every 250 ms from `from` to `to` ms with the counters given by `f(t_ms)`.
    fn feed(m: &mut OutageMeter, from: u64, to: u64, f: impl Fn(u64) -> (u64, u64, u64)) -> Vec<OpOutages> {
        let mut closed = Vec::new();
        for t in (from..=to).step_by(250) {
            let (acked, verified, delivered) = f(t);
            closed.extend(m.sample(Progress { t: ms(t), acked, last_acked: acked, verified, durable: Some((delivered, delivered.min(acked))) }));
        }
        closed
    }

    #[test]
    fn a_write_stall_after_a_scale_is_its_outage_and_busy_readers_are_none() {
        let mut m = OutageMeter::new(Duration::from_secs(120));
        feed(&mut m, 0, 10_000, |t| (t, t, t));
        m.operation("scale", ms(10_000));
        // Acks stop from 12 s to 20 s; the readers keep up with what was acked.
        let closed = feed(&mut m, 10_250, 50_000, |t| {
            let acked = if t < 12_000 { t } else if t < 20_000 { 12_000 } else { t };
            (acked, acked, acked)
        });
        assert_eq!(closed.len(), 1);
        let o = &closed[0];
        assert_eq!((o.op.as_str(), o.requested_s), ("scale", 10.0));
        assert_eq!(o.write, Some(Span { from_s: 12.0, to_s: 20.0, ongoing: false }), "{o:?}");
        assert_eq!((o.read, o.durable), (None, None), "nothing to read is no read outage");
    }

    /// A message the durable consumer never received (a skip) lies below what it did
    /// receive: a pause of the publisher after a scale leaves it nothing to deliver, which
    /// is no durable outage; a consumer behind what was acknowledged that delivers nothing is.
    #[test]
    fn a_hole_below_what_the_durable_consumer_received_is_no_outage() {
        let run = |behind: u64| {
            let mut m = OutageMeter::new(Duration::from_secs(120));
            let sample = |m: &mut OutageMeter, t: u64, acked: u64| {
                let high = acked - behind;
                m.sample(Progress { t: ms(t), acked, last_acked: acked, verified: acked, durable: Some((high, high)) })
            };
            let mut closed = Vec::new();
            for t in (0..=10_000).step_by(250) {
                closed.extend(sample(&mut m, t, 1_000 + t));
            }
            m.operation("scale", ms(10_000));
            // Acks stop from 11 s to 41 s.
            for t in (10_250..=80_000).step_by(250) {
                let acked = if (11_000..41_000).contains(&t) { 11_000 } else { t };
                closed.extend(sample(&mut m, t, 1_000 + acked));
            }
            closed.remove(0)
        };
        assert_eq!(run(0).durable, None, "received up to the last ack: nothing owed while writes stop");
        assert!(run(500).durable.is_some_and(|s| s.secs() >= 29.0), "500 behind and silent: an outage");
    }

    #[test]
    fn an_outage_belongs_to_the_latest_operation_before_it_and_none_long_after() {
        let mut m = OutageMeter::new(Duration::from_secs(120));
        feed(&mut m, 0, 5_000, |t| (t, t, t));
        m.operation("stepdown", ms(2_000));
        m.operation("move", ms(5_500));
        // The reader stops at 6 s and reads again at 15 s: the move's, not the stepdown's.
        let reader = |t: u64| if t < 6_000 { t } else if t < 15_000 { 6_000 } else { t };
        let mut closed = feed(&mut m, 5_250, 60_000, |t| (t, reader(t), t));
        assert_eq!(closed.iter().map(|o| o.op.as_str()).collect::<Vec<_>>(), ["stepdown", "move"]);
        assert_eq!(closed[0].read, None);
        assert_eq!(closed[1].read, Some(Span { from_s: 6.0, to_s: 15.0, ongoing: false }));
        // One beginning a moment before the request (logged after it was sent) is its own.
        m.operation("scale", ms(70_000));
        closed = feed(&mut m, 60_250, 110_000, |t| (t, if (69_500..75_000).contains(&t) { 69_500 } else { t }, t));
        assert_eq!(closed[0].read.map(|s| s.from_s), Some(69.5));
        // A stall 40 s after a request belongs to nothing.
        m.operation("stepdown", ms(120_000));
        closed = feed(&mut m, 110_250, 200_000, |t| (t, if (160_000..170_000).contains(&t) { 160_000 } else { t }, t));
        assert_eq!(closed[0].read, None, "{:?}", closed[0]);
    }

    /// Two stalls after one request: the longer is its write outage, and the shorter one,
    /// over any bound too, is kept to be judged (it was displaced and went unjudged).
    #[test]
    fn every_outage_of_an_operation_is_kept_not_only_its_longest() {
        let mut m = OutageMeter::new(Duration::from_secs(120));
        feed(&mut m, 0, 5_000, |t| (t, t, t));
        m.operation("move", ms(5_000));
        let stalls = |t: u64| if (6_000..18_000).contains(&t) { 6_000 } else if (20_000..45_000).contains(&t) { 20_000 } else { t };
        let closed = feed(&mut m, 5_250, 120_000, |t| (stalls(t), t.min(stalls(t)), t.min(stalls(t))));
        let o = &closed[0];
        assert_eq!(o.write, Some(Span { from_s: 20.0, to_s: 45.0, ongoing: false }));
        assert_eq!(o.shorter, vec![(Activity::Write, Span { from_s: 6.0, to_s: 18.0, ongoing: false })]);
        assert_eq!(o.all().count(), 2, "{o:?}");
    }

    /// A record carries its own request and the later ones, to judge its outages between.
    #[test]
    fn a_record_carries_its_request_and_the_later_ones() {
        let mut m = OutageMeter::new(Duration::from_secs(120));
        feed(&mut m, 0, 5_000, |t| (t, t, t));
        m.operation("scale", ms(5_000));
        feed(&mut m, 5_250, 20_000, |t| (t, t, t));
        m.operation("move", ms(20_000));
        let closed = feed(&mut m, 20_250, 40_000, |t| (t, t, t));
        assert_eq!(closed[0].requests, vec![("scale".to_string(), 5.0), ("move".to_string(), 20.0)]);
        let last = m.close_all(ms(41_000));
        assert_eq!(last[0].requests, vec![("move".to_string(), 20.0)]);
    }

    #[test]
    fn a_stall_under_way_keeps_the_watch_open_until_it_ends_or_the_limit() {
        let mut m = OutageMeter::new(Duration::from_secs(60));
        feed(&mut m, 0, 1_000, |t| (t, t, t));
        m.operation("scale", ms(1_000));
        let closed = feed(&mut m, 1_250, 80_000, |t| (t.min(2_000), t.min(2_000), t.min(2_000)));
        assert!(closed.is_empty(), "still stalled at 80 s: waited for");
        let closed = feed(&mut m, 80_250, 95_000, |t| (t.min(2_000), t.min(2_000), t.min(2_000)));
        assert_eq!(closed.len(), 1, "closed at 31 + 60 s");
        let w = closed[0].write.unwrap();
        assert!(w.ongoing && w.from_s == 2.0 && (91.0..=91.3).contains(&w.to_s), "{w:?}");
        // The run ends with another one open: measured to the end, and its own.
        m.operation("scale", ms(95_000));
        feed(&mut m, 95_250, 96_000, |t| (t, t, t));
        let last = m.close_all(ms(98_000));
        assert_eq!(last[0].write, None, "the stall before its request is not its own");
    }

    #[test]
    fn an_outage_across_later_requests_is_judged_by_its_longest_stretch_between_them() {
        let s = Span { from_s: 10.0, to_s: 40.0, ongoing: false };
        assert_eq!(judged_stretch(&s, &[], &[]), (10.0, 40.0));
        assert_eq!(judged_stretch(&s, &[], &[10.5]), (10.0, 40.0), "its own request, logged a moment after it began");
        assert_eq!(judged_stretch(&s, &[], &[14.0, 18.0, 21.0, 24.0]), (24.0, 40.0), "16 s after the last: still too long");
        assert_eq!(judged_stretch(&s, &[], &[19.0, 5.0, 50.0]), (19.0, 40.0), "requests outside it cut nothing");
        assert_eq!(judged_stretch(&s, &[], &[25.0, 33.0]), (10.0, 25.0), "the first stretch the longest");
        assert_eq!(judged_stretch(&s, &[(30.0, None)], &[25.0, 33.0]), (10.0, 25.0), "then a fault");
        let moves = [13.0, 15.0, 17.5, 19.0, 21.5];
        let longest = judged_stretch(&Span { from_s: 12.5, to_s: 22.5, ongoing: false }, &[], &moves);
        assert!(longest.1 - longest.0 <= 2.5, "a stream moved every 0.5-2.5 s through a 10 s stall: {longest:?}");
    }

    #[test]
    fn an_outage_is_judged_from_its_start_until_a_fault() {
        let s = Span { from_s: 10.0, to_s: 40.0, ongoing: false };
        assert_eq!(fault_free_start(&s, &[]), (10.0, 40.0));
        assert_eq!(fault_free_start(&s, &[(5.0, Some(12.0))]), (10.0, 10.0), "begun in a fault: the fault's, even past its end");
        assert_eq!(fault_free_start(&s, &[(1.0, Some(7.0)), (20.0, Some(35.0))]), (10.0, 20.0), "the operation's until a fault comes");
        assert_eq!(fault_free_start(&s, &[(1.0, Some(8.5))]), (10.0, 10.0), "begun 1.5 s after a fault ended: its recovery");
        assert_eq!(fault_free_start(&s, &[(15.0, None)]), (10.0, 15.0));
        assert_eq!(fault_free_start(&s, &[(1.0, Some(7.0)), (41.0, Some(50.0))]), (10.0, 40.0), "faults outside it");
    }
}
