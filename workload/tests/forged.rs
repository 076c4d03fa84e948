//! Defects no server action produces on demand, forged at the protocol level by the
//! client-side proxy's test-only mode (`faults::forge`) between a real cluster and the real
//! workload: each must fail exactly its property.

mod common;

use common::Harness;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use workload::cluster::forge::Frame;
use workload::cluster::proxy::Link;

const LIMIT: Duration = Duration::from_secs(150);

fn with_payload(frame: Frame, payload: Vec<u8>) -> Frame {
    match frame {
        Frame::Msg { subject, sid, reply, headers, .. } => Frame::Msg { subject, sid, reply, headers, payload },
        other => other,
    }
}

/// A publish ack of `stream` that is not a duplicate: its sequence.
fn fresh_ack(frame: &Frame, stream: &str) -> Option<u64> {
    let Frame::Msg { payload, .. } = frame else { return None };
    let ack: Value = serde_json::from_slice(payload).ok()?;
    (ack["stream"] == stream && ack.get("duplicate").is_none()).then(|| ack["seq"].as_u64()).flatten()
}

/// Ack K cannot be parsed, so the publisher rewinds while K+1's ack is already on its way;
/// that ack names sequence K+501. Only judging the replies of given-up sends can see it.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_ack_arriving_after_a_rewind_fails_publish_ack_gap_free() {
    let h = Harness::start("lateack").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    let mut broken: Option<u64> = None;
    let mut done = false;
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        match (fresh_ack(&f, &stream), broken) {
            (Some(seq), None) if seq >= 2000 => {
                broken = Some(seq);
                vec![with_payload(f, br#"{"stream":"#.to_vec())]
            }
            (Some(seq), Some(k)) if seq == k + 1 && !done => {
                done = true;
                vec![with_payload(f, json!({ "stream": stream, "seq": seq + 500 }).to_string().into_bytes())]
            }
            _ => vec![f],
        }
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    // After the wrong ack the publisher's resends never fit the stream again: its window,
    // finished when the run's time is up, runs out.
    done.assert_failed("publish-ack-gap-free", &["publish-eventually-acked"]);
    let first = &done.property("publish-ack-gap-free")["first_failure"];
    assert_eq!(first["observed_by"], "an ack that arrived after its send was given up by a rewind", "{first}");
    assert_eq!(first["acked_seq"].as_u64(), first["index"].as_u64().map(|i| i + 500), "{first}");
    assert!(done.counter("late_acks") >= 1);
    assert_eq!(done.counter("ack_diverged_at"), 0, "a late ack does not move the ledger");
}

/// The (stream sequence, consumer, consumer sequence) of a JetStream delivery of `stream`,
/// read from its ack subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>...`).
fn delivery(frame: &Frame, stream: &str) -> Option<(u64, String, u64)> {
    let Frame::Msg { reply: Some(reply), .. } = frame else { return None };
    let tokens: Vec<&str> = reply.split('.').collect();
    let at = tokens.iter().position(|t| *t == stream)?;
    (tokens.first() == Some(&"$JS") && tokens.get(1) == Some(&"ACK")).then_some(())?;
    Some((tokens.get(at + 3)?.parse().ok()?, tokens.get(at + 1)?.to_string(), tokens.get(at + 4)?.parse().ok()?))
}

/// The same frame with its ack subject naming consumer sequence `cseq`.
fn with_consumer_seq(frame: &Frame, stream: &str, cseq: u64) -> Frame {
    let mut f = frame.clone();
    if let Frame::Msg { reply: Some(reply), .. } = &mut f {
        let mut tokens: Vec<String> = reply.split('.').map(str::to_string).collect();
        let at = tokens.iter().position(|t| t == stream).expect("a delivery of the stream");
        tokens[at + 4] = cseq.to_string();
        *reply = tokens.join(".");
    }
    f
}

/// An already delivered message is delivered again inside the same consumer, as its next
/// consumer sequence: a server that goes back in the stream. Nothing about it is a new
/// consumer, so it is an ordering violation, not the client restarting one.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_delivery_inside_one_consumer_fails_read_sequence_gap_free() {
    let h = Harness::start("replay").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    let mut kept: Option<(Frame, u64, String)> = None;
    let mut done = false;
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        // The ordered reader's deliveries only (the durable consumer may be given anything again).
        let Some((sseq, consumer, cseq)) = delivery(&f, &stream).filter(|(_, c, _)| !done && c != "durable") else { return vec![f] };
        match &kept {
            Some((old, old_seq, c)) if *c == consumer && sseq >= old_seq + 200 => {
                let replay = with_consumer_seq(old, &stream, cseq + 1);
                done = true;
                vec![f, replay]
            }
            Some((_, _, c)) if *c == consumer => vec![f],
            _ => {
                if sseq >= 1000 {
                    kept = Some((f.clone(), sseq, consumer));
                }
                vec![f]
            }
        }
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    done.assert_failed("read-sequence-gap-free", &[]);
    let first = &done.property("read-sequence-gap-free")["first_failure"];
    assert_eq!(first["problem"], "an older stream sequence delivered by a consumer asked to go on from a later one", "{first}");
}

