//! The commands that run no workload of their own: `report` and `check` read a saved run,
//! `matrix` runs `workload local` once per release and seed.

use crate::cli::args::MatrixArgs;
use crate::cli::{usage, EXIT_INFRA, EXIT_PROPERTY_FAILED, EXIT_UNKNOWN, EXIT_USAGE};
use std::path::Path;
use std::process::ExitCode;
use workload::report;
use workload::tools::matrix;

/// `workload report DIR`: report.md, timeline.svg and report.html from DIR's report.json
/// (and its timeline.jsonl and faults.jsonl).
pub fn write_page(dir: &Path) -> ExitCode {
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
pub fn check_saved(dir: &Path, allow_known: bool) -> ExitCode {
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
fn remark(dir: &Path, report: &mut serde_json::Value) -> anyhow::Result<()> {
    report::mark_known(report, dir);
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(report)?)?;
    Ok(())
}

pub fn run_matrix(m: &MatrixArgs) -> ExitCode {
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
