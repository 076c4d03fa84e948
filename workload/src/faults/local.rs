//! The local executor: faults on a [`LocalCluster`]'s processes (signals) and proxied links,
//! the counterpart of [`DockerNodes`](super::docker::DockerNodes)' `apply` and `end`. The
//! faults that work on a node's files (membership, corruption, snapshot rollback, power
//! cuts) are carried out by the injector through its target, for both executors.

use crate::cluster::LocalCluster;
use crate::config::FaultKind;
use crate::faults::quiet::quiet_asked;
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Puts a process or link fault in place on `nodes` (several only for a coordinated
/// strike); what the log should show (pids, links). A restart is lame-duck with
/// `lame_duck`, and a quiet request cuts its wait short.
pub async fn apply(cluster: &mut LocalCluster, kind: FaultKind, nodes: &[usize], lame_duck: bool, latency: Duration, quiet: Option<watch::Receiver<Option<Instant>>>) -> Value {
    let i = nodes[0];
    match kind {
        // Several nodes at once in a coordinated strike (see `Schedule::together`).
        FaultKind::Kill => {
            let pids: Vec<Option<u32>> = nodes.iter().map(|&i| cluster.nodes[i].pid()).collect();
            nodes.iter().for_each(|&i| cluster.nodes[i].kill());
            if let [pid] = pids[..] { json!({ "pid": pid }) } else { json!({ "pids": pids }) }
        }
        FaultKind::Pause => {
            let sent: Vec<Value> = nodes.iter().map(|&i| json!({ "pid": cluster.nodes[i].pid(), "sent": cluster.nodes[i].signal(Signal::SIGSTOP) })).collect();
            if let [one] = &sent[..] { one.clone() } else { json!({ "paused": sent }) }
        }
        FaultKind::Restart => {
            let sig = if lame_duck { Signal::SIGUSR2 } else { Signal::SIGTERM };
            let bin = cluster.server_bin.clone();
            let node = &mut cluster.nodes[i];
            let before = node.pid();
            node.signal(sig);
            // A lame-duck server takes its lame_duck_duration to leave: a quiet request
            // meanwhile cuts that short (a kill) rather than wait for it.
            let cut_short = tokio::select! {
                _ = node.wait_exit(Duration::from_secs(30)) => false,
                _ = quiet_asked(quiet) => true,
            };
            node.kill();
            let started = node.start(&bin).map_err(|e| e.to_string());
            json!({ "how": if lame_duck { "lame-duck" } else { "sigterm" }, "pid_before": before, "pid_after": node.pid(), "error": started.err(), "cut_short_by_quiet": cut_short })
        }
        FaultKind::Isolate | FaultKind::Split => {
            let Some(net) = &cluster.network else { return Value::Null };
            let cut = net.partition_links(nodes);
            cut.iter().for_each(|l| l.cut());
            json!({ "links_cut": cut.iter().map(|l| l.name.clone()).collect::<Vec<_>>() })
        }
        FaultKind::Latency => {
            let Some(net) = &cluster.network else { return Value::Null };
            let d = latency;
            net.links_of(i).iter().for_each(|l| l.delay(d));
            json!({ "latency_ms": d.as_millis() as u64 })
        }
        // Carried out by the injector through its target (`Injector::apply`).
        FaultKind::Membership | FaultKind::Corrupt | FaultKind::SnapshotRollback | FaultKind::PowerLoss | FaultKind::PowerLossAll => Value::Null,
    }
}

/// Ends a fault on `nodes`: starts what was stopped, resumes what was paused, heals links.
pub fn end(cluster: &mut LocalCluster, kind: FaultKind, nodes: &[usize]) -> Value {
    let bin = cluster.server_bin.clone();
    match kind {
        FaultKind::Membership | FaultKind::Corrupt | FaultKind::SnapshotRollback | FaultKind::PowerLoss => {
            let node = &mut cluster.nodes[nodes[0]];
            let started = node.start(&bin).map_err(|e| e.to_string());
            json!({ "pid": node.pid(), "error": started.err() })
        }
        FaultKind::Kill | FaultKind::PowerLossAll if nodes.len() > 1 => {
            let started: Vec<Value> = nodes.iter().map(|&i| {
                let node = &mut cluster.nodes[i];
                let started = node.start(&bin).map_err(|e| e.to_string());
                json!({ "node": node.name, "pid": node.pid(), "error": started.err() })
            }).collect();
            json!({ "started": started })
        }
        FaultKind::Kill | FaultKind::PowerLossAll => {
            let node = &mut cluster.nodes[nodes[0]];
            let started = node.start(&bin).map_err(|e| e.to_string());
            json!({ "pid": node.pid(), "error": started.err() })
        }
        FaultKind::Pause => {
            let resumed: Vec<bool> = nodes.iter().map(|&i| cluster.nodes[i].signal(Signal::SIGCONT)).collect();
            json!({ "resumed": resumed.iter().all(|r| *r) })
        }
        FaultKind::Restart => Value::Null,
        FaultKind::Isolate | FaultKind::Split => {
            if let Some(net) = &cluster.network {
                net.partition_links(nodes).iter().for_each(|l| l.heal());
            }
            Value::Null
        }
        FaultKind::Latency => {
            if let Some(net) = &cluster.network {
                net.links_of(nodes[0]).iter().for_each(|l| l.heal());
            }
            Value::Null
        }
    }
}
