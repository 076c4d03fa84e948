//! The per-replica look: each node's monitoring endpoint (`/jsz`) reports the state of the
//! replica that node holds, which [`properties::replicas::judge`] compares with the
//! leader's. Only the stream's current peer set is looked at, and only while the stream
//! says every replica is current; nodes holding no replica are skipped.

use crate::nats::monitor::http_client;
use properties::durable::ConsumerReplica;
use properties::replicas::{judge, Agreement, ReplicaState};
use properties::scale::StreamInfoView;
use serde_json::Value;

/// Asks the nodes; keeps each monitoring URL's server name once learnt.
pub struct ReplicaProbe {
    http: reqwest::Client,
    urls: Vec<String>,
    names: Vec<Option<String>>,
}

/// One comparison.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicaLook {
    /// The stream does not say every replica is current: nothing to compare yet.
    NotSettled(String),
    /// A node of the peer set did not answer.
    Unobserved(String),
    Compared { leader: ReplicaState, followers: Vec<ReplicaState>, agreement: Agreement },
}

impl ReplicaProbe {
    pub fn new(monitor_urls: &[String]) -> Self {
        Self { http: http_client(), urls: monitor_urls.to_vec(), names: vec![None; monitor_urls.len()] }
    }

    /// Whether there is anything to ask (no monitoring URLs: the check cannot run).
    pub fn enabled(&self) -> bool {
        !self.urls.is_empty()
    }

    /// Compares every current replica of `stream` with its leader, as `info` (the leader's
    /// STREAM.INFO) lists them. `at_rest`: nothing writes to the stream any more.
    pub async fn compare(&mut self, stream: &str, info: &StreamInfoView, at_rest: bool) -> ReplicaLook {
        let Some(cluster) = &info.cluster else { return ReplicaLook::NotSettled("no cluster information".into()) };
        let leader = cluster.leader.clone().unwrap_or_default();
        if leader.is_empty() {
            return ReplicaLook::NotSettled("no leader".into());
        }
        if cluster.desired.is_some() {
            return ReplicaLook::NotSettled("desired-state change pending".into());
        }
        if let Some(r) = cluster.replicas.iter().find(|r| !r.current || r.offline) {
            return ReplicaLook::NotSettled(format!("replica {} not current", r.name));
        }
        match self.states(stream, info).await {
            Ok((leader, followers)) => {
                let agreement = judge(&leader, &followers, at_rest);
                ReplicaLook::Compared { leader, followers, agreement }
            }
            Err(e) => ReplicaLook::Unobserved(e),
        }
    }

    /// What the leader and every replica `info` lists hold, each read from its own node,
    /// whether or not the leader calls them current.
    pub async fn states(&mut self, stream: &str, info: &StreamInfoView) -> Result<(ReplicaState, Vec<ReplicaState>), String> {
        let cluster = info.cluster.as_ref().ok_or("no cluster information")?;
        let leader = cluster.leader.as_deref().filter(|l| !l.is_empty()).ok_or("no leader")?;
        let mut states = Vec::new();
        for peer in std::iter::once(leader).chain(cluster.replicas.iter().map(|r| r.name.as_str())) {
            match self.state_on(peer, stream).await? {
                Some(s) => states.push(s),
                None => return Err(format!("{peer} holds no replica of {stream} although the leader lists it")),
            }
        }
        let leader = states.remove(0);
        Ok((leader, states))
    }

    /// Each peer `info` lists (leader and replicas) with the last sequence its own node
    /// holds, for [`properties::scale::CatchUp`]; `None` when a peer did not answer.
    pub async fn catch_up_look(&mut self, stream: &str, info: &StreamInfoView) -> Option<Vec<(String, u64)>> {
        let cluster = info.cluster.as_ref()?;
        let leader = cluster.leader.as_deref().filter(|l| !l.is_empty());
        let mut peers = Vec::new();
        for peer in leader.into_iter().chain(cluster.replicas.iter().map(|r| r.name.as_str())) {
            peers.push((peer.to_string(), self.state_on(peer, stream).await.ok()?.map_or(0, |s| s.last_seq)));
        }
        Some(peers)
    }

    /// The meta leader, as the first node that answers `/jsz` names it.
    pub async fn meta_leader(&self) -> Option<String> {
        for url in &self.urls {
            if let Ok(jsz) = self.get(&format!("{url}/jsz")).await {
                return jsz["meta_cluster"]["leader"].as_str().map(str::to_string);
            }
        }
        None
    }

    /// The state of `stream`'s replica on the node named `name`.
    pub async fn state_on(&mut self, name: &str, stream: &str) -> Result<Option<ReplicaState>, String> {
        let jsz = self.jsz_on(name, "accounts=true&streams=true").await?;
        Ok(replica_in(&jsz, name, stream))
    }

    /// The state of `consumer` (of `stream`) as the node named `name` stores it.
    pub async fn consumer_on(&mut self, name: &str, stream: &str, consumer: &str) -> Result<Option<ConsumerReplica>, String> {
        let jsz = self.jsz_on(name, "accounts=true&streams=true&consumers=true").await?;
        Ok(consumer_in(&jsz, name, stream, consumer))
    }

