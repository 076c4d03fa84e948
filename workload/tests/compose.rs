//! The two container topologies, run for real on the images `scripts/build-images` tags:
//! the local one (`docker-compose.yaml`) and the Antithesis one (`config/`), whose Test
//! Composer commands run with `docker exec` in a legal order while a node container is
//! killed. Also the Antithesis rules on `config/` and the test template.
//!
//! Every topology is brought down with its volumes when its test ends, passed or not
//! (and before it starts, in case an earlier run was killed).

mod common;

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TEMPLATE: &str = "/opt/antithesis/test/v1/jetstream";
const IMAGES: [&str; 2] = ["nats-workload:latest", "nats-workload-node:latest"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Docker Compose v2 through `scripts/compose` (the one docs/docker.md gives users).
fn compose_command() -> Command {
    Command::new(root().join("scripts/compose"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("docker runs")
}

fn require_images() {
    for image in IMAGES {
        assert!(docker(&["image", "inspect", image]).status.success(), "image {image} is missing: run scripts/build-images first (scripts/test does)");
    }
}

/// A compose project, brought down with its volumes when dropped.
struct Topology {
    dir: PathBuf,
    project: &'static str,
    /// COMPOSE_FILE: the compose files, ':'-separated, as a user would set it.
    files: &'static str,
    duration: Option<&'static str>,
    /// WORKLOAD_CONFIG, a path inside the workload container.
    config: Option<&'static str>,
}

impl Topology {
    fn new(dir: PathBuf, project: &'static str) -> Topology {
        Topology::with(dir, project, "docker-compose.yaml", None)
    }

    fn with(dir: PathBuf, project: &'static str, files: &'static str, duration: Option<&'static str>) -> Topology {
        require_images();
        let t = Topology { dir, project, files, duration, config: None };
        t.down();
        t
    }

    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = compose_command();
        c.args(["-p", self.project]).args(args).current_dir(&self.dir).env("COMPOSE_FILE", self.files);
        c.env_remove("WORKLOAD_DURATION").env_remove("WORKLOAD_SEED");
        // Each local project publishes the workload's metrics on a host port of its own.
        c.env("WORKLOAD_METRICS_PORT", metrics_port(self.project).to_string());
        if let Some(d) = self.duration {
            c.env("WORKLOAD_DURATION", d);
        }
        c.env_remove("WORKLOAD_CONFIG");
        if let Some(f) = self.config {
            c.env("WORKLOAD_CONFIG", f);
        }
        c.output().expect("compose runs")
    }

    /// The workload container's report.json and exit code, once it has exited.
    fn report(&self) -> (Value, String) {
        let id = self.ok(&["ps", "-a", "-q", "workload"]).trim().to_string();
        let exit = docker(&["inspect", "-f", "{{.State.ExitCode}}", &id]);
        let dir = tempfile::tempdir().unwrap();
        let copied = docker(&["cp", &format!("{id}:/runs/latest/report.json"), dir.path().to_str().unwrap()]);
        assert!(copied.status.success(), "no report: {}\n{}", text(&copied), self.logs());
        let report = serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
        (report, String::from_utf8_lossy(&exit.stdout).trim().to_string())
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert!(o.status.success(), "compose {args:?} failed:\n{}\n--- logs ---\n{}", text(&o), self.logs());
        text(&o)
    }

    fn logs(&self) -> String {
        let o = self.cmd(&["logs", "--no-color", "--tail", "60"]);
        text(&o)
    }

    fn down(&self) {
        let o = self.cmd(&["down", "-v", "--remove-orphans", "-t", "10"]);
        if !o.status.success() {
            eprintln!("compose down failed: {}", text(&o));
        }
    }
}

/// The host port a project's workload metrics are published on (docker-compose.yaml), one
/// per project, since two may run at once.
fn metrics_port(project: &str) -> u16 {
    match project {
        "nats-workload-faults" => 19465,
        "nats-workload-membership" => 19466,
        _ => 19464,
    }
}

/// The value of the sample `name` on a Prometheus page served at 127.0.0.1:`port`.
fn scrape(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut page = String::new();
    c.read_to_string(&mut page).ok()?;
    page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.down();
    }
}

/// The SDK lines that say something went wrong: a failed always (and eventually, which is
/// emitted as always) assertion, or a reached unreachable one.
fn sdk_failures(lines: &str) -> Vec<Value> {
    lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("antithesis_assert").cloned())
        .filter(|a| a["hit"] == true)
        .filter(|a| (a["assert_type"] == "always" && a["condition"] == false) || (a["display_type"] == "Unreachable"))
        .collect()
}

