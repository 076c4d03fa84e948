//! The reader's checker: stream sequences must follow each other and every message must be
//! exactly the one published for its sequence.
//!
//! The publisher stores message `i` only where the stream's last sequence is `i - 1`, so
//! message `i` lives at stream sequence `i`: a message's id, payload and checksum are all
//! determined by its sequence and the run's seed. The verifier keeps one counter.

use crate::payload::{checksum, checksum_bytes, RunMessages};
use crate::{Property, Violation};
use serde_json::json;

pub struct ReadVerifier {
    content: ContentCheck,
    next_seq: u64,
}

/// Compares a delivered message with the one published for its sequence.
pub struct ContentCheck {
    messages: RunMessages,
    expected: Vec<u8>,
}

/// What is wrong with a delivered message.
#[derive(Clone, Debug, PartialEq)]
pub enum ContentProblem {
    /// Its id is not one of the run's.
    Foreign,
    /// It is not the message published for its sequence (the details say how).
    Differs(serde_json::Value),
}

impl ContentCheck {
    pub fn new(messages: RunMessages) -> Self {
        let expected = vec![0; messages.payload_size];
        Self { messages, expected }
    }

    /// None when the message at `seq` is exactly the one published for it.
    pub fn check(&mut self, seq: u64, msg_id: Option<&str>, sum: Option<&str>, payload: &[u8]) -> Option<ContentProblem> {
        let Some(index) = msg_id.and_then(|id| self.messages.index_of(id)) else { return Some(ContentProblem::Foreign) };
        let mut problems = Vec::new();
        if index != seq {
            problems.push(format!("message id {index} at sequence {seq}"));
        }
        // On the stack: this runs for every message read, twice (reader and durable).
        if sum.map(str::as_bytes) != Some(&checksum_bytes(payload)[..]) {
            problems.push("checksum header does not match the payload".into());
        }
        self.expected.resize(self.messages.payload_size, 0);
        self.messages.fill_payload(seq, &mut self.expected);
        if payload != self.expected.as_slice() {
            problems.push("payload differs from the one published for this sequence".into());
        }
        if problems.is_empty() {
            return None;
        }
        Some(ContentProblem::Differs(json!({ "seq": seq, "msg_id": msg_id, "checksum_header": sum, "payload_sha256": checksum(payload),
                                             "payload_len": payload.len(), "problems": problems })))
    }
}

/// What one delivered message means.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadOutcome {
    /// The next sequence, with the published content.
    Verified,
    /// Sequences `from..=to` were skipped. Nothing was consumed: the caller looks the
    /// missing sequences up (see [`judge_missing`]) and then resumes from `from`.
    Gap { from: u64, to: u64 },
    /// An already consumed sequence as the first delivery of a consumer the client
    /// recreated from the start of the stream ([`Delivery::FirstFromStart`]). That is no
    /// evidence against the server only if `seq` is the first message the stream holds:
    /// the caller confirms it ([`ReadVerifier::not_the_stream_start`] when it is not). Its
    /// content is still checked (`violation`), and the caller resumes at `next_seq()`.
    /// An older sequence anywhere else is an ordering violation ([`ReadOutcome::Violations`]).
    Behind { seq: u64, violation: Option<Violation> },
    /// The message breaks one or more properties. Its sequence is consumed.
    Violations(Vec<Violation>),
}

/// Where a delivery stands in the consumer that made it (async-nats recreates an ordered
/// consumer by itself, under a new name, on a consumer-sequence gap or missed heartbeats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Inside a consumer, or the first of a consumer that was created to start at the
    /// reader's next sequence (the reader's own, or the client's after a delivery).
    InOrder,
    /// The first delivery (consumer sequence 1) of a consumer the client recreated before
    /// anything was delivered: async-nats then asks for the whole stream
    /// (`DeliverPolicy::All`), so it starts at the stream's first message.
    FirstFromStart,
}

/// What a look-up of a skipped sequence in the stream found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Present,
    /// Confirmed absent (not a momentary answer).
    Absent,
}

impl ReadVerifier {
    /// A verifier expecting `first_seq` next.
    pub fn new(messages: RunMessages, first_seq: u64) -> Self {
        Self { content: ContentCheck::new(messages), next_seq: first_seq }
    }

    /// The next stream sequence the reader must see.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Number of sequences consumed so far (verified or not).
    pub fn consumed(&self) -> u64 {
        self.next_seq - 1
    }

    /// Judges one delivery.
    pub fn check(&mut self, seq: u64, delivery: Delivery, msg_id: Option<&str>, sum: Option<&str>, payload: &[u8]) -> ReadOutcome {
        if seq > self.next_seq {
            return ReadOutcome::Gap { from: self.next_seq, to: seq - 1 };
        }
        if seq < self.next_seq {
            let content = self.content(seq, msg_id, sum, payload);
            if delivery == Delivery::FirstFromStart {
                return ReadOutcome::Behind { seq, violation: content };
            }
            let order = Violation::new(
                Property::ReadSequenceGapFree,
                json!({ "seq": seq, "expected_seq": self.next_seq,
                        "problem": "an older stream sequence delivered by a consumer asked to go on from a later one" }),
            );
            return ReadOutcome::Violations([order].into_iter().chain(content).collect());
        }
        self.next_seq += 1;
        match self.content(seq, msg_id, sum, payload) {
            None => ReadOutcome::Verified,
            Some(v) => ReadOutcome::Violations(vec![v]),
        }
    }

