//! The durable consumer under a real crash: no false alarm where the server keeps its
//! promise, and the undo counted where it makes none. (Each of its safety properties fails
//! through a real defect in `defects.rs`.)

mod common;

use common::Harness;
use serde_json::json;
use std::time::{Duration, Instant};
use workload::nats::jsapi;

const T: Duration = Duration::from_secs(5);

/// The durable consumer's info, once `ready` holds for it, within `within` (`what` names
/// the wait).
async fn consumer_when(h: &Harness, within: Duration, what: &str, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let client = h.client().await;
    let deadline = Instant::now() + within;
    loop {
        if let Ok(info) = jsapi::request(&client, &format!("CONSUMER.INFO.{}.durable", h.stream), &json!(null), T).await {
            if ready(&info) {
                return info;
            }
        }
        assert!(Instant::now() < deadline, "the durable consumer never {what}; log: {}", h.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The index of the node leading the durable consumer, once it has acked `floor` messages.
async fn consumers_server(h: &Harness, floor: u64) -> usize {
    let info = consumer_when(h, Duration::from_secs(60), &format!("acked {floor}"), |c| c["ack_floor"]["stream_seq"].as_u64().unwrap_or(0) >= floor).await;
    let leader = info["cluster"]["leader"].as_str().unwrap().to_string();
    h.cluster.nodes.iter().position(|n| n.name == leader).unwrap()
}

/// Kills (-9) the server holding the durable consumer once it has acked `floor` messages,
/// and starts it again; returns after the restart.
async fn kill_the_consumers_server(h: &mut Harness, floor: u64) {
    let i = consumers_server(h, floor).await;
    h.cluster.nodes[i].kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let bin = h.cluster.server_bin.clone();
    h.cluster.nodes[i].start(&bin).unwrap();
}

/// A 25 s run whose durable consumer has `replicas`, nothing unacked on purpose and no
/// operator; the consumer's server is killed once it acked 3000.
async fn run_through_a_crash(name: &str, replicas: usize) -> common::Finished {
    let mut h = Harness::start(name).await;
    let cfg = h.config("durable.toml", &format!("[durable]\nreplicas = [{replicas}]\nskip_ack_probability = 0.0\n"));
    let child = h.spawn("25s", &["--config", &cfg, "--operator", "false"]);
    kill_the_consumers_server(&mut h, 3000).await;
    h.finish(child, Duration::from_secs(150))
}

/// An R1 durable consumer's server keeps acks in memory for a while: killed, it can come back
/// with confirmed acks undone and deliver those messages again. That is counted, not failed:
/// the run passes.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreplicated_consumers_crash_undoes_acks_without_a_false_alarm() {
    let done = run_through_a_crash("r1crash", 1).await;
    assert_eq!(done.report["verdict"], "pass", "{}", done.report["failed"]);
    // Whether any confirmed ack was still unwritten at the kill depends on timing (on a
    // loaded CI machine none was); when one was, it is counted here and not failed.
    eprintln!("acks undone by the crash: {}", done.counter("durable_unreplicated_undone"));
}

/// A replicated durable consumer confirms an ack once its peers have it: killing its
/// leader undoes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_replicated_consumer_keeps_every_confirmed_ack_through_its_leaders_crash() {
    let done = run_through_a_crash("r3crash", 3).await;
    assert_eq!(done.report["verdict"], "pass", "{}", done.report["failed"]);
    assert_eq!(done.counter("durable_unreplicated_undone"), 0);
    assert!(done.counter("durable_acks_confirmed") > 3000);
}

/// Pausing the consumer's server longer than the client waits for an answer loses the
/// confirmations of the acks in flight, although the server takes those acks when it
/// resumes (and so never redelivers them). The driver sends each unanswered ack again and
/// the server confirms it: the confirmed prefix, which the undo check judges the ack floor
/// against, moves on instead of staying at the first lost confirmation for the rest of the run.
#[tokio::test(flavor = "multi_thread")]
async fn an_ack_whose_confirmation_was_lost_is_confirmed_when_sent_again() {
    use nix::sys::signal::Signal;
    let h = Harness::start("ackagain").await;
    // One ack in flight at a time: the consumer falls behind the publisher, and while it
    // drains its backlog an ack is always waiting for its answer. No redelivery within the
    // run: an ack left unanswered is confirmed only when sent again.
    let cfg = h.config("durable.toml", "[durable]\nreplicas = [1]\nskip_ack_probability = 0.0\nacks_in_flight = 1\nack_wait = \"120s\"\n");
    let child = h.spawn("40s", &["--config", &cfg, "--operator", "false"]);
    let i = consumers_server(&h, 1000).await;
    consumer_when(&h, Duration::from_secs(20), "fell behind", |c| c["num_pending"].as_u64().unwrap_or(0) >= 2000).await;
    assert!(h.cluster.nodes[i].signal(Signal::SIGSTOP));
    // Longer than the client's 5 s wait for an answer.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(h.cluster.nodes[i].signal(Signal::SIGCONT));
    let done = h.finish(child, Duration::from_secs(150));
    assert_eq!(done.report["verdict"], "pass", "{}", done.report["failed"]);
    let (lost, again) = (done.counter("durable_acks_unconfirmed"), done.counter("durable_acks_confirmed_again"));
    assert!(lost > 0, "the pause left no ack unanswered: the test saw nothing; log: {}", h.log());
    assert!(again > 0, "{lost} acks unanswered, none confirmed when sent again; log: {}", h.log());
    assert_eq!(done.counter("durable_acks_unconfirmed_dropped"), 0);
}
