//! The command line: bad settings stop the program before it connects, naming the field;
//! `workload local` runs its own cluster and leaves no process behind.

use std::process::Command;

fn workload() -> Command {
    Command::new(env!("CARGO_BIN_EXE_workload"))
}

#[test]
fn invalid_settings_exit_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = workload()
        .args(["run", "--servers", "nats://127.0.0.1:1", "--liveness-window", "10s", "--liveness-quiet", "10s", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("liveness.quiet"), "{}", String::from_utf8_lossy(&out.stderr));

    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[publish]\npayload = 3\n").unwrap();
    let out = workload().args(["local", "--config"]).arg(&cfg).arg("--out").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("payload"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn local_runs_its_own_cluster_passes_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = workload().args(["local", "--duration", "10s", "--seed", "7", "--out"]).arg(dir.path()).output().unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["verdict"], "pass", "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(report["seed"], 7);
    assert!(report["server_version"].as_str().unwrap().starts_with('v'));
    let sdk = std::fs::read_to_string(dir.path().join("sdk.jsonl")).unwrap();
    assert_eq!(sdk.matches("\"antithesis_setup\"").count(), 1, "setup_complete exactly once");
    assert!(sdk.contains("publish-ack-gap-free: "), "the SDK declared the catalog");
    // Every node was started with a config file under the run directory.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let leftover = String::from_utf8_lossy(&ps.stdout).lines().filter(|l| l.contains(dir.path().to_str().unwrap())).count();
    assert_eq!(leftover, 0, "nats-server processes left behind");
}
