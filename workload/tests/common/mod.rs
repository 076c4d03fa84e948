//! A real 3-node nats-server cluster and the real `workload` binary run against it.
#![allow(dead_code)]

use async_nats::jetstream;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use workload::cluster::{find_server, LocalCluster};
use workload::nats::jsapi;

pub struct Harness {
    pub cluster: LocalCluster,
    pub dir: tempfile::TempDir,
    pub run_id: String,
    pub stream: String,
    pub subject: String,
}

pub struct Finished {
    pub report: Value,
    pub status: std::process::ExitStatus,
    pub out: PathBuf,
}

impl Finished {
    /// Ids of the verdict-deciding properties that failed.
    pub fn failed(&self) -> BTreeSet<String> {
        self.report["failed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    }

    pub fn property(&self, id: &str) -> &Value {
        self.report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap()
    }

    /// What went wrong, first and short (CI shows the head of a failure's message): the
    /// verdict, the failed and unknown properties with their first failure, the final check.
    pub fn why(&self) -> String {
        let mut lines = vec![format!("verdict {} (exit {:?}); failed {}", self.report["verdict"], self.status.code(), self.report["failed"])];
        for p in self.report["properties"].as_array().into_iter().flatten() {
            if p["status"] == "failed" || p["status"] == "unknown" {
                lines.push(format!("{} {}: {}", p["id"], p["status"], p["first_failure"]));
            }
        }
        lines.push(format!("final_check {}", self.report["final_check"]));
        lines.join("\n")
    }

    pub fn counter(&self, name: &str) -> u64 {
        self.report["counters"][name].as_u64().unwrap()
    }

    /// `target` failed, and nothing outside `allowed` (the defect's known side effects) did.
    pub fn assert_failed(&self, target: &str, allowed: &[&str]) {
        let failed = self.failed();
        assert!(failed.contains(target), "{target} did not fail; failed: {failed:?}\nreport: {}", self.report);
        let unexpected: Vec<_> = failed.iter().filter(|f| *f != target && !allowed.contains(&f.as_str())).collect();
        assert!(unexpected.is_empty(), "unexpected failures {unexpected:?}\nreport: {}", self.report);
        assert_eq!(self.report["verdict"], "fail");
        assert_eq!(self.status.code(), Some(1), "exit code 1 for a failed property");
        let first = &self.property(target)["first_failure"];
        assert!(!first.is_null(), "the first failure of {target} carries its details");
        // A real defect is never excused as a known server issue.
        assert!(self.report["unexplained"].as_array().is_some_and(|u| u.iter().any(|f| f == target)), "{target} was taken for a known server issue: {}", self.report["known_issues"]);
        assert_ne!(self.report["verdict_without_known"], "pass");
    }
}

/// A property's first failure in a report (null when it never failed or is not listed).
fn first_failure(report: &Value, id: &str) -> Value {
    report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).map(|p| p["first_failure"].clone()).unwrap_or(Value::Null)
}

/// A run on a correct build of the workload must pass, except for failures that a known
/// server issue explains: the workload's own table (`properties/src/known.rs`: release,
/// trigger, and a predicate over each failure's details) marks them in the report, and
/// `verdict_without_known` says what is left. Those are printed; anything else fails the test.
pub fn assert_passes_but_known_server_issues(report: &Value, log: &str) {
    if report["verdict"] == "pass" {
        return;
    }
    assert_eq!(report["verdict_without_known"], "pass", "{}", failure_summary(report, log));
    for issue in report["known_issues"].as_array().into_iter().flatten() {
        eprintln!("known server issue {} ({}): {}", issue["id"], issue["status"], issue["title"]);
    }
    for p in report["properties"].as_array().into_iter().flatten().filter(|p| !p["known"].is_null()) {
        eprintln!("  {} failed {} times, each explained: {}", p["id"], p["failed"], p["failures"]);
    }
}

/// What a failed run showed, most telling first (CI cuts long messages in the middle):
/// the verdict, each failed property's first failure, unknowns, then the log's last lines.
pub fn failure_summary(report: &Value, log: &str) -> String {
    let mut out = format!("verdict {}; failed {}; unknown {}; not explained by a known server issue {}\n", report["verdict"], report["failed"], report["unknown"], report["unexplained"]);
    for f in report["failed"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        out += &format!("  {f}: {}\n", first_failure(report, f));
    }
    // What the cluster went through: the faults (from the report) and the operations (the
    // log's "operation ..." lines), the last 40 of each; a liveness failure is read against them.
    let faults: Vec<String> = report["faults"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| format!("{:>8.1}s {} {} {}", e["t_s"].as_f64().unwrap_or(0.0), e["event"].as_str().unwrap_or(""), e["kind"].as_str().unwrap_or(""), e["nodes"]))
        .collect();
    out += &format!("--- faults (last 40 of {}) ---\n{}\n", faults.len(), last(&faults, 40).join("\n"));
    let ops: Vec<&str> = log.lines().filter(|l| l.contains(" operation ")).collect();
    out += &format!("--- operations (last 40 of {}) ---\n{}\n", ops.len(), last(&ops, 40).join("\n"));
    let lines: Vec<&str> = log.lines().collect();
    out += &format!("--- last lines of the log ---\n{}", last(&lines, 80).join("\n"));
    out
}

fn last<T>(lines: &[T], n: usize) -> &[T] {
    &lines[lines.len().saturating_sub(n)..]
}

/// Runs `workload local <args> --config <config> --out <dir>` to its end (with `env` set);
/// the report, the log, and the run directory (removed when dropped).
pub fn local_run(args: &[&str], config: &str, env: &[(&str, &str)]) -> (Value, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("workload.toml");
    std::fs::write(&cfg, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_workload"))
        .arg("local")
        .args(args)
        .arg("--config")
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    let text = std::fs::read_to_string(dir.path().join("report.json")).unwrap_or_default();
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("no report ({e}): {log}"));
    (report, log, dir)
}

impl Harness {
    pub async fn start(name: &str) -> Harness {
        let dir = tempfile::Builder::new().prefix(&format!("wl-{name}-")).tempdir().unwrap();
        let bin = find_server(None).expect("nats-server (run scripts/install-nats-server)");
        let cluster = LocalCluster::launch(&bin, 3, &dir.path().join("cluster"), false, Duration::from_secs(60)).await.unwrap();
        let run_id = format!("t{}_{}", name, std::process::id());
        let (stream, subject) = workload::run::names(&run_id);
        Harness { cluster, dir, run_id, stream, subject }
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.cluster.client_urls()).await.unwrap()
    }