/// `old`'s message delivered as `now`'s is: to its subscription, by its consumer, with
/// consumer sequence `cseq`.
fn as_delivered_like(old: &Frame, now: &Frame, stream: &str, consumer: &str, cseq: u64) -> Frame {
    let mut f = with_consumer_seq(old, stream, cseq);
    if let (Frame::Msg { subject, sid, reply: Some(reply), .. }, Frame::Msg { subject: to, sid: to_sid, .. }) = (&mut f, now) {
        let mut tokens: Vec<String> = reply.split('.').map(str::to_string).collect();
        let at = tokens.iter().position(|t| t == stream).expect("a delivery of the stream");
        tokens[at + 1] = consumer.to_string();
        *reply = tokens.join(".");
        (*subject, *sid) = (to.clone(), to_sid.clone());
    }
    f
}

/// The client recreates the ordered consumer after a consumer-sequence gap (one delivery
/// dropped here) to go on after the last message it delivered; the new consumer's first
/// delivery (consumer sequence 1) is an older stream sequence, content intact, and every
/// later consumer sequence follows on from it. A server that went back in the stream; only
/// a consumer restarted from the stream's start may begin before the reader.
#[tokio::test(flavor = "multi_thread")]
async fn a_recreated_consumer_starting_with_an_older_sequence_fails_read_sequence_gap_free() {
    let h = Harness::start("restart").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    // The kept older delivery, the consumer it came from, and once the gap is made, the
    // consumer whose sequences are shifted by the inserted one.
    let (mut kept, mut first_consumer, mut shifted): (Option<(Frame, u64)>, Option<String>, Option<String>) = (None, None, None);
    let mut dropped = false;
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        let Some((sseq, consumer, cseq)) = delivery(&f, &stream).filter(|(_, c, _)| c != "durable") else { return vec![f] };
        if shifted.as_deref() == Some(consumer.as_str()) {
            return vec![with_consumer_seq(&f, &stream, cseq + 1)];
        }
        match (&kept, dropped) {
            (None, _) if sseq >= 1000 => {
                kept = Some((f.clone(), sseq));
                first_consumer = Some(consumer);
                vec![f]
            }
            (Some((_, old)), false) if first_consumer.as_deref() == Some(consumer.as_str()) && sseq >= old + 200 => {
                dropped = true; // a consumer-sequence gap: the client recreates the consumer
                vec![]
            }
            (Some((old, _)), true) if shifted.is_none() && first_consumer.as_deref() != Some(consumer.as_str()) && cseq == 1 => {
                let older = as_delivered_like(old, &f, &stream, &consumer, 1);
                let next = with_consumer_seq(&f, &stream, 2);
                shifted = Some(consumer);
                vec![older, next]
            }
            _ => vec![f],
        }
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    done.assert_failed("read-sequence-gap-free", &[]);
    let first = &done.property("read-sequence-gap-free")["first_failure"];
    assert_eq!(first["problem"], "an older stream sequence delivered by a consumer asked to go on from a later one", "{first}");
    assert!(first["seq"].as_u64().unwrap() + 200 <= first["expected_seq"].as_u64().unwrap(), "{first}");
    assert!(done.counter("consumer_recreates") >= 1);
}

