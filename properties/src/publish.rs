//! The publisher's ledger: which message is the first unconfirmed one, how far the acks
//! prove the stream, and whether an ack or a rejection breaks a publish property.
//!
//! The publisher sends message `i` with `Nats-Msg-Id` `<run>-i` and (normally)
//! `expected_last_sequence = i - 1`, keeps a window of sends in flight, and judges replies
//! strictly in send order. On anything but a clean ack it rewinds to `next_index()` and
//! sends the same ids again, so the stream stays gap-free: message `i` lives at sequence
//! `i`. Replies to sends given up by a rewind are still judged when they arrive
//! ([`PublishLedger::on_late_ack`]). The ledger holds a few numbers.

use crate::{Property, Violation};
use serde_json::json;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishLedger {
    last_acked_index: u64,
    last_acked_seq: u64,
    /// Every sequence `1..=watermark` was acknowledged as holding the message of that
    /// index. Frozen at the first violation: what comes after it is not known to be ours.
    watermark: u64,
    /// The index whose ack first broke a property, if any.
    diverged_at: Option<u64>,
}

/// What one ack, judged in order, means.
#[derive(Clone, Debug, PartialEq)]
pub enum AckVerdict {
    /// First store of the message at the expected sequence.
    Fresh,
    /// A retry was recognised: the original was stored at the expected sequence.
    Duplicate,
    /// A duplicate ack without a sequence (nats-server 2.10 while the original is still in
    /// flight): proves nothing, the same id must be sent again.
    Unknown,
    /// The ack breaks a property. The ledger moves on relative to it (so one defect is
    /// reported once, not on every later message) but its watermark stays where the acks
    /// were last consistent, so no sequence the server never acknowledged is counted as
    /// acknowledged.
    Violation(Violation),
}

/// What an ack for a send given up by a rewind means.
#[derive(Clone, Debug, PartialEq)]
pub enum LateAck {
    /// It names the sequence its message must have.
    Consistent,
    /// It cannot be judged: a duplicate ack without a sequence, or acks have already broken
    /// a property (after that, which sequence a message must have is not known).
    Unjudged,
    Violation(Violation),
}

impl PublishLedger {
    pub fn new() -> Self {
        Self::default()
    }

    /// The first message not yet confirmed: where a rewind restarts.
    pub fn next_index(&self) -> u64 {
        self.last_acked_index + 1
    }

    /// Sequence of the last acknowledged message (0 before the first ack): what the stream's
    /// last sequence is expected to be.
    pub fn last_acked_seq(&self) -> u64 {
        self.last_acked_seq
    }

    pub fn last_acked_index(&self) -> u64 {
        self.last_acked_index
    }

    /// Every sequence up to this one was acknowledged holding its own message: what the
    /// loss checks hold the stream to.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// The index whose ack first broke a property.
    pub fn diverged_at(&self) -> Option<u64> {
        self.diverged_at
    }

    /// Judges the ack for `index`, which must be `next_index()` (acks are judged in order).
    pub fn on_ack(&mut self, index: u64, seq: u64, duplicate: bool) -> AckVerdict {
        debug_assert_eq!(index, self.next_index(), "acks must be judged in send order");
        if duplicate && seq == 0 {
            return AckVerdict::Unknown;
        }
        let expected = self.last_acked_seq + 1;
        let verdict = if seq == expected {
            if duplicate { AckVerdict::Duplicate } else { AckVerdict::Fresh }
        } else {
            AckVerdict::Violation(Violation::new(
                ack_property(duplicate),
                json!({ "index": index, "expected_seq": expected, "acked_seq": seq, "duplicate": duplicate }),
            ))
        };
        if matches!(verdict, AckVerdict::Violation(_)) {
            self.diverged_at.get_or_insert(index);
        }
        self.last_acked_index = index;
        self.last_acked_seq = self.last_acked_seq.max(seq);
        if self.diverged_at.is_none() {
            self.watermark = self.last_acked_seq;
        }
        verdict
    }

