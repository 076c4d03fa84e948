//! Each fault of the local injector has its observable effect on a real proxied cluster,
//! healing undoes it, and a schedule with every fault type leaves a correct server green.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};
use workload::cluster::{find_server, LocalCluster};
use workload::nats::monitor::{http_client, unhealthy};
use workload::config::{Config, FaultKind};
use workload::faults::injector::Injector;
use workload::faults::log::FaultLog;
use workload::nats::jsapi;
use workload::random::Source;
use workload::nats::view::{ClusterView, Role};

async fn proxied(name: &str) -> (tempfile::TempDir, Arc<tokio::sync::Mutex<LocalCluster>>) {
    let dir = tempfile::Builder::new().prefix(&format!("wl-fault-{name}-")).tempdir().unwrap();
    let bin = find_server(None).unwrap();
    let cluster = LocalCluster::launch(&bin, 3, &dir.path().join("cluster"), true, Duration::from_secs(60)).await.unwrap();
    (dir, Arc::new(tokio::sync::Mutex::new(cluster)))
}

fn injector(cluster: &Arc<tokio::sync::Mutex<LocalCluster>>) -> Injector {
    Injector::new(cluster.clone(), Config::default(), Source::Seeded(1), Arc::new(FaultLog::new(None)))
}

/// Polls `f` for up to 30 s.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    common::eventually(what, Duration::from_secs(30), || {
        let holds = f();
        async move { holds.await.then_some(()).ok_or("not yet") }
    })
    .await
}

async fn routes(monitor: &str) -> u64 {
    let Ok(r) = http_client().get(format!("{monitor}/routez")).send().await else { return u64::MAX };
    let body = r.bytes().await.unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&body).ok().and_then(|v| v["num_routes"].as_u64()).unwrap_or(u64::MAX)
}

async fn healthy(cluster: &Arc<tokio::sync::Mutex<LocalCluster>>) -> bool {
    let urls = cluster.lock().await.monitor_urls();
    unhealthy(&http_client(), &urls).await.is_empty()
}

