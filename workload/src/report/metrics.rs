//! Live metrics for soak runs: a Prometheus endpoint (`--metrics ADDR`, off by default).
//!
//! Nothing is counted twice: every second the run's own counters (the ones `report.json`
//! gives at the end), the history's property counts, the fault log and the quiet-period count are
//! copied into the `metrics` registry, which `metrics-exporter-prometheus` serves at
//! `http://ADDR/metrics`.

use crate::history;
use crate::context::state::Stats;
use crate::context::streams::Streams;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;
use properties::Property;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Counters of the run that are levels, not running totals.
const LEVELS: [&str; 8] = ["last_acked_seq", "sent_high", "ack_diverged_at", "replicas", "settle_ms_max", "durable_received", "rss_kib_first", "rss_kib_max"];

/// Starts the endpoint (inside the tokio runtime).
pub fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    PrometheusBuilder::new().with_http_listener(addr).install().map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    tracing::info!(%addr, "metrics at http://{addr}/metrics");
    Ok(())
}

/// Copies the run's state into the registry every second, through the final verification,
/// until the process ends.
pub async fn export(streams: Arc<Streams>) {
    let mut leader = String::new();
    loop {
        publish(&streams, &mut leader);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The counters are totals over the streams; with several, each stream's acks and lag are
/// served too (labelled `stream`), and the leader is the first stream's.
fn publish(streams: &Streams, leader: &mut String) {
    let ctxs = streams.now();
    let ctx = &ctxs[0];
    let s = &ctx.stats;
    if let serde_json::Value::Object(all) = streams.totals() {
        for (name, value) in all {
            let v = value.as_u64().unwrap_or(0);
            if LEVELS.contains(&name.as_str()) {
                gauge!(format!("workload_{name}")).set(v as f64);
            } else {
                let total = if name.ends_with("_total") { name } else { format!("{name}_total") };
                counter!(format!("workload_{total}")).absolute(v);
            }
        }
    }
    gauge!("workload_consumer_lag").set(ctxs.iter().map(|c| c.stats.lag()).sum::<u64>() as f64);
    if ctxs.len() > 1 {
        for c in &ctxs {
            counter!("workload_stream_acked_total", "stream" => c.stream.clone()).absolute(Stats::get(&c.stats.acked));
            gauge!("workload_stream_consumer_lag", "stream" => c.stream.clone()).set(c.stats.lag() as f64);
        }
    }
    let now = s.leader.lock().map(|l| l.clone()).unwrap_or_default();
    if now != *leader {
        if !leader.is_empty() {
            gauge!("workload_stream_leader", "node" => leader.clone()).set(0.0);
        }
        *leader = now;
    }
    if !leader.is_empty() {
        gauge!("workload_stream_leader", "node" => leader.clone()).set(1.0);
    }
    if let Some(faults) = &ctx.faults {
        for (kind, n) in faults.starts_by_kind() {
            counter!("workload_fault_starts_total", "kind" => kind).absolute(n);
        }
    }
    counter!("workload_quiet_periods_total").absolute(ctx.live.quiet.count());
    counter!("workload_client_errors_total").absolute(crate::logs::client_errors());
    for &p in Property::ALL {
        let c = history::counts(p);
        for (outcome, n) in [("held", c.held), ("failed", c.failed), ("unknown", c.unknown)] {
            counter!("workload_property_evaluations_total", "property" => p.id(), "kind" => serde_json::json!(p.kind()).as_str().unwrap_or_default().to_string(), "outcome" => outcome).absolute(n);
        }
    }
}