/// One delivery to the durable consumer carries other bytes than were published for its
/// sequence (and a checksum matching those bytes); the ordered reader is given the real
/// message. Only the durable consumer's content check can see it.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_delivery_to_the_durable_consumer_fails_durable_content_matches_publish() {
    let h = Harness::start("durforge").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    let mut done = false;
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        match delivery(&f, &stream) {
            Some((sseq, consumer, _)) if consumer == "durable" && sseq >= 1000 && !done => {
                done = true;
                let forged = vec![7u8; 128];
                let Frame::Msg { subject, sid, reply, headers, .. } = f else { unreachable!() };
                let sum = properties::payload::checksum(&forged);
                let headers = headers.map(|h| {
                    let text = String::from_utf8_lossy(&h).to_string();
                    let line = text.lines().find(|l| l.starts_with(properties::payload::CHECKSUM_HEADER)).unwrap_or_default().to_string();
                    text.replace(&line, &format!("{}: {sum}", properties::payload::CHECKSUM_HEADER)).into_bytes()
                });
                vec![Frame::Msg { subject, sid, reply, headers, payload: forged }]
            }
            _ => vec![f],
        }
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    done.assert_failed("durable-content-matches-publish", &[]);
    let first = &done.property("durable-content-matches-publish")["first_failure"];
    assert!(first["seq"].as_u64().is_some_and(|s| s >= 1000) && first["problems"].as_array().is_some_and(|p| !p.is_empty()), "{first}");
}

/// The server reports acknowledged message 1000 in its stream info's `state.lost` (what a
/// store that found damaged blocks on recovery says; no server action here makes a 2.15.1
/// node say it on demand, its damaged blocks show up as deletes instead). Every later
/// answer says so, so the confirmation holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_reported_loss_of_an_acked_message_fails_acked_message_never_lost() {
    let h = Harness::start("lost").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        let Frame::Msg { payload, .. } = &f else { return vec![f] };
        let Ok(mut info) = serde_json::from_slice::<Value>(payload) else { return vec![f] };
        let ours = info["type"] == "io.nats.jetstream.api.v1.stream_info_response" && info["config"]["name"] == stream;
        if !ours || info["state"]["last_seq"].as_u64().unwrap_or(0) < 2000 {
            return vec![f];
        }
        info["state"]["lost"] = json!({ "msgs": [1000], "bytes": 300 });
        vec![with_payload(f, info.to_string().into_bytes())]
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    done.assert_failed("acked-message-never-lost", &[]);
    let first = &done.property("acked-message-never-lost")["first_failure"];
    assert_eq!(first["reported_lost_by_server"], json!([1000]), "{first}");
}

/// The stream's info says it is placed on tag `g0` (n1 and n2) while naming n3 its leader,
/// every replica current: what a server that settled a move on the wrong peers would say
/// (2.12.1 was seen doing it under faults). Every look for 15 s says so: the placement fails.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_settled_outside_its_placement_fails_placement_honoured() {
    let h = Harness::start("placement").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        let Frame::Msg { payload, .. } = &f else { return vec![f] };
        let Ok(mut info) = serde_json::from_slice::<Value>(payload) else { return vec![f] };
        if info["type"] != "io.nats.jetstream.api.v1.stream_info_response" || info["config"]["name"] != stream {
            return vec![f];
        }
        info["config"]["placement"] = json!({ "tags": ["g0"] });
        info["cluster"]["leader"] = json!("n3");
        vec![with_payload(f, info.to_string().into_bytes())]
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "30s", &["--operator", "false"]), LIMIT);
    done.assert_failed("placement-honoured", &[]);
    let first = &done.property("placement-honoured")["first_failure"];
    assert!(first["problem"].as_str().unwrap_or("").contains("n3 lacks tag g0"), "{first}");
    assert!(first["settled_for_s"].as_f64().unwrap() >= 15.0, "{first}");
}

