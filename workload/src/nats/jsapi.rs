//! Raw JetStream API requests, with the server's error codes kept.
//!
//! Stream management goes through here rather than async-nats's typed helpers because the
//! checks need what those hide: the numeric error code (stream not found vs. a timeout),
//! the whole stream config to send back on update, and 2.15's `cluster.desired` block.

use async_nats::Client;
use bytes::Bytes;
use properties::scale::StreamInfoView;
use serde_json::{json, Value};
use std::time::Duration;

pub const STREAM_NOT_FOUND: u64 = 10059;
pub const NO_MESSAGE_FOUND: u64 = 10037;
pub const STREAM_NAME_IN_USE: u64 = 10058;
/// "stream move already in progress": an update refused while a move is carried out.
pub const STREAM_MOVE_IN_PROGRESS: u64 = 10124;

#[derive(Clone, Debug, thiserror::Error)]
pub enum ApiError {
    #[error("request timed out")]
    Timeout,
    #[error("no responders")]
    NoResponders,
    #[error("request failed: {0}")]
    Transport(String),
    #[error("server error {err_code} ({code}): {description}")]
    Server { code: u64, err_code: u64, description: String },
    #[error("unexpected reply: {0}")]
    Decode(String),
}

impl ApiError {
    pub fn err_code(&self) -> Option<u64> {
        match self {
            ApiError::Server { err_code, .. } => Some(*err_code),
            _ => None,
        }
    }
}

/// The version of the first server that answered an API request in this process (the
/// report's `server_version` when the workload did not start the servers itself).
pub static SERVER_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// One request to `$JS.API.<api>`, answered with the reply's JSON or the server's error.
pub async fn request(client: &Client, api: &str, body: &Value, timeout: Duration) -> Result<Value, ApiError> {
    let payload = if body.is_null() { Bytes::new() } else { Bytes::from(body.to_string()) };
    let reply = match tokio::time::timeout(timeout, client.request(format!("$JS.API.{api}"), payload)).await {
        Err(_) => return Err(ApiError::Timeout),
        Ok(Err(e)) => {
            return Err(match e.kind() {
                async_nats::RequestErrorKind::TimedOut => ApiError::Timeout,
                async_nats::RequestErrorKind::NoResponders => ApiError::NoResponders,
                _ => ApiError::Transport(e.to_string()),
            })
        }
        Ok(Ok(m)) => m,
    };
    if SERVER_VERSION.get().is_none() {
        // An answer came, so the connection has the server's INFO.
        let _ = SERVER_VERSION.set(client.server_info().version);
    }
    let value: Value = serde_json::from_slice(&reply.payload).map_err(|e| ApiError::Decode(e.to_string()))?;
    if let Some(err) = value.get("error") {
        return Err(ApiError::Server {
            code: err.get("code").and_then(Value::as_u64).unwrap_or(0),
            err_code: err.get("err_code").and_then(Value::as_u64).unwrap_or(0),
            description: err.get("description").and_then(Value::as_str).unwrap_or("").to_string(),
        });
    }
    Ok(value)
}

/// A stream's info: the parsed view the checks use, and the raw reply (for its config).
pub struct StreamInfo {
    pub view: StreamInfoView,
    pub raw: Value,
}

pub async fn stream_info(client: &Client, stream: &str, timeout: Duration) -> Result<StreamInfo, ApiError> {
    stream_info_with(client, stream, &Value::Null, timeout).await
}

/// Stream info that also lists interior deleted sequences.
/// The stream's leader, or why there is none yet (a create is answered before the group's
/// election: a publish at once finds no responders).
pub async fn stream_leader(client: &Client, stream: &str, timeout: Duration) -> Result<String, String> {
    let info = stream_info(client, stream, timeout).await.map_err(|e| e.to_string())?;
    info.view.cluster.and_then(|c| c.leader).filter(|l| !l.is_empty()).ok_or_else(|| format!("{stream} has no leader yet"))
}

/// Whether the stream behind `subject` answers a publish from `js`'s connection. A
/// `stream_leader` is not enough: the leader's interest in the subject reaches the other
/// servers over routes a moment after the election, and until it reaches this connection's
/// server a publish meets "no responders". Asked with an expected last sequence no stream
/// has, which the leader refuses without storing anything: a refusal is an answer.
pub async fn stream_answers(js: &async_nats::jetstream::Context, subject: &str) -> Result<(), String> {
    use async_nats::jetstream::{context::PublishErrorKind, message::PublishMessage};
    let probe = PublishMessage::build().expected_last_sequence(u64::MAX).payload(Bytes::new());
    match js.send_publish(subject.to_string(), probe).await.map_err(|e| e.to_string())?.await {
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(()),
        Err(e) => Err(e.to_string()),
        Ok(ack) => Err(format!("a probe was stored at sequence {}", ack.sequence)),
    }
}

