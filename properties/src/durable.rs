//! The durable consumer's checker: a durable, explicitly acknowledged pull consumer on the
//! run's stream, whose every ack is confirmed by the server (a double ack).
//!
//! Deliveries may come in any order (a message left unacknowledged comes again after the
//! ack wait, a new consumer leader may deliver again what the old one sent), so the ledger
//! keeps sets of sequences, not a position: those received at least once and those whose
//! ack the server confirmed. Both are kept as ranges, so memory grows with the number of
//! holes (bounded by the consumer's unacknowledged messages), not with the messages.
//!
//! The rules:
//! - content: every delivery is exactly the message published for its sequence;
//! - a confirmed ack is never undone: the consumer's ack floor, as the server reports it,
//!   never falls below a sequence all of whose predecessors had their acks confirmed, and a
//!   message whose ack was confirmed is not delivered again ([`Redeliveries`] tells a race
//!   from an undo);
//! - nothing is skipped: the ack floor never passes a sequence that was never delivered
//!   while the stream still holds it (a message gone from the stream is data loss, judged
//!   by the loss checks, not a skip);
//! - at least once: every acknowledged message reaches the consumer within its ack wait
//!   plus the liveness window of its publish ack, or of the consumer's last change
//!   ([`DeliveryWatch`]).

use crate::payload::RunMessages;
use crate::ranges::Ranges;
use crate::read::{ContentCheck, ContentProblem};
use crate::{Property, Violation};
use crate::confirm::Confirm;
use crate::liveness::WindowConfig;
use serde_json::{json, Value};
use std::time::Duration;

/// Deliveries of messages whose ack the server had confirmed. One such delivery can be a
/// race, not an undo: the ack-wait timer fired (a redelivery was decided) just as the ack
/// was being processed, e.g. when a paused leader resumes, and the redelivery goes out after
/// the ack's confirmation. The workload then leaves the message unacknowledged: if the
/// server really lost the ack, the message is still pending and comes yet again after
/// another ack wait, which is the undo; if not, it never comes again. A copy that comes
/// sooner than half an ack wait after the first is not that evidence: no ack-wait timer
/// could have fired in between (seen in CI on 2.15.1: delivery counts 2 and 3 of one
/// message 5 ms apart, around a consumer leader stepdown; why the server sent both is not
/// known), and the message stays watched from its first redelivery.
#[derive(Clone, Debug, Default)]
pub struct Redeliveries {
    /// Suspects: sequence and when it was first delivered again.
    suspects: Vec<(u64, Duration)>,
}

/// What a delivery of a confirmed-acked message means.
#[derive(Clone, Debug, PartialEq)]
pub enum Redelivery {
    /// The first such delivery: leave it unacknowledged and watch for another.
    Suspect,
    /// Delivered again too soon after the first for an ack wait to have passed: still
    /// watched, still left alone.
    Repeat,
    /// Delivered again although left alone since the first: the ack was undone.
    Undone(Violation),
    /// Too many suspects at once to watch: ack it and judge nothing.
    Unwatched,
}

/// Suspects watched at once (each costs 16 bytes).
const WATCHED: usize = 4096;

impl Redeliveries {
    pub fn on_delivery(&mut self, seq: u64, delivered: u64, confirmed_floor: u64, now: Duration, ack_wait: Duration) -> Redelivery {
        if let Some(i) = self.suspects.iter().position(|(s, _)| *s == seq) {
            if now.saturating_sub(self.suspects[i].1) < ack_wait / 2 {
                return Redelivery::Repeat;
            }
            let (_, first) = self.suspects.swap_remove(i);
            return Redelivery::Undone(Violation::new(
                Property::DurableAckNeverUndone,
                json!({ "seq": seq, "delivered": delivered, "confirmed_floor": confirmed_floor,
                        "first_delivered_again_s_ago": now.saturating_sub(first).as_secs_f64(),
                        "problem": "a message whose ack the server had confirmed was delivered again, and again after it was left alone" }),
            ));
        }
        if self.suspects.len() >= WATCHED {
            return Redelivery::Unwatched;
        }
        self.suspects.push((seq, now));
        Redelivery::Suspect
    }

    /// Forgets suspects not delivered again within `hold`: races. Returns how many.
    pub fn expire(&mut self, now: Duration, hold: Duration) -> Vec<u64> {
        let (gone, kept): (Vec<_>, Vec<_>) = self.suspects.iter().partition(|(_, t)| now.saturating_sub(*t) > hold);
        self.suspects = kept;
        gone.into_iter().map(|(s, _)| s).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.suspects.is_empty()
    }

    pub fn clear(&mut self) {
        self.suspects.clear();
    }
}

/// When sequences were acknowledged, roughly: samples of (seconds, last acknowledged
/// sequence). When full, every other sample goes and later ones are taken half as often, so
/// any run keeps at most [`CLOCK_SAMPLES`] and the resolution coarsens with its length.
#[derive(Clone, Debug)]
pub struct AckClock {
    samples: Vec<(f64, u64)>,
    every: usize,
    offered: usize,
}

pub const CLOCK_SAMPLES: usize = 512;

impl Default for AckClock {
    fn default() -> Self {
        Self { samples: Vec::new(), every: 1, offered: 0 }
    }
}

impl AckClock {
    pub fn sample(&mut self, t: f64, acked: u64) {
        self.offered += 1;
        if !(self.offered - 1).is_multiple_of(self.every) {
            return;
        }
        self.samples.push((t, acked));
        if self.samples.len() > CLOCK_SAMPLES {
            self.samples = self.samples.iter().copied().step_by(2).collect();
            self.every *= 2;
        }
    }

    /// When `seq` was acknowledged: after the last sample that had not reached it, at the
    /// latest at the first that had. `None` when no sample has reached it yet.
    pub fn acked_between(&self, seq: u64) -> Option<(f64, f64)> {
        let at = self.samples.iter().position(|(_, acked)| *acked >= seq)?;
        let before = if at == 0 { 0.0 } else { self.samples[at - 1].0 };
        Some((before, self.samples[at].0))
    }
}

