//! The publisher's ledger: which message is the first unconfirmed one, and whether an ack
//! or a rejection breaks a publish property.
//!
//! The publisher sends message `i` with `Nats-Msg-Id` `<run>-i` and (normally)
//! `expected_last_sequence = i - 1`, keeps a window of sends in flight, and judges replies
//! strictly in send order. On anything but a clean ack it rewinds to `next_index()` and
//! sends the same ids again, so the stream stays gap-free. The ledger holds two numbers.

use crate::{Property, Violation};
use serde_json::json;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishLedger {
    last_acked_index: u64,
    last_acked_seq: u64,
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
    /// The ack breaks a property; the ledger has resynchronised on it so one defect is
    /// reported once, not on every later message.
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

    /// Sequence of the last acknowledged message (0 before the first ack).
    pub fn last_acked_seq(&self) -> u64 {
        self.last_acked_seq
    }

    pub fn last_acked_index(&self) -> u64 {
        self.last_acked_index
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
            let property = if duplicate {
                Property::PublishDuplicateAckOriginalSequence
            } else {
                Property::PublishAckGapFree
            };
            AckVerdict::Violation(Violation::new(
                property,
                json!({ "index": index, "expected_seq": expected, "acked_seq": seq, "duplicate": duplicate }),
            ))
        };
        self.last_acked_index = index;
        self.last_acked_seq = self.last_acked_seq.max(seq);
        verdict
    }

    /// Classifies a `WrongLastSequence` rejection of the oldest unconfirmed message, whose
    /// publish expected `last_acked_seq()` as the stream's last sequence. The server runs
    /// the dedup check first, so a retry of a message it recognises never lands here.
    pub fn on_wrong_last_sequence(&self, reported_last: u64) -> Rejection {
        use std::cmp::Ordering::*;
        match reported_last.cmp(&self.last_acked_seq) {
            Equal => Rejection::Transient,
            Less => Rejection::Behind,
            Greater => Rejection::Ahead { seq: self.last_acked_seq + 1 },
        }
    }

    /// A `Behind` answer that held for a whole confirmation period: the stream ends before
    /// a message it acknowledged.
    pub fn stream_behind(&self, index: u64, reported_last: u64, held_s: f64) -> Violation {
        Violation::new(
            Property::AckedMessageNeverLost,
            json!({ "index": index, "stream_last_seq": reported_last, "last_acked_seq": self.last_acked_seq,
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

/// What a `WrongLastSequence` rejection says about the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The stream's last sequence is the last ack: the server's view moved meanwhile; retry.
    Transient,
    /// The stream ends before the last ack. A deposed leader can say so for a moment;
    /// only a confirmed answer is a violation ([`PublishLedger::stream_behind`]).
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
                for (index, reply) in replies {
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
            }
            for (pos, index) in stored.iter().enumerate() {
                prop_assert_eq!(*index, pos as u64 + 1);
            }
            prop_assert!(ledger.last_acked_seq() <= stored.len() as u64);
        }
    }
}