    /// Whether the message at `seq` is exactly the one published for it.
    fn content(&mut self, seq: u64, msg_id: Option<&str>, sum: Option<&str>, payload: &[u8]) -> Option<Violation> {
        match self.content.check(seq, msg_id, sum, payload)? {
            ContentProblem::Foreign => Some(Violation::new(
                Property::ReadOnlyPublishedMessages,
                json!({ "seq": seq, "msg_id": msg_id, "problem": "message id is not one of this run's" }),
            )),
            ContentProblem::Differs(details) => Some(Violation::new(Property::ReadContentMatchesPublish, details)),
        }
    }

    /// A [`ReadOutcome::Behind`] delivery of `seq` came from a consumer that started at the
    /// stream's start, but the stream's first message is `stream_first`, not `seq`: the
    /// server went back in the stream (or skipped its start).
    pub fn not_the_stream_start(&self, seq: u64, stream_first: u64) -> Violation {
        Violation::new(
            Property::ReadSequenceGapFree,
            json!({ "seq": seq, "expected_seq": self.next_seq, "stream_first_seq": stream_first,
                    "problem": "a consumer restarted from the stream's start first delivered a sequence other than the stream's first" }),
        )
    }

    /// Continue after a judged gap: the reader resumes from the first delivered sequence.
    pub fn skip_to(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq);
    }
}

/// Judges a gap `from..=to` whose first sequence was looked up in the stream.
/// Present: the server skipped a stored message on delivery. Absent: the message is gone;
/// if it had been acknowledged that is data loss.
pub fn judge_missing(from: u64, to: u64, first: Lookup, last_acked_seq: u64) -> Violation {
    let details = json!({ "missing_from": from, "missing_to": to, "last_acked_seq": last_acked_seq,
                          "first_missing_in_stream": first == Lookup::Present });
    match first {
        Lookup::Present => Violation::new(Property::ReadSequenceGapFree, details),
        Lookup::Absent if from <= last_acked_seq => Violation::new(Property::AckedMessageNeverLost, details),
        Lookup::Absent => Violation::new(Property::ReadSequenceGapFree, details),
    }
}