pub struct DurableLedger {
    content: ContentCheck,
    received: Ranges,
    confirmed: Ranges,
    /// Sequences the ack floor passed before they were received (each reported once as a
    /// skip): still owed to the consumer, and followed to whether they ever come.
    passed: Ranges,
}

/// What became of the messages owed to the durable consumer, by the end of its run: those
/// reported late, and those its ack floor passed before they were received.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Owed {
    pub late: LateMessages,
    pub skipped: Skips,
}

impl Handover {
    pub fn owed(&self) -> Owed {
        Owed { late: self.delivery.late(&self.ledger, 8), skipped: self.ledger.skips(8) }
    }
}

/// What became of the sequences the ack floor passed before they were received.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Skips {
    pub passed: u64,
    /// Of those, received afterwards (the server delivered them after all).
    pub received_later: u64,
    /// Never received (the first runs).
    pub never_received: Vec<(u64, u64)>,
}

impl DurableLedger {
    pub fn new(messages: RunMessages) -> Self {
        Self { content: ContentCheck::new(messages), received: Ranges::default(), confirmed: Ranges::default(), passed: Ranges::default() }
    }

    /// Forgets everything: the consumer was found gone (and reported) and is made anew.
    pub fn restart(&mut self) {
        self.received = Ranges::default();
        self.confirmed = Ranges::default();
        self.passed = Ranges::default();
    }

    /// Every sequence up to this one was delivered at least once.
    pub fn received_floor(&self) -> u64 {
        self.received.floor()
    }

    /// The highest sequence delivered (holes below it are at-least-once's question).
    pub fn received_high(&self) -> u64 {
        self.received.high()
    }

    /// Every sequence up to this one had its ack confirmed.
    pub fn confirmed_floor(&self) -> u64 {
        self.confirmed.floor()
    }

    /// What the two sets cost (ranges held).
    pub fn ranges(&self) -> usize {
        self.received.len() + self.confirmed.len()
    }

    /// Judges one delivery's content and records it as received.
    pub fn on_delivery(&mut self, seq: u64, msg_id: Option<&str>, sum: Option<&str>, payload: &[u8]) -> Vec<Violation> {
        let mut out = Vec::new();
        match self.content.check(seq, msg_id, sum, payload) {
            None => {}
            Some(ContentProblem::Foreign) => out.push(Violation::new(
                Property::DurableContentMatchesPublish,
                json!({ "seq": seq, "msg_id": msg_id, "problem": "message id is not one of this run's" }),
            )),
            Some(ContentProblem::Differs(details)) => out.push(Violation::new(Property::DurableContentMatchesPublish, details)),
        }
        self.received.insert(seq);
        out
    }

    /// Sequences `from ..= to` are not for this consumer (looked up: no longer in the
    /// stream, or another subject's), so its ack floor may pass them. Whether they were
    /// acknowledged publishes is the ordered reader's and the monitor's question.
    pub fn not_for_it(&mut self, from: u64, to: u64) {
        self.received.insert_range(from, to);
    }

    /// The first sequence up to `floor` neither received nor already reported passed.
    fn first_unjudged(&self, floor: u64) -> Option<u64> {
        let mut next = 1;
        while let Some(end) = self.received.end_of(next).or_else(|| self.passed.end_of(next)) {
            next = end + 1;
        }
        (next <= floor).then_some(next)
    }

    /// Whether the ack floor passed `seq` before it was received.
    pub fn was_passed(&self, seq: u64) -> bool {
        self.passed.contains(seq)
    }

    /// The ack floor `floor` passed what was never received, and that was reported: the
    /// floor is not judged for them again, but they stay owed (see [`DeliveryWatch`]) and
    /// followed ([`DurableLedger::skips`]).
    pub fn passed_by_floor(&mut self, floor: u64) {
        for (from, to) in self.received.gaps(floor, usize::MAX) {
            self.passed.insert_range(from, to);
        }
    }

    /// What became of the sequences the floor passed: received later, or never.
    pub fn skips(&self, max: usize) -> Skips {
        let passed: u64 = self.passed.iter().map(|(s, e)| e - s + 1).sum();
        let received_later: u64 = self.passed.iter().map(|(s, e)| self.received.count_in(s, e)).sum();
        let never_received = self.passed.iter().flat_map(|(s, e)| gaps_within(&self.received, s, e)).take(max).collect();
        Skips { passed, received_later, never_received }
    }

    /// The first `max` runs of acknowledged sequences (up to `last_acked`) never received.
    pub fn never_received(&self, last_acked: u64, max: usize) -> Vec<(u64, u64)> {
        self.received.gaps(last_acked, max)
    }

    /// Whether the server confirmed the ack of `seq`.
    pub fn is_confirmed(&self, seq: u64) -> bool {
        self.confirmed.contains(seq)
    }

    /// The server confirmed the ack of `seq`.
    pub fn on_ack_confirmed(&mut self, seq: u64) {
        self.confirmed.insert(seq);
    }

    /// The acks confirmed above `floor` were lost in a way the caller excuses (a crash of
    /// the only server that held them): they are not judged again, so a floor the server
    /// leaves there is not failed later. Acks confirmed from now on are judged as ever.
    pub fn forget_confirmed_above(&mut self, floor: u64) {
        self.confirmed.remove_above(floor);
    }

    /// Judges one look at the consumer's ack floor (its stream sequence) as the server
    /// reports it. A single answer can be stale (a deposed leader); the caller confirms a
    /// bad one over time before reporting it.
    pub fn judge_ack_floor(&self, floor: u64) -> Option<Violation> {
        let confirmed = self.confirmed_floor();
        if floor < confirmed {
            return Some(Violation::new(
                Property::DurableAckNeverUndone,
                json!({ "ack_floor": floor, "confirmed_floor": confirmed,
                        "problem": "the consumer's ack floor is below sequences whose acks the server confirmed" }),
            ));
        }
        let missing = self.first_unjudged(floor)?;
        Some(Violation::new(
            Property::DurableNothingSkipped,
            json!({ "ack_floor": floor, "never_delivered": missing, "received_floor": self.received_floor(),
                    "problem": "the consumer's ack floor passed a sequence never delivered to it" }),
        ))
    }
}

