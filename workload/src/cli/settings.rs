//! How a command's flags, and a composer driver's drawn knobs, change the loaded settings.

use crate::cli::args::Common;
use workload::config::Config;
use workload::random::{Purpose, Source};

pub fn apply_overrides(cfg: &mut Config, c: &Common) {
    if let Some(v) = c.payload_size {
        cfg.publish.payload_size = v;
    }
    if let Some(v) = c.in_flight {
        cfg.publish.in_flight = v;
    }
    if let Some(v) = c.streams {
        cfg.stream.count = v;
    }
    if let Some(v) = c.liveness_window {
        cfg.liveness.window = v;
    }
    if let Some(v) = c.liveness_quiet {
        cfg.liveness.quiet = v;
    }
    if let Some(v) = c.operator {
        cfg.operator.enabled = v;
    }
    if let Some(account) = &c.system_account {
        (cfg.operator.system_user, cfg.operator.system_password) = account.clone();
    }
    if let Some(v) = c.faults {
        cfg.faults.enabled = v;
    }
    if let Some(v) = &c.fault_profile {
        cfg.faults.profile.clone_from(v);
    }
    if let Some(v) = c.metrics {
        cfg.report.metrics = Some(v);
    }
    if let Some(v) = c.sync_interval {
        cfg.stream.sync_interval = v;
    }
}

/// Which of a composer driver's knobs it draws itself (those no flag or variable set).
pub struct Knobs {
    pub payload_size: bool,
    pub in_flight: bool,
}

/// A composer driver draws its payload size, publishes in flight and initial replica count
/// per invocation (from the `composer.*` lists), so Antithesis can combine them.
pub fn draw_knobs(cfg: &mut Config, knobs: &Knobs, cluster_size: usize, source: &Source) {
    let mut rng = source.chooser(Purpose::Knobs);
    if knobs.payload_size {
        cfg.publish.payload_size = rng.pick("payload size", &cfg.composer.payload_sizes);
    }
    // Without expected sequences only one publish may be in flight (validated), so the
    // configured depth stands.
    if knobs.in_flight && cfg.publish.expected_last_sequence {
        cfg.publish.in_flight = rng.pick("publishes in flight", &cfg.composer.in_flight);
    }
    let replicas = if cfg.composer.initial_replicas.is_empty() { (1..=cluster_size.clamp(1, 3)).collect() } else { cfg.composer.initial_replicas.clone() };
    cfg.stream.initial_replicas = rng.pick("initial replicas", &replicas);
}