    /// Judges an ack for `index` that arrived after a rewind gave its send up, before or
    /// after a retry confirmed the same index. Until a violation, message `i` lives at
    /// sequence `i`: a late ack naming any other sequence is as wrong as an in-order one.
    pub fn on_late_ack(&self, index: u64, seq: u64, duplicate: bool) -> LateAck {
        if (duplicate && seq == 0) || self.diverged_at.is_some() {
            return LateAck::Unjudged;
        }
        if seq == index {
            return LateAck::Consistent;
        }
        LateAck::Violation(Violation::new(
            ack_property(duplicate),
            json!({ "index": index, "expected_seq": index, "acked_seq": seq, "duplicate": duplicate,
                    "observed_by": "an ack that arrived after its send was given up by a rewind" }),
        ))
    }

    /// Classifies a `WrongLastSequence` rejection of the oldest unconfirmed message, whose
    /// publish expected `last_acked_seq()` as the stream's last sequence. The server runs
    /// the dedup check first, so a retry of a message it recognises never lands here.
    pub fn on_wrong_last_sequence(&self, reported_last: u64) -> Rejection {
        use std::cmp::Ordering::*;
        match reported_last.cmp(&self.last_acked_seq) {
            Equal => Rejection::Transient,
            Less if reported_last < self.watermark => Rejection::Behind,
            // Between the watermark and a last ack that already broke a property: nothing
            // acknowledged is known to be missing.
            Less => Rejection::Transient,
            Greater => Rejection::Ahead { seq: self.last_acked_seq + 1 },
        }
    }

    /// A `Behind` answer that held for a whole confirmation period: the stream ends before
    /// a message it acknowledged.
    pub fn stream_behind(&self, index: u64, reported_last: u64, held_s: f64) -> Violation {
        Violation::new(
            Property::AckedMessageNeverLost,
            json!({ "index": index, "stream_last_seq": reported_last, "last_acked_seq": self.watermark,
                    "observed_by": "publishes rejected: the stream ends before the last ack", "held_s": held_s }),
        )
    }

    /// Judges what occupies `seq` (the sequence after the last ack) after an `Ahead`
    /// rejection of message `index`. The message itself there means dedup has not caught up
    /// yet (seen on a freshly elected leader): retry. Anything else is a write that is not
    /// the workload's, or a message out of place.
    pub fn judge_occupant(&self, index: u64, seq: u64, occupant_index: Option<u64>, occupant_id: Option<&str>) -> Option<Violation> {
        if occupant_index == Some(index) {
            return None;
        }
        Some(Violation::new(
            Property::PublishAckGapFree,
            json!({ "index": index, "seq": seq, "last_acked_seq": self.last_acked_seq, "occupant_msg_id": occupant_id,
                    "observed_by": "the stream moved past the last ack with a message that is not the next one" }),
        ))
    }
}

/// The property a wrong ack breaks: a duplicate must name the original sequence, a fresh
/// store must extend the stream by one.
fn ack_property(duplicate: bool) -> Property {
    if duplicate { Property::PublishDuplicateAckOriginalSequence } else { Property::PublishAckGapFree }
}