/// At least once, judged: the oldest acknowledged message the consumer has not received
/// must reach it within a deadline of its ack wait plus the liveness window, counted from
/// its publish ack or from the consumer's last change (made, rescaled, a new leader: what
/// was pending is redelivered only after an ack wait), whichever came later. As in every
/// window, faults are asked to pause for the deadline's last `quiet` seconds, and a message
/// is late only once they were (one quiet period serves every message owed past its
/// deadline at the time, so a withheld range is judged at once, not a quiet apiece). A late
/// message is reported once and then watched: received later, or never.
#[derive(Clone, Debug)]
pub struct DeliveryWatch {
    deadline: Duration,
    quiet: Duration,
    /// The oldest message owed, and since when.
    oldest: Option<(u64, Duration)>,
    /// When faults were last asked to pause for a message owed.
    quiet_at: Option<Duration>,
    /// Messages reported late (received since, or not).
    late: Ranges,
}

/// What one look says.
#[derive(Clone, Debug, PartialEq)]
pub enum DeliveryCheck {
    /// Nothing owed, or the oldest message owed is within its deadline.
    Fine,
    /// The message watched was received within its deadline (after `waited`).
    Held { seq: u64, waited: Duration },
    /// The quiet part of a deadline begins: faults should pause.
    AskQuiet { seq: u64 },
    /// Owed past their deadlines, quiet included: `from ..= to` (those of it not received),
    /// the first after `waited`. Reported once each.
    Late { from: u64, to: u64, waited: Duration },
}

/// What became of the messages reported late, by the end.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LateMessages {
    pub late: u64,
    /// Of those, received after they were reported.
    pub received_later: u64,
    /// Never received (the first runs).
    pub never_received: Vec<(u64, u64)>,
}

impl DeliveryWatch {
    /// `window`: the liveness window (its length and quiet part); `ack_wait`: the consumer's.
    pub fn new(window: WindowConfig, ack_wait: Duration) -> Self {
        Self { deadline: window.window + ack_wait, quiet: window.quiet, oldest: None, quiet_at: None, late: Ranges::default() }
    }

    /// The first message neither received nor reported late.
    fn owed(&self, ledger: &DurableLedger) -> u64 {
        let mut next = 1;
        while let Some(end) = ledger.received.end_of(next).or_else(|| self.late.end_of(next)) {
            next = end + 1;
        }
        next
    }

    /// Every message up to this one was received or reported late: how far the consumer
    /// got, for its catch-up (a late message stalls nothing twice).
    pub fn settled_floor(&self, ledger: &DurableLedger) -> u64 {
        self.owed(ledger) - 1
    }

    /// One look at `now`: `last_acked` is the publisher's last ack, `acked_at(seq)` when
    /// `seq` was acknowledged at the latest (none: not known; counted from now), the
    /// consumer last changed at `changed_at`, and `server_delivered` is the highest stream
    /// sequence its leader last said it delivered (none: not known).
    ///
    /// A message the consumer has not reached yet is on its way, not late: its clock starts
    /// when the server's delivered position reaches it. A consumer whose state was lost
    /// with its server (an excused undo) delivers everything again from its new floor, and
    /// one far behind works through its backlog; whether either moves at all is
    /// `durable-eventually-catches-up`'s question.
    pub fn observe(
        &mut self,
        now: Duration,
        ledger: &DurableLedger,
        last_acked: u64,
        acked_at: impl Fn(u64) -> Option<Duration>,
        changed_at: Duration,
        server_delivered: Option<u64>,
    ) -> DeliveryCheck {
        let since = |seq: u64| acked_at(seq).unwrap_or(now).max(changed_at).min(now);
        let owed = self.owed(ledger);
        let mut out = DeliveryCheck::Fine;
        if let Some((seq, since)) = self.oldest.filter(|(seq, _)| *seq < owed) {
            out = DeliveryCheck::Held { seq, waited: now.saturating_sub(since) };
            self.oldest = None;
        }
        if owed > last_acked {
            return out;
        }
        if server_delivered.is_some_and(|d| d < owed) {
            self.oldest = Some((owed, now));
            return out;
        }
        let (seq, from) = *self.oldest.get_or_insert_with(|| (owed, since(owed)));
        let waited = now.saturating_sub(from);
        if waited + self.quiet < self.deadline {
            return out;
        }
        match self.quiet_at {
            Some(q) if now < q + self.quiet => return out, // in the quiet part
            Some(q) if now.saturating_sub(q) <= self.deadline => {} // quiet was had: judge
            _ => {
                self.quiet_at = Some(now);
                return DeliveryCheck::AskQuiet { seq };
            }
        }
        if waited < self.deadline {
            return out;
        }
        // Late: this one, and every message owed after it whose deadline has passed too.
        self.oldest = None;
        let mut to = seq;
        self.late.insert(seq);
        loop {
            let next = self.owed(ledger);
            if next > last_acked || now.saturating_sub(since(next)) < self.deadline {
                break;
            }
            self.late.insert(next);
            to = next;
        }
        DeliveryCheck::Late { from: seq, to, waited }
    }

    /// The messages reported late: how many, how many were received since, and the first
    /// runs of those never received.
    pub fn late(&self, ledger: &DurableLedger, max: usize) -> LateMessages {
        let late: u64 = self.late.iter().map(|(s, e)| e - s + 1).sum();
        let received_later: u64 = self.late.iter().map(|(s, e)| ledger.received.count_in(s, e)).sum();
        let never_received = self.late.iter().flat_map(|(s, e)| gaps_within(&ledger.received, s, e)).take(max).collect();
        LateMessages { late, received_later, never_received }
    }

    /// The consumer was made anew (with a new ledger): what it owes is counted afresh.
    pub fn restart(&mut self) {
        self.oldest = None;
        self.late = Ranges::default();
    }
}

