//! Every operation of the operator has its effect on a real five-node cluster (peers
//! really change, leaders really step down), is judged as it settles, and leaves every
//! property green on a correct server.

mod common;

use serde_json::Value;

fn local_run(nodes: &str, duration: &str, config: &str, extra: &[&str]) -> (Value, String) {
    let (report, log, _) = local_run_logged(1, nodes, duration, config, extra);
    (report, log)
}

/// A run, and its operations.jsonl (one event a line).
fn local_run_logged(clusters: usize, nodes: &str, duration: &str, config: &str, extra: &[&str]) -> (Value, String, Vec<Value>) {
    let clusters = clusters.to_string();
    let args = [&["--clusters", &clusters, "--nodes", nodes, "--duration", duration, "--seed", "16", "--faults", "false", "--liveness-window", "60s", "--liveness-quiet", "15s"], extra].concat();
    let (report, log, dir) = common::local_run(&args, config, &[("RUST_LOG", "info,workload::drivers::operator=debug")]);
    let events = std::fs::read_to_string(dir.path().join("operations.jsonl")).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (report, log, events)
}

const EVERY_OPERATION: &str = r#"
[operator]
interval_min = "500ms"
interval_max = "1s"
wait_settled_probability = 1.0
cancel_move_probability = 0.3
[operator.weights]
scale = 1
move = 3
peer_remove = 2
peer_evacuate = 2
stream_stepdown = 2
meta_stepdown = 2
server_evacuate = 2
# The durable consumer's operations have their own test.
consumer_stepdown = 0
consumer_scale = 0
consumer_peer_remove = 0
consumer_peer_evacuate = 0
[scale]
# Groups hold three nodes (R4 and R5 cannot move); R1 has no peer to remove or leader to
# step down. Every operation stays applicable.
replicas = [2, 3]
wait_settled_probability = 1.0
"#;

#[test]
fn every_operation_takes_effect_on_five_nodes_and_every_property_holds() {
    let (report, log, events) = local_run_logged(1, "5", "90s", EVERY_OPERATION, &[]);
    let tail: String = log.lines().rev().take(60).collect::<Vec<_>>().join("\n");
    common::assert_passes_but_known_server_issues(&report, &tail);
    let ops = &report["operations"];
    eprintln!("operations: {ops}");
    assert_eq!(ops["skipped"], serde_json::json!({}), "2.15 has every operation, and local runs hold the system account");
    for op in ["scale", "move", "peer-remove", "peer-evacuate", "server-evacuate", "stream-stepdown", "meta-stepdown"] {
        let c = &ops["counts"][op];
        assert!(c["settled"].as_u64().unwrap_or(0) >= 1, "{op} never settled: {ops}\n{tail}");
        assert!(op == "scale" || c["effect_seen"].as_u64().unwrap_or(0) >= 1, "{op} never changed peers or leader: {ops}\n{tail}");
        // operations.jsonl has every accepted request and every settle, with its time.
        let logged = |event: &str| events.iter().filter(|e| e["op"] == op && e["event"] == event && e["t_s"].as_f64().is_some()).count() as u64;
        assert_eq!((logged("requested"), logged("settled")), (c["done"].as_u64().unwrap(), c["settled"].as_u64().unwrap()), "{op}: {events:?}");
    }
    let held = |id: &str| report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap()["held"].as_u64().unwrap();
    assert!(held("placement-honoured") >= 1, "moves were judged where they settled");
    assert!(held("peer-removal-eventually-replaced") >= 1 && held("stepdown-eventually-elects") >= 1);
    assert_eq!(report["final_check"]["read"], "held");
}

/// An older server (2.14.6, `$NATS_SERVER_OLD`, installed by scripts/test) is never sent an
/// operation it lacks: the report names them as skipped, and the run goes to its verdict.
#[test]
fn an_older_server_is_never_sent_what_it_lacks() {
    let old = std::env::var("NATS_SERVER_OLD").expect("NATS_SERVER_OLD: a 2.14 nats-server (scripts/test installs one)");
    let (report, log) = local_run("3", "30s", EVERY_OPERATION, &["--nats-server", &old]);
    let tail: String = log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    assert!(report["verdict"].is_string(), "the run reached a verdict: {tail}");
    let ops = &report["operations"];
    for op in ["peer-evacuate", "cancel-move", "server-evacuate"] {
        assert!(ops["skipped"][op].as_str().is_some_and(|why| why.contains("2.15")), "{op} not skipped: {ops}");
        assert!(ops["counts"][op].is_null(), "{op} was sent to 2.14: {ops}");
    }
    assert!(ops["counts"]["stream-stepdown"]["done"].as_u64().unwrap_or(0) + ops["counts"]["move"]["done"].as_u64().unwrap_or(0) > 0, "{ops}");
    assert!(!log.contains("STREAM.PEER.EVACUATE") && !log.contains("CANCEL_MOVE") && !log.contains("SERVER.EVACUATE"));
}

