//! The benchmark in smoke mode produces every number it promises (speed is reported by
//! `workload bench`, never asserted here).

#[test]
fn smoke_bench_produces_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workload"))
        .args(["bench", "--smoke", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("bench.json")).unwrap()).unwrap();
    for path in [
        "/publish/in_flight_1/ratio",
        "/publish/in_flight_16/ratio",
        "/publish/in_flight_16/raw_per_s",
        "/read/ratio",
        "/memory/peak_rss_mib",
        "/memory/samples/1/rss_mib",
        "/detection/median_s",
    ] {
        let v = r.pointer(path).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{path} = {v} in {r}");
    }
}