/// The runs of `from ..= to` that `set` lacks.
fn gaps_within(set: &Ranges, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut seq = from;
    while seq <= to {
        match set.end_of(seq) {
            Some(end) => seq = end.saturating_add(1),
            None => {
                let stop = set.iter().map(|(s, _)| s).find(|s| *s > seq).map_or(to, |s| (s - 1).min(to));
                out.push((seq, stop));
                seq = stop + 1;
            }
        }
    }
    out
}

/// One node's view of its own replica of the durable consumer (its `/jsz` consumer
/// detail: a follower reports the state it stored, not the leader's).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConsumerReplica {
    pub node: String,
    pub delivered: u64,
    pub ack_floor: u64,
}

/// Once nothing reads or acks, every replica must hold the leader's delivered sequence
/// and ack floor: `Ok`, or the replicas that differ.
pub fn replicas_at_rest(leader: &ConsumerReplica, followers: &[ConsumerReplica]) -> Result<(), Vec<ConsumerReplica>> {
    let differ: Vec<ConsumerReplica> = followers.iter().filter(|r| (r.delivered, r.ack_floor) != (leader.delivered, leader.ack_floor)).cloned().collect();
    if differ.is_empty() { Ok(()) } else { Err(differ) }
}

/// What the durable driver remembers between its looks at the consumer (its ack floor as
/// the leader reports it, and whether it exists), and the rule that excuses an undone ack.
/// The looks themselves (I/O) are the driver's.
pub struct FloorJudge {
    /// A bad floor, and "consumer not found", each count once confirmed over a quiet period.
    pub floor: Confirm,
    pub gone: Confirm,
    /// When looks last found the consumer on a single server, and which.
    single_seen: Option<Duration>,
    single_on: Option<String>,
    /// Each server the consumer was found single on, from when (the last few changes).
    single_history: std::collections::VecDeque<(Duration, String)>,
    /// When the highest sequence delivered got where, recently and finely: an ack cannot be
    /// confirmed before its message was delivered, and fresh deliveries come in stream
    /// order, so this bounds from below when an undone ack was confirmed.
    pub delivered: RecentClock,
    /// Looks in a row that found it on a single server.
    single_looks: u32,
    /// The consumer's leader and peers at the last look, for a failure's details.
    pub last_look: Value,
    /// When the publisher's acks got where, sampled at every look: a skipped message's
    /// details say when it was published (what a known issue's trigger is timed against).
    pub acked: AckClock,
    /// Failures the driver reported from this judge's looks (not excused).
    pub failed: u64,
}

impl FloorJudge {
    pub fn new(confirm_hold: Duration) -> Self {
        let confirm = || Confirm::new(confirm_hold, 3);
        Self {
            floor: confirm(),
            gone: confirm(),
            single_seen: None,
            single_on: None,
            single_history: Default::default(),
            delivered: RecentClock::default(),
            single_looks: 0,
            last_look: Value::Null,
            acked: AckClock::default(),
            failed: 0,
        }
    }

    /// Where the consumer's leader said, at the last look, it had delivered to (its
    /// `delivered.stream_seq`), when that look had a leader and is at most `max_age` old at
    /// `now`: an older answer (looks unanswered since) says nothing of now.
    pub fn recent_delivered(&self, now: Duration, max_age: Duration) -> Option<u64> {
        let look = &self.last_look;
        let at = Duration::try_from_secs_f64(look["t_s"].as_f64()?).ok()?;
        if now.saturating_sub(at) > max_age || look["leader"].as_str().is_none_or(str::is_empty) {
            return None;
        }
        look.pointer("/delivered/stream_seq").and_then(Value::as_u64)
    }

    /// A look at `now` found the consumer kept by `one` server (its leader, `leader`) or
    /// not. One answer without followers may come from a server whose part of a new
    /// replicated group has not started yet; two in a row (a look apart) do not.
    pub fn saw(&mut self, one: OneServer, leader: Option<&str>, now: Duration) {
        self.single_looks = if one == OneServer::No { 0 } else { self.single_looks + 1 };
        if one == OneServer::Configured || self.single_looks >= 2 {
            self.single_seen = Some(now);
            if let Some(l) = leader.filter(|l| !l.is_empty()) {
                if self.single_history.back().is_none_or(|(_, s)| s != l) {
                    self.single_history.push_back((now, l.to_string()));
                    if self.single_history.len() > 16 {
                        self.single_history.pop_front();
                    }
                }
                self.single_on = Some(l.to_string());
            }
        }
    }

    /// What could excuse an undone ack: a single server keeps a consumer's acks in memory
    /// and writes them out now and then (2.15.1 lost 165-258 of 1000 confirmed acks to a
    /// kill -9), and nothing else holds them, so a crash of that server after it confirmed
    /// them undoes them by design. So an undo is excused only when the consumer had a
    /// single replica within `recent` before `now` AND that server crashed (was killed,
    /// restarted, power-cut or wiped) after the undone message was delivered (its ack was
    /// confirmed later still; a crash before that cannot have undone it): the question this
    /// returns, for the caller to answer from the fault log and the server's start time.
    /// None: nothing can excuse it (a skip never is; no single-replica spell; no server
    /// known).
    pub fn crash_question(&self, v: &Violation, now: Duration, recent: Duration) -> Option<CrashQuestion> {
        if v.property != Property::DurableAckNeverUndone || self.single_seen.is_none_or(|t| now.saturating_sub(t) > recent) {
            return None;
        }
        let server = self.single_on.clone()?;
        // The first ack undone: above the floor the server reports, or the one delivered again.
        let first = v.details["ack_floor"].as_u64().map(|f| f + 1).or_else(|| v.details["seq"].as_u64()).unwrap_or(1);
        let delivered_after = self.delivered.last_below(first).unwrap_or_default();
        // Every server that held it alone since then (a removal or a crash of any of them
        // loses the acks).
        let mut servers = self.servers_alone_since(delivered_after);
        if !servers.contains(&server) {
            servers.push(server.clone());
        }
        Some(CrashQuestion { server, servers, delivered_after })
    }