/// A monitoring endpoint in front of `node`'s: every answer passes unchanged except that,
/// where the node holds a follower replica of the durable consumer, that replica's ack
/// floor is one lower than the node stored. Returns the proxy's URL.
async fn forging_monitor(node: String, upstream: String, stream: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request).lines().next().unwrap_or_default().to_string();
            let path = line.split(' ').nth(1).unwrap_or("/").to_string();
            let Ok(reply) = http.get(format!("{upstream}{path}")).send().await else { continue };
            let status = reply.status().as_u16();
            let mut body = reply.bytes().await.unwrap_or_default().to_vec();
            if let Ok(mut jsz) = serde_json::from_slice::<Value>(&body) {
                for account in jsz["account_details"].as_array_mut().into_iter().flatten() {
                    for s in account["stream_detail"].as_array_mut().into_iter().flatten().filter(|s| s["name"] == stream.as_str()) {
                        for c in s["consumer_detail"].as_array_mut().into_iter().flatten().filter(|c| c["name"] == "durable") {
                            let follower = c["cluster"]["leader"].as_str().is_some_and(|l| l != node);
                            if let (true, Some(floor)) = (follower, c["ack_floor"]["stream_seq"].as_u64()) {
                                c["ack_floor"]["stream_seq"] = json!(floor.saturating_sub(1));
                            }
                        }
                    }
                }
                body = jsz.to_string().into_bytes();
            }
            let head = format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(&body).await;
        }
    });
    url
}

/// Every follower of the replicated durable consumer stores an ack floor one below its
/// leader's, at rest: only comparing each replica's own state shows it.
#[tokio::test(flavor = "multi_thread")]
async fn a_follower_storing_another_ack_floor_fails_durable_replicas_agree_at_rest() {
    let h = Harness::start("consumerreplica").await;
    let mut monitors = Vec::new();
    for node in &h.cluster.nodes {
        monitors.push(forging_monitor(node.name.clone(), node.monitor_url(), h.stream.clone()).await);
    }
    let cfg = h.config("r3.toml", "[durable]\nreplicas = [3]\n");
    let child = h.spawn_watching(&h.cluster.client_urls(), &monitors, "12s", &["--operator", "false", "--config", &cfg]);
    let done = h.finish(child, LIMIT);
    done.assert_failed("durable-replicas-agree-at-rest", &[]);
    let first = &done.property("durable-replicas-agree-at-rest")["first_failure"];
    let differ = first["differ"].as_array().unwrap_or_else(|| panic!("{first}"));
    assert_eq!(differ.len(), 2, "both followers: {first}");
    assert_eq!(differ[0]["ack_floor"].as_u64().unwrap() + 1, first["leader"]["ack_floor"].as_u64().unwrap(), "{first}");
    assert_eq!(done.report["final_check"]["durable"], "failed");
}

/// A publish ack of `stream`, fresh or duplicate.
fn any_ack(frame: &Frame, stream: &str) -> bool {
    let Frame::Msg { payload, .. } = frame else { return false };
    serde_json::from_slice::<Value>(payload).is_ok_and(|ack| ack["stream"] == stream && ack.get("seq").is_some())
}