/// What a `WrongLastSequence` rejection says about the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The stream's last sequence is the last ack: the server's view moved meanwhile; retry.
    /// Also any answer that contradicts "the stream ends before the last ack".
    Transient,
    /// The stream ends before an acknowledged message. A deposed leader can say so for a
    /// moment; only a confirmed answer is a violation ([`PublishLedger::stream_behind`]).
    Behind,
    /// Something sits at `seq` that was never acknowledged to the workload: look it up and
    /// judge it ([`PublishLedger::judge_occupant`]).
    Ahead { seq: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn in_order_acks_and_retries_hold() {
        let mut l = PublishLedger::new();
        assert_eq!(l.on_ack(1, 1, false), AckVerdict::Fresh);
        assert_eq!(l.on_ack(2, 0, true), AckVerdict::Unknown);
        assert_eq!(l.next_index(), 2);
        assert_eq!(l.on_ack(2, 2, true), AckVerdict::Duplicate);
        assert_eq!(l.on_ack(3, 3, false), AckVerdict::Fresh);
        assert_eq!(l.on_wrong_last_sequence(3), Rejection::Transient);
    }

    #[test]
    fn gaps_and_wrong_duplicates_are_violations() {
        let mut l = PublishLedger::new();
        l.on_ack(1, 1, false);
        let AckVerdict::Violation(v) = l.on_ack(2, 3, false) else { panic!() };
        assert_eq!(v.property, Property::PublishAckGapFree);
        // resynchronised: the next one in line is fine
        assert_eq!(l.on_ack(3, 4, false), AckVerdict::Fresh);
        let AckVerdict::Violation(v) = l.on_ack(4, 2, true) else { panic!() };
        assert_eq!(v.property, Property::PublishDuplicateAckOriginalSequence);
    }

    #[test]
    fn a_violation_freezes_the_watermark_so_unacked_sequences_are_never_held_against_the_stream() {
        let mut l = PublishLedger::new();
        l.on_ack(1, 1, false);
        l.on_ack(2, 2, false);
        assert_eq!(l.watermark(), 2);
        // A bogus ack far ahead: sequences 3..=999 were never acknowledged.
        assert!(matches!(l.on_ack(3, 1000, false), AckVerdict::Violation(_)));
        assert_eq!(l.diverged_at(), Some(3));
        assert_eq!(l.on_ack(4, 1001, false), AckVerdict::Fresh, "reported once");
        assert_eq!(l.watermark(), 2, "loss checks stay on what was consistently acked");
        assert_eq!(l.last_acked_seq(), 1001);
        assert_eq!(l.on_wrong_last_sequence(500), Rejection::Transient, "above the watermark: nothing acked is missing");
        assert_eq!(l.on_wrong_last_sequence(1), Rejection::Behind);
    }

    #[test]
    fn late_acks_must_name_their_own_sequence() {
        let mut l = PublishLedger::new();
        for i in 1..=5 {
            l.on_ack(i, i, false);
        }
        assert_eq!(l.on_late_ack(4, 4, false), LateAck::Consistent, "the original's own ack, after the retry's");
        assert_eq!(l.on_late_ack(7, 7, false), LateAck::Consistent, "ahead of the ledger, at its own sequence");
        assert_eq!(l.on_late_ack(7, 0, true), LateAck::Unjudged);
        let LateAck::Violation(v) = l.on_late_ack(6, 9, false) else { panic!() };
        assert_eq!(v.property, Property::PublishAckGapFree);
        let LateAck::Violation(v) = l.on_late_ack(3, 2, true) else { panic!() };
        assert_eq!(v.property, Property::PublishDuplicateAckOriginalSequence);
        l.on_ack(6, 60, false);
        assert_eq!(l.on_late_ack(7, 8, false), LateAck::Unjudged, "after a violation nothing is known");
    }

    #[test]
    fn wrong_last_sequence_below_or_above_the_last_ack() {
        let mut l = PublishLedger::new();
        for i in 1..=5 {
            l.on_ack(i, i, false);
        }
        assert_eq!(l.on_wrong_last_sequence(2), Rejection::Behind);
        assert_eq!(l.stream_behind(6, 2, 30.0).property, Property::AckedMessageNeverLost);
        assert_eq!(l.on_wrong_last_sequence(7), Rejection::Ahead { seq: 6 });
        assert_eq!(l.judge_occupant(6, 6, Some(6), Some("r-6")), None, "our own message: dedup lagging");
        assert_eq!(l.judge_occupant(6, 6, None, None).unwrap().property, Property::PublishAckGapFree);
        assert_eq!(l.judge_occupant(6, 6, Some(7), Some("r-7")).unwrap().property, Property::PublishAckGapFree);
    }

    /// A simulated correct server: stores in order, dedups ids, checks the expected last
    /// sequence after dedup, may lose acks (storing or not), may answer a duplicate with
    /// sequence 0 or miss it for a while (a new leader's dedup state lagging). The publisher sends a window, judges replies in order and rewinds at the
    /// first unclean one. No violation may ever be reported.
    #[derive(Clone, Debug)]
    struct Round { window: u8, lose_ack_at: Option<u8>, store_lost: bool, unknown_dup: bool, dedup_blind: bool }

    fn round() -> impl Strategy<Value = Round> {
        (1u8..8, proptest::option::of(0u8..8), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(window, lose_ack_at, store_lost, unknown_dup, dedup_blind)| Round { window, lose_ack_at, store_lost, unknown_dup, dedup_blind },
        )
    }

    enum Reply { Ack(u64, bool), WrongLast(u64), Lost }

    proptest! {
        #[test]
        fn a_correct_server_never_raises_a_publish_violation(rounds in proptest::collection::vec(round(), 1..60)) {
            let mut ledger = PublishLedger::new();
            let mut stored: Vec<u64> = Vec::new(); // seq k holds index stored[k-1]
            for Round { window, lose_ack_at, store_lost, unknown_dup, dedup_blind } in rounds {
                let first = ledger.next_index();
                let replies: Vec<(u64, Reply)> = (0..window as u64).map(|k| {
                    let index = first + k;
                    let expected_last = ledger.last_acked_seq() + k;
                    let reply = if dedup_blind && stored.contains(&index) {
                        // A new leader whose dedup state lags: the expected-sequence check answers.
                        Reply::WrongLast(stored.len() as u64)
                    } else if let Some(pos) = stored.iter().position(|i| *i == index) {
                        Reply::Ack(if unknown_dup { 0 } else { pos as u64 + 1 }, true)
                    } else if stored.len() as u64 != expected_last {
                        Reply::WrongLast(stored.len() as u64)
                    } else if Some(k as u8) == lose_ack_at {
                        if store_lost { stored.push(index); }
                        Reply::Lost
                    } else {
                        stored.push(index);
                        Reply::Ack(stored.len() as u64, false)
                    };
                    (index, reply)
                }).collect();
                let mut replies = replies.into_iter();
                for (index, reply) in replies.by_ref() {
                    match reply {
                        Reply::Ack(seq, dup) => match ledger.on_ack(index, seq, dup) {
                            AckVerdict::Violation(v) => prop_assert!(false, "false alarm {:?}", v),
                            AckVerdict::Unknown => break,
                            AckVerdict::Fresh | AckVerdict::Duplicate => {}
                        },
                        Reply::WrongLast(last) => {
                            // A correct server only ever says "behind" from a stale view,
                            // and what sits after the last ack is the message being retried.
                            match ledger.on_wrong_last_sequence(last) {
                                Rejection::Behind => prop_assert!(false, "stream behind the acks"),
                                Rejection::Ahead { seq } => {
                                    let occupant = stored[seq as usize - 1];
                                    prop_assert_eq!(ledger.judge_occupant(index, seq, Some(occupant), None), None);
                                }
                                Rejection::Transient => {}
                            }
                            break;
                        }
                        Reply::Lost => break,
                    }
                }
                // Replies to the sends the rewind gave up still arrive, and are judged.
                for (index, reply) in replies {
                    if let Reply::Ack(seq, dup) = reply {
                        prop_assert!(!matches!(ledger.on_late_ack(index, seq, dup), LateAck::Violation(_)), "false alarm on a late ack");
                    }
                }
            }
            for (pos, index) in stored.iter().enumerate() {
                prop_assert_eq!(*index, pos as u64 + 1);
            }
            prop_assert!(ledger.last_acked_seq() <= stored.len() as u64);
        }
    }
}