/// The failed always (and reached unreachable) assertions of every command run on the
/// shared volume that its own report does not explain by a known server issue: each
/// command's `sdk.jsonl` beside its `report.json`, whose properties carry `known` when
/// every failure of theirs matched the workload's table of known issues.
fn unexplained_sdk_failures() -> Vec<Value> {
    let mut out = Vec::new();
    for dir in in_container("ls -d /state/runs/*").split_whitespace() {
        let report: Value = serde_json::from_str(&in_container(&format!("cat {dir}/report.json 2>/dev/null"))).unwrap_or(Value::Null);
        let explained = |id: &str| report["properties"].as_array().into_iter().flatten().any(|p| p["id"] == id && !p["known"].is_null());
        for a in sdk_failures(&in_container(&format!("cat {dir}/sdk.jsonl"))) {
            let id = a["id"].as_str().unwrap_or_default().split(':').next().unwrap_or_default().to_string();
            if explained(&id) {
                eprintln!("known server issue in {dir}: {id}: {}", a["details"]);
            } else {
                out.push(a);
            }
        }
    }
    out
}

#[test]
fn local_topology_runs_until_stopped_and_reports_a_pass() {
    let t = Topology::new(root(), "nats-workload-local");
    t.ok(&["up", "-d"]);
    std::thread::sleep(Duration::from_secs(45));
    // The workload's metrics, published on the host while it runs, and moving.
    let port = metrics_port(t.project);
    let first = scrape(port, "workload_acked_total").unwrap_or_else(|| panic!("no metrics on 127.0.0.1:{port}\n{}", t.logs()));
    // Publishing may stall while the operator scales an R1 stream up (acks wait for a new
    // peer to catch up): it must move again within a liveness window.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut later = first;
    while later <= first && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(5));
        later = scrape(port, "workload_acked_total").unwrap();
    }
    assert!(later > first, "workload_acked_total moved: {first} then {later}");
    // What Ctrl-C on `docker compose up` does: stop the workload (it verifies and
    // reports), then the nodes.
    t.ok(&["stop", "-t", "300"]);
    let (report, exit) = t.report();
    let c = &report["counters"];
    assert_eq!(report["verdict"], "pass", "failed: {}\n{}", report["failed"], t.logs());
    assert_eq!(exit, "0", "the workload exits 0 on a pass");
    assert!(c["acked"].as_u64().unwrap() > 1000, "messages were published: {c}");
    assert_eq!(c["final_verified"], c["last_acked_seq"], "the final read verified every ack: {c}");
    assert_eq!(report["final_read_complete"], true);
    assert!(c["scale_requests"].as_u64().unwrap() > 0, "scaling was seen: {c}");
}