    /// Starts `workload run` against this cluster with short liveness windows (unless
    /// `extra` names its own).
    pub fn spawn(&self, duration: &str, extra: &[&str]) -> Child {
        self.spawn_via(&self.cluster.client_urls(), duration, extra)
    }

    /// [`Harness::spawn`] with the clients connecting to `servers` (e.g. a forging link).
    pub fn spawn_via(&self, servers: &[String], duration: &str, extra: &[&str]) -> Child {
        self.spawn_watching(servers, &self.cluster.monitor_urls(), duration, extra)
    }

    /// [`Harness::spawn_via`] with the monitoring endpoints at `monitors` (e.g. a forging
    /// HTTP proxy).
    pub fn spawn_watching(&self, servers: &[String], monitors: &[String], duration: &str, extra: &[&str]) -> Child {
        let out = self.dir.path().join("out");
        let window: &[&str] = if extra.contains(&"--liveness-window") { &[] } else { &["--liveness-window", "20s", "--liveness-quiet", "3s"] };
        Command::new(env!("CARGO_BIN_EXE_workload"))
            .args(["run", "--servers", &servers.join(",")])
            .args(["--monitor", &monitors.join(",")])
            .args(["--run-id", &self.run_id, "--seed", "42", "--duration", duration])
            .args(window)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .env("RUST_LOG", "info,async_nats=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("workload.log")).unwrap())
            .spawn()
            .unwrap()
    }

    /// Runs `workload composer <name>` against this cluster with the shared state dir `state/`
    /// and short liveness windows (unless `extra` names its own); returns the ids that
    /// failed and the report. Composer commands exit 0 even when a property fails.
    pub fn composer(&self, name: &str, extra: &[&str]) -> (Vec<String>, Value) {
        let o = self.composer_command(name, name, extra).output().unwrap();
        let log = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "composer {name} exits 0 even when a property fails: {log}");
        let report = self.composer_report(name);
        let failed = report["failed"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
        (failed, report)
    }

    /// `workload composer <step>` writing into `<dir>/<out>`, not started yet.
    pub fn composer_command(&self, step: &str, out: &str, extra: &[&str]) -> Command {
        let window: &[&str] = if extra.contains(&"--liveness-window") { &[] } else { &["--liveness-window", "20s", "--liveness-quiet", "3s"] };
        let mut c = Command::new(env!("CARGO_BIN_EXE_workload"));
        c.args(["composer", step, "--servers", &self.cluster.client_urls().join(",")])
            .args(["--monitor", &self.cluster.monitor_urls().join(",")])
            .args(window)
            .arg("--state")
            .arg(self.dir.path().join("state"))
            .arg("--out")
            .arg(self.dir.path().join(out))
            .args(extra);
        c
    }

    /// The report a composer command wrote into `<dir>/<out>`.
    pub fn composer_report(&self, out: &str) -> Value {
        let path = self.dir.path().join(out).join("report.json");
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
    }

    /// A config file in the test's directory.
    pub fn config(&self, name: &str, toml: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, toml).unwrap();
        path.to_str().unwrap().to_string()
    }

