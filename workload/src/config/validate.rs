//! Validation: every setting checked once, before anything connects, a bad one named by its
//! path in the config file.

use super::{Config, MAX_STREAMS};
use std::time::Duration;

/// A setting that cannot work, named by its path in the config file.
#[derive(Debug, thiserror::Error)]
#[error("invalid config: {field}: {reason}")]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

impl Config {
    /// Checks every setting; `cluster_size` is known for local runs, not before connecting.
    pub fn validate(&self, cluster_size: Option<usize>) -> Result<(), ConfigError> {
        let p = &self.publish;
        if p.payload_size == 0 || p.payload_size > 1024 * 1024 {
            return Err(bad("publish.payload_size", "must be 1 ..= 1048576 bytes"));
        }
        if p.in_flight == 0 || p.in_flight > 4096 {
            return Err(bad("publish.in_flight", "must be 1 ..= 4096"));
        }
        if p.in_flight > 1 && !p.expected_last_sequence {
            return Err(bad("publish.expected_last_sequence", "must be true when publish.in_flight > 1, or a rewind could reorder the stream"));
        }
        if p.ack_timeout < Duration::from_millis(100) {
            return Err(bad("publish.ack_timeout", "must be at least 100ms"));
        }
        let l = &self.liveness;
        if l.window < Duration::from_secs(1) {
            return Err(bad("liveness.window", "must be at least 1s"));
        }
        if l.quiet.is_zero() || l.quiet >= l.window {
            return Err(bad("liveness.quiet", "must be more than 0 and less than liveness.window"));
        }
        if l.outage_bound.is_zero() {
            return Err(bad("liveness.outage_bound", "must be more than 0"));
        }
        if self.stream.duplicate_window < l.window * 2 {
            return Err(bad("stream.duplicate_window", "must be at least twice liveness.window, or a retry could be stored twice"));
        }
        let d = &self.durable;
        if d.enabled {
            if d.replicas.is_empty() || d.replicas.iter().any(|r| *r > 5) {
                return Err(bad("durable.replicas", "must list counts in 0 ..= 5 (0: the stream's)"));
            }
            if d.ack_wait < Duration::from_secs(1) {
                return Err(bad("durable.ack_wait", "must be at least 1s"));
            }
            if !(0.0..=0.5).contains(&d.skip_ack_probability) {
                return Err(bad("durable.skip_ack_probability", "must be in 0 ..= 0.5"));
            }
            if d.acks_in_flight == 0 {
                return Err(bad("durable.acks_in_flight", "must be at least 1"));
            }
        }
        let max = cluster_size.map_or(5, |n| n.min(5));
        let s = &self.stream;
        if s.initial_replicas == 0 || s.initial_replicas > 5 {
            return Err(bad("stream.initial_replicas", "must be 1 ..= 5"));
        }
        if s.count == 0 || s.count > MAX_STREAMS {
            return Err(bad("stream.count", format!("must be 1 ..= {MAX_STREAMS}")));
        }
        let c = &self.scale;
        if let Some(r) = c.replicas.iter().find(|r| **r == 0 || **r > max) {
            return Err(bad("scale.replicas", format!("{r} is outside 1 ..= {max}")));
        }
        let o = &self.operator;
        if o.interval_min > o.interval_max {
            return Err(bad("operator.interval_min", "must not exceed operator.interval_max"));
        }
        for (field, v) in [
            ("scale.back_to_back_probability", c.back_to_back_probability),
            ("scale.wait_settled_probability", c.wait_settled_probability),
            ("operator.cancel_move_probability", o.cancel_move_probability),
            ("operator.wait_settled_probability", o.wait_settled_probability),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(bad(field, "must be within 0 ..= 1"));
            }
        }
        let cm = &self.composer;
        if cm.driver_min > cm.driver_max {
            return Err(bad("composer.driver_min", "must not exceed composer.driver_max"));
        }
        if cm.payload_sizes.is_empty() || cm.payload_sizes.iter().any(|s| *s == 0 || *s > 1024 * 1024) {
            return Err(bad("composer.payload_sizes", "must name sizes within 1 ..= 1048576"));
        }
        if cm.in_flight.is_empty() || cm.in_flight.iter().any(|n| *n == 0 || *n > 4096) {
            return Err(bad("composer.in_flight", "must name depths within 1 ..= 4096"));
        }
        if let Some(r) = cm.initial_replicas.iter().find(|r| **r == 0 || **r > max) {
            return Err(bad("composer.initial_replicas", format!("{r} is outside 1 ..= {max}")));
        }
        if self.faults.schedule().is_none() {
            let known: Vec<String> = self.profiles().into_keys().collect();
            return Err(bad("faults.profile", format!("no profile named {:?} (known: {})", self.faults.profile, known.join(", "))));
        }
        for (name, f) in &self.faults.profiles {
            let field = |k: &str| format!("faults.profiles.{name}.{k}");
            for (k, lo, hi) in [("off_min", f.off_min, f.off_max), ("on_min", f.on_min, f.on_max), ("fault_min", f.fault_min, f.fault_max), ("gap_min", f.gap_min, f.gap_max)] {
                if lo > hi {
                    return Err(bad(field(k), "must not exceed its _max"));
                }
            }
            if f.kinds.is_empty() {
                return Err(bad(field("kinds"), "must name at least one fault type"));
            }
            if f.fault_min.is_zero() {
                return Err(bad(field("fault_min"), "must be more than 0"));
            }
            let wait = f.wait_settled_probability.unwrap_or(0.0);
            for (k, v) in [("target_bias", f.target_bias), ("align_probability", f.align_probability), ("together", f.together), ("wait_settled_probability", wait)] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(bad(field(k), "must be within 0 ..= 1"));
                }
            }
            if let Some(n) = cluster_size {
                if f.max_faulty >= n && self.faults.enabled {
                    return Err(bad(field("max_faulty"), format!("must be below the cluster size {n}")));
                }
            }
        }
        if self.report.progress_interval.is_zero() {
            return Err(bad("report.progress_interval", "must be more than 0"));
        }
        Ok(())
    }
}
