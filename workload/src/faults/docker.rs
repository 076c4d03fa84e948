//! Node containers as fault targets, through the Docker Engine API (the socket is mounted
//! only by docker-compose.faults.yaml): kill and start again, pause and unpause, a graceful
//! restart, and isolation by disconnecting a container from its network (reconnected with
//! its DNS aliases, so peers find it by service name again).

use crate::config::FaultKind;
use anyhow::Context;
use bollard::container::{InspectContainerOptions, KillContainerOptions, ListContainersOptions, RestartContainerOptions, StartContainerOptions};
use bollard::models::EndpointSettings;
use bollard::network::{ConnectNetworkOptions, DisconnectNetworkOptions};
use bollard::Docker;
use serde_json::{json, Value};
use std::collections::HashMap;

const PROJECT_LABEL: &str = "com.docker.compose.project";
const SERVICE_LABEL: &str = "com.docker.compose.service";

/// One node's container.
pub struct NodeContainer {
    /// The compose service name (the host name in the client URLs).
    pub name: String,
    id: String,
    network: String,
    aliases: Vec<String>,
}

pub struct DockerNodes {
    docker: Docker,
    pub nodes: Vec<NodeContainer>,
}

impl DockerNodes {
    /// Split needs a network of its own for the minority; latency needs tc in the node
    /// image. Neither is drawn here.
    pub fn supports(kind: FaultKind) -> bool {
        matches!(kind, FaultKind::Kill | FaultKind::Pause | FaultKind::Restart | FaultKind::Isolate)
    }

