//! Every safety property fails, by id, when a real defect is put into a real cluster
//! while the real workload runs. Each test names the property it proves can fail and the
//! properties its defect may also (legitimately) break.

mod common;

use bytes::Bytes;
use common::Harness;
use properties::payload::{checksum, RunMessages, CHECKSUM_HEADER, MSG_ID_HEADER};
use serde_json::json;
use std::time::Duration;
use workload::jsapi;

const LIMIT: Duration = Duration::from_secs(150);
const T: Duration = Duration::from_secs(5);

/// Publishes into the run's subject under a message id of the run; returns the sequence.
async fn publish_as(h: &Harness, client: &async_nats::Client, msg_id: &str, sum: Option<&str>, payload: Vec<u8>) -> u64 {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(MSG_ID_HEADER, msg_id);
    if let Some(sum) = sum {
        headers.insert(CHECKSUM_HEADER, sum);
    }
    let ack = h.jetstream(client).publish_with_headers(h.subject.clone(), headers, payload.into()).await.unwrap();
    ack.await.unwrap().sequence
}

async fn api(client: &async_nats::Client, api: &str, body: serde_json::Value) -> serde_json::Value {
    jsapi::request(client, api, &body, T).await.unwrap_or_else(|e| panic!("{api}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_an_acked_message_fails_acked_message_never_lost() {
    let h = Harness::start("delete").await;
    let child = h.spawn("12s", &[]);
    let client = h.client().await;
    h.wait_for_messages(&client, 2000).await;
    api(&client, &format!("STREAM.MSG.DELETE.{}", h.stream), json!({ "seq": 1000 })).await;
    let done = h.finish(child, LIMIT);
    done.assert_failed("acked-message-never-lost", &["stream-state-covers-acks"]);
    // Seen by the monitor (the stream lists 1000 as deleted) or by a read (a gap at 1000).
    let first = &done.property("acked-message-never-lost")["first_failure"];
    assert!(first["missing_from"] == 1000 || first["acked_seqs_missing"] == json!([1000]), "{first}");
}

#[tokio::test(flavor = "multi_thread")]
async fn purging_the_stream_fails_stream_state_covers_acks() {
    let h = Harness::start("purge").await;
    let child = h.spawn("12s", &[]);
    let client = h.client().await;
    h.wait_for_messages(&client, 2000).await;
    api(&client, &format!("STREAM.PURGE.{}", h.stream), json!({})).await;
    let done = h.finish(child, LIMIT);
    done.assert_failed("stream-state-covers-acks", &["acked-message-never-lost"]);
    assert!(done.failed().contains("acked-message-never-lost"), "the final read misses the purged prefix");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_message_fails_read_only_published_and_publish_ack_gap_free() {
    let h = Harness::start("foreign").await;
    let child = h.spawn("12s", &[]);
    let client = h.client().await;
    h.wait_for_messages(&client, 2000).await;
    client.publish(h.subject.clone(), Bytes::from_static(b"not the workload's")).await.unwrap();
    client.flush().await.unwrap();
    let done = h.finish(child, LIMIT);
    done.assert_failed("read-only-published-messages", &["publish-ack-gap-free", "publish-eventually-acked"]);
    done.assert_failed("publish-ack-gap-free", &["read-only-published-messages", "publish-eventually-acked"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_content_under_a_valid_id_fails_read_content_matches_publish() {
    let h = Harness::start("forged").await;
    let client = h.client().await;
    h.precreate_stream(&client).await;
    // Message 1's id and size with other bytes, and a checksum that matches those bytes:
    // only regenerating the payload from the seed can tell.
    let run = RunMessages::new(&h.run_id, 42, 128);
    let forged = vec![7u8; 128];
    assert_eq!(publish_as(&h, &client, &run.msg_id(1), Some(&checksum(&forged)), forged).await, 1);
    let done = h.finish(h.spawn("8s", &[]), LIMIT);
    done.assert_failed("read-content-matches-publish", &[]);
    assert!(done.counter("duplicate_acks") >= 1, "the publisher's message 1 was deduplicated onto the forgery");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stolen_message_id_fails_publish_duplicate_ack_original_sequence() {
    let h = Harness::start("dupack").await;
    let client = h.client().await;
    h.precreate_stream(&client).await;
    // Message 2's id lands at sequence 1, so the workload's message 2 is answered with a
    // duplicate ack naming a sequence that was never assigned to it. Without expected
    // sequences (one at a time) the publisher sees the acks as they come.
    let run = RunMessages::new(&h.run_id, 42, 128);
    assert_eq!(publish_as(&h, &client, &run.msg_id(2), None, b"x".to_vec()).await, 1);
    let cfg = h.dir.path().join("one-at-a-time.toml");
    std::fs::write(&cfg, "[publish]\nin_flight = 1\nexpected_last_sequence = false\n").unwrap();
    let done = h.finish(h.spawn("8s", &["--config", cfg.to_str().unwrap()]), LIMIT);
    done.assert_failed(
        "publish-duplicate-ack-original-sequence",
        &["publish-ack-gap-free", "read-content-matches-publish"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_stream_fails_stream_never_disappears() {
    let h = Harness::start("gone").await;
    let child = h.spawn("12s", &[]);
    let client = h.client().await;
    h.wait_for_messages(&client, 1000).await;
    api(&client, &format!("STREAM.DELETE.{}", h.stream), json!(null)).await;
    let done = h.finish(child, LIMIT);
    done.assert_failed(
        "stream-never-disappears",
        &["stream-state-covers-acks", "acked-message-never-lost", "publish-eventually-acked", "consumer-eventually-catches-up", "scale-eventually-settles"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_the_reader_is_not_given_fails_read_sequence_gap_free() {
    let h = Harness::start("skip").await;
    let child = h.spawn("12s", &[]);
    let client = h.client().await;
    h.wait_for_messages(&client, 2000).await;
    // A second subject in the run's stream: its message takes a sequence that the reader,
    // filtered to the workload's subject, is never given, although it is in the stream.
    let info = jsapi::stream_info(&client, &h.stream, T).await.unwrap();
    let mut config = info.raw["config"].clone();
    let other = format!("{}.other", h.subject);
    config["subjects"].as_array_mut().unwrap().push(json!(other));
    api(&client, &format!("STREAM.UPDATE.{}", h.stream), config).await;
    h.jetstream(&client).publish(other, "elsewhere".into()).await.unwrap().await.unwrap();
    let done = h.finish(child, LIMIT);
    done.assert_failed("read-sequence-gap-free", &["publish-ack-gap-free", "publish-eventually-acked"]);
    assert_eq!(done.property("read-sequence-gap-free")["first_failure"]["first_missing_in_stream"], true);
}

/// The Test Composer path: a driver records what it acknowledged; one of those messages is
/// deleted after the driver has ended. anytime_ and finally_ must each fail
/// acked-message-never-lost (and still exit 0: a failure is an assertion, not an exit code).
#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_recorded_message_fails_the_composer_checks() {
    let h = Harness::start("composer").await;
    let state = h.dir.path().join("state");
    let step = |name: &str, extra: &[&str]| {
        let out = h.dir.path().join(name);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_workload"))
            .args(["composer", name, "--servers", &h.cluster.client_urls().join(",")])
            .args(["--monitor", &h.cluster.monitor_urls().join(",")])
            .args(["--liveness-window", "20s", "--liveness-quiet", "3s"])
            .arg("--state")
            .arg(&state)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "composer {name} exits 0 even when a property fails: {log}");
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
        let failed: Vec<String> = report["failed"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
        (failed, report)
    };
    let (failed, driver) = step("driver", &["--duration", "6s", "--run-id", &h.run_id]);
    assert!(failed.is_empty(), "{driver}");
    assert!(driver["counters"]["last_acked_seq"].as_u64().unwrap() > 500, "{driver}");
    let client = h.client().await;
    api(&client, &format!("STREAM.MSG.DELETE.{}", h.stream), json!({ "seq": 500 })).await;

    for name in ["anytime", "finally"] {
        let (failed, report) = step(name, &[]);
        assert!(failed.contains(&"acked-message-never-lost".to_string()), "{name}: {report}");
        let allowed = ["acked-message-never-lost", "stream-state-covers-acks"];
        assert!(failed.iter().all(|f| allowed.contains(&f.as_str())), "{name}: {failed:?}");
    }
}