/// docs/docker.md's command with its fault switch, ending by itself: a node container
/// that a fault kills or restarts must not end the run, and the command exits with the
/// workload's code after showing its report.
#[test]
fn compose_up_with_docker_faults_kills_and_isolates_nodes_and_still_passes() {
    let files = "docker-compose.yaml:docker-compose.faults.yaml";
    let t = Topology::with(root(), "nats-workload-faults", files, Some("120s"));
    let run = Command::new("timeout")
        .args(["600", root().join("scripts/compose-up").to_str().unwrap()])
        .current_dir(root())
        .env("COMPOSE_FILE", files)
        .env("COMPOSE_PROJECT_NAME", t.project)
        .env("WORKLOAD_METRICS_PORT", metrics_port(t.project).to_string())
        .env("WORKLOAD_DURATION", "120s")
        // This seed's first fault stops a node container (a restart): the run must go on.
        .env("WORKLOAD_SEED", "2026")
        .output()
        .unwrap();
    let out = text(&run);
    // Once (CI, 2026-12-03, a build beside it) the command ran into its 600 s with no
    // workload container: what it said then is what tells why.
    let last: Vec<&str> = out.lines().rev().take(80).collect();
    let last = last.into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(!t.ok(&["ps", "-a", "-q", "workload"]).trim().is_empty(), "no workload container ({}); scripts/compose-up ended with:\n{last}", run.status);
    let (report, exit) = t.report();
    common::assert_passes_but_known_server_issues(&report, &out);
    let verdict = report["verdict"].as_str().unwrap_or_default();
    assert!(out.contains(&format!("verdict: {verdict}")), "the report is shown:\n{out}");
    assert_eq!(run.status.success(), verdict == "pass", "scripts/compose-up exits with the workload's code ({exit}):\n{out}");
    assert_eq!(exit == "0", verdict == "pass");
    let starts = report["faults"]["starts"].as_object().unwrap();
    assert!(starts.contains_key("restart") || starts.contains_key("kill"), "a node container was stopped: {}", report["faults"]);
    let events = report["faults"]["events"].as_array().unwrap();
    assert!(events.iter().all(|e| e["detail"]["errors"].as_array().is_none_or(|e| e.is_empty())), "every Docker call worked: {events:?}");
    assert_eq!(report["counters"]["final_verified"], report["counters"]["last_acked_seq"]);
}

/// The faults that change a node's volume, through Docker: a membership change (a stopped
/// node container removed from the meta group, its data volume wiped and its next start
/// given a new server name; it rejoins under that name, its own /varz says so) and a
/// corruption of one of the stream's files in the volume; the run still passes with every
/// ack read.
#[test]
fn docker_membership_and_corruption_change_the_node_volumes_and_the_run_passes() {
    let files = "docker-compose.yaml:docker-compose.faults.yaml";
    let mut t = Topology::with(root(), "nats-workload-membership", files, Some("120s"));
    t.config = Some("/membership.toml");
    // Membership changes and corruptions only, on a stream left at three replicas, so that
    // they are allowed soon (they wait for a settled stream with two whole copies) and the
    // schedule's rounds draw both: with kills beside them, a run could end on kills alone.
    let config = "[operator]\nenabled = false\n[faults]\nprofile = \"membership\"\n[faults.profiles.membership]\n\
                  kinds = [\"membership\", \"corrupt\"]\noff_min = \"10s\"\noff_max = \"15s\"\non_min = \"20s\"\non_max = \"30s\"\n\
                  fault_min = \"5s\"\nfault_max = \"10s\"\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("membership.toml"), config).unwrap();
    t.ok(&["up", "--no-start"]);
    let id = t.ok(&["ps", "-a", "-q", "workload"]).trim().to_string();
    let copied = docker(&["cp", dir.path().join("membership.toml").to_str().unwrap(), &format!("{id}:/membership.toml")]);
    assert!(copied.status.success(), "{}", text(&copied));
    t.ok(&["up", "-d"]);
    let exit = docker(&["wait", &id]);
    let (report, code) = t.report();
    common::assert_passes_but_known_server_issues(&report, &format!("exit {} / {code}\n{}", text(&exit), t.logs()));
    if report["verdict"] == "pass" {
        assert_eq!(report["counters"]["final_verified"], report["counters"]["last_acked_seq"]);
    }
    let events = report["faults"]["events"].as_array().unwrap();
    let renamed: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["event"] == "start" && e["kind"] == "membership")
        .filter_map(|e| Some((e["detail"]["removed"].as_str()?.to_string(), e["detail"]["rejoins_as"].as_str()?.to_string())))
        .collect();
    let (removed, new) = renamed.last().unwrap_or_else(|| panic!("no membership change carried out: {events:?}"));
    let service = removed.split('-').next().unwrap();
    assert!(new.starts_with(&format!("{service}-")) && new != removed, "{removed} -> {new}");
    let varz = t.ok(&["exec", "-T", service, "wget", "-q", "-O", "-", "http://127.0.0.1:8222/varz"]);
    assert!(varz.contains(&format!("\"server_name\": \"{new}\"")), "{service} runs as {new}: {varz}");
    let corrupted = events.iter().filter(|e| e["event"] == "start" && e["kind"] == "corrupt").filter_map(|e| e["detail"]["touched"].as_array()).flatten().collect::<Vec<_>>();
    assert!(corrupted.iter().any(|t| t["stream_file"] == true && t["file"].as_str().is_some_and(|f| f.starts_with("jetstream/"))), "a stream file in a node's volume was corrupted: {events:?}");
}

