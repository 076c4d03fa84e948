//! The servers' monitoring endpoints over HTTP: `/healthz`, and any JSON page (`/jsz`, ...).

use std::time::Duration;

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("a plain HTTP client always builds")
}

/// `Ok` when every monitoring URL's full `/healthz` answers 200, else which do not.
pub async fn all_healthy(http: &reqwest::Client, monitor_urls: &[String]) -> Result<(), String> {
    let sick = unhealthy(http, monitor_urls).await;
    if sick.is_empty() { Ok(()) } else { Err(format!("not healthy: {}", sick.join(", "))) }
}

/// A monitoring endpoint's JSON answer (`/varz`, `/jsz`, ...).
pub async fn get_json(http: &reqwest::Client, url: &str) -> Result<serde_json::Value, String> {
    let reply = http.get(url).send().await.map_err(|e| format!("{url}: {e}"))?;
    let body = reply.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))
}

/// The monitoring URLs whose full `/healthz` does not answer 200.
/// Each entry is the URL and why (the server's own `error`, or the request's failure).
pub async fn unhealthy(http: &reqwest::Client, monitor_urls: &[String]) -> Vec<String> {
    let checks = monitor_urls.iter().map(|url| async move {
        match http.get(format!("{url}/healthz")).send().await {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => {
                let status = r.status();
                let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or_default();
                Some(format!("{url} ({status}: {})", body["error"].as_str().unwrap_or("?")))
            }
            Err(e) => Some(format!("{url} ({})", if e.is_timeout() { "timed out".to_string() } else { e.to_string() })),
        }
    });
    futures::future::join_all(checks).await.into_iter().flatten().collect()
}
