//! `workload local` (starts its own nats-server cluster) and `workload run` (an existing
//! cluster). Exit codes: 0 every property held, 1 a property failed, 2 bad usage or
//! config, 3 the run could not be carried out (infrastructure).

use clap::{Args, Parser, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use workload::cluster::{self, LocalCluster};
use std::sync::Arc;
use workload::config::Config;
use workload::faults::injector::{FaultLog, Injector};
use workload::run::{self, RunSpec};
use workload::bench::{self, BenchSpec};
use workload::{report, sdk};

#[derive(Parser, Debug)]
#[command(version, about = "Property workload for NATS JetStream: ordered publisher, checksum-verifying ordered consumer, random replica scaler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a local nats-server cluster (child processes on 127.0.0.1) and run against it.
    Local {
        /// Number of cluster nodes.
        #[arg(long, env = "WORKLOAD_NODES", default_value_t = 3)]
        nodes: usize,
        /// nats-server binary (default: $NATS_SERVER, the project's .venv, then PATH).
        #[arg(long, env = "NATS_SERVER")]
        nats_server: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Run against an existing cluster.
    Run {
        /// Client URLs, comma-separated.
        #[arg(long, env = "WORKLOAD_SERVERS", value_delimiter = ',', required = true)]
        servers: Vec<String>,
        /// Monitoring base URLs (http://host:8222), comma-separated, for /healthz checks.
        #[arg(long, env = "WORKLOAD_MONITOR", value_delimiter = ',')]
        monitor: Vec<String>,
        /// Cluster size (default: the number of --servers).
        #[arg(long, env = "WORKLOAD_CLUSTER_SIZE")]
        cluster_size: Option<usize>,
        #[command(flatten)]
        common: Common,
    },
    /// Measure the workload against raw async-nats loops on a local cluster (see BENCHMARKS.md).
    Bench {
        /// Seconds instead of minutes: proves the benchmark produces numbers.
        #[arg(long)]
        smoke: bool,
        #[arg(long, env = "NATS_SERVER")]
        nats_server: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Args, Debug)]
struct Common {
    /// How long to drive the workload before the final verification (e.g. 60s, 8h).
    #[arg(long, env = "WORKLOAD_DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Directory for sdk.jsonl, report.json and node logs.
    #[arg(long, env = "WORKLOAD_OUT", default_value = "runs/latest")]
    out: PathBuf,
    /// Seed for payloads and random choices (default: random, printed and reported).
    #[arg(long, env = "WORKLOAD_SEED")]
    seed: Option<u64>,
    /// Run id: names the stream WORKLOAD_<id> and prefixes message ids (default: from the seed).
    #[arg(long, env = "WORKLOAD_RUN_ID")]
    run_id: Option<String>,
    /// Config file (see config/workload.toml for every setting and its default).
    #[arg(long, env = "WORKLOAD_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides publish.payload_size.
    #[arg(long, env = "WORKLOAD_PAYLOAD_SIZE")]
    payload_size: Option<usize>,
    /// Overrides publish.in_flight.
    #[arg(long, env = "WORKLOAD_IN_FLIGHT")]
    in_flight: Option<usize>,
    /// Overrides liveness.window.
    #[arg(long, env = "WORKLOAD_LIVENESS_WINDOW", value_parser = humantime::parse_duration)]
    liveness_window: Option<Duration>,
    /// Overrides liveness.quiet.
    #[arg(long, env = "WORKLOAD_LIVENESS_QUIET", value_parser = humantime::parse_duration)]
    liveness_quiet: Option<Duration>,
    /// Overrides scale.enabled (true/false).
    #[arg(long, env = "WORKLOAD_SCALE")]
    scale: Option<bool>,
    /// Overrides faults.enabled (true/false; local runs only).
    #[arg(long, env = "WORKLOAD_FAULTS")]
    faults: Option<bool>,
}

const EXIT_PROPERTY_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_INFRA: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (Command::Local { common, .. } | Command::Run { common, .. } | Command::Bench { common, .. }) = &cli.command;
    let mut cfg = match Config::load(common.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage(&format!("{e:#}")),
    };
    apply_overrides(&mut cfg, common);
    let cluster_size = match &cli.command {
        Command::Local { nodes, .. } => Some(*nodes),
        Command::Run { servers, cluster_size, .. } => Some(cluster_size.unwrap_or(servers.len())),
        Command::Bench { .. } => Some(3),
    };
    if cluster_size == Some(0) {
        return usage("the cluster needs at least one node");
    }
    if let Err(e) = cfg.validate(cluster_size) {
        return usage(&e.to_string());
    }
    if let Some(id) = &common.run_id {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return usage("--run-id must be letters, digits and '_' (it names a stream and a subject token)");
        }
    }
    if let Err(e) = std::fs::create_dir_all(&common.out) {
        eprintln!("cannot create {}: {e}", common.out.display());
        return ExitCode::from(EXIT_INFRA);
    }
    let sdk_out = common.out.join("sdk.jsonl");
    if std::env::var_os("ANTITHESIS_SDK_LOCAL_OUTPUT").is_none() {
        let _ = std::fs::remove_file(&sdk_out); // this run's output only
    }
    // Before any thread exists: the SDK reads its output variable here.
    sdk::init(Some(&sdk_out));
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,async_nats=warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INFRA);
        }
    };
    match runtime.block_on(execute(cli.command, cfg)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("run could not be carried out: {e:#}");
            ExitCode::from(EXIT_INFRA)
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(EXIT_USAGE)
}