    /// The `/jsz?<query>` answer of the node named `name`.
    async fn jsz_on(&mut self, name: &str, query: &str) -> Result<Value, String> {
        let i = self.index_of(name).await?;
        self.get(&format!("{}/jsz?{query}", self.urls[i])).await
    }

    /// The monitoring URL of the node named `name` (asks each unnamed node's /varz; a
    /// name seen nowhere makes every node be asked again: a node may have come back under
    /// a new name after a membership change).
    async fn index_of(&mut self, name: &str) -> Result<usize, String> {
        if !self.names.iter().any(|n| n.as_deref() == Some(name)) {
            self.names.iter_mut().for_each(|n| *n = None);
        }
        for i in 0..self.urls.len() {
            if self.names[i].is_none() {
                if let Ok(varz) = self.get(&format!("{}/varz", self.urls[i])).await {
                    self.names[i] = varz["server_name"].as_str().map(str::to_string);
                }
            }
            if self.names[i].as_deref() == Some(name) {
                return Ok(i);
            }
        }
        Err(format!("no monitoring endpoint answers as {name}"))
    }

    async fn get(&self, url: &str) -> Result<Value, String> {
        crate::nats::monitor::get_json(&self.http, url).await
    }
}

/// The replica of `stream` in one node's `/jsz?accounts=true&streams=true` answer.
pub fn replica_in(jsz: &Value, node: &str, stream: &str) -> Option<ReplicaState> {
    let st = &stream_detail(jsz, stream)?["state"];
    let n = |k: &str| st[k].as_u64().unwrap_or(0);
    Some(ReplicaState {
        node: node.to_string(),
        first_seq: n("first_seq"),
        last_seq: n("last_seq"),
        messages: n("messages"),
        num_deleted: n("num_deleted"),
        bytes: n("bytes"),
    })
}

/// The meta group's members as node `node` sees them in its `/jsz` answer: the leader,
/// the replicas it lists and itself; `None` while it knows no meta leader.
pub fn meta_members(jsz: &Value, node: &str) -> Option<std::collections::BTreeSet<String>> {
    let meta = &jsz["meta_cluster"];
    let leader = meta["leader"].as_str().filter(|l| !l.is_empty())?;
    let replicas = meta["replicas"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str());
    Some([leader, node].into_iter().chain(replicas).map(str::to_string).collect())
}

/// The replica of `consumer` in one node's `/jsz?accounts=true&streams=true&consumers=true`.
pub fn consumer_in(jsz: &Value, node: &str, stream: &str, consumer: &str) -> Option<ConsumerReplica> {
    let c = stream_detail(jsz, stream)?["consumer_detail"].as_array()?.iter().find(|c| c["name"] == consumer)?;
    let n = |path: &str| c.pointer(path).and_then(Value::as_u64).unwrap_or(0);
    Some(ConsumerReplica { node: node.to_string(), delivered: n("/delivered/stream_seq"), ack_floor: n("/ack_floor/stream_seq") })
}

/// `stream`'s entry in a node's `/jsz?accounts=true&streams=true` answer, in any account.
fn stream_detail<'a>(jsz: &'a Value, stream: &str) -> Option<&'a Value> {
    let accounts = jsz["account_details"].as_array()?;
    accounts.iter().flat_map(|a| a["stream_detail"].as_array().into_iter().flatten()).find(|s| s["name"] == stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_members_are_the_leader_the_listed_replicas_and_the_node_itself() {
        let jsz: Value = serde_json::from_str(r#"{"meta_cluster":{"name":"workload","leader":"n1","replicas":[
            {"name":"n3","current":true},{"name":"n4-2","current":false,"offline":true}],"cluster_size":4}}"#).unwrap();
        let members = meta_members(&jsz, "n2").unwrap();
        assert_eq!(members.into_iter().collect::<Vec<_>>(), ["n1", "n2", "n3", "n4-2"]);
        let leaderless: Value = serde_json::from_str(r#"{"meta_cluster":{"leader":"","replicas":[{"name":"n3"}]}}"#).unwrap();
        assert_eq!(meta_members(&leaderless, "n2"), None, "no leader: its list is not to be trusted");
        assert_eq!(meta_members(&serde_json::json!({}), "n2"), None);
    }

    /// Recorded from a 2.15.1 node (trimmed).
    #[test]
    fn reads_a_nodes_own_replica_from_jsz() {
        let jsz: Value = serde_json::from_str(r#"{"server_id":"N1","account_details":[{"name":"$G","stream_detail":[
            {"name":"OTHER","state":{"messages":1,"first_seq":1,"last_seq":1}},
            {"name":"WORKLOAD_x","cluster":{"leader":"n2","replicas":[{"name":"n2","current":true}]},
             "state":{"messages":125715,"bytes":44658040,"first_seq":1,"last_seq":125716,"num_deleted":1,"num_subjects":1}}]}]}"#).unwrap();
        let r = replica_in(&jsz, "n1", "WORKLOAD_x").unwrap();
        assert_eq!((r.first_seq, r.last_seq, r.messages, r.num_deleted, r.bytes), (1, 125716, 125715, 1, 44658040));
        assert_eq!(r.node, "n1");
        assert_eq!(replica_in(&jsz, "n1", "WORKLOAD_y"), None, "no replica held here");
        assert_eq!(replica_in(&serde_json::json!({}), "n1", "WORKLOAD_x"), None);
    }
}
