//! What a command that drives a workload does: reach its cluster (start one, or find the
//! given one and its fault target), run (a run, a composer step, a benchmark), then write
//! the report and turn its verdict into the exit code.

use crate::cli::args::{ClusterArgs, Command, ComposerArgs, Phase};
use crate::cli::settings::{draw_knobs, Knobs};
use crate::cli::{EXIT_INFRA, EXIT_PROPERTY_FAILED, EXIT_UNKNOWN};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use workload::cluster::{self, LocalCluster};
use workload::config::Config;
use workload::context::state::ClusterAddr;
use workload::faults::docker::DockerNodes;
use workload::faults::injector::{Injector, Target};
use workload::faults::log::FaultLog;
use workload::random::{Purpose, Source};
use workload::run::records::StateDir;
use workload::run::{self, composer, NotRun, RunSpec};
use workload::tools::bench::{self, BenchSpec};
use workload::report;

/// The cluster a command works on: its addresses, the server version when known, what
/// local faults act on, and the composer step with its shared state directory.
struct Reached {
    addr: ClusterAddr,
    server_version: Option<String>,
    target: Option<Target>,
    /// Every fault the cluster meets is this run's own (logged): outages are judged.
    faults_known: bool,
    composer: Option<(Phase, StateDir)>,
}

pub async fn execute(command: Command, mut cfg: Config, out: PathBuf) -> anyhow::Result<ExitCode> {
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    let cluster_size = command.cluster_size();
    // One place decides where choices come from (Antithesis's source, or a seeded PRNG).
    let Some(common) = command.common() else { anyhow::bail!("this command runs no workload of its own") };
    let source = Source::decide(common.seed);
    let seed = source.seed();
    let run_id = common.run_id.clone().unwrap_or_else(|| format!("{seed:016x}"));
    let duration = common.duration;
    let knobs = Knobs { payload_size: common.payload_size.is_none(), in_flight: common.in_flight.is_none() };
    let allow_known = common.allow_known;
    let Reached { addr, server_version, target, composer, faults_known } = match command {
        Command::Local { nodes, clusters, nats_server, .. } => match start_local(&mut cfg, nodes, clusters, nats_server.as_deref(), &out, &stop).await? {
            Some(reached) => reached,
            None => return Ok(ExitCode::from(EXIT_INFRA)), // stopped while starting
        },
        Command::Run { cluster, docker_faults, docker_node_data, only_own_faults, .. } => {
            existing(&cfg, cluster, docker_faults, docker_node_data.as_deref(), cluster_size, only_own_faults).await?
        }
        Command::Composer { step } => {
            let phase = step.phase();
            let ComposerArgs { cluster, state, .. } = step.into_args();
            let addr = ClusterAddr { servers: cluster.servers, monitor_urls: cluster.monitor, size: cluster_size };
            Reached { addr, server_version: None, target: None, composer: Some((phase, StateDir(state))), faults_known: false }
        }
        Command::Bench { smoke, depths, rounds, messages, nats_server, .. } => {
            let mut spec = if smoke { BenchSpec::smoke(cfg) } else { BenchSpec::full(cfg) };
            spec.depths = depths.unwrap_or(spec.depths);
            spec.rounds = rounds.unwrap_or(spec.rounds).max(1);
            spec.messages = messages.unwrap_or(spec.messages).max(1);
            return benchmark(spec, nats_server.as_deref(), &out).await;
        }
        Command::Matrix(_) | Command::Report { .. } | Command::Check { .. } => anyhow::bail!("this command runs no workload of its own"),
    };
    let duration = match (&composer, duration) {
        (_, Some(d)) => d,
        (Some(_), None) => source.chooser(Purpose::DriverDuration).between("driver duration", cfg.composer.driver_min, cfg.composer.driver_max),
        (None, None) => Duration::from_secs(60),
    };
    let fault_log = Arc::new(FaultLog::new(Some(out.join("faults.jsonl"))));
    // The local nodes live as long as this handle: the injector's own goes when it stops,
    // before the final verification.
    let _local_nodes = match &target {
        Some(Target::Local(c)) => Some(c.clone()),
        _ => None,
    };
    // Every fault is ours (and logged) on a cluster this process faults (its local nodes, or
    // its docker topology), with the injector on or off, or one the user says nothing else
    // faults. Elsewhere faults are not known, and outages are measured, not judged.
    let known_faults = faults_known.then(|| fault_log.clone());
    let injector = match target {
        Some(target) if cfg.faults.enabled => Some(Injector::new(target, cfg.clone(), source, fault_log.clone()).with_snapshot_copies(out.join("snapshot-copies"))),
        _ => None,
    };
    let steered = source == Source::Antithesis;
    let mut facts = json!({ "seed": seed, "choices": if steered { "antithesis" } else { "seeded" }, "server_version": server_version, "cluster_size": cluster_size, "config": cfg });
    let composer_step = composer.is_some();
    match composer {
        Some((Phase::Entrypoint, _)) => {
            return Ok(match composer::entrypoint(&cfg, &addr, stop).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("the run could not be carried out: {e}");
                    ExitCode::from(EXIT_INFRA)
                }
            });
        }
        Some((phase, state)) if phase != Phase::Driver => {
            let started = std::time::Instant::now();
            facts["command"] = json!(phase.name());
            let (key, value) = checking_step(phase, &cfg, &addr, &state, source, duration, stop).await?;
            facts[key] = value;
            facts["elapsed_s"] = json!(started.elapsed().as_secs_f64());
        }
        driver => {
            let is_driver = driver.is_some();
            if is_driver {
                // Moves, evacuations and stepdowns are commands of their own.
                cfg.keep_operations(composer::driver_owned);
                draw_knobs(&mut cfg, &knobs, cluster_size, &source);
                facts["config"] = json!(cfg);
            }
            // A composer driver writes report.json (and operations.jsonl, which the known-issue
            // table reads) without pages or timeline: one per command on a shared volume.
            let timeline = (!is_driver).then(|| out.join("timeline.jsonl"));
            let spec = RunSpec { cfg: cfg.clone(), cluster: addr, seed, source, run_id: run_id.clone(), duration, injector, known_faults, composer: driver.map(|(_, state)| state), timeline, out: Some(out.clone()) };
            tracing::info!(seed, run_id, ?duration, "run starting");
            let finished = match run::run(spec, stop).await {
                Ok(f) => f,
                Err(NotRun::Setup(e)) => {
                    tracing::error!("the run could not be carried out: {e}");
                    return Ok(ExitCode::from(EXIT_INFRA));
                }
                Err(NotRun::Stopped) if is_driver => return Ok(ExitCode::SUCCESS), // reported as an assertion
                Err(NotRun::Stopped) => return Ok(ExitCode::from(EXIT_INFRA)),
            };
            facts["command"] = json!(if is_driver { "driver" } else { "run" });
            facts["run_id"] = json!(run_id);
            if let (Some(all), Value::Object(run)) = (facts.as_object_mut(), finished.facts()) {
                all.extend(run);
            }
            facts["rss_mib_end"] = json!(run::rss_mib());
            facts["client_errors_logged"] = json!(workload::logs::client_errors());
            facts["faults"] = fault_log.summary();
        }
    }
    if facts["server_version"].is_null() {
        facts["server_version"] = json!(workload::nats::jsapi::SERVER_VERSION.get());
    }
    let (verdict, without_known) = finish_report(facts, &out, !composer_step)?;
    let verdict = if allow_known { without_known } else { verdict };
    Ok(match verdict.as_str() {
        // A Test Composer command reports through assertions, not its exit code.
        _ if composer_step => ExitCode::SUCCESS,
        "pass" => ExitCode::SUCCESS,
        "unknown" => ExitCode::from(EXIT_UNKNOWN),
        _ => ExitCode::from(EXIT_PROPERTY_FAILED),
    })
}

