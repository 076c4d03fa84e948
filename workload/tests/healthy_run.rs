//! A correct server with the scaler running leaves every property green.

mod common;

use common::Harness;
use std::time::Duration;

/// Every property green, except known server issues the report marks (here the one met:
/// findings/durable-ack-floor-skip, seen in CI on 2026-12-02 with no fault at all, the
/// consumer following its stream through R1 <-> R3); the safety properties below must pass.
fn assert_clean(done: &common::Finished) {
    common::assert_passes_but_known_server_issues(&done.report, &format!("{}\n\nreport: {}", done.why(), done.report));
    assert_eq!(done.status.success(), done.report["verdict"] == "pass", "exit status follows the verdict");
    for id in ["publish-ack-gap-free", "read-sequence-gap-free", "read-content-matches-publish", "acked-message-never-lost", "stream-never-disappears"] {
        assert_eq!(done.property(id)["status"], "passed", "{id}: {}", done.report);
    }
    assert_eq!(done.report["final_read_complete"], true);
    assert_eq!(done.counter("final_verified"), done.counter("last_acked_seq"), "the final read covered every ack");
}

#[tokio::test(flavor = "multi_thread")]
async fn pipelined_run_with_scaling_holds_every_property() {
    let h = Harness::start("healthy").await;
    // Scaling only (the operations tests take every other operation), so that 40 seconds
    // go both ways across R1. Windows as long as the run: a reader whose new consumer was
    // placed on a peer still being filled stalls until it recreates it at the window's
    // quiet point (see docs/operations.md, "What copying a stream costs"); on two busy cores a 20 s
    // window leaves the new one little time to deliver (a CI run failed this test's
    // verdict once, details not kept; a 20 s run here showed a 17 s reader stall).
    let cfg = h.config("scaling.toml", "[operator.weights]\nscale = 1\nmove = 0\npeer_remove = 0\npeer_evacuate = 0\nstream_stepdown = 0\nmeta_stepdown = 0\nconsumer_stepdown = 0\nconsumer_scale = 0\nconsumer_peer_remove = 0\nconsumer_peer_evacuate = 0\nserver_evacuate = 0\n");
    let args = ["--config", &cfg, "--liveness-window", "60s", "--liveness-quiet", "15s"];
    let done = h.finish(h.spawn("40s", &args), Duration::from_secs(150));
    assert_clean(&done);
    // Thousands acknowledged (and all read back, `assert_clean`); how many the reader
    // verified during the run depends on how busy the machine is (3,630 of 9,875 in a CI
    // run with a build beside it), so only that it read.
    assert!(done.counter("last_acked_seq") > 5000 && done.counter("verified") > 0, "{}", done.report["counters"]);
    for id in ["stream-scaled-down-to-r1", "stream-scaled-up-from-r1", "scale-waited-until-settled"] {
        assert_eq!(done.property(id)["status"], "passed", "{id} not exercised: {}", done.report);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_at_a_time_run_with_scaling_holds_every_property() {
    let h = Harness::start("single").await;
    let done = h.finish(h.spawn("20s", &["--in-flight", "1"]), Duration::from_secs(120));
    assert_clean(&done);
    assert!(done.counter("last_acked_seq") > 500 && done.counter("verified") > 0, "{}", done.report["counters"]);
}