pub async fn stream_info_deleted(client: &Client, stream: &str, timeout: Duration) -> Result<StreamInfo, ApiError> {
    stream_info_with(client, stream, &json!({ "deleted_details": true }), timeout).await
}

async fn stream_info_with(client: &Client, stream: &str, body: &Value, timeout: Duration) -> Result<StreamInfo, ApiError> {
    let raw = request(client, &format!("STREAM.INFO.{stream}"), body, timeout).await?;
    let view = serde_json::from_value(raw.clone()).map_err(|e| ApiError::Decode(e.to_string()))?;
    Ok(StreamInfo { view, raw })
}

/// Every stream of the account (`STREAM.LIST`, page by page). A list that some stream
/// leaders did not answer (`missing`) is an error: what it left out cannot be judged.
pub async fn all_streams(client: &Client, timeout: Duration) -> Result<Vec<StreamInfoView>, ApiError> {
    let mut streams = Vec::new();
    loop {
        let page = request(client, "STREAM.LIST", &json!({ "offset": streams.len() }), timeout).await?;
        if page["missing"].as_array().is_some_and(|m| !m.is_empty()) {
            return Err(ApiError::Decode(format!("streams missing from the list: {}", page["missing"])));
        }
        // `streams` may be null rather than empty.
        let batch: Vec<StreamInfoView> = serde_json::from_value::<Option<_>>(page["streams"].clone()).map_err(|e| ApiError::Decode(e.to_string()))?.unwrap_or_default();
        let total = page["total"].as_u64().unwrap_or(0) as usize;
        let empty = batch.is_empty();
        streams.extend(batch);
        if empty || streams.len() >= total {
            return Ok(streams);
        }
    }
}

/// The config this workload creates its stream with.
pub fn stream_config(stream: &str, subject: &str, replicas: usize, duplicate_window: Duration) -> Value {
    json!({
        "name": stream,
        "subjects": [subject],
        "retention": "limits",
        "storage": "file",
        "discard": "old",
        "num_replicas": replicas,
        "duplicate_window": duplicate_window.as_nanos() as u64,
        "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": -1, "max_msg_size": -1,
    })
}

/// Creates the stream; a create whose first reply was lost finds it in place, which counts.
/// Returns once the stream's leader answers: the create's reply can come before the leader
/// exists, and a publish then finds no stream for its subject.
pub async fn create_stream(client: &Client, config: &Value, timeout: Duration) -> Result<(), ApiError> {
    let name = config["name"].as_str().unwrap_or_default();
    match request(client, &format!("STREAM.CREATE.{name}"), config, timeout).await {
        Ok(_) => {}
        Err(e) if e.err_code() == Some(STREAM_NAME_IN_USE) => {
            // Only ours if it has our subject; anything else is a clash the user must fix.
            let info = stream_info(client, name, timeout).await?;
            if info.raw["config"]["subjects"] != config["subjects"] {
                return Err(e);
            }
        }
        Err(e) => return Err(e),
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let info = stream_info(client, name, timeout).await;
        if matches!(&info, Ok(i) if i.view.cluster.as_ref().is_none_or(|c| c.leader.is_some())) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return info.and(Err(ApiError::Timeout));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends the stream's own config back with another replica count.
pub async fn set_replicas(client: &Client, stream: &str, mut config: Value, replicas: usize, timeout: Duration) -> Result<(), ApiError> {
    config["num_replicas"] = json!(replicas);
    request(client, &format!("STREAM.UPDATE.{stream}"), &config, timeout).await.map(|_| ())
}

/// Whether sequence `seq` is in the stream (asks the leader, not a replica).
pub async fn message_present(client: &Client, stream: &str, seq: u64, timeout: Duration) -> Result<bool, ApiError> {
    match request(client, &format!("STREAM.MSG.GET.{stream}"), &json!({ "seq": seq }), timeout).await {
        Ok(_) => Ok(true),
        Err(e) if e.err_code() == Some(NO_MESSAGE_FOUND) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A client of `servers` named `name`, retrying its first connection until it succeeds.
pub async fn connect(servers: &[String], name: &str) -> anyhow::Result<async_nats::Client> {
    connect_as(servers, name, None).await
}

/// [`connect`] as `user` (user name and password), e.g. the system account.
pub async fn connect_as(servers: &[String], name: &str, user: Option<(&str, &str)>) -> anyhow::Result<async_nats::Client> {
    let options = match user {
        Some((user, password)) => async_nats::ConnectOptions::with_user_and_password(user.into(), password.into()),
        None => async_nats::ConnectOptions::new(),
    };
    let client = options
        .name(name)
        .retry_on_initial_connect()
        // Only the given addresses: the local cluster's proxies must not be bypassed.
        .ignore_discovered_servers()
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(Duration::from_secs(5)))
        .connect(servers.to_vec())
        .await?;
    Ok(client)
}
