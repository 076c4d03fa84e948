//! A real 3-node nats-server cluster and the real `workload` binary run against it.
#![allow(dead_code)]

use async_nats::jetstream;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use workload::cluster::{find_server, LocalCluster};
use workload::jsapi;

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
    }
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
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(info) = jsapi::stream_info(client, &self.stream, Duration::from_secs(2)).await {
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