    /// Every server the consumer was found alone on since `seq` was acknowledged at the
    /// earliest (none: when is not known): a crash or an evacuation of any of them can lose
    /// what a floor passed.
    pub fn alone_since_acked(&self, seq: u64) -> Option<Vec<String>> {
        self.acked.acked_between(seq).map(|(from, _)| self.servers_alone_since(Duration::from_secs_f64(from)))
    }

    /// Every server the consumer was found alone on since `t`: the one it was on at that
    /// time, and any it was found on later (the latest last; the last few changes only).
    pub fn servers_alone_since(&self, t: Duration) -> Vec<String> {
        let since = self.single_history.iter().rposition(|(at, _)| *at <= t).unwrap_or(0);
        self.single_history.iter().skip(since).map(|(_, s)| s.clone()).collect()
    }
}

/// Did a server that held the consumer alone crash, or was it removed from the consumer's
/// peers, after `delivered_after` (run time: the undone message was delivered, and so its
/// ack confirmed, after that)?
#[derive(Clone, Debug, PartialEq)]
pub struct CrashQuestion {
    /// The server it was last found single on.
    pub server: String,
    /// Every server it was found single on since `delivered_after` (the latest last).
    pub servers: Vec<String>,
    pub delivered_after: Duration,
}

/// When a growing number (the highest sequence delivered) reached each value, over the last `keep`:
/// samples at least 100 ms apart and the latest value, so an undone message's delivery is
/// placed within a fraction of a second of a crash. A sample is (t, v): the value was v at
/// t, so it reached v by then and any higher value after. Bounded by `keep` / 100 ms samples.
#[derive(Clone, Debug)]
pub struct RecentClock {
    samples: std::collections::VecDeque<(Duration, u64)>,
    latest: Option<(Duration, u64)>,
    keep: Duration,
}

impl Default for RecentClock {
    fn default() -> Self {
        Self { samples: Default::default(), latest: None, keep: Duration::from_secs(300) }
    }
}

impl RecentClock {
    /// The value is `value` at `now`.
    pub fn sample(&mut self, now: Duration, value: u64) {
        if self.latest.is_some_and(|(_, v)| v == value) {
            return;
        }
        self.latest = Some((now, value));
        if self.samples.back().is_none_or(|(t, _)| now.saturating_sub(*t) >= Duration::from_millis(100)) {
            self.samples.push_back((now, value));
        }
        while self.samples.front().is_some_and(|(t, _)| now.saturating_sub(*t) > self.keep) {
            self.samples.pop_front();
        }
    }

    /// When the value had reached `n` at the latest: the first sample at or past it (the
    /// oldest kept, for a value reached before the samples begin); none if not reached yet.
    pub fn reached_by(&self, n: u64) -> Option<Duration> {
        self.samples.iter().chain(self.latest.iter()).find(|(_, v)| *v >= n).map(|(t, _)| *t)
    }

    /// The last time the value was still below `n`: it reached `n` after that. None when
    /// no sample kept is below it (reached before the samples begin, or never sampled).
    pub fn last_below(&self, n: u64) -> Option<Duration> {
        self.samples.iter().chain(self.latest.iter()).filter(|(_, v)| *v < n).map(|(t, _)| *t).max()
    }
}

/// What the durable driver hands the final verification: every delivery and confirmed ack,
/// and the judge that remembers when the consumer last ran on a single server (an undo the
/// final look confirms is excused by a single-replica spell the driver saw, as during the
/// run: without it, 2.14.6's loss of acks when the operator scaled an R1 consumer to R2
/// failed `durable-ack-never-undone` in the matrix test).
pub struct Handover {
    pub ledger: DurableLedger,
    pub judge: FloorJudge,
    /// At-least-once: what was reported late (and the report says what came of it).
    pub delivery: DeliveryWatch,
}

/// Whether a CONSUMER.INFO answer shows the consumer kept by one server only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneServer {
    /// Its `num_replicas` is 1 (a stream scaled to R1 sets its consumers' to 1 as well).
    Configured,
    /// No followers listed. 2.15.1 runs an R1 consumer without a raft group and answers
    /// `{name, leader}` only; so does a server whose part of a new replicated group has not
    /// started yet (seen in CI for a consumer just recreated under an R3 stream).
    Listed,
    No,
}

pub fn one_server(info: &Value) -> OneServer {
    let followers = info.pointer("/cluster/replicas").and_then(Value::as_array).map_or(0, Vec::len);
    match info.pointer("/config/num_replicas").and_then(Value::as_u64) {
        Some(1) => OneServer::Configured,
        _ if followers == 0 => OneServer::Listed,
        _ => OneServer::No,
    }
}

#[cfg(test)]
mod judge_tests {
    use super::*;

    #[test]
    fn a_consumer_without_followers_or_configured_r1_is_on_one_server() {
        // As 2.15.1 answers: an R1 consumer under an R1 stream has no raft group.
        let r1 = json!({ "config": { "num_replicas": 0 }, "cluster": { "name": "x", "leader": "n3" } });
        let r3 = json!({ "config": { "num_replicas": 0 }, "cluster": { "name": "x", "raft_group": "C-R3F-5T5H31an", "leader": "n3",
                        "replicas": [{ "name": "n1", "current": true }, { "name": "n2", "current": false }] } });
        let configured = json!({ "config": { "num_replicas": 1 }, "cluster": { "name": "x", "leader": "n1" } });
        assert_eq!(one_server(&r1), OneServer::Listed);
        assert_eq!(one_server(&r3), OneServer::No);
        assert_eq!(one_server(&configured), OneServer::Configured);
    }