/// Runs a Test Composer command in the workload container; its exit status and output.
fn composer(command: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new("docker").args(["exec", "workload", &format!("{TEMPLATE}/{command}")]).args(args).output().unwrap();
    (o.status.success(), text(&o))
}

fn in_container(script: &str) -> String {
    text(&docker(&["exec", "workload", "sh", "-c", script]))
}

#[test]
fn antithesis_topology_passes_snouty_and_runs_the_test_composer_commands_through_a_node_kill() {
    snouty_validate("antithesis", "antithesis");
    three_node_timeline();
    // Both topologies name their containers n1..., workload: one after the other.
    five_node_timeline();
}

/// Brings the topology in `config/<dir>` up and waits for the entrypoint's setup_complete.
fn antithesis_topology(dir: &str, project: &'static str) -> Topology {
    let t = Topology::new(root().join("config").join(dir), project);
    t.ok(&["up", "-d"]);
    let deadline = Instant::now() + Duration::from_secs(180);
    while !in_container("cat /state/runs/entrypoint-*/sdk.jsonl 2>/dev/null").contains("antithesis_setup") {
        assert!(Instant::now() < deadline, "no setup_complete within 180 s:\n{}", t.logs());
        std::thread::sleep(Duration::from_secs(1));
    }
    t
}

/// Every report.json the commands matching `glob` wrote on the shared volume.
fn reports(glob: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(&in_container(&format!("cat /state/runs/{glob}/report.json"))).into_iter().map(Result::unwrap).collect()
}

/// The five-node topology: snouty's checks, then a pipelined driver beside the operator,
/// then `finally_`: every command exits 0, every acknowledged message is read back, and
/// no always assertion failed.
fn five_node_timeline() {
    snouty_validate("antithesis-5", "antithesis-5");
    let t = antithesis_topology("antithesis-5", "nats-workload-antithesis-5");
    let monitor = in_container("echo $WORKLOAD_MONITOR");
    assert_eq!(monitor.trim().split(',').count(), 5, "{monitor}");
    const COMMANDS: [(&str, &str); 2] = [("parallel_driver_publish_read_scale.sh", "40s"), ("parallel_driver_step_down_leaders.sh", "30s")];
    let running: Vec<_> = COMMANDS.iter().map(|(cmd, d)| std::thread::spawn(move || composer(cmd, &["--duration", d]))).collect();
    for c in running {
        let (ok, out) = c.join().unwrap();
        assert!(ok, "a command exits 0:\n{out}");
    }
    let (ok, out) = composer("finally_verify_everything.sh", &[]);
    assert!(ok, "finally_ exits 0:\n{out}");
    let driver = &reports("driver-*")[0];
    common::assert_passes_but_known_server_issues(driver, &t.logs());
    assert!(driver["final_check"]["last_acked"].as_u64().unwrap() > 0, "{driver}");
    assert_eq!(reports("finally-*")[0]["verdict"], "pass");
    assert_eq!(unexplained_sdk_failures(), Vec::<Value>::new(), "no always assertion failed:\n{}", t.logs());
}