/// `workload local`: a fresh cluster of child processes under `out/cluster` (None if a
/// signal stopped the start).
async fn start_local(cfg: &mut Config, per_cluster: usize, clusters: usize, nats_server: Option<&Path>, out: &Path, stop: &CancellationToken) -> anyhow::Result<Option<Reached>> {
    let mut power_loss = cfg.faults.enabled && cfg.schedule().kinds.iter().any(|k| k.cuts_power());
    if power_loss && !Path::new("/dev/fuse").exists() {
        tracing::warn!("no /dev/fuse: the power-loss layer cannot be mounted, so power cuts are skipped (every other fault kind goes on)");
        power_loss = false;
    }
    let sync_always = cfg.stream.sync_interval == workload::config::SyncInterval::Always;
    let layout = cluster::Layout { clusters: clusters.max(1), nodes: per_cluster, sync_always, power_loss };
    let nodes = layout.size();
    let bin = cluster::find_server(nats_server)?;
    let version = cluster::server_version(&bin);
    let dir = out.join("cluster");
    let _ = std::fs::remove_dir_all(&dir); // fresh data dirs every run
    tracing::info!(nodes, server = %bin.display(), version = version.as_deref().unwrap_or("?"), faults = cfg.faults.enabled, "starting local cluster in {}", dir.display());
    let local = tokio::select! {
        r = LocalCluster::launch_layout(&bin, layout, &dir, cfg.faults.enabled, Duration::from_secs(60)) => r?,
        _ = stop.cancelled() => return Ok(None),
    };
    let addr = ClusterAddr { servers: local.client_urls(), monitor_urls: local.monitor_urls(), size: nodes };
    if cfg.operator.system_user.is_empty() {
        (cfg.operator.system_user, cfg.operator.system_password) = (cluster::SYSTEM_USER.into(), cluster::SYSTEM_PASSWORD.into());
    }
    let target = Some(Target::Local(Arc::new(tokio::sync::Mutex::new(local))));
    Ok(Some(Reached { addr, server_version: version, target, composer: None, faults_known: true }))
}

