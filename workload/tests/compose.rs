//! The two container topologies, run for real on the images `scripts/build-images` tags:
//! the local one (`docker-compose.yaml`) and the Antithesis one (`config/`), whose Test
//! Composer commands run with `docker exec` in a legal order while a node container is
//! killed. Also the Antithesis rules on `config/` and the test template.
//!
//! Every topology is brought down with its volumes when its test ends, passed or not
//! (and before it starts, in case an earlier run was killed).

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

/// Docker Compose v2 through `scripts/compose` (the README's, as users run it).
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
}

impl Topology {
    fn new(dir: PathBuf, project: &'static str) -> Topology {
        Topology::with(dir, project, "docker-compose.yaml", None)
    }

    fn with(dir: PathBuf, project: &'static str, files: &'static str, duration: Option<&'static str>) -> Topology {
        require_images();
        let t = Topology { dir, project, files, duration };
        t.down();
        t
    }

    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = compose_command();
        c.args(["-p", self.project]).args(args).current_dir(&self.dir).env("COMPOSE_FILE", self.files);
        c.env_remove("WORKLOAD_DURATION").env_remove("WORKLOAD_SEED");
        if let Some(d) = self.duration {
            c.env("WORKLOAD_DURATION", d);
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

#[test]
fn local_topology_runs_until_stopped_and_reports_a_pass() {
    let t = Topology::new(root(), "nats-workload-local");
    t.ok(&["up", "-d"]);
    std::thread::sleep(Duration::from_secs(60));
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

/// The README's command with the README's fault switch, ending by itself: a node container
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
        .env("WORKLOAD_DURATION", "120s")
        // This seed's first fault stops a node container (a restart): the run must go on.
        .env("WORKLOAD_SEED", "2026")
        .output()
        .unwrap();
    let out = text(&run);
    assert!(out.contains("verdict: pass"), "the report is shown:\n{out}");
    assert!(run.status.success(), "scripts/compose-up exits with the workload's 0:\n{out}");
    let (report, exit) = t.report();
    assert_eq!(report["verdict"], "pass", "failed: {}\n{}", report["failed"], t.logs());
    assert_eq!(exit, "0");
    let starts = report["faults"]["starts"].as_object().unwrap();
    assert!(starts.contains_key("restart") || starts.contains_key("kill"), "a node container was stopped: {}", report["faults"]);
    let events = report["faults"]["events"].as_array().unwrap();
    assert!(events.iter().all(|e| e["detail"]["errors"].as_array().is_none_or(|e| e.is_empty())), "every Docker call worked: {events:?}");
    assert_eq!(report["counters"]["final_verified"], report["counters"]["last_acked_seq"]);
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
    snouty_validate();
    let t = Topology::new(root().join("config/antithesis"), "nats-workload-antithesis");
    t.ok(&["up", "-d"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !in_container("cat /state/runs/entrypoint-*/sdk.jsonl 2>/dev/null").contains("antithesis_setup") {
        assert!(Instant::now() < deadline, "no setup_complete within 120 s:\n{}", t.logs());
        std::thread::sleep(Duration::from_secs(1));
    }

    // A pipelined driver, a one-at-a-time driver and the leader-stepping operator at once;
    // a node container is killed during them and started again.
    const COMMANDS: [(&str, &str); 3] = [
        ("parallel_driver_publish_read_scale.sh", "45s"),
        ("parallel_driver_publish_one_at_a_time.sh", "45s"),
        ("singleton_driver_step_down_leaders.sh", "35s"),
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
    let reports = |glob: &str| -> Vec<Value> {
        serde_json::Deserializer::from_str(&in_container(&format!("cat /state/runs/{glob}/report.json"))).into_iter().map(Result::unwrap).collect()
    };
    let drivers = reports("driver-*");
    assert_eq!(drivers.len(), 2, "{drivers:?}");
    let operator = &reports("operator-*")[0];
    assert!(operator["operations"]["stepdowns_asked"].as_u64().unwrap() >= 1, "the operator acted: {operator}");
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
    assert_eq!(sdk_failures(&sdk), Vec::<Value>::new(), "no always assertion failed");
}

// ---- Antithesis rules, checked on the files (no Docker needed) ----

fn yaml(path: &Path) -> serde_yaml_ng::Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn antithesis_compose_file_keeps_the_rules() {
    let dir = root().join("config/antithesis");
    let compose = yaml(&dir.join("docker-compose.yaml"));
    let services = compose["services"].as_mapping().expect("services");
    let env = std::fs::read_to_string(dir.join(".env")).expect("config/antithesis/.env: run scripts/build-images first (scripts/test does)");
    let entries: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
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
    // The local topology mounts the Docker socket only in its faults override.
    let local = std::fs::read_to_string(root().join("docker-compose.yaml")).unwrap();
    assert!(!local.contains("docker.sock"));
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
fn snouty_validate() {
    let Ok(snouty) = std::env::var("SNOUTY") else {
        eprintln!("SNOUTY is not set: snouty validate skipped (scripts/test installs snouty and sets it)");
        return;
    };
    // snouty runs the project as "antithesis" (its directory's name); a Topology brings it
    // down with its volumes.
    let _cleanup = Topology::new(root().join("config/antithesis"), "antithesis");
    // snouty finds Compose v2 on PATH (scripts/install-compose may have put it in .venv/bin).
    let path = format!("{}:{}", root().join(".venv/bin").display(), std::env::var("PATH").unwrap_or_default());
    let v = Command::new(&snouty).args(["validate"]).arg(root().join("config/antithesis")).env("PATH", path).output().unwrap();
    let out = text(&v);
    assert!(v.status.success(), "snouty validate failed:\n{out}");
    assert!(out.contains("Setup validation successful"), "{out}");
}
