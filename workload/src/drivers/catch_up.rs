//! The catch-up liveness rule shared by the ordered reader and the durable consumer.

use crate::drivers::reader::Until;
use crate::context::retry::{OpenWindow, Step};
use crate::sdk;
use crate::context::state::{Ctx, Stats};
use properties::Property;
use serde_json::json;

/// How far behind a reader must sometimes fall for the catch-up paths to matter.
const FAR_BEHIND: u64 = 10_000;

/// The catch-up liveness rule: whenever a reader is behind, it must reach the sequence it
/// was behind (the last ack at that moment, or the final read's target) within a window
/// of time WITHOUT PROGRESS: every message read starts the window over, so a long read
/// that keeps moving never runs out.
pub struct CatchUp<'a> {
    /// The liveness property judged, and whether the lag is numeric guidance
    /// (`consumer-fell-far-behind`, the ordered reader's).
    property: Property,
    far_behind: bool,
    target: Option<(u64, OpenWindow<'a>)>,
    /// Consumed at the last tick, and the other measure of progress then (see [`CatchUp::tick`]).
    seen: u64,
    seen_other: u64,
    /// The consumer as created (name, the server holding it, its start sequence) and, once
    /// the reader stalled, how far that server's replica of the stream goes: a consumer
    /// placed on a replica still being copied delivers nothing until the copy gets there.
    pub consumer: serde_json::Value,
}

impl<'a> CatchUp<'a> {
    pub fn new(property: Property, far_behind: bool) -> Self {
        Self { property, far_behind, target: None, seen: 0, seen_other: 0, consumer: json!(null) }
    }

    /// Adds the consumer's server's own last sequence to what a failure reports.
    pub async fn note_holder(&mut self, ctx: &Ctx) {
        let Some(server) = self.consumer["server"].as_str().map(str::to_string) else { return };
        let mut probe = crate::nats::replicas::ReplicaProbe::new(&ctx.cluster.monitor_urls);
        self.consumer["server_last_seq"] = match probe.state_on(&server, &ctx.stream).await {
            Ok(state) => json!(state.map_or(0, |s| s.last_seq)),
            Err(e) => json!(e),
        };
    }

    /// Once a second: says whether to go on, that the reader stalled (faults now pause),
    /// or that a window ran out (reported).
    /// `consumed`: every sequence up to it was read. `other`: another measure of the
    /// reader's work that counts as progress when it grows (the durable consumer's
    /// deliveries: redelivering what the server took back moves that, not `consumed`).
    pub fn tick(&mut self, ctx: &'a Ctx, until: Until, consumed: u64, other: u64) -> Tick {
        let progressed = consumed > self.seen || other > self.seen_other;
        self.seen = consumed;
        self.seen_other = other;
        self.reached(consumed);
        let goal = match until {
            Until::Cancelled => {
                let last = Stats::get(&ctx.stats.last_acked_seq);
                let lag = last.saturating_sub(consumed);
                if self.far_behind {
                    sdk::above!(Property::ConsumerFellFarBehind, lag, FAR_BEHIND, &json!({ "lag": lag, "consumed": consumed }));
                }
                last
            }
            Until::Seq(last) => last,
        };
        let Some((target, w)) = &mut self.target else {
            if consumed < goal {
                self.target = Some((goal, ctx.live.open_question_for("consumer catch-up", self.property)));
            }
            return Tick::Go;
        };
        if progressed {
            w.progressed();
            return Tick::Go;
        }
        match w.step(&format!("reader at {consumed} of {target}")) {
            Step::Retry(_) => Tick::Go,
            Step::QuietStarted(_) => Tick::Stalled { target: *target },
            Step::Expired(elapsed) => {
                sdk::check!(self.property => [Property::ConsumerEventuallyCatchesUp, Property::DurableEventuallyCatchesUp], false, &json!({
                    "target": *target, "consumed": consumed, "without_progress_s": elapsed.as_secs_f64(), "consumer": self.consumer }));
                Stats::add(&ctx.stats.liveness_windows_expired, 1);
                if let Some((_, w)) = self.target.take() {
                    w.expired();
                }
                Tick::Expired
            }
        }
    }
}

impl CatchUp<'_> {
    /// The target is reached once every sequence up to it was read: held. Called at each
    /// tick and when a reader is done (a target it leaves unreached, because the run was
    /// stopped under it, is left open: unknown).
    pub fn reached(&mut self, consumed: u64) {
        if self.target.as_ref().is_some_and(|(target, _)| consumed >= *target) {
            let Some((target, w)) = self.target.take() else { return };
            sdk::check!(self.property => [Property::ConsumerEventuallyCatchesUp, Property::DurableEventuallyCatchesUp], true, &json!({ "target": target, "elapsed_s": w.elapsed().as_secs_f64() }));
            w.decided();
        }
    }
}

pub enum Tick {
    Go,
    /// No progress for most of a window: faults were asked to pause.
    Stalled { target: u64 },
    Expired,
}
