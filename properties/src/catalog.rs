//! Every property the workload checks, in one place.
//!
//! The message of a property is its identity in Antithesis reports and in `report.json`:
//! `"<id>: <plain sentence>"`, a compile-time constant. Values go into the details, never
//! into the message. `for_each_property!` hands the list to other crates (the SDK module
//! generates one assertion call site per property from it), so this table is the only
//! place a property is named.

use serde::{Deserialize, Serialize};

/// How a property is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Safety: every evaluation must hold.
    Always,
    /// Liveness inside a bounded window: every window must end in success.
    Eventually,
    /// Coverage: must hold at least once for the run to have exercised the path.
    Sometimes,
    /// Coverage: the code path must be reached at least once.
    Reachable,
    /// Must never be reached.
    Unreachable,
}

/// Calls `$callback! { (Variant, kind, "id", "sentence") ... }` with the whole catalog.
///
/// Kinds: `always`; `always_or_unreachable` (safety checked only on rare paths: a timeline
/// that never reaches it is not a failure); `eventually` and `eventually_or_unreachable`
/// (liveness in a bounded window, sent as an always assertion); `sometimes` (evaluated with
/// its real condition wherever the situation can arise, so Antithesis sees both outcomes);
/// `sometimes_greater` (numeric guidance: a value that should sometimes exceed a threshold,
/// so Antithesis can steer toward it); `sometimes_local` (coverage of what only the
/// workload's own fault injector does, local and docker: tallied in the report, not sent
/// to Antithesis, whose timelines can never reach it); `reachable`; `unreachable`.
#[macro_export]
macro_rules! for_each_property {
    ($callback:ident) => {
        $callback! {
            // Safety: publishing.
            (PublishAckGapFree, always, "publish-ack-gap-free",
             "every fresh publish ack carries the previous ack's sequence plus one, and no write the workload did not make moves the stream past it")
            (PublishDuplicateAckOriginalSequence, always_or_unreachable, "publish-duplicate-ack-original-sequence",
             "a duplicate publish ack carries the sequence first assigned to that message id")
            // Safety: reading.
            (ReadSequenceGapFree, always, "read-sequence-gap-free",
             "each consumed stream sequence is the previous one plus one")
            (ReadContentMatchesPublish, always, "read-content-matches-publish",
             "a consumed message has exactly the id, payload and checksum published for its sequence")
            (ReadOnlyPublishedMessages, always, "read-only-published-messages",
             "nothing is read from the stream that the workload did not publish")
            (AckedMessageNeverLost, always, "acked-message-never-lost",
             "every acknowledged message can be read back, mid-run and in the final read")
            (StreamNeverDisappears, always, "stream-never-disappears",
             "the run's stream, once created, is never reported missing for longer than a fault blip")
            (StreamStateCoversAcks, always, "stream-state-covers-acks",
             "the stream's last sequence and message count are never below the last acknowledged sequence")
            (PlacementHonoured, always_or_unreachable, "placement-honoured",
             "once a stream has settled after an operation, every one of its peers carries every placement tag")
            (ReplicasAgree, always, "replicas-agree",
             "every current replica holds the same first and last sequence, message count and deleted count as the stream leader")
            // Safety: the durable consumer.
            (DurableContentMatchesPublish, always, "durable-content-matches-publish",
             "every message the durable consumer receives is exactly the one published for its sequence")
            (DurableAckNeverUndone, always, "durable-ack-never-undone",
             "the durable consumer's ack floor never falls below an ack the server confirmed, and a confirmed-acked message is never delivered again")
            (DurableNothingSkipped, always, "durable-nothing-skipped",
             "the durable consumer's ack floor never passes a sequence that was never delivered to it")
            (OperationOutageBounded, always_or_unreachable, "operation-outage-bounded",
             "no operation is followed by an outage of writes, reads or durable deliveries longer than the configured bound while no fault is in force and no other change is requested")
            // Liveness inside bounded windows.
            (PublishEventuallyAcked, eventually_or_unreachable, "publish-eventually-acked",
             "a publish is acknowledged within the liveness window")
            (ConsumerEventuallyCatchesUp, eventually, "consumer-eventually-catches-up",
             "the consumer reaches the last acknowledged sequence within the liveness window")
            (DurableEventuallyCatchesUp, eventually, "durable-eventually-catches-up",
             "the durable consumer receives every message up to the last acknowledged sequence within the liveness window")
            (DurableEveryMessageDelivered, eventually, "durable-every-message-delivered",
             "every acknowledged message reaches the durable consumer within its ack wait plus the liveness window, counted from its publish ack or the consumer's last change")
            (DurableReplicasAgreeAtRest, eventually, "durable-replicas-agree-at-rest",
             "once nothing reads or acks, every replica of the durable consumer reports the leader's delivered sequence and ack floor within the liveness window")
            (ScaleEventuallySettles, eventually, "scale-eventually-settles",
             "a requested replica count is reached and healthy within the liveness window")
            (MoveEventuallySettles, eventually_or_unreachable, "move-eventually-settles",
             "a move (or a cancelled move) ends with the stream settled on servers its placement allows, within the liveness window")
            (PeerRemovalEventuallyReplaced, eventually_or_unreachable, "peer-removal-eventually-replaced",
             "a removed or evacuated peer (of the stream, its server, or the durable consumer) is replaced at the same replica count within the liveness window")
            (StepdownEventuallyElects, eventually_or_unreachable, "stepdown-eventually-elects",
             "after a stream, consumer or meta leader stepdown a leader is elected and the stream (and consumer) settled within the liveness window")
            (ConsumerScaleEventuallySettles, eventually_or_unreachable, "consumer-scale-eventually-settles",
             "a replica change of the durable consumer ends with a leader and every replica current within the liveness window")
            (ClusterEventuallyHealthy, eventually, "cluster-eventually-healthy",
             "every node reports healthy and the stream answers within the liveness window")
            // Coverage, with real conditions: the interesting states were reached.
            (PublishRetryGotDuplicateAck, sometimes, "publish-retry-got-duplicate-ack",
             "the first clean ack after a resend was a duplicate ack, exercising dedup")
            (AckAcrossLeaderChange, sometimes, "ack-received-across-a-leader-change",
             "the first clean ack after a resend came from another stream leader than the one that failed")
            (StreamScaledDownToR1, sometimes, "stream-scaled-down-to-r1",
             "a scale request took the stream from several replicas down to one")
            (StreamScaledUpFromR1, sometimes, "stream-scaled-up-from-r1",
             "a scale request took the stream from one replica up to several")
            (ScaleToR1WhileANodeWasDown, sometimes, "scale-to-r1-while-a-node-was-down",
             "a scale down to one replica was requested while a node did not answer healthy")
            (ScaleSettledSlowly, sometimes_greater, "scale-settled-slowly",
             "a replica change took more than half the liveness window to settle")
            (MovedWhileANodeWasDown, sometimes, "moved-while-a-node-was-down",
             "a move was requested while a node did not answer healthy")
            (PeerRemovedWhileANodeWasDown, sometimes, "peer-removed-while-a-node-was-down",
             "a peer removal or evacuation was requested while a node did not answer healthy")
            (OperationWhileAnotherSettling, sometimes, "operation-while-another-settling",
             "an operation was requested while the stream had not settled from the one before")
            (DurableRedeliveredAfterUnacked, sometimes, "durable-redelivered-after-unacked",
             "a message the durable consumer left unacknowledged was delivered to it again")
            (DurableOperatedWhileBehind, sometimes, "durable-operated-while-behind",
             "an operation was requested on the stream while the durable consumer was behind the last ack")
            (StreamScaledDownPastAnR1Consumer, sometimes, "stream-scaled-down-past-an-r1-consumer",
             "the stream was scaled down while the durable consumer had a single replica on another server than the stream leader")
            (DurableLeaderChangedWithAcksInFlight, sometimes, "durable-leader-changed-with-acks-in-flight",
             "the durable consumer's leader changed while acks were waiting for their confirmation")
            (OperationCausedLongOutage, sometimes_greater, "operation-caused-long-outage",
             "an operation was followed by an outage of writes, reads or durable deliveries of more than half the outage bound")
            (ConsumerFellFarBehind, sometimes_greater, "consumer-fell-far-behind",
             "the reader was more than ten thousand messages behind the last ack")
            (DurableLeaderChangedWithManyAcksInFlight, sometimes_greater, "durable-leader-changed-with-many-acks-in-flight",
             "the durable consumer's leader changed while more than 32 acks were waiting for their confirmation")
            (ScaleToR1WithSeveralNodesDown, sometimes_greater, "scale-to-r1-with-several-nodes-down",
             "a scale down to one replica was requested while more than one node did not answer healthy")
            (StreamLeaderChangedRepeatedly, sometimes_greater, "stream-leader-changed-repeatedly",
             "the stream's leader changed more than three times within a minute")
            (DiskFaultHitAStreamFile, sometimes_local, "disk-fault-hit-a-stream-file",
             "a corruption or snapshot rollback on a stopped node changed a file of the run's stream")
            (NodeCameBackAfterDiskFault, sometimes_local, "node-came-back-after-disk-fault",
             "a node whose files a disk fault changed answered healthy again within the liveness window")
            // Coverage: the fault and retry paths ran.
            (PublishRetriedAfterNoResponders, reachable, "publish-retried-after-no-responders",
             "a publish hit a leader election (no responders) and was retried")
            (PublishRetriedAfterTimeout, reachable, "publish-retried-after-timeout",
             "a publish ack was lost (timeout) and the same id was sent again")
            (PublishRetriedWhileInProcess, reachable, "publish-retried-while-in-process",
             "a retried publish met its original still being proposed")
            (ScaleRequestedBackToBack, reachable, "scale-requested-back-to-back",
             "a second replica change was requested right after the first")
            (MoveCancelled, reachable, "move-cancelled",
             "a move in progress was cancelled and the server accepted the cancel")
            (StreamLeaderSteppedDown, reachable, "stream-leader-stepped-down",
             "the operator made the stream's leader step down")
            (ConsumerLeaderSteppedDown, reachable, "consumer-leader-stepped-down",
             "the operator made the durable consumer's leader step down")
            (MetaLeaderSteppedDown, reachable, "meta-leader-stepped-down",
             "the operator made the meta leader step down")
            (ScaleWaitedUntilSettled, reachable, "scale-waited-until-settled",
             "the scaler waited for a replica change to settle and saw it settle")
            (ConsumerRecreated, reachable, "consumer-recreated",
             "the ordered consumer was recreated (by the client or by the reader) and reading went on")
            (QuietPeriodRequested, reachable, "liveness-quiet-period-requested",
             "a liveness window ran long enough to ask for faults to pause")
            (OperatorSteppedDownALeader, reachable, "operator-stepped-down-a-stream-leader",
             "the operator command made the leader of a stream a driver recorded step down")
            (StreamRetiredAfterFullCheck, reachable, "stream-retired-after-a-full-check",
             "a stream verified in full by its driver, every replica agreeing, was retired once newer verified streams pushed it out")
            (AnytimeJudgedAFinishedStream, sometimes, "anytime-judged-a-finished-stream",
             "anytime_ judged a finished driver's stream under faults (it was whole or a bad state was confirmed)")
            (SetupCompleted, reachable, "setup-completed",
             "the cluster was reachable and healthy before the drivers started")
            // Must never happen.
            (WorkloadNeverPanics, unreachable, "workload-never-panics",
             "the workload process panicked")
            (DriverRecordUnreadable, unreachable, "driver-record-unreadable",
             "a driver's record on the shared volume could not be read (it is skipped, the rest verified)")
        }
    };
}