/// The three-node topology, its commands run by `docker exec` in a legal order while a node
/// container is killed and started again.
fn three_node_timeline() {
    let _topology = antithesis_topology("antithesis", "nats-workload-antithesis");

    // A pipelined driver, a one-at-a-time driver and the three operator commands at once;
    // a node container is killed during them and started again.
    const COMMANDS: [(&str, &str); 5] = [
        ("parallel_driver_publish_read_scale.sh", "45s"),
        ("parallel_driver_publish_one_at_a_time.sh", "45s"),
        ("parallel_driver_step_down_leaders.sh", "35s"),
        ("parallel_driver_move_streams.sh", "30s"),
        ("parallel_driver_evacuate_peers.sh", "30s"),
    ];
    let running: Vec<_> = COMMANDS.iter().map(|(cmd, d)| std::thread::spawn(move || composer(cmd, &["--duration", d]))).collect();
    std::thread::sleep(Duration::from_secs(15));
    assert!(docker(&["kill", "n2"]).status.success());
    std::thread::sleep(Duration::from_secs(10));
    assert!(docker(&["start", "n2"]).status.success());
    for c in running {
        let (ok, out) = c.join().unwrap();
        assert!(ok, "a driver exits 0:\n{out}");
    }
    let drivers = reports("driver-*");
    assert_eq!(drivers.len(), 2, "{drivers:?}");
    let operator = &reports("operator-*")[0];
    assert!(operator["operations"]["stepdowns_asked"].as_u64().unwrap() >= 1, "the operator acted: {operator}");

    // Each operator command alone (no driver running): each still performs an operation,
    // on the finished streams or the meta leader, or on a stream of its own.
    let alone = |cmd: &str, out: &str, duration: &str| {
        let (ok, log) = composer(cmd, &["--duration", duration, "--out", &format!("/state/alone/{out}")]);
        assert!(ok, "{cmd} alone exits 0:\n{log}");
        let report: Value = serde_json::from_str(&in_container(&format!("cat /state/alone/{out}/report.json"))).unwrap();
        assert!(report["failed"].as_array().unwrap().is_empty(), "{cmd} alone: {report}");
        report
    };
    let done = |r: &Value, op: &str| r["operated"]["operations"]["counts"][op]["done"].as_u64().unwrap_or(0);
    let stepdowns = alone("parallel_driver_step_down_leaders.sh", "operator", "12s");
    assert!(stepdowns["operations"]["stepdowns_done"].as_u64().unwrap() >= 1, "{}", stepdowns["operations"]);
    let moves = alone("parallel_driver_move_streams.sh", "moves", "25s");
    assert!(done(&moves, "move") >= 1, "{}", moves["operated"]);
    let evacuations = alone("parallel_driver_evacuate_peers.sh", "evacuations", "25s");
    assert!(done(&evacuations, "peer-evacuate") + done(&evacuations, "server-evacuate") >= 1, "{}", evacuations["operated"]);
    let (ok, out) = composer("anytime_finished_streams_intact.sh", &[]);
    assert!(ok, "anytime_ exits 0:\n{out}");
    let report = &reports("anytime-*")[0];
    let looks: Vec<&str> = report["streams"].as_array().unwrap().iter().map(|s| s["stream_state"].as_str().unwrap()).collect();
    assert!(looks.iter().all(|l| ["held", "unknown", "retired"].contains(l)), "{looks:?}");
    let (ok, out) = composer("eventually_acked_messages_readable.sh", &[]);
    assert!(ok, "eventually_ exits 0:\n{out}");
    let (ok, out) = composer("finally_verify_everything.sh", &[]);
    assert!(ok, "finally_ exits 0:\n{out}");

    // Every acknowledged message was read back: by finally_, or by the driver itself before
    // it retired its stream.
    let report = &reports("finally-*")[0];
    let streams = report["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "one recorded stream per driver: {streams:?}");
    for s in streams {
        if s["retired"] == true {
            let own = drivers.iter().find(|d| d["stream"] == s["stream"]).expect("the retiring driver's report");
            let check = &own["final_check"];
            assert_eq!(check["verified"], check["last_acked"], "read back in full before retiring: {own}");
            assert_eq!(check["replicas"], "held", "{own}");
            continue;
        }
        let check = &s["check"];
        assert!(check["last_acked"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(check["verified"], check["last_acked"], "every acknowledged message read back: {s}");
        assert_eq!(check["read"], "held", "{s}");
        assert_eq!(check["replicas"], "held", "every replica equals the leader: {s}");
        assert_eq!(s["driver_finished"], true);
    }
    assert_eq!(report["verdict"], "pass", "{report}");
    let sdk = in_container("cat /state/runs/*/sdk.jsonl");
    assert_eq!(sdk.matches("\"antithesis_setup\"").count(), 1, "setup_complete exactly once");
    assert!(sdk.contains("\"assert_type\":\"always\",\"condition\":true"), "always assertions were evaluated");
    assert_eq!(unexplained_sdk_failures(), Vec::<Value>::new(), "no always assertion failed");
}

// ---- Antithesis rules, checked on the files (no Docker needed) ----

fn yaml(path: &Path) -> serde_yaml_ng::Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn antithesis_compose_files_keep_the_rules() {
    for dir in ["config/antithesis", "config/antithesis-5"] {
        keeps_the_antithesis_rules(&root().join(dir));
    }
    // The local topology mounts the Docker socket only in its faults override.
    let local = std::fs::read_to_string(root().join("docker-compose.yaml")).unwrap();
    assert!(!local.contains("docker.sock"));
}

fn keeps_the_antithesis_rules(dir: &Path) {
    let compose = yaml(&dir.join("docker-compose.yaml"));
    let services = compose["services"].as_mapping().expect("services");
    let env = std::fs::read_to_string(dir.join(".env")).unwrap_or_else(|e| panic!("{}/.env: run scripts/build-images first (scripts/test does): {e}", dir.display()));
    let entries: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let mut only: Vec<&str> = entries.iter().map(String::as_str).collect();
    only.sort_unstable();
    assert_eq!(only, [".env", "Dockerfile", "docker-compose.yaml"], "the config directory holds only what the config image needs");
    for line in env.lines().filter(|l| !l.starts_with('#')) {
        assert!(!line.ends_with(":latest"), "images carry the build's unique tag, not latest: {line}");
    }
    let defined: Vec<&str> = env.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once('=')).map(|(k, _)| k.trim()).collect();
    let mut depended_on = Vec::new();
    for (name, s) in services {
        let name = name.as_str().unwrap();
        assert_eq!(s["platform"].as_str(), Some("linux/amd64"), "{name}: platform");
        assert_eq!(s["init"].as_bool(), Some(true), "{name}: init");
        let container = s["container_name"].as_str().unwrap_or_else(|| panic!("{name}: container_name"));
        assert_eq!(s["hostname"].as_str(), Some(container), "{name}: hostname equals container_name");
        assert!(!container.contains('_'), "{name}: no underscore in {container}");
        for banned in ["pull_policy", "logging", "build"] {
            assert!(s.get(banned).is_none(), "{name}: no {banned}");
        }
        let image = s["image"].as_str().unwrap_or_else(|| panic!("{name}: image"));
        for var in image.split("${").skip(1).map(|v| v.split('}').next().unwrap()) {
            assert!(defined.contains(&var), "{name}: ${{{var}}} is defined in .env");
        }
        for volume in s["volumes"].as_sequence().into_iter().flatten() {
            let source = volume.as_str().unwrap().split(':').next().unwrap();
            assert!(compose["volumes"].get(source).is_some(), "{name}: {source} is a named volume");
        }
        if let Some(deps) = s["depends_on"].as_mapping() {
            for (dep, how) in deps {
                assert_eq!(how["condition"].as_str(), Some("service_healthy"), "{name} waits for {dep:?} to be healthy");
                depended_on.push(dep.as_str().unwrap().to_string());
            }
        }
    }
    for dep in depended_on {
        assert!(services[dep.as_str()]["healthcheck"]["test"].is_sequence(), "{dep} has a healthcheck");
    }
    // The commands' shared state is on a named volume.
    let workload = &services["workload"];
    let state = workload["environment"]["WORKLOAD_STATE"].as_str().unwrap();
    assert!(workload["volumes"].as_sequence().unwrap().iter().any(|v| v.as_str().unwrap().ends_with(&format!(":{state}"))));
    let dockerfile = std::fs::read_to_string(dir.join("Dockerfile")).unwrap();
    let steps: Vec<&str> = dockerfile.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert_eq!(steps, ["FROM scratch", "COPY docker-compose.yaml .env /"], "the config image is the compose file and .env only");
}

#[test]
fn test_template_commands_are_executable_and_call_real_steps() {
    const PREFIXES: [&str; 8] = ["first_", "parallel_driver_", "singleton_driver_", "serial_driver_", "anytime_", "eventually_", "finally_", "helper_"];
    let dir = root().join("workload/antithesis/test/v1");
    let templates: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(templates.len(), 1, "one template: {templates:?}");
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(&templates[0]).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let prefix = PREFIXES.iter().find(|p| name.starts_with(**p)).unwrap_or_else(|| panic!("{name}: no Test Composer prefix"));
        kinds.push(*prefix);
        assert!(path.metadata().unwrap().permissions().mode() & 0o111 != 0, "{name} is executable");
        let script = std::fs::read_to_string(&path).unwrap();
        assert!(script.starts_with("#!/bin/sh\n"), "{name}: a shebang the image has");
        if name.starts_with("helper_") {
            continue; // Test Composer ignores helpers
        }
        let step = script.lines().find_map(|l| l.strip_prefix("exec workload composer ")).unwrap_or_else(|| panic!("{name}: runs a composer step"));
        let step = step.split_whitespace().next().unwrap();
        let help = Command::new(env!("CARGO_BIN_EXE_workload")).args(["composer", step, "--help"]).output().unwrap();
        assert!(help.status.success(), "{name}: `workload composer {step}` exists");
    }
    for needed in ["parallel_driver_", "anytime_", "eventually_", "finally_"] {
        assert!(kinds.contains(&needed), "a {needed} command exists");
    }
}

/// `snouty validate` (Antithesis's own CLI): brings the config directory's topology up,
/// waits for setup_complete and checks the test template in the running container.
/// scripts/test installs snouty and sets $SNOUTY; without it this step says so.
/// Part of the Antithesis topology test: both use the same container names.
/// `snouty validate config/<dir>`; `project`: the compose project it runs (its
/// directory's name).
fn snouty_validate(dir: &str, project: &'static str) {
    let Ok(snouty) = std::env::var("SNOUTY") else {
        eprintln!("SNOUTY is not set: snouty validate skipped (scripts/test installs snouty and sets it)");
        return;
    };
    // A Topology brings snouty's project down with its volumes.
    let _cleanup = Topology::new(root().join("config").join(dir), project);
    // snouty finds Compose v2 on PATH (scripts/install-compose may have put it in .venv/bin).
    let path = format!("{}:{}", root().join(".venv/bin").display(), std::env::var("PATH").unwrap_or_default());
    let v = Command::new(&snouty).args(["validate"]).arg(root().join("config").join(dir)).env("PATH", path).output().unwrap();
    let out = text(&v);
    assert!(v.status.success(), "snouty validate failed:\n{out}");
    assert!(out.contains("Setup validation successful"), "{out}");
}