    #[test]
    fn only_a_crash_of_the_single_server_after_the_confirmation_can_excuse_an_undo() {
        let s = Duration::from_secs;
        let undone = Violation::new(Property::DurableAckNeverUndone, json!({ "ack_floor": 100, "confirmed_floor": 200 }));
        let skipped = Violation::new(Property::DurableNothingSkipped, json!({}));
        let mut j = FloorJudge::new(s(4));
        j.delivered.sample(s(8), 90);
        j.delivered.sample(s(9), 150);
        assert_eq!(j.crash_question(&undone, s(10), s(60)), None, "never on one server");
        j.saw(OneServer::Listed, Some("n2"), s(10));
        assert_eq!(j.crash_question(&undone, s(10), s(60)), None, "one followerless answer is not yet a spell");
        j.saw(OneServer::Listed, Some("n2"), s(12));
        assert_eq!(j.crash_question(&undone, s(30), s(60)), Some(CrashQuestion { server: "n2".into(), servers: vec!["n2".into()], delivered_after: s(8) }), "101 was delivered after 8 s (90 then)");
        assert_eq!(j.crash_question(&skipped, s(30), s(60)), None, "a skip is never excused");
        j.saw(OneServer::No, Some("n1"), s(14));
        assert!(j.crash_question(&undone, s(72), s(60)).is_some() && j.crash_question(&undone, s(73), s(60)).is_none(), "the spell ages out after `recent`");
        let mut c = FloorJudge::new(s(4));
        c.saw(OneServer::Configured, Some("n3"), s(5));
        let redelivered = Violation::new(Property::DurableAckNeverUndone, json!({ "seq": 7 }));
        assert_eq!(c.crash_question(&redelivered, s(6), s(60)), Some(CrashQuestion { server: "n3".into(), servers: vec!["n3".into()], delivered_after: s(0) }), "configured R1 counts at once; no sample below it: any crash since the start");
    }

    #[test]
    fn every_server_that_held_the_consumer_alone_since_the_delivery_is_asked_about() {
        let s = Duration::from_secs;
        let mut j = FloorJudge::new(s(4));
        j.saw(OneServer::Configured, Some("n1"), s(12));
        j.saw(OneServer::Configured, Some("n3"), s(20));
        j.delivered.sample(s(8), 90);
        j.delivered.sample(s(25), 150);
        let early = Violation::new(Property::DurableAckNeverUndone, json!({ "ack_floor": 100 }));
        let q = j.crash_question(&early, s(30), s(60)).unwrap();
        assert_eq!((q.server.as_str(), q.servers.clone(), q.delivered_after), ("n3", vec!["n1".to_string(), "n3".to_string()], s(8)), "moved from n1 to n3 since 101 was delivered");
        let late = Violation::new(Property::DurableAckNeverUndone, json!({ "ack_floor": 150 }));
        assert_eq!(j.crash_question(&late, s(30), s(60)).unwrap().servers, vec!["n3".to_string()], "151 was delivered after 25 s, on n3 alone");
    }

    #[test]
    fn the_recent_clock_is_fine_and_bounded() {
        let ms = Duration::from_millis;
        let mut c = RecentClock::default();
        for i in 0..10_000u64 {
            c.sample(ms(i * 50), i);
        }
        assert!(c.samples.len() <= 3001, "{}", c.samples.len());
        assert_eq!(c.reached_by(9_999), Some(ms(9_999 * 50)), "the latest value is always kept");
        assert_eq!(c.reached_by(9_997), Some(ms(9_998 * 50)), "within 100 ms");
        assert_eq!(c.reached_by(10), c.samples.front().map(|s| s.0), "older than kept: the oldest sample bounds it");
        assert_eq!(c.reached_by(20_000), None);
        assert_eq!(c.last_below(9_999), Some(ms(9_998 * 50)), "9,998 was the value then");
        assert_eq!(c.last_below(9_997), Some(ms(9_996 * 50)));
        assert_eq!(c.last_below(10), None, "below every sample kept");
    }
}

#[cfg(test)]
mod delivery_tests {
    use super::*;

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    fn watch() -> DeliveryWatch {
        DeliveryWatch::new(WindowConfig { window: s(120), quiet: s(30), ..Default::default() }, s(10))
    }

    /// A ledger that received `seqs`.
    fn received(seqs: impl IntoIterator<Item = u64>) -> DurableLedger {
        let m = RunMessages::new("run", 7, 16);
        let mut l = DurableLedger::new(m.clone());
        for seq in seqs {
            let p = m.payload(seq);
            l.on_delivery(seq, Some(&m.msg_id(seq)), Some(&crate::payload::checksum(&p)), &p);
        }
        l
    }

    #[test]
    fn a_message_owed_past_ack_wait_and_window_is_late_once_quiet_was_had() {
        let mut w = watch();
        let acked = |_| Some(s(5));
        let mut l = received(1..=100);
        assert_eq!(w.observe(s(10), &l, 100, acked, s(0), None), DeliveryCheck::Fine, "nothing owed");
        assert_eq!(w.observe(s(20), &l, 150, acked, s(0), None), DeliveryCheck::Fine, "101 owed since its ack at 5 s");
        assert_eq!(w.observe(s(106), &l, 150, acked, s(0), None), DeliveryCheck::AskQuiet { seq: 101 }, "130 s deadline, 30 s of it quiet");
        assert_eq!(w.observe(s(134), &l, 150, acked, s(0), None), DeliveryCheck::Fine, "in the quiet part");
        assert_eq!(w.observe(s(136), &l, 150, acked, s(0), None), DeliveryCheck::Late { from: 101, to: 150, waited: s(131) }, "every message acked as long ago is late with it");
        assert_eq!(w.observe(s(140), &l, 150, acked, s(0), None), DeliveryCheck::Fine, "reported once");
        assert_eq!(w.settled_floor(&l), 150, "a late message stalls the catch-up no more");
        for seq in 101..=120 {
            l.on_delivery(seq, None, None, b"");
        }
        assert_eq!(w.late(&l, 8), LateMessages { late: 50, received_later: 20, never_received: vec![(121, 150)] });
    }

    #[test]
    fn only_messages_past_their_own_deadline_are_late() {
        let mut w = watch();
        let acked = |seq: u64| Some(s(seq));
        let l = received(1..=4);
        assert_eq!(w.observe(s(100), &l, 50, acked, s(0), None), DeliveryCheck::Fine, "95 s: before the quiet part");
        assert_eq!(w.observe(s(105), &l, 50, acked, s(0), None), DeliveryCheck::AskQuiet { seq: 5 });
        assert_eq!(w.observe(s(140), &l, 50, acked, s(0), None), DeliveryCheck::Late { from: 5, to: 10, waited: s(135) }, "11 was acked at 11 s: 129 s ago");
        assert_eq!(w.observe(s(141), &l, 50, acked, s(0), None), DeliveryCheck::Late { from: 11, to: 11, waited: s(130) }, "the quiet just had serves it");
        assert_eq!(w.observe(s(300), &l, 50, acked, s(0), None), DeliveryCheck::AskQuiet { seq: 12 }, "a quiet period long past does not serve");
    }