fn apply_overrides(cfg: &mut Config, c: &Common) {
    if let Some(v) = c.payload_size {
        cfg.publish.payload_size = v;
    }
    if let Some(v) = c.in_flight {
        cfg.publish.in_flight = v;
    }
    if let Some(v) = c.liveness_window {
        cfg.liveness.window = v;
    }
    if let Some(v) = c.liveness_quiet {
        cfg.liveness.quiet = v;
    }
    if let Some(v) = c.scale {
        cfg.scale.enabled = v;
    }
    if let Some(v) = c.faults {
        cfg.faults.enabled = v;
    }
}

async fn execute(command: Command, cfg: Config) -> anyhow::Result<ExitCode> {
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    let (common, servers, monitor, cluster_size, server_version, cluster) = match command {
        Command::Local { nodes, nats_server, common } => {
            let bin = cluster::find_server(nats_server.as_deref())?;
            let version = cluster::server_version(&bin);
            let dir = common.out.join("cluster");
            let _ = std::fs::remove_dir_all(&dir); // fresh data dirs every run
            let mut local = LocalCluster::start(&bin, nodes, &dir, cfg.faults.enabled).await?;
            tracing::info!(nodes, server = %bin.display(), version = version.as_deref().unwrap_or("?"), faults = cfg.faults.enabled, "starting local cluster in {}", dir.display());
            tokio::select! {
                r = local.wait_healthy(Duration::from_secs(60)) => r?,
                _ = stop.cancelled() => return Ok(ExitCode::from(EXIT_INFRA)),
            }
            let (servers, monitor) = (local.client_urls(), local.monitor_urls());
            (common, servers, monitor, nodes, version, Some(Arc::new(tokio::sync::Mutex::new(local))))
        }
        Command::Run { servers, monitor, cluster_size, common } => {
            let size = cluster_size.unwrap_or(servers.len());
            (common, servers, monitor, size, None, None)
        }
        Command::Bench { smoke, nats_server, common } => {
            let bin = cluster::find_server(nats_server.as_deref())?;
            let spec = if smoke { BenchSpec::smoke(cfg) } else { BenchSpec::full(cfg) };
            let mut result = bench::run(spec, &bin, &common.out).await?;
            result["server_version"] = json!(cluster::server_version(&bin));
            std::fs::write(common.out.join("bench.json"), serde_json::to_string_pretty(&result)?)?;
            bench::print(&result);
            println!("bench: {}", common.out.join("bench.json").display());
            return Ok(ExitCode::SUCCESS);
        }
    };
    let seed = common.seed.unwrap_or_else(rand::random);
    let run_id = common.run_id.clone().unwrap_or_else(|| format!("{seed:016x}"));
    tracing::info!(seed, run_id, duration = ?common.duration, "run starting");
    let fault_log = Arc::new(FaultLog::new(Some(common.out.join("faults.jsonl"))));
    let injector = match &cluster {
        Some(c) if cfg.faults.enabled => Some(Injector::new(c.clone(), cfg.clone(), seed, fault_log.clone())),
        _ => None,
    };
    let spec = RunSpec { cfg: cfg.clone(), servers, monitor_urls: monitor, cluster_size, seed, run_id: run_id.clone(), duration: common.duration, injector };
    let finished = run::run(spec, stop).await?;
    let (stream, _) = run::names(&run_id);
    let report = report::build(json!({
        "seed": seed,
        "run_id": run_id,
        "stream": stream,
        "server_version": server_version,
        "cluster_size": cluster_size,
        "elapsed_s": finished.elapsed.as_secs_f64(),
        "final_read_complete": finished.final_read_complete,
        "rss_mib_end": run::rss_mib(),
        "counters": finished.ctx.stats.to_json(),
        "quiet_requests": finished.ctx.live.quiet.count(),
        "faults": fault_log.summary(),
        "config": cfg,
    }));
    let path = common.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    report::print(&report);
    println!("report: {}", path.display());
    Ok(if report["verdict"] == "pass" { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROPERTY_FAILED) })
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
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
