//! The benchmark in smoke mode produces every number it promises (speed is reported by
//! `workload bench`, never asserted here).

#[test]
fn smoke_bench_produces_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workload"))
        .args(["bench", "--smoke", "--depths", "1,16", "--rounds", "2", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("bench.json")).unwrap()).unwrap();
    for path in [
        "/publish/in_flight_1/checked_vs_raw_headers",
        "/publish/in_flight_1/raw_headers_vs_raw",
        "/publish/in_flight_16/checked_vs_raw_headers",
        "/publish/in_flight_16/raw/per_s",
        "/publish/in_flight_16/raw_headers/per_s",
        "/publish/in_flight_16/checked/per_s",
        "/publish/in_flight_16/raw/cpu_ms_per_1000",
        "/publish/in_flight_16/checked/cpu_ms_per_1000",
        "/read/checked_vs_raw",
        "/read/checked_vs_raw_spread/1",
        "/publish/in_flight_16/checked_vs_raw_headers_spread/0",
        "/publish/in_flight_16/checked_vs_raw_headers_spread/1",
        "/read/checked/cpu_ms_per_1000",
        "/memory/peak_rss_mib",
        "/memory/samples/1/rss_mib",
        "/detection/median_s",
        "/streams/0/acked_per_s",
        "/streams/1/acked_per_s",
        "/streams/1/slowest_acked_per_s",
        "/streams/1/cpu_ms_per_1000",
        "/streams/1/raw_headers_acked_per_s",
        "/streams/1/checked_vs_raw_headers",
    ] {
        let v = r.pointer(path).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{path} = {v} in {r}");
    }
    // --rounds: every side sampled that often; each ratio is the median of the rounds' own.
    assert_eq!(r["publish"]["in_flight_16"]["checked"]["samples_per_s"].as_array().map(Vec::len), Some(2), "{r}");
    // The multi-stream path: `workload run`'s own, two streams, both read back whole.
    assert_eq!((r["streams"][1]["streams"].as_u64(), r["streams"][1]["final_check_held"].as_bool()), (Some(2), Some(true)), "{}", r["streams"]);
}