/// From 8 s into a 12 s run every publish ack is lost on the client's link, for good: the
/// publisher's window is still open when the run's time is up. The run finishes it (the
/// publisher goes on resending what it sent, faults paused) and it runs out: a stall at the
/// end of a run fails like one in its middle, instead of passing unjudged.
#[tokio::test(flavor = "multi_thread")]
async fn a_publish_stall_open_when_the_run_ends_fails_publish_eventually_acked() {
    let h = Harness::start("endstall").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    let from = std::time::Instant::now() + Duration::from_secs(8);
    link.forge(Arc::new(Mutex::new(move |f: Frame| if std::time::Instant::now() > from && any_ack(&f, &stream) { vec![] } else { vec![f] })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    done.assert_failed("publish-eventually-acked", &[]);
    let row = done.property("publish-eventually-acked");
    assert!(row["first_failure_s"].as_f64().is_some_and(|t| t > 12.0), "judged after the run's time was up: {row}");
    assert_eq!(done.report["final_check"]["read"], "held", "what was acknowledged is all there: {}", done.why());
    assert_eq!(done.report["windows_left_open"], json!([]), "nothing left open: {}", done.why());
}

/// Every delivery of one stream sequence to the durable consumer is lost on the client's
/// link, for good (the ordered reader gets it): the message is stored and acknowledged but
/// never reaches the durable consumer. At least once is judged: it is late after its ack
/// wait plus the liveness window, and the final check says it was never received.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_withheld_from_the_durable_consumer_fails_durable_every_message_delivered() {
    let h = Harness::start("withheld").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    let mut withheld: Option<u64> = None;
    link.forge(Arc::new(Mutex::new(move |f: Frame| match delivery(&f, &stream) {
        Some((sseq, consumer, _)) if consumer == "durable" && (withheld == Some(sseq) || (withheld.is_none() && sseq >= 2000)) => {
            withheld = Some(sseq);
            vec![]
        }
        _ => vec![f],
    })));
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "12s", &["--operator", "false"]), LIMIT);
    done.assert_failed("durable-every-message-delivered", &[]);
    let first = &done.property("durable-every-message-delivered")["first_failure"];
    let seq = first["first_late"].as_u64().expect("the late sequence");
    assert!(seq >= 2000 && first["never_received"][0] == json!([seq, seq]), "{first}");
    assert!(first["waited_s"].as_f64().is_some_and(|w| w >= 25.0), "ack wait 5 s + window 20 s: {first}");
    let owed = &done.report["final_check"]["durable_owed"];
    assert_eq!(owed["late"]["never_received"], json!([[seq, seq]]), "{owed}");
    assert_eq!(done.report["final_check"]["durable"], "held", "the ack floor never passed it: {}", done.why());
}

/// Every publish ack is lost on the client's link for 12 s from half a second after the
/// operator's first stream stepdown, in a run whose operator steps the leader down every
/// 14-15 s, with no fault injected (the run is told nothing else faults the cluster): a write
/// outage of 12 s or more after one operation, with no other request before the bound ran
/// out, fails `operation-outage-bounded`, and nothing else fails (the 20 s publish window
/// is not used up).
#[tokio::test(flavor = "multi_thread")]
async fn a_write_outage_after_an_operation_with_no_fault_fails_operation_outage_bounded() {
    let h = Harness::start("outage").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    // When the first operation was requested, as its record in operations.jsonl shows.
    let first_op = Arc::new(std::sync::OnceLock::<std::time::Instant>::new());
    let ops_file = h.dir.path().join("out").join("operations.jsonl");
    let seen = first_op.clone();
    tokio::spawn(async move {
        while !std::fs::read_to_string(&ops_file).is_ok_and(|s| s.contains("\"requested\"")) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = seen.set(std::time::Instant::now());
    });
    let forging = first_op.clone();
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        let lost = forging.get().is_some_and(|t| (Duration::from_millis(500)..Duration::from_millis(12_500)).contains(&t.elapsed()));
        if lost && any_ack(&f, &stream) { vec![] } else { vec![f] }
    })));
    let cfg = h.config(
        "stepdowns.toml",
        "[operator]\ninterval_min = \"14s\"\ninterval_max = \"15s\"\nwait_settled_probability = 0.0\n[operator.weights]\nscale = 0\nmove = 0\npeer_remove = 0\npeer_evacuate = 0\nserver_evacuate = 0\nstream_stepdown = 1\nmeta_stepdown = 0\nconsumer_stepdown = 0\nconsumer_scale = 0\nconsumer_peer_remove = 0\nconsumer_peer_evacuate = 0\n",
    );
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "40s", &["--config", &cfg, "--only-own-faults", "--cluster-size", "3"]), LIMIT);
    assert!(first_op.get().is_some(), "the operator stepped the leader down");
    done.assert_failed("operation-outage-bounded", &[]);
    // The outage of the lost acks, judged after the stepdown alone.
    let row = done.property("operation-outage-bounded");
    let covers = |f: &Value| {
        let d = &f["details"];
        d["activity"] == "write" && d["op"] == "stream-stepdown" && d["judged_s"].as_f64().is_some_and(|s| s > 10.0)
    };
    assert!(row["failures"].as_array().is_some_and(|f| f.iter().any(covers)), "{row}");
    let ops = std::fs::read_to_string(done.out.join("operations.jsonl")).unwrap();
    assert!(ops.lines().any(|l| l.contains("\"outage\"")), "every operation's outages are recorded");
}