/// The meta group's members, by name, as node `i`'s `/jsz` lists them (itself included).
async fn meta_members(cluster: &Arc<tokio::sync::Mutex<LocalCluster>>, i: usize) -> Vec<String> {
    let mon = cluster.lock().await.nodes[i].monitor_url();
    let Ok(r) = http_client().get(format!("{mon}/jsz")).send().await else { return Vec::new() };
    let jsz: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap_or_default()).unwrap_or_default();
    let meta = &jsz["meta_cluster"];
    let mut names: Vec<String> = meta["replicas"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str().map(String::from)).collect();
    names.extend(meta["leader"].as_str().map(String::from));
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn membership_removes_the_server_wipes_it_and_it_rejoins_under_a_new_name() {
    let (_dir, cluster) = proxied("membership").await;
    let mut cfg = Config::default();
    (cfg.operator.system_user, cfg.operator.system_password) = (workload::cluster::SYSTEM_USER.into(), workload::cluster::SYSTEM_PASSWORD.into());
    let mut inj = Injector::new(cluster.clone(), cfg, Source::Seeded(1), Arc::new(FaultLog::new(None)));
    let client = async_nats::connect(cluster.lock().await.client_urls()).await.unwrap();
    let stream = jsapi::stream_config("MEMBERS", "members", 3, Duration::from_secs(300));
    jsapi::create_stream(&client, &stream, Duration::from_secs(5)).await.unwrap();
    let store = cluster.lock().await.nodes[1].store_dir.clone();
    eventually("n2 stores the stream", || async { std::fs::read_dir(store.join("jetstream")).is_ok_and(|mut d| d.next().is_some()) }).await;

    let detail = inj.force(FaultKind::Membership, vec![1], Duration::from_secs(60)).await;
    assert_eq!(detail["removed"], "n2", "{detail}");
    assert_eq!(detail["rejoins_as"], "n2-2", "{detail}");
    assert!(!store.join("jetstream").exists(), "the removed server's data is wiped");
    eventually("the meta group let n2 go", || async { !meta_members(&cluster, 0).await.contains(&"n2".to_string()) }).await;
    inj.heal_all("test").await;
    eventually("n2-2 joins the meta group", || async { meta_members(&cluster, 0).await.contains(&"n2-2".to_string()) }).await;
    eventually("the cluster is healthy again", || healthy(&cluster)).await;
    let varz = http_client().get(format!("{}/varz", cluster.lock().await.nodes[1].monitor_url())).send().await.unwrap().bytes().await.unwrap();
    let varz: serde_json::Value = serde_json::from_slice(&varz).unwrap();
    assert_eq!(varz["server_name"], "n2-2");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_changes_the_pid_and_the_node_comes_back() {
    let (_dir, cluster) = proxied("kill").await;
    let mut inj = injector(&cluster);
    let before = cluster.lock().await.nodes[1].pid().unwrap();
    inj.force(FaultKind::Kill, vec![1], Duration::from_secs(60)).await;
    let mon = cluster.lock().await.nodes[1].monitor_url();
    assert!(http_client().get(format!("{mon}/healthz")).send().await.is_err(), "a killed node answers nothing");
    inj.heal_all("test").await;
    let after = cluster.lock().await.nodes[1].pid().unwrap();
    assert_ne!(before, after);
    eventually("the restarted node is healthy again", || healthy(&cluster)).await;
}

/// With `majority` and `together`, one strike kills two of three nodes at once (Jepsen's
/// kill of a majority); the one left loses its quorum, and healing brings both back.
#[tokio::test(flavor = "multi_thread")]
async fn a_coordinated_kill_takes_a_majority_at_once_and_both_come_back() {
    let (_dir, cluster) = proxied("together").await;
    let mut cfg = Config::default();
    let gentle = cfg.faults.profiles.get_mut("gentle").unwrap();
    (gentle.kinds, gentle.majority, gentle.together) = (vec![FaultKind::Kill], true, 1.0);
    let mut inj = Injector::new(cluster.clone(), cfg, Source::Seeded(1), Arc::new(FaultLog::new(None)));
    let before: Vec<u32> = cluster.lock().await.nodes.iter().map(|n| n.pid().unwrap()).collect();
    let struck = inj.strike(&[]).await;
    assert_eq!(struck.len(), 2, "{struck:?}");
    let monitors = cluster.lock().await.monitor_urls();
    for &i in &struck {
        assert!(http_client().get(format!("{}/healthz", monitors[i])).send().await.is_err(), "node {i} answers nothing");
    }
    assert!(inj.strike(&[]).await.is_empty(), "never the third node too");
    inj.heal_all("test").await;
    for &i in &struck {
        assert_ne!(cluster.lock().await.nodes[i].pid().unwrap(), before[i], "node {i} was started again");
    }
    eventually("the cluster is healthy again", || healthy(&cluster)).await;
}

/// An R3 stream holding `n` messages, stored on every node.
async fn stream_with_messages(cluster: &Arc<tokio::sync::Mutex<LocalCluster>>, name: &str, n: usize) -> async_nats::Client {
    let client = async_nats::connect(cluster.lock().await.client_urls()).await.unwrap();
    let subject = name.to_lowercase();
    let config = jsapi::stream_config(name, &subject, 3, Duration::from_secs(300));
    // A cluster just launched may not place an R3 stream yet.
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = jsapi::create_stream(&client, &config, Duration::from_secs(5)).await {
        assert!(Instant::now() < deadline, "cannot create {name}: {e}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let js = async_nats::jetstream::new(client.clone());
    // The create is answered before the group has a leader: a publish then finds no
    // responders (async-nats: "no stream found").
    common::eventually(&format!("{name} answers"), Duration::from_secs(30), || jsapi::stream_answers(&js, &subject)).await;
    let mut acks = Vec::new();
    for i in 0..n {
        acks.push(js.publish(subject.clone(), format!("message {i} of the disk fault tests").into()).await.unwrap());
    }
    for ack in acks {
        ack.await.unwrap();
    }
    client
}

/// Every file under `dir` with its bytes.
fn files(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.insert(p, b);
        }
    }
    out
}

/// A corruption stops the node, really changes the one stream file its log names (bits
/// flipped where it says, or cut to the size it says), and the node comes back.
#[tokio::test(flavor = "multi_thread")]
async fn corruption_changes_the_stream_file_it_names_and_the_node_comes_back() {
    let (_dir, cluster) = proxied("corrupt").await;
    let _client = stream_with_messages(&cluster, "DAMAGED", 5000).await;
    let store = cluster.lock().await.nodes[1].store_dir.clone();
    for seed in [1, 2, 3] {
        let mut inj = Injector::new(cluster.clone(), Config::default(), Source::Seeded(seed), Arc::new(FaultLog::new(None))).with_stream("DAMAGED");
        eventually("every node is healthy", || healthy(&cluster)).await;
        let before = files(&store);
        let detail = inj.force(FaultKind::Corrupt, vec![1], Duration::from_secs(60)).await;
        let mon = cluster.lock().await.nodes[1].monitor_url();
        assert!(http_client().get(format!("{mon}/healthz")).send().await.is_err(), "the node is down while its files change");
        let touched = detail["touched"].as_array().unwrap_or_else(|| panic!("{detail}"));
        assert_eq!(touched.len(), 1, "{detail}");
        let t = &touched[0];
        let file = store.join(t["file"].as_str().unwrap());
        assert!(t["stream_file"] == true && t["file"].as_str().unwrap().contains("DAMAGED") || t["file"].as_str().unwrap().contains("/S-"), "{t}");
        let (old, now) = (&before[&file], std::fs::read(&file).unwrap());
        assert_eq!(now.len() as u64, t["size_after"].as_u64().unwrap(), "{t}");
        match t["op"].as_str().unwrap() {
            "flip" => {
                assert_eq!(now.len(), old.len());
                let bits = t["bits"].as_array().unwrap();
                let changed: Vec<usize> = (0..now.len()).filter(|&i| now[i] != old[i]).collect();
                assert!(!changed.is_empty() && changed.iter().all(|&i| bits.iter().any(|b| b[0] == i as u64)), "only the named bytes changed: {t}");
            }
            "truncate" => assert!(now.len() < old.len() || old.is_empty(), "{t}"),
            other => panic!("{other}"),
        }
        let untouched: Vec<_> = before.iter().filter(|(p, b)| **p != file && std::fs::read(p).ok().as_ref() != Some(*b)).map(|(p, _)| p).collect();
        assert!(untouched.is_empty(), "no other file changed: {untouched:?}");
        inj.heal_all("test").await;
        eventually("the damaged node is healthy again", || healthy(&cluster)).await;
    }
}

/// A snapshot rollback puts back the snapshots copied earlier (removing newer ones), and
/// the node comes back.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_rollback_puts_the_earlier_copy_back() {
    let (dir, cluster) = proxied("rollback").await;
    let client = stream_with_messages(&cluster, "ROLLED", 2000).await;
    let copies = dir.path().join("copies");
    let mut inj = Injector::new(cluster.clone(), Config::default(), Source::Seeded(1), Arc::new(FaultLog::new(None))).with_stream("ROLLED").with_snapshot_copies(copies.clone());
    inj.copy_snapshots().await;
    let (store, name) = { let c = cluster.lock().await; (c.nodes[1].store_dir.clone(), c.nodes[1].name.clone()) };
    let snapshots = |root: &std::path::Path| files(root).into_iter().filter(|(p, _)| p.to_string_lossy().contains("/snapshots/")).map(|(p, b)| (p.strip_prefix(root).unwrap().to_path_buf(), b)).collect::<std::collections::BTreeMap<_, _>>();
    let copied = snapshots(&copies.join(&name));
    assert!(!copied.is_empty(), "the meta layer's snapshot at least was copied");
    // Changes to the meta layer and the stream until the node takes newer snapshots.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut max = 1;
    while snapshots(&store) == copied {
        assert!(Instant::now() < deadline, "no newer snapshot within 90 s");
        let mut cfg = jsapi::stream_config("ROLLED", "rolled", 3, Duration::from_secs(300));
        max += 1;
        cfg["max_msgs_per_subject"] = serde_json::json!(1_000_000 + max);
        let _ = jsapi::request(&client, "STREAM.UPDATE.ROLLED", &cfg, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let detail = inj.force(FaultKind::SnapshotRollback, vec![1], Duration::from_secs(60)).await;
    let touched = detail["touched"].as_array().unwrap_or_else(|| panic!("{detail}"));
    assert!(touched.iter().any(|t| t["op"] == "restore"), "{detail}");
    assert_eq!(snapshots(&store), copied, "the node's snapshots are the earlier copy again");
    inj.heal_all("test").await;
    eventually("the rolled-back node is healthy again", || healthy(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_node_stops_answering_healthz() {
    let (_dir, cluster) = proxied("pause").await;
    let mut inj = injector(&cluster);
    let pid = cluster.lock().await.nodes[0].pid();
    inj.force(FaultKind::Pause, vec![0], Duration::from_secs(60)).await;
    let mon = cluster.lock().await.nodes[0].monitor_url();
    assert!(http_client().get(format!("{mon}/healthz")).send().await.is_err(), "a stopped process cannot answer");
    inj.heal_all("test").await;
    assert_eq!(cluster.lock().await.nodes[0].pid(), pid, "same process, resumed");
    eventually("the resumed node answers /healthz", || healthy(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn graceful_restart_replaces_the_process() {
    let (_dir, cluster) = proxied("restart").await;
    let mut inj = injector(&cluster);
    let detail = inj.force(FaultKind::Restart, vec![2], Duration::ZERO).await;
    assert_ne!(detail["pid_before"], detail["pid_after"], "{detail}");
    assert!(detail["error"].is_null(), "{detail}");
    eventually("the restarted node is healthy", || healthy(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_isolated_node_loses_its_routes_and_gets_them_back() {
    let (_dir, cluster) = proxied("isolate").await;
    let mut inj = injector(&cluster);
    let mon = cluster.lock().await.nodes[0].monitor_url();
    eventually("full mesh", || async { routes(&mon).await >= 2 }).await;
    inj.force(FaultKind::Isolate, vec![0], Duration::from_secs(60)).await;
    eventually("the isolated node has no routes", || async { routes(&mon).await == 0 }).await;
    let client_url = cluster.lock().await.client_urls()[0].clone();
    assert!(async_nats::connect(client_url.as_str()).await.is_err(), "clients cannot reach an isolated node");
    inj.heal_all("test").await;
    eventually("routes come back", || async { routes(&mon).await >= 2 }).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_slows_a_round_trip_through_the_node() {
    let (_dir, cluster) = proxied("latency").await;
    let mut inj = injector(&cluster);
    let url = cluster.lock().await.client_urls()[1].clone();
    let client = async_nats::connect(url.as_str()).await.unwrap();
    // A request nobody serves: the server's no-responders answer is one round trip.
    let rtt = || async {
        let t = Instant::now();
        let _ = client.request("rtt.probe", "".into()).await;
        t.elapsed()
    };
    let base = rtt().await;
    inj.force(FaultKind::Latency, vec![1], Duration::from_secs(60)).await;
    let slow = rtt().await;
    assert!(slow >= Duration::from_millis(300), "200 ms each way: {slow:?} (before {base:?})");
    inj.heal_all("test").await;
    assert!(rtt().await < Duration::from_millis(100));
}

#[test]
fn a_run_with_every_fault_type_passes_and_shows_the_faults() {
    let quick = "[faults]\nprofile = \"quick\"\n[faults.profiles.quick]\noff_min = \"5s\"\noff_max = \"10s\"\non_min = \"20s\"\non_max = \"30s\"\nfault_min = \"2s\"\nfault_max = \"5s\"\n";
    let (report, log, dir) = common::local_run(&["--duration", "150s", "--seed", "11", "--liveness-window", "60s", "--liveness-quiet", "15s"], quick, &[]);
    common::assert_passes_but_known_server_issues(&report, &log);
    let starts = &report["faults"]["starts"];
    for kind in ["kill", "pause", "restart", "isolate", "split", "latency"] {
        assert!(starts[kind].as_u64().unwrap_or(0) >= 1, "no {kind} fault: {starts}");
    }
    let roles = report["faults"]["roles_struck"].as_object().unwrap();
    assert!(roles.keys().any(|r| r == "stream-leader" || r == "sole-replica"), "the stream's leader was a target: {roles:?}");
    let events = report["faults"]["events"].as_array().unwrap();
    let kill = events.iter().find(|e| e["kind"] == "kill" && e["event"] == "end").expect("a kill ended");
    assert!(kill["detail"]["pid"].as_u64().is_some(), "the killed node was restarted: {kill}");
    assert!(report["counters"]["rewinds"].as_u64().unwrap() >= 1, "publishes failed and were resent");
    assert!(report["counters"]["verified"].as_u64().unwrap() > 1000);
    assert!(report["quiet_requests"].as_u64().unwrap() >= 1, "a quiet period was asked for");
    assert!(std::fs::read_to_string(dir.path().join("faults.jsonl")).unwrap().lines().count() >= 12);
    let ps = std::process::Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(dir.path().to_str().unwrap()), "processes left behind");
}

/// A strike aimed at the stream leader (as an aligned strike after a scale request is)
/// kills the node STREAM.INFO named leader just before; the fault log names its role; and
/// the stream then elects another leader. (How the bias weighs roles: `faults::targets`.)
#[tokio::test(flavor = "multi_thread")]
async fn a_biased_strike_hits_the_stream_leader_of_that_moment() {
    let (_dir, cluster) = proxied("target").await;
    let client = async_nats::connect(cluster.lock().await.client_urls()).await.unwrap();
    let stream = "TARGETED";
    let t = Duration::from_secs(5);
    jsapi::create_stream(&client, &jsapi::stream_config(stream, "targeted", 3, Duration::from_secs(300)), t).await.unwrap();
    let elected = Instant::now() + Duration::from_secs(30);
    while jsapi::stream_leader(&client, stream, t).await.is_err() {
        assert!(Instant::now() < elected, "{stream} has no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut cfg = Config::default();
    let schedule = cfg.faults.profiles.get_mut("gentle").unwrap();
    schedule.kinds = vec![FaultKind::Kill];
    schedule.target_bias = 1.0;
    let info = jsapi::stream_info(&client, stream, t).await.unwrap();
    let leader = info.view.cluster.as_ref().and_then(|c| c.leader.clone()).unwrap();
    let view = Arc::new(ClusterView::default());
    view.saw_stream(&info.view, view.wipe_generation());
    let log = Arc::new(FaultLog::new(None));
    let mut inj = Injector::new(cluster.clone(), cfg, Source::Seeded(3), log.clone()).with_view(view);
    let struck = inj.strike(&[Role::StreamLeader]).await;
    let names: Vec<String> = { let c = cluster.lock().await; struck.iter().map(|i| c.nodes[*i].name.clone()).collect() };
    assert_eq!(names, vec![leader.clone()], "the leader of that moment was struck");
    let start = log.events.lock().unwrap()[0].clone();
    assert_eq!(start.roles[&leader], vec![Role::StreamLeader], "{start:?}");
    eventually("another node leads the stream", || async {
        let now = jsapi::stream_info(&client, stream, t).await.ok().and_then(|i| i.view.cluster.and_then(|c| c.leader));
        now.is_some_and(|l| l != leader)
    }).await;
    inj.heal_all("test").await;
}

/// Each built-in fault profile runs 90 s on a real cluster and passes.
fn a_short_run_passes(profile: &str) -> serde_json::Value {
    let (report, log, _dir) = common::local_run(&["--duration", "90s", "--seed", "5", "--fault-profile", profile, "--liveness-window", "60s", "--liveness-quiet", "15s"], "", &[]);
    common::assert_passes_but_known_server_issues(&report, &format!("{profile}: {log}"));
    assert_eq!(report["config"]["faults"]["profile"], profile);
    assert!(report["faults"]["starts"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>() >= 3, "{}", report["faults"]["starts"]);
    report
}

#[test]
fn the_gentle_profile_passes_a_short_run() {
    a_short_run_passes("gentle");
}

#[test]
fn the_aggressive_profile_passes_a_short_run() {
    let report = a_short_run_passes("aggressive");
    // The profile's operator scales 8 times in 10 (stream stepdowns the rest): a few flips each way in 90 s.
    for id in ["stream-scaled-down-to-r1", "stream-scaled-up-from-r1"] {
        let p = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap();
        assert!(p["held"].as_u64().unwrap() >= 1, "R1 <-> R3 flips: {p}");
    }
    let scales = &report["operations"]["counts"]["scale"];
    assert!(scales["done"].as_u64().unwrap_or(0) >= 4, "{scales}");
    // A bare majority at once, as the profile allows on three nodes, and never all three.
    let mut faulty = std::collections::BTreeSet::new();
    let mut most = 0;
    for e in report["faults"]["events"].as_array().unwrap() {
        let nodes = e["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string());
        match e["event"].as_str() {
            Some("start") => faulty.extend(nodes),
            _ => nodes.for_each(|n| {
                faulty.remove(&n);
            }),
        }
        most = most.max(faulty.len());
    }
    assert_eq!(most, 2, "two of three nodes faulty at once: {}", report["faults"]["events"]);
}

/// Two streams in one faulty run: each has its own publisher, readers and operator, every
/// one is read back whole at the end, and the report gives both and the totals.
#[test]
fn two_streams_under_the_gentle_profile_pass_a_short_run() {
    let (report, log, _dir) = common::local_run(&["--duration", "90s", "--seed", "6", "--streams", "2", "--liveness-window", "60s", "--liveness-quiet", "15s"], "", &[]);
    common::assert_passes_but_known_server_issues(&report, &log);
    let streams = report["per_stream"].as_array().unwrap_or_else(|| panic!("per_stream: {report}"));
    assert_eq!(streams.len(), 2);
    let mut acked = 0;
    for s in streams {
        let c = &s["counters"];
        assert!(c["acked"].as_u64().unwrap() > 1000 && c["final_verified"] == c["last_acked_seq"], "every ack read back: {s}");
        assert!(c["scale_requests"].as_u64().unwrap() >= 1, "its own operator scaled it: {s}");
        acked += c["acked"].as_u64().unwrap();
    }
    assert_eq!(report["counters"]["acked"].as_u64(), Some(acked), "the totals add up");
    assert!(report["slowest_stream"].is_string());
    assert!(report["faults"]["starts"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>() >= 3, "{}", report["faults"]["starts"]);
}

/// A long run's streams rotate (here after 40,000 acks each, under the gentle profile): each
/// finished epoch's stream is verified in full with faults paused and deleted, a fresh one
/// takes its place, and the report's totals are the epochs' sums.
#[test]
fn streams_rotate_into_epochs_each_verified_and_deleted() {
    let config = "[stream]\nrotate_after = \"0s\"\nrotate_messages = 40000\n";
    let (report, log, _dir) = common::local_run(&["--duration", "90s", "--seed", "8", "--liveness-window", "30s", "--liveness-quiet", "10s"], config, &[]);
    common::assert_passes_but_known_server_issues(&report, &log);
    let epochs = report["epochs"].as_array().unwrap_or_else(|| panic!("no epochs: {}", common::failure_summary(&report, &log)));
    assert!(epochs.len() >= 2, "{epochs:?}");
    let (mut acked, mut verified) = (0, 0);
    for (i, e) in epochs.iter().enumerate() {
        let s = &e["streams"][0];
        let name = s["stream"].as_str().unwrap();
        assert_eq!(name.ends_with(&format!("_e{i}")), i > 0, "epoch {i} is stream {name}");
        let c = &s["counters"];
        let check = &s["final_check"];
        assert_eq!(check["verified"], check["last_acked"], "epoch {i} read back in full: {s}");
        acked += c["acked"].as_u64().unwrap();
        verified += check["verified"].as_u64().unwrap();
        if i + 1 < epochs.len() {
            assert!(c["acked"].as_u64().unwrap() >= 40_000, "epoch {i} rotated at its size: {c}");
            assert_eq!(e["deleted"], true, "{e}");
            assert!(log.contains(&format!("verified in full and deleted stream={name}")), "{name} deleted");
        }
    }
    assert_eq!(report["counters"]["acked"].as_u64(), Some(acked), "the totals add up");
    assert_eq!(report["final_check"]["verified"].as_u64(), Some(verified));
}

/// The disk profile (corruption and snapshot rollbacks among kills, restarts and pauses)
/// on a correct server: the run reaches its verdict, a corruption hit a file of the
/// stream, and every damaged node came back.
#[test]
fn the_disk_profile_corrupts_stream_files_and_passes_a_short_run() {
    // The disk profile's kinds, with short fault-free stretches so that several come in 120 s,
    // on a stream the operator keeps at three replicas (damage is drawn only there).
    let quick = "[scale]\nreplicas = [3]\n[faults]\nprofile = \"quick-disk\"\n[faults.profiles.quick-disk]\nkinds = [\"corrupt\", \"corrupt\", \"snapshot-rollback\", \"kill\"]\n\
                 off_min = \"5s\"\noff_max = \"10s\"\non_min = \"20s\"\non_max = \"30s\"\nfault_min = \"3s\"\nfault_max = \"6s\"\n";
    let (report, log, _dir) = common::local_run(&["--duration", "120s", "--seed", "4", "--liveness-window", "60s", "--liveness-quiet", "15s"], quick, &[]);
    common::assert_passes_but_known_server_issues(&report, &log);
    assert!(report["faults"]["starts"]["corrupt"].as_u64().unwrap_or(0) >= 1, "{}", report["faults"]["starts"]);
    for id in ["disk-fault-hit-a-stream-file", "node-came-back-after-disk-fault"] {
        let p = report["properties"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap();
        assert!(p["held"].as_u64().unwrap() >= 1, "{p}");
    }
}

#[test]
fn a_killed_workload_leaves_no_server_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_workload"))
        .args(["local", "--duration", "60s", "--out"])
        .arg(dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let running = || {
        let ps = std::process::Command::new("ps").args(["-eo", "args"]).output().unwrap();
        let dir = dir.path().to_str().unwrap();
        String::from_utf8_lossy(&ps.stdout).lines().filter(|l| l.contains("nats-server") && l.contains(dir)).count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while running() < 3 {
        assert!(Instant::now() < deadline, "the cluster never started");
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while running() > 0 {
        assert!(Instant::now() < deadline, "nats-server processes outlived the workload");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A peer removal and a membership change must not take the stream's two copies at once
/// (2.15.1, seed 21: `PEER.REMOVE` of one peer of an R2 stream, the other's server wiped
/// 0.7 s later, and every acknowledged message gone). The injector holds a data-destroying
/// fault back until a look shows the removal carried out, and the operator drops no peer
/// while such a fault is under way.
#[tokio::test(flavor = "multi_thread")]
async fn a_membership_change_waits_for_a_peer_removal_to_be_carried_out() {
    let (_dir, cluster) = proxied("turns").await;
    let client = stream_with_messages(&cluster, "TURNS", 200).await;
    let t = Duration::from_secs(5);
    let mut config = jsapi::stream_info(&client, "TURNS", t).await.unwrap().raw["config"].clone();
    config["num_replicas"] = 2.into();
    eventually("the stream is scaled to two replicas", || async { jsapi::request(&client, "STREAM.UPDATE.TURNS", &config, t).await.is_ok() }).await;
    let settled = || async { jsapi::stream_info(&client, "TURNS", t).await.is_ok_and(|i| properties::scale::settled(&i.view, 2).is_ok()) };
    eventually("the stream settles at two replicas", settled).await;
    let mut cfg = Config::default();
    (cfg.operator.system_user, cfg.operator.system_password) = (workload::cluster::SYSTEM_USER.into(), workload::cluster::SYSTEM_PASSWORD.into());
    cfg.faults.profiles.get_mut("gentle").unwrap().kinds = vec![FaultKind::Membership];
    let view = Arc::new(ClusterView::default());
    let look = |view: &ClusterView, info: &jsapi::StreamInfo, generation: u64| {
        view.saw_stream(&info.view, generation);
        view.saw_copies(generation, 2); // every replica listed is whole: the test waited for it
    };
    let g = view.wipe_generation();
    let info = jsapi::stream_info(&client, "TURNS", t).await.unwrap();
    look(&view, &info, g);
    let log = Arc::new(FaultLog::new(None));
    let mut inj = Injector::new(cluster.clone(), cfg, Source::Seeded(1), log.clone()).with_view(view.clone());

    let follower = info.view.cluster.as_ref().unwrap().replicas[0].name.clone();
    assert!(view.dropping(Some(&follower), 2, Duration::from_secs(60)), "nothing destroys a copy yet");
    jsapi::request(&client, "STREAM.PEER.REMOVE.TURNS", &serde_json::json!({ "peer": follower }), t).await.unwrap();
    // A look begun after the request but answered before the meta group carried it out:
    // both copies still listed and whole.
    look(&view, &info, view.wipe_generation());
    assert_eq!(view.complete_copies(), 2);
    assert!(inj.strike(&[]).await.is_empty(), "no wipe while the removal is not seen carried out");
    assert!(log.events.lock().unwrap().is_empty());

    let g = view.wipe_generation();
    let replaced = |i: &jsapi::StreamInfo| !properties::operations::peers(&i.view).contains(&follower) && properties::scale::settled(&i.view, 2).is_ok();
    eventually("the removal is carried out and the replacement is current", || async {
        jsapi::stream_info(&client, "TURNS", t).await.is_ok_and(|i| replaced(&i))
    }).await;
    let info = jsapi::stream_info(&client, "TURNS", t).await.unwrap();
    look(&view, &info, g);
    assert!(!view.taking(), "the look begun after the removal ended its turn");
    let struck = inj.strike(&[]).await;
    assert_eq!(struck.len(), 1, "the wipe goes ahead now");
    assert!(!view.dropping(None, 1, Duration::from_secs(60)), "no scale down while a server is wiped");
    inj.heal_all("test").await;
    assert!(view.dropping(None, 1, Duration::from_secs(60)), "the wipe has ended");
}