macro_rules! define_catalog {
    ($( ($variant:ident, $kind:ident, $id:literal, $sentence:literal) )*) => {
        /// One property of the catalog. `message()` is its constant assertion message.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Property { $($variant),* }

        impl Property {
            /// Every property, in catalog order.
            pub const ALL: &'static [Property] = &[$(Property::$variant),*];

            /// The kebab-case id, the stable name used in reports and tests.
            pub const fn id(self) -> &'static str {
                match self { $(Property::$variant => $id),* }
            }

            /// `"<id>: <sentence>"`, the assertion message (a constant for the SDK).
            pub const fn message(self) -> &'static str {
                match self { $(Property::$variant => concat!($id, ": ", $sentence)),* }
            }

            pub const fn kind(self) -> Kind {
                match self { $(Property::$variant => define_catalog!(@kind $kind)),* }
            }

            /// Position in `ALL`, for per-property counters.
            pub const fn index(self) -> usize { self as usize }

            pub fn from_id(id: &str) -> Option<Property> {
                Property::ALL.iter().copied().find(|p| p.id() == id)
            }
        }
    };
    (@kind always) => { Kind::Always };
    (@kind always_or_unreachable) => { Kind::Always };
    (@kind eventually) => { Kind::Eventually };
    (@kind eventually_or_unreachable) => { Kind::Eventually };
    (@kind sometimes) => { Kind::Sometimes };
    (@kind sometimes_greater) => { Kind::Sometimes };
    (@kind sometimes_local) => { Kind::Sometimes };
    (@kind reachable) => { Kind::Reachable };
    (@kind unreachable) => { Kind::Unreachable };
}

