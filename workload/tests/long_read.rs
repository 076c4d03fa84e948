//! A final read many liveness windows long must pass: catch-up windows measure time
//! without progress, not total time. (Before, the whole read had to fit in one window, so
//! a correct server failed `consumer-eventually-catches-up` past ~13 M messages at the
//! default 120 s window: inside the advertised 8-hour soak.)

mod common;

use bytes::Bytes;
use common::{eventually, Harness};
use properties::payload::{checksum, RunMessages};
use std::collections::VecDeque;
use std::time::Duration;
use workload::nats::jsapi;
use workload::run::records::{Record, StateDir};

const WINDOW_S: f64 = 1.0;
const MESSAGES: u64 = 1_200_000;
const PAYLOAD: usize = 16;

#[tokio::test(flavor = "multi_thread")]
async fn a_final_read_many_windows_long_passes() {
    let h = Harness::start("longread").await;
    let client = h.client().await;
    // The run's stream, in memory so the test fills it fast, with exactly the messages the
    // workload would have published and been acknowledged for.
    let mut config = jsapi::stream_config(&h.stream, &h.subject, 1, Duration::from_secs(300));
    config["storage"] = "memory".into();
    jsapi::create_stream(&client, &config, Duration::from_secs(5)).await.unwrap();
    let js = h.jetstream(&client);
    // The create is answered before the election: a publish then meets no responders.
    eventually("the stream answers", Duration::from_secs(30), || jsapi::stream_answers(&js, &h.subject)).await;
    let run = RunMessages::new(&h.run_id, 42, PAYLOAD);
    let mut acks = VecDeque::new();
    for i in 1..=MESSAGES {
        let payload = run.payload(i);
        let msg = async_nats::jetstream::message::PublishMessage::build()
            .message_id(run.msg_id(i))
            .header(properties::payload::CHECKSUM_HEADER, checksum(&payload).as_str())
            .payload(Bytes::from(payload));
        acks.push_back(js.send_publish(h.subject.clone(), msg).await.unwrap());
        if acks.len() >= 2048 {
            assert_eq!(acks.pop_front().unwrap().await.unwrap().sequence, i - 2047);
        }
    }
    for ack in acks {
        ack.await.unwrap();
    }
    StateDir(h.dir.path().join("state"))
        .write(&Record { run_id: h.run_id.clone(), seed: 42, payload_size: PAYLOAD, last_acked: MESSAGES, replicas: 1, finished: true, open_suspicions: vec![], verified_at_ms: None, retired: false })
        .unwrap();

    let (_, report) = h.composer("finally", &["--operator", "false", "--liveness-window", "1s", "--liveness-quiet", "500ms"]);
    let check = &report["streams"][0]["check"];
    assert_eq!(report["verdict"], "pass", "{report}");
    assert_eq!(check["read"], "held", "{check}");
    assert_eq!(check["verified"], MESSAGES, "{check}");
    let read_s = check["read_s"].as_f64().unwrap();
    assert!(read_s > 3.0 * WINDOW_S, "the read must outlast several windows to prove anything: {read_s} s");
}