    #[test]
    fn the_deadline_counts_from_the_later_of_the_ack_and_the_consumers_last_change() {
        let mut w = watch();
        let none = received([]);
        let all = received(1..=10);
        assert_eq!(w.observe(s(50), &none, 10, |_| Some(s(1)), s(40), None), DeliveryCheck::Fine);
        assert_eq!(w.observe(s(139), &none, 10, |_| Some(s(1)), s(40), None), DeliveryCheck::Fine, "99 s since the change (quiet from 100 s), not 138 since the ack");
        assert_eq!(w.observe(s(141), &all, 10, |_| Some(s(1)), s(40), None), DeliveryCheck::Held { seq: 1, waited: s(101) });
        let mut u = watch();
        assert_eq!(u.observe(s(50), &none, 10, |_| None, s(0), None), DeliveryCheck::Fine, "an unknown ack time counts from now");
        assert_eq!(u.observe(s(150), &none, 10, |_| None, s(0), None), DeliveryCheck::AskQuiet { seq: 1 });
        assert_eq!(u.observe(s(175), &none, 10, |_| None, s(0), None), DeliveryCheck::Fine, "130 s from 50");
        assert!(matches!(u.observe(s(181), &none, 10, |_| None, s(0), None), DeliveryCheck::Late { from: 1, .. }));
        u.restart();
        assert_eq!(u.observe(s(182), &none, 10, |_| None, s(182), None), DeliveryCheck::Fine, "a new consumer owes from its making");
    }

    /// A consumer reset with its server (the soak of 2026-12-07: floor 0, delivering from 1
    /// again while 925,113 had been received) owes 925,114 only once it gets there: its
    /// clock starts when the server's delivered position reaches it, and then it is judged
    /// as any other.
    #[test]
    fn a_message_the_server_has_not_reached_yet_is_not_late() {
        let mut w = watch();
        let got = received(1..=100);
        let acked = |_| Some(s(1));
        assert_eq!(w.observe(s(200), &got, 150, acked, s(0), Some(40)), DeliveryCheck::Fine, "delivering 40 again: 101 is on its way");
        assert_eq!(w.observe(s(300), &got, 150, acked, s(0), Some(100)), DeliveryCheck::Fine, "still before it at 300 s");
        assert_eq!(w.observe(s(301), &got, 150, acked, s(0), Some(120)), DeliveryCheck::Fine, "passed it: the clock starts from the last look before");
        assert_eq!(w.observe(s(399), &got, 150, acked, s(0), Some(150)), DeliveryCheck::Fine);
        assert_eq!(w.observe(s(400), &got, 150, acked, s(0), Some(150)), DeliveryCheck::AskQuiet { seq: 101 }, "130 s deadline from 300 s, 30 s of it quiet");
        assert!(matches!(w.observe(s(430), &got, 150, acked, s(0), Some(150)), DeliveryCheck::Late { from: 101, .. }), "delivered past it and never received: late");
    }

    #[test]
    fn a_passed_sequence_is_reported_once_and_followed_to_whether_it_comes() {
        let mut l = received([1, 2, 3, 5, 6, 9]);
        assert_eq!(l.judge_ack_floor(9).unwrap().details["never_delivered"], 4);
        l.passed_by_floor(9);
        assert_eq!(l.judge_ack_floor(9), None, "reported once");
        assert_eq!(l.judge_ack_floor(10).unwrap().details["never_delivered"], 10, "a later skip is judged");
        assert_eq!(l.received_floor(), 3, "still owed");
        l.on_delivery(7, None, None, b"");
        assert_eq!(l.skips(8), Skips { passed: 3, received_later: 1, never_received: vec![(4, 4), (8, 8)] });
    }

    /// A position from a look long ago would start no message's clock, for ever: the
    /// delivery watch then counts from the ack instead.
    #[test]
    fn only_a_recent_look_with_a_leader_says_where_the_consumer_is() {
        let mut j = FloorJudge::new(s(10));
        assert_eq!(j.recent_delivered(s(5), s(30)), None, "no look yet");
        j.last_look = serde_json::json!({ "t_s": 100.0, "leader": "n2", "delivered": { "stream_seq": 40 } });
        assert_eq!(j.recent_delivered(s(120), s(30)), Some(40));
        assert_eq!(j.recent_delivered(s(131), s(30)), None, "31 s old");
        j.last_look["leader"] = Value::Null;
        assert_eq!(j.recent_delivered(s(101), s(30)), None, "a leaderless answer is one replica's own state");
    }