/// `workload run`: the given cluster; with `--docker-faults`, its node containers as the
/// fault target.
async fn existing(cfg: &Config, cluster: ClusterArgs, docker_faults: bool, docker_node_data: Option<&Path>, cluster_size: usize, only_own_faults: bool) -> anyhow::Result<Reached> {
    let target = if docker_faults && cfg.faults.enabled {
        let hosts: Vec<String> = cluster.servers.iter().map(|url| url_host(url)).collect();
        Some(Target::Docker(DockerNodes::discover(&hosts, &cluster.servers, &cluster.monitor, docker_node_data).await?))
    } else {
        None
    };
    let faults_known = target.is_some() || only_own_faults;
    let addr = ClusterAddr { servers: cluster.servers, monitor_urls: cluster.monitor, size: cluster_size };
    Ok(Reached { addr, server_version: None, target, composer: None, faults_known })
}

/// `workload bench`: bench.json in `out`, printed.
async fn benchmark(spec: BenchSpec, nats_server: Option<&Path>, out: &Path) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(!spec.depths.is_empty() && !spec.depths.contains(&0), "--depths: one or more depths of at least 1");
    let bin = cluster::find_server(nats_server)?;
    let mut result = bench::run(spec, &bin, out).await?;
    result["server_version"] = json!(cluster::server_version(&bin));
    std::fs::write(out.join("bench.json"), serde_json::to_string_pretty(&result)?)?;
    bench::print(&result);
    println!("bench: {}", out.join("bench.json").display());
    Ok(ExitCode::SUCCESS)
}

/// A composer step other than the entrypoint and a driver: the operator commands and the
/// verifying ones. Its report fact, by name.
async fn checking_step(phase: Phase, cfg: &Config, addr: &ClusterAddr, state: &StateDir, source: Source, duration: Duration, stop: CancellationToken) -> anyhow::Result<(&'static str, Value)> {
    Ok(match phase {
        Phase::Operator => ("operations", composer::operator(cfg, addr, state, source, duration, stop).await?),
        Phase::Moves => ("operated", composer::operate(cfg, addr, state, source, duration, composer::Operations::Moves, stop).await?),
        Phase::Evacuations => ("operated", composer::operate(cfg, addr, state, source, duration, composer::Operations::Evacuations, stop).await?),
        Phase::Anytime => ("streams", json!(composer::watch_at_rest(cfg, addr, state, stop).await?)),
        Phase::Eventually | Phase::Finally => ("streams", json!(composer::verify(cfg, addr, state, stop).await?)),
        Phase::Entrypoint | Phase::Driver => anyhow::bail!("{} is not a checking step", phase.name()),
    })
}

/// `nats://n1:4222` → `n1`.
fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    host_port.split(':').next().unwrap_or(host_port).to_string()
}

/// Writes and prints the report (report.json; with `pages`, report.md, timeline.svg and
/// report.html too); returns its verdict and the verdict without the failures known server
/// issues explain. A composer command writes report.json alone (`workload report DIR`
/// renders the rest on demand): thousands run in one Antithesis timeline.
fn finish_report(facts: Value, out: &Path, pages: bool) -> anyhow::Result<(String, String)> {
    let mut report = report::build(facts);
    report::mark_known(&mut report, out);
    let path = out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    if pages {
        report::page::write(out, &report)?;
    }
    report::print(&report);
    println!("report: {}", path.display());
    let verdict = |key: &str| report[key].as_str().unwrap_or("fail").to_string();
    Ok((verdict("verdict"), verdict("verdict_without_known")))
}

/// First SIGINT/SIGTERM: stop the drivers and verify. A second one: leave at once.
async fn stop_on_signal(stop: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else { return };
    for n in 0.. {
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
        if n > 0 {
            eprintln!("second signal: exiting without a report");
            std::process::exit(EXIT_INFRA as i32);
        }
        tracing::warn!("signal received: stopping drivers, then the final verification and the report");
        stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_names_come_from_client_urls() {
        assert_eq!(super::url_host("nats://n1:4222"), "n1");
        assert_eq!(super::url_host("nats://u:p@n2:4222"), "n2");
        assert_eq!(super::url_host("n3"), "n3");
    }
}
