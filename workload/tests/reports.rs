//! The pages a person reads after a run, and the metrics a soak run is watched by, from a
//! real run against a real cluster: a passing one, and one that lost messages because
//! five acknowledged ones were deleted under it. The HTML page is rendered by a real
//! headless browser (Debian's `chromium`; scripts/test installs it) and the screenshot is
//! looked at, pixel by pixel, for the table and the picture.

mod common;

use common::{Finished, Harness};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use workload::nats::jsapi;

const LIMIT: Duration = Duration::from_secs(150);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The three pages of a finished run, the SVG checked to be well-formed XML.
fn pages(done: &Finished) -> (String, String, String) {
    let svg = read(&done.out.join("timeline.svg"));
    let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("timeline.svg is not XML: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    (read(&done.out.join("report.md")), svg, read(&done.out.join("report.html")))
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `name value` lines of a Prometheus text page, by name with labels.
async fn scrape(url: &str) -> Vec<(String, f64)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = reqwest::get(url).await {
            if let Ok(text) = r.text().await {
                if text.contains("workload_acked_total") {
                    return text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.rsplit_once(' ')).filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?))).collect();
                }
            }
        }
        assert!(Instant::now() < deadline, "no metrics at {url}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn metric(page: &[(String, f64)], name: &str) -> f64 {
    page.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name} in {page:?}")).1
}

/// Renders `html` with headless chromium; the screenshot as RGB pixels and its width.
fn screenshot(html: &Path, png: &Path) -> (Vec<[u8; 3]>, u32) {
    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()));
    let chromium = chromium.expect("chromium is needed to render the report (scripts/test installs Debian's chromium)");
    let o = Command::new("timeout")
        .args(["120", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,2200"])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(png.exists(), "no screenshot: {}", String::from_utf8_lossy(&o.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    let pixels = buf[..info.buffer_size()].chunks(step).map(|p| [p[0], p[1], p[2]]).collect();
    (pixels, info.width)
}

/// How many pixels have exactly this colour.
fn count(pixels: &[[u8; 3]], rgb: [u8; 3]) -> usize {
    pixels.iter().filter(|p| **p == rgb).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_lost_messages_names_them_on_every_page_and_its_metrics_move() {
    let h = Harness::start("pages").await;
    let url = format!("http://127.0.0.1:{}/metrics", free_port());
    let addr = url.trim_start_matches("http://").trim_end_matches("/metrics").to_string();
    let child = h.spawn("15s", &["--metrics", &addr]);
    let client = h.client().await;
    h.wait_for_messages(&client, 3000).await;
    let first = scrape(&url).await;
    for seq in 1000..=1004 {
        jsapi::request(&client, &format!("STREAM.MSG.DELETE.{}", h.stream), &json!({ "seq": seq }), Duration::from_secs(5)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = scrape(&url).await;
    for name in ["workload_acked_total", "workload_durable_acks_confirmed_total", "workload_last_acked_seq"] {
        assert!(metric(&second, name) > metric(&first, name), "{name} did not move: {} then {}", metric(&first, name), metric(&second, name));
    }
    assert!(metric(&second, "workload_replicas") >= 1.0);
    let held = "workload_property_evaluations_total{property=\"read-content-matches-publish\",kind=\"always\",outcome=\"held\"}";
    assert!(metric(&second, held) > 0.0, "property counts are served");

    let done = h.finish(child, LIMIT);
    done.assert_failed("acked-message-never-lost", &["stream-state-covers-acks"]);
    let m = &done.report["messages"];
    assert_eq!((m["lost"].as_u64(), &m["lost_ranges"]), (Some(5), &json!([[1000, 1004]])), "{m}");
    assert_eq!(m["ok"].as_u64().unwrap() + 5, m["acked"].as_u64().unwrap(), "every other acked message read back: {m}");
    let at = done.property("acked-message-never-lost")["first_failure_s"].as_f64().unwrap();

    let (md, svg, html) = pages(&done);
    let lost = "Lost: 5 acknowledged messages, confirmed gone from the stream: sequences 1000-1004.";
    assert!(md.starts_with("# Run report: FAIL") && md.contains(lost), "{md}");
    assert!(md.lines().any(|l| l.starts_with("| acked-message-never-lost | always | failed |") && l.contains(&format!("at {at:.0} s"))), "{md}");
    assert!(svg.contains(&format!("acked-message-never-lost ({}s)", at.round())), "the first failure is marked: {svg}");
    assert!(svg.contains("lost 5, unknown 0</title>"), "the lost messages are drawn where they were acknowledged");
    assert!(html.contains(&format!("<p>{lost}</p>")) && html.contains("<tr class=\"failed\"><td>acked-message-never-lost</td>"));
    assert!(html.contains(&svg[..svg.find('>').unwrap()]), "the picture is inside the page");

    let (pixels, width) = screenshot(&done.out.join("report.html"), &h.dir.path().join("report.png"));
    assert!(width >= 1000);
    assert!(count(&pixels, [0xff, 0xdd, 0xdd]) > 1000, "the failed row of the table is shown");
    assert!(count(&pixels, [0x2c, 0xa0, 0x2c]) > 100, "the messages read back are drawn (green)");
    assert!(count(&pixels, [0xd6, 0x27, 0x28]) > 10, "the lost messages are drawn (red)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_passing_run_writes_its_pages_and_workload_report_writes_them_again_and_check_judges_the_same() {
    let h = Harness::start("pagesok").await;
    let done = h.finish(h.spawn("10s", &[]), LIMIT);
    assert_eq!(done.report["verdict"], "pass", "{}", done.why());
    let m = &done.report["messages"];
    assert_eq!((m["lost"].as_u64(), m["ok"].as_u64()), (Some(0), m["acked"].as_u64()), "{m}");
    let (md, svg, html) = pages(&done);
    assert!(md.starts_with("# Run report: PASS") && !md.contains("## Messages"), "{md}");
    assert!(!svg.contains("lost 1") && svg.contains("lost 0, unknown 0</title>"), "all ok");
    assert!(!html.contains("<tr class=\"failed\">"));
    assert!(html.len() < 200_000 && svg.len() < 100_000, "html {} bytes, svg {} bytes", html.len(), svg.len());

    for page in ["report.md", "timeline.svg", "report.html"] {
        std::fs::remove_file(done.out.join(page)).unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_workload")).arg("report").arg(&done.out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again = pages(&done);
    assert_eq!(again, (md, svg, html), "the same pages from the run directory");
    // Judged again from report.json alone: the same verdict, the same exit code.
    let o = Command::new(env!("CARGO_BIN_EXE_workload")).arg("check").arg(&done.out).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("verdict: pass") && !out.contains("differs"), "{out}");
}