for_each_property!(define_catalog);

impl Property {
    /// Safety and liveness properties decide the verdict; coverage properties do not.
    pub const fn decides_verdict(self) -> bool {
        matches!(self.kind(), Kind::Always | Kind::Eventually | Kind::Unreachable)
    }
}

impl Serialize for Property {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_unique_kebab_case_and_prefix_their_message() {
        let mut seen = HashSet::new();
        for p in Property::ALL {
            assert!(seen.insert(p.id()), "duplicate id {}", p.id());
            assert!(p
                .id()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
            assert!(p.message().starts_with(&format!("{}: ", p.id())));
            assert_eq!(Property::from_id(p.id()), Some(*p));
            assert_eq!(Property::ALL[p.index()], *p);
        }
    }

    #[test]
    fn readme_lists_every_property_with_its_kind() {
        let readme = include_str!("../../docs/properties.md");
        for p in Property::ALL {
            let kind = serde_json::to_value(p.kind()).unwrap();
            let row = readme
                .lines()
                .find(|l| l.starts_with('|') && l.split('|').nth(1).is_some_and(|cell| cell.trim().split(" / ").any(|id| id == p.id())))
                .unwrap_or_else(|| panic!("docs/properties.md lacks {}", p.id()));
            assert!(row.contains(&format!("| {} ", kind.as_str().unwrap())), "docs/properties.md gives {} another kind", p.id());
        }
    }
}