/// The answer to a stream's update, when it is `stream`'s (the operator's scales).
fn update_answer(frame: &Frame, stream: &str) -> bool {
    let Frame::Msg { payload, .. } = frame else { return false };
    serde_json::from_slice::<Value>(payload).is_ok_and(|a| a["type"] == "io.nats.jetstream.api.v1.stream_update_response" && a["config"]["name"] == stream)
}

/// The first answer to a scale of the stream (3 -> 1; later ones ask for 1 again) is lost
/// on the client's link, and for 40 s
/// every later one is turned into a refusal (10005 "no suitable peers", as a soak's server
/// answered a repeated R4 update while a removed server's replacement was pending). The
/// server applied each: the operator sees that in the stream's configuration and does not
/// ask again, so no scale fails `scale-eventually-settles` (asking again, the first scale
/// would meet refusals past its 20 s window).
#[tokio::test(flavor = "multi_thread")]
async fn a_scale_whose_answer_was_lost_is_not_asked_again_once_applied() {
    let h = Harness::start("lostscale").await;
    let link = Link::start("forged".into(), h.cluster.nodes[0].client_port).await.unwrap();
    let stream = h.stream.clone();
    let first: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    link.forge(Arc::new(Mutex::new(move |f: Frame| {
        if !update_answer(&f, &stream) {
            return vec![f];
        }
        let mut first = first.lock().unwrap();
        match *first {
            None => {
                *first = Some(std::time::Instant::now());
                vec![]
            }
            Some(t) if t.elapsed() < Duration::from_secs(40) => {
                let refusal = json!({ "type": "io.nats.jetstream.api.v1.stream_update_response",
                                      "error": { "code": 400, "err_code": 10005, "description": "no suitable peers for placement" } });
                vec![with_payload(f, refusal.to_string().into_bytes())]
            }
            Some(_) => vec![f],
        }
    })));
    let cfg = h.config(
        "scales.toml",
        "[operator]\ninterval_min = \"3s\"\ninterval_max = \"4s\"\nwait_settled_probability = 0.0\n[operator.weights]\nscale = 1\nmove = 0\npeer_remove = 0\npeer_evacuate = 0\nserver_evacuate = 0\nstream_stepdown = 0\nmeta_stepdown = 0\nconsumer_stepdown = 0\nconsumer_scale = 0\nconsumer_peer_remove = 0\nconsumer_peer_evacuate = 0\n[scale]\nreplicas = [1]\nwait_settled_probability = 0.0\nback_to_back_probability = 0.0\n",
    );
    let servers = [format!("nats://127.0.0.1:{}", link.port)];
    let done = h.finish(h.spawn_via(&servers, "30s", &["--config", &cfg, "--cluster-size", "3"]), LIMIT);
    assert!(!done.failed().contains("scale-eventually-settles"), "{}", done.why());
    let log = std::fs::read_to_string(h.dir.path().join("workload.log")).unwrap();
    assert!(log.contains("scale applied though its answer was lost"), "the lost answer was met: {}", done.why());
    let ops = std::fs::read_to_string(done.out.join("operations.jsonl")).unwrap();
    let scales: Vec<Value> = ops.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|o| o["op"] == "scale" && o["event"] == "requested").collect();
    assert!(scales.len() >= 3, "{scales:?}");
    assert_eq!(scales[0]["detail"], json!({ "from": 3, "to": 1 }), "the first, whose answer was lost, recorded as the change it was: {scales:?}");
}