    /// The containers of `services` in the compose project of the container this process
    /// runs in.
    pub async fn discover(services: &[String]) -> anyhow::Result<DockerNodes> {
        let docker = Docker::connect_with_local_defaults()
            .context("no Docker Engine API")?
            .negotiate_version()
            .await
            .context("cannot reach the Docker Engine API: is /var/run/docker.sock mounted (docker-compose.faults.yaml does)?")?;
        let me = std::fs::read_to_string("/etc/hostname").context("cannot read /etc/hostname")?;
        let own = docker.inspect_container(me.trim(), None::<InspectContainerOptions>).await.context("cannot inspect this container: docker faults run inside a compose service")?;
        let project = own
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get(PROJECT_LABEL).cloned())
            .context("this container has no compose project label")?;
        let label = format!("{PROJECT_LABEL}={project}");
        let filters = HashMap::from([("label".to_string(), vec![label])]);
        let listed = docker.list_containers(Some(ListContainersOptions::<String> { all: true, filters, ..Default::default() })).await?;
        let mut nodes = Vec::new();
        for service in services {
            let summary = listed
                .iter()
                .find(|c| c.labels.as_ref().and_then(|l| l.get(SERVICE_LABEL)) == Some(service))
                .with_context(|| format!("no container of service {service} in compose project {project}"))?;
            let id = summary.id.clone().context("container without an id")?;
            let inspected = docker.inspect_container(&id, None::<InspectContainerOptions>).await?;
            let networks = inspected.network_settings.and_then(|n| n.networks).unwrap_or_default();
            let (network, endpoint) = networks.into_iter().next().with_context(|| format!("{service} is on no network"))?;
            let mut aliases = endpoint.aliases.unwrap_or_default();
            if !aliases.contains(service) {
                aliases.push(service.clone());
            }
            nodes.push(NodeContainer { name: service.clone(), id, network, aliases });
        }
        tracing::info!(project, nodes = ?services, "docker fault injector: node containers found");
        Ok(DockerNodes { docker, nodes })
    }

    /// Puts a fault in place; what the log should show.
    pub async fn apply(&mut self, kind: FaultKind, nodes: &[usize], lame_duck: bool) -> Value {
        let mut results = Vec::new();
        for &i in nodes {
            let n = &self.nodes[i];
            let r = match kind {
                FaultKind::Kill => self.docker.kill_container(&n.id, Some(KillContainerOptions { signal: "SIGKILL" })).await,
                FaultKind::Pause => self.docker.pause_container(&n.id).await,
                FaultKind::Restart if lame_duck => self.lame_duck_restart(&n.id).await,
                // Docker sends SIGTERM, then SIGKILL after t seconds.
                FaultKind::Restart => self.docker.restart_container(&n.id, Some(RestartContainerOptions { t: 40 })).await,
                FaultKind::Isolate | FaultKind::Split => {
                    let opts = DisconnectNetworkOptions { container: n.id.as_str(), force: true };
                    self.docker.disconnect_network(&n.network, opts).await
                }
                // Not supported here (`supports`): never drawn.
                FaultKind::Latency | FaultKind::Membership => Ok(()),
            };
            results.push(r.err().map(|e| e.to_string()));
        }
        let how = matches!(kind, FaultKind::Restart).then(|| if lame_duck { "lame-duck" } else { "sigterm" });
        json!({ "how": how, "errors": results.into_iter().flatten().collect::<Vec<_>>() })
    }

    /// SIGUSR2 (lame-duck mode: the server hands off and exits by itself after
    /// lame_duck_duration, 30 s in config/nats), then a start. A server still running after
    /// 45 s is killed first, as the local injector does: starting a running container does
    /// nothing, and the server would exit later with nobody to start it again.
    async fn lame_duck_restart(&self, id: &str) -> Result<(), bollard::errors::Error> {
        self.docker.kill_container(id, Some(KillContainerOptions { signal: "SIGUSR2" })).await?;
        if !self.wait_stopped(id, 45).await? {
            tracing::warn!(container = id, "still running 45 s after lame-duck mode: killed");
            self.docker.kill_container(id, Some(KillContainerOptions { signal: "SIGKILL" })).await?;
            self.wait_stopped(id, 15).await?;
        }
        self.docker.start_container(id, None::<StartContainerOptions<String>>).await
    }

    /// Whether the container stopped running within `secs` seconds.
    async fn wait_stopped(&self, id: &str, secs: u64) -> Result<bool, bollard::errors::Error> {
        for _ in 0..secs {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let state = self.docker.inspect_container(id, None::<InspectContainerOptions>).await?.state;
            if !state.and_then(|s| s.running).unwrap_or(false) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Node containers that are not running although no fault holds them down, each with
    /// what Docker says of it, after starting it again (called when every fault is healed).
    pub async fn start_stopped(&self) -> Vec<Value> {
        let mut found = Vec::new();
        for n in &self.nodes {
            let Ok(inspected) = self.docker.inspect_container(&n.id, None::<InspectContainerOptions>).await else { continue };
            let Some(state) = inspected.state else { continue };
            if state.running == Some(true) {
                continue;
            }
            let started = self.docker.start_container(&n.id, None::<StartContainerOptions<String>>).await;
            found.push(json!({ "node": n.name, "status": format!("{:?}", state.status), "exit_code": state.exit_code,
                               "finished_at": state.finished_at, "oom_killed": state.oom_killed, "error": state.error,
                               "start_error": started.err().map(|e| e.to_string()) }));
        }
        found
    }

    /// Ends a fault: start, unpause or reconnect.
    pub async fn end(&mut self, kind: FaultKind, nodes: &[usize]) -> Value {
        let mut errors = Vec::new();
        for &i in nodes {
            let n = &self.nodes[i];
            let r = match kind {
                FaultKind::Kill => self.docker.start_container(&n.id, None::<StartContainerOptions<String>>).await,
                FaultKind::Pause => self.docker.unpause_container(&n.id).await,
                FaultKind::Isolate | FaultKind::Split => {
                    let endpoint_config = EndpointSettings { aliases: Some(n.aliases.clone()), ..Default::default() };
                    self.docker.connect_network(&n.network, ConnectNetworkOptions { container: n.id.as_str(), endpoint_config }).await
                }
                FaultKind::Restart | FaultKind::Latency | FaultKind::Membership => Ok(()),
            };
            if let Err(e) = r {
                errors.push(e.to_string());
            }
        }
        if errors.is_empty() { Value::Null } else { json!({ "errors": errors }) }
    }
}
