//! The `workload` binary: `main` parses the command line (`cli/args.rs`), loads and checks
//! the settings, starts the SDK and the runtime, and hands over to `cli/execute.rs` (or
//! `cli/offline.rs` for the commands that read a saved run). Exit codes (`cli/mod.rs`): 0
//! every property held, 1 a property failed, 2 bad usage or config, 3 the run could not be
//! carried out (infrastructure), 4 nothing failed but some safety question could not be
//! answered (verdict "unknown").

mod cli;

use clap::Parser;
use cli::args::{Cli, Command};
use cli::offline::{check_saved, run_matrix, write_page};
use cli::settings::apply_overrides;
use cli::{usage, EXIT_INFRA};
use std::process::ExitCode;
use workload::config::Config;
use workload::sdk;

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
    match runtime.block_on(cli::execute::execute(cli.command, cfg, out)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("run could not be carried out: {e:#}");
            ExitCode::from(EXIT_INFRA)
        }
    }
}