    #[test]
    fn never_received_lists_the_holes_up_to_the_last_ack() {
        let l = received([1, 2, 3, 5, 6, 9]);
        assert_eq!(l.never_received(10, 8), vec![(4, 4), (7, 8), (10, 10)]);
        assert_eq!(l.never_received(6, 8), vec![(4, 4)]);
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn the_clock_brackets_an_ack_and_stays_bounded() {
        let mut c = AckClock::default();
        for i in 0..10_000u64 {
            c.sample(i as f64, i * 10);
        }
        assert!(c.samples.len() <= CLOCK_SAMPLES);
        let (lo, hi) = c.acked_between(50_005).unwrap();
        assert!(lo <= 5_000.5 && hi >= 5_000.5 && hi - lo <= 2.0 * 10_000.0 / CLOCK_SAMPLES as f64, "{lo}..{hi}");
        assert_eq!(c.acked_between(200_000), None, "not acknowledged by the last sample");
        assert_eq!(AckClock::default().acked_between(1), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::checksum;
    use proptest::prelude::*;

    fn run() -> RunMessages {
        RunMessages::new("run", 7, 16)
    }

    fn deliver(l: &mut DurableLedger, m: &RunMessages, seq: u64) -> Vec<Property> {
        let p = m.payload(seq);
        l.on_delivery(seq, Some(&m.msg_id(seq)), Some(&checksum(&p)), &p).into_iter().map(|v| v.property).collect()
    }

    /// Sequences `1 ..= n` delivered, their acks confirmed.
    fn deliver_and_confirm(l: &mut DurableLedger, m: &RunMessages, n: u64) {
        for seq in 1..=n {
            deliver(l, m, seq);
            l.on_ack_confirmed(seq);
        }
    }

    #[test]
    fn out_of_order_deliveries_and_redeliveries_are_fine() {
        let m = run();
        let mut l = DurableLedger::new(m.clone());
        for seq in [1, 2, 4, 5, 3, 4] {
            assert!(deliver(&mut l, &m, seq).is_empty());
        }
        assert_eq!(l.received_floor(), 5);
        l.on_ack_confirmed(1);
        l.on_ack_confirmed(2);
        l.on_ack_confirmed(5);
        assert_eq!(l.confirmed_floor(), 2);
        assert_eq!(l.judge_ack_floor(2), None);
        assert_eq!(l.judge_ack_floor(5), None, "a higher floor: acks confirmed but their replies lost");
        assert_eq!(deliver(&mut l, &m, 3), Vec::<Property>::new(), "unconfirmed, so it may come again");
    }

    #[test]
    fn each_defect_maps_to_its_property() {
        let m = run();
        let mut l = DurableLedger::new(m.clone());
        deliver_and_confirm(&mut l, &m, 3);
        assert!(deliver(&mut l, &m, 2).is_empty() && l.is_confirmed(2), "delivered again: judged by Redeliveries");
        assert_eq!(l.judge_ack_floor(1).unwrap().property, Property::DurableAckNeverUndone);
        assert_eq!(l.judge_ack_floor(5).unwrap().property, Property::DurableNothingSkipped);
        assert_eq!(l.judge_ack_floor(5).unwrap().details["never_delivered"], 4);
        let mut bad = m.payload(4);
        bad[0] ^= 1;
        let v = l.on_delivery(4, Some(&m.msg_id(4)), Some(&checksum(&bad)), &bad);
        assert_eq!(v[0].property, Property::DurableContentMatchesPublish);
        assert_eq!(l.on_delivery(5, Some("other-5"), None, b"x")[0].property, Property::DurableContentMatchesPublish);
        l.restart();
        assert!(deliver(&mut l, &m, 1).is_empty(), "a new consumer starts a new ledger");
    }

    #[test]
    fn an_excused_undo_is_forgotten_and_later_acks_are_judged_again() {
        let m = run();
        let mut l = DurableLedger::new(m.clone());
        deliver_and_confirm(&mut l, &m, 5);
        assert_eq!(l.judge_ack_floor(2).unwrap().property, Property::DurableAckNeverUndone);
        l.forget_confirmed_above(2);
        assert_eq!((l.judge_ack_floor(2), l.is_confirmed(3)), (None, false), "the floor left where the crash put it is not failed again");
        l.on_ack_confirmed(3);
        assert_eq!(l.judge_ack_floor(2).unwrap().property, Property::DurableAckNeverUndone, "an ack confirmed after is judged");
    }

    #[test]
    fn a_confirmed_ack_delivered_twice_more_is_undone_once_is_a_race() {
        let s = Duration::from_secs;
        let wait = s(5);
        let mut r = Redeliveries::default();
        assert_eq!(r.on_delivery(7, 2, 10, s(1), wait), Redelivery::Suspect);
        assert_eq!(r.on_delivery(8, 2, 10, s(1), wait), Redelivery::Suspect);
        assert_eq!(r.on_delivery(7, 3, 10, s(1) + Duration::from_millis(5), wait), Redelivery::Repeat, "too soon for an ack wait to have passed");
        let Redelivery::Undone(v) = r.on_delivery(7, 4, 10, s(7), wait) else { panic!() };
        assert_eq!((v.property, v.details["first_delivered_again_s_ago"].as_f64()), (Property::DurableAckNeverUndone, Some(6.0)));
        assert_eq!(r.expire(s(10), s(15)), Vec::<u64>::new());
        assert_eq!(r.expire(s(17), s(15)), vec![8], "never came again: a race");
        assert!(r.is_empty());
    }

    proptest! {

        /// Any delivery order of any set, acked in any order: the floors are the contiguous
        /// prefixes, and the ranges never outnumber the holes.
        #[test]
        fn floors_are_contiguous_prefixes(seqs in proptest::collection::vec(1u64..200, 0..300)) {
            let m = run();
            let mut l = DurableLedger::new(m.clone());
            let mut seen = std::collections::BTreeSet::new();
            for s in &seqs {
                prop_assert!(deliver(&mut l, &m, *s).is_empty());
                seen.insert(*s);
            }
            let floor = (1..).take_while(|s| seen.contains(s)).count() as u64;
            prop_assert_eq!(l.received_floor(), floor);
            prop_assert_eq!(l.judge_ack_floor(0), None);
            let holes = (1..=seen.last().copied().unwrap_or(0)).filter(|s| !seen.contains(s)).count();
            prop_assert!(l.received.len() <= holes + 1);
        }
    }

    #[test]
    fn replicas_at_rest_hold_the_leaders_delivered_sequence_and_ack_floor() {
        let r = |node: &str, delivered, ack_floor| ConsumerReplica { node: node.into(), delivered, ack_floor };
        let leader = r("n1", 5000, 4990);
        assert_eq!(replicas_at_rest(&leader, &[r("n2", 5000, 4990), r("n3", 5000, 4990)]), Ok(()));
        assert_eq!(replicas_at_rest(&leader, &[r("n2", 5000, 4990), r("n3", 5000, 4000)]), Err(vec![r("n3", 5000, 4000)]));
        assert!(replicas_at_rest(&leader, &[r("n2", 5001, 4990)]).is_err(), "ahead of the leader differs too");
        assert_eq!(replicas_at_rest(&leader, &[]), Ok(()), "a single replica agrees with itself");
    }
}