/// The far end of a range judged missing at once: the reader, stuck at `next` below
/// `target`, found `next` absent, and the stream then said it holds `stream_first..=
/// stream_last`. Ending before `next`: everything up to the target is gone. Starting after
/// it: everything up to the stream's first sequence (one judgment, not one per message, so
/// a stream reset to empty under many acks is judged at once). Otherwise (inside the
/// stream, or no answer): `next` alone, a hole.
pub fn missing_to(next: u64, target: u64, stream_first: Option<u64>, stream_last: Option<u64>) -> u64 {
    match (stream_first, stream_last) {
        (_, Some(last)) if last < next => target.max(next),
        (Some(first), _) if first > next => (first - 1).min(target.max(next)),
        _ => next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run() -> RunMessages {
        RunMessages::new("run", 99, 32)
    }

    fn deliver(v: &mut ReadVerifier, m: &RunMessages, seq: u64) -> ReadOutcome {
        deliver_from(v, m, seq, Delivery::InOrder)
    }

    fn deliver_from(v: &mut ReadVerifier, m: &RunMessages, seq: u64, delivery: Delivery) -> ReadOutcome {
        let p = m.payload(seq);
        v.check(seq, delivery, Some(&m.msg_id(seq)), Some(&checksum(&p)), &p)
    }

    #[test]
    fn published_messages_in_order_verify() {
        let m = run();
        let mut v = ReadVerifier::new(m.clone(), 1);
        for seq in 1..=100 {
            assert_eq!(deliver(&mut v, &m, seq), ReadOutcome::Verified);
        }
        assert_eq!(v.consumed(), 100);
    }

    #[test]
    fn each_defect_maps_to_its_property() {
        let m = run();
        let mut v = ReadVerifier::new(m.clone(), 1);
        assert_eq!(deliver(&mut v, &m, 3), ReadOutcome::Gap { from: 1, to: 2 });
        assert_eq!(v.next_seq(), 1, "a gap consumes nothing");

        let one = |o: ReadOutcome| match o { ReadOutcome::Violations(v) => v[0].property, o => panic!("{o:?}") };
        let p = m.payload(1);
        assert_eq!(one(v.check(1, Delivery::InOrder, Some("other-1"), Some(&checksum(&p)), &p)), Property::ReadOnlyPublishedMessages);
        assert_eq!(one(v.check(2, Delivery::InOrder, None, None, b"x")), Property::ReadOnlyPublishedMessages);
        let p3 = m.payload(3);
        assert_eq!(one(v.check(3, Delivery::InOrder, Some(&m.msg_id(4)), Some(&checksum(&p3)), &p3)), Property::ReadContentMatchesPublish);
        let mut bad = m.payload(4);
        bad[0] ^= 1;
        assert_eq!(one(v.check(4, Delivery::InOrder, Some(&m.msg_id(4)), Some(&checksum(&bad)), &bad)), Property::ReadContentMatchesPublish);
        let p5 = m.payload(5);
        assert_eq!(one(v.check(5, Delivery::InOrder, Some(&m.msg_id(5)), Some("00"), &p5)), Property::ReadContentMatchesPublish);
        assert_eq!(deliver_from(&mut v, &m, 1, Delivery::FirstFromStart), ReadOutcome::Behind { seq: 1, violation: None }, "a consumer restarted from the stream's start");
        let behind_bad = v.check(2, Delivery::FirstFromStart, Some(&m.msg_id(2)), Some("00"), &m.payload(2));
        assert!(matches!(behind_bad, ReadOutcome::Behind { seq: 2, violation: Some(ref x) } if x.property == Property::ReadContentMatchesPublish));
        assert_eq!(v.not_the_stream_start(2, 1).property, Property::ReadSequenceGapFree);
        assert_eq!(one(deliver(&mut v, &m, 3)), Property::ReadSequenceGapFree, "an older sequence inside one consumer is out of order");
        assert_eq!(v.next_seq(), 6, "redeliveries consume nothing");
        assert_eq!(deliver(&mut v, &m, 6), ReadOutcome::Verified);
    }

    #[test]
    fn missing_messages_are_judged_by_what_the_stream_holds() {
        assert_eq!(judge_missing(4, 6, Lookup::Present, 10).property, Property::ReadSequenceGapFree);
        assert_eq!(judge_missing(4, 6, Lookup::Absent, 10).property, Property::AckedMessageNeverLost);
        assert_eq!(judge_missing(11, 12, Lookup::Absent, 10).property, Property::ReadSequenceGapFree);
    }

    #[test]
    fn a_missing_range_ends_where_the_stream_says() {
        // 2.10.25, 2026-12-01: the stream reset, first sequence 68,599 under 68,894 acks.
        assert_eq!(missing_to(1, 68_894, Some(68_599), Some(68_598)), 68_598);
        assert_eq!(missing_to(1, 68_894, Some(68_599), Some(70_000)), 68_598, "the range stops before the first message held");
        assert_eq!(missing_to(500, 900, Some(1), Some(499)), 900, "a stream ending before the reader: all up to the target");
        assert_eq!(missing_to(500, 900, Some(1), Some(1_000)), 500, "inside the stream: one hole");
        assert_eq!(missing_to(500, 900, None, None), 500, "no stream info: one message only");
        assert_eq!(missing_to(500, 400, Some(1), Some(499)), 500, "a target below the reader never shrinks the range below next");
        assert_eq!(missing_to(500, 520, Some(600), None), 520, "never past the target");
    }

    proptest! {
        /// A consumer restarted from the stream's start delivers sequence 1 again (the caller
        /// confirms that 1 is the stream's first); the reader then recreates its own at its
        /// position. Read that way, nothing is raised; an older sequence delivered in order
        /// anywhere else always is.
        #[test]
        fn only_a_restart_from_the_stream_start_may_go_back(restarts in proptest::collection::vec((any::<bool>(), 1u64..50, 0u64..50), 0..10)) {
            let m = run();
            let mut v = ReadVerifier::new(m.clone(), 1);
            for (from_start, ahead, back) in restarts {
                if v.next_seq() > 1 {
                    let kind = if from_start { Delivery::FirstFromStart } else { Delivery::InOrder };
                    let older = v.next_seq().saturating_sub(back + 1).max(1);
                    match deliver_from(&mut v, &m, older, kind) {
                        ReadOutcome::Behind { seq, violation: None } => prop_assert!(from_start && seq == older),
                        ReadOutcome::Violations(vs) => prop_assert!(!from_start && vs[0].property == Property::ReadSequenceGapFree),
                        other => prop_assert!(false, "{:?}", other),
                    }
                }
                let first = v.next_seq();
                for seq in first..first + ahead {
                    prop_assert_eq!(deliver(&mut v, &m, seq), ReadOutcome::Verified);
                }
            }
        }

        /// Any single corrupted byte is caught.
        #[test]
        fn any_bit_flip_is_caught(seq in 1u64..1000, pos in 0usize..32, bit in 0u8..8) {
            let m = run();
            let mut v = ReadVerifier::new(m.clone(), seq);
            let mut p = m.payload(seq);
            let sum = checksum(&p);
            p[pos] ^= 1 << bit;
            let caught = matches!(v.check(seq, Delivery::InOrder, Some(&m.msg_id(seq)), Some(&sum), &p), ReadOutcome::Violations(_));
            prop_assert!(caught);
        }
    }
}