/// The durable consumer's leader steps down, its replica count changes (1 up to the
/// stream's, or follow the stream) and its peers are removed and evacuated (2.15) under an
/// R3 stream: each takes effect, the consumer settles, and no confirmed ack is undone.
#[test]
fn the_durable_consumer_is_stepped_down_rescaled_and_moved_under_its_acks() {
    let config = r#"
[operator]
interval_min = "500ms"
interval_max = "1s"
wait_settled_probability = 1.0
[operator.weights]
scale = 1
move = 0
peer_remove = 0
peer_evacuate = 0
stream_stepdown = 0
meta_stepdown = 0
consumer_stepdown = 2
consumer_scale = 1
consumer_peer_remove = 4
consumer_peer_evacuate = 2
server_evacuate = 0
[scale]
# The stream stays R3 (its scale requests still go out): a peer of the stream the consumer
# does not hold, while the consumer has two, is what lets a consumer peer be removed.
replicas = [3]
wait_settled_probability = 1.0
[durable]
replicas = [2]
"#;
    let (report, log) = local_run("3", "60s", config, &[]);
    let tail: String = log.lines().rev().take(60).collect::<Vec<_>>().join("\n");
    common::assert_passes_but_known_server_issues(&report, &tail);
    let ops = &report["operations"];
    eprintln!("operations: {ops}");
    for op in ["consumer-stepdown", "consumer-scale", "consumer-peer-remove", "consumer-peer-evacuate"] {
        let c = &ops["counts"][op];
        assert!(c["effect_seen"].as_u64().unwrap_or(0) >= 1, "{op} never settled with an effect: {ops}\n{tail}");
    }
    let property = |id: &str| report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap().clone();
    for id in ["durable-ack-never-undone", "durable-nothing-skipped", "durable-content-matches-publish"] {
        assert_eq!(property(id)["status"], "passed", "{id}: {}", property(id));
    }
    assert!(property("consumer-scale-eventually-settles")["held"].as_u64().unwrap() >= 1);
    assert_eq!(report["final_check"]["durable"], "held");
    assert!(report["counters"]["durable_acks_confirmed"].as_u64().unwrap() > 1000, "{}", report["counters"]);
}

/// In a supercluster of two three-node clusters joined by gateways, the stream moves from
/// one cluster to the other and back, and where it settles is judged.
#[test]
fn the_stream_moves_between_the_clusters_of_a_supercluster() {
    let config = r#"
[operator]
# Long enough for the monitor (every 2 s) to look at each settled placement.
interval_min = "3s"
interval_max = "4s"
wait_settled_probability = 1.0
cancel_move_probability = 0.0
[operator.weights]
scale = 0
move = 1
peer_remove = 0
peer_evacuate = 0
stream_stepdown = 0
meta_stepdown = 0
consumer_stepdown = 0
consumer_scale = 0
consumer_peer_remove = 0
consumer_peer_evacuate = 0
server_evacuate = 0
"#;
    let (report, log, events) = local_run_logged(2, "3", "45s", config, &[]);
    let tail: String = log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    common::assert_passes_but_known_server_issues(&report, &tail);
    let moves = &report["operations"]["counts"]["move"];
    assert!(moves["effect_seen"].as_u64().unwrap_or(0) >= 2, "the stream changed clusters there and back: {moves}\n{tail}");
    // Nodes n1-n3 form c1 and n4-n6 form c2: a settled move's peers all sit in one of them.
    let settled_in = |cluster: &[&str]| {
        events.iter().any(|e| e["event"] == "settled" && e["op"] == "move"
            && e["detail"]["after"].as_array().is_some_and(|a| !a.is_empty() && a.iter().all(|p| cluster.contains(&p.as_str().unwrap_or_default()))))
    };
    assert!(settled_in(&["n1", "n2", "n3"]) && settled_in(&["n4", "n5", "n6"]), "settled in both clusters: {events:?}\n{tail}");
    let held = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == "placement-honoured").unwrap()["held"].as_u64().unwrap();
    assert!(held >= 2, "placement judged where the moves settled: held {held}\n{tail}");
}