    /// Waits for the workload to exit (killing it after `limit`) and reads its report.
    pub fn finish(&self, mut child: Child, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("workload did not finish within {limit:?}; log: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let out = self.dir.path().join("out");
        let text = std::fs::read_to_string(out.join("report.json"))
            .unwrap_or_else(|e| panic!("no report ({e}); exit {status}; log: {}", self.log()));
        Finished { report: serde_json::from_str(&text).unwrap(), status, out }
    }

    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("workload.log")).unwrap_or_default();
        log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Waits until the run's stream exists and holds at least `n` messages.
    pub async fn wait_for_messages(&self, client: &async_nats::Client, n: u64) -> u64 {
        self.wait_for_stream(client, &self.stream, n).await
    }

    /// Waits until `stream` exists and holds at least `n` messages.
    pub async fn wait_for_stream(&self, client: &async_nats::Client, stream: &str, n: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(info) = jsapi::stream_info(client, stream, Duration::from_secs(2)).await {
                if info.view.state.last_seq >= n {
                    return info.view.state.last_seq;
                }
            }
            assert!(Instant::now() < deadline, "stream never reached {n} messages; log: {}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates the run's stream beforehand, exactly as the workload would.
    pub async fn precreate_stream(&self, client: &async_nats::Client) {
        let cfg = jsapi::stream_config(&self.stream, &self.subject, 3, Duration::from_secs(300));
        jsapi::create_stream(client, &cfg, Duration::from_secs(5)).await.unwrap();
    }

    pub fn jetstream(&self, client: &async_nats::Client) -> jetstream::Context {
        jetstream::new(client.clone())
    }
}

/// Tries `f` every 200 ms until it succeeds, for at most `within`; panics with `what` and
/// the last error after that.
pub async fn eventually<T, E: std::fmt::Display, Fut: std::future::Future<Output = Result<T, E>>>(what: &str, within: Duration, mut f: impl FnMut() -> Fut) -> T {
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Ok(t) => return t,
            Err(e) if Instant::now() > deadline => panic!("{what}: never, last {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
