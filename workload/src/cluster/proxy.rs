//! TCP link proxies on 127.0.0.1: the local cluster's network.
//!
//! Every route between two nodes and every client connection to a node passes through a
//! [`Link`]. Cutting a link closes its connections and refuses new ones (a firewall
//! REJECT), which the servers notice at once; a delay holds every chunk for a fixed time
//! in each direction without limiting throughput. Healing restores both.

use super::forge::{Frame, Parser, Rule};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One proxied link: a listening port forwarding to `upstream`.
pub struct Link {
    pub name: String,
    pub port: u16,
    state: Arc<LinkState>,
    accept: JoinHandle<()>,
}

struct LinkState {
    cut: AtomicBool,
    delay_ms: AtomicU64,
    /// Bumped on every cut: open connections watch it and close.
    generation: watch::Sender<u64>,
    /// Test-only: rewrites what the upstream (a server) sends to clients ([`Link::forge`]).
    forge: Mutex<Option<Rule>>,
}

impl Link {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream` (127.0.0.1:port).
    pub async fn start(name: String, upstream: u16) -> std::io::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(LinkState { cut: AtomicBool::new(false), delay_ms: AtomicU64::new(0), generation: watch::channel(0).0, forge: Mutex::new(None) });
        let accept = tokio::spawn(accept_loop(listener, upstream, state.clone()));
        Ok(Link { name, port, state, accept })
    }

    /// Closes every connection and refuses new ones until healed.
    pub fn cut(&self) {
        self.state.cut.store(true, Relaxed);
        self.state.generation.send_modify(|g| *g += 1);
    }

    /// Holds every chunk for `delay` in each direction.
    pub fn delay(&self, delay: Duration) {
        self.state.delay_ms.store(delay.as_millis() as u64, Relaxed);
    }

    pub fn heal(&self) {
        self.state.cut.store(false, Relaxed);
        self.state.delay_ms.store(0, Relaxed);
    }

    /// Test-only: every connection opened from now on passes what the server sends through
    /// `rule` (see [`super::forge`]).
    pub fn forge(&self, rule: Rule) {
        if let Ok(mut f) = self.state.forge.lock() {
            *f = Some(rule);
        }
    }

    pub fn is_cut(&self) -> bool {
        self.state.cut.load(Relaxed)
    }

    pub fn delay_ms(&self) -> u64 {
        self.state.delay_ms.load(Relaxed)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut(); // closes the connections' tasks too
    }
}

async fn accept_loop(listener: TcpListener, upstream: u16, state: Arc<LinkState>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else { continue };
        if state.cut.load(Relaxed) {
            drop(inbound); // refused: closed at once
            continue;
        }
        tokio::spawn(serve(inbound, upstream, state.clone()));
    }
}

async fn serve(inbound: TcpStream, upstream: u16, state: Arc<LinkState>) {
    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let mut cut = state.generation.subscribe();
    cut.mark_unchanged();
    let (ri, wi) = inbound.into_split();
    let (ro, wo) = outbound.into_split();
    let forge = state.forge.lock().ok().and_then(|f| f.clone());
    tokio::select! {
        _ = pipe(ri, wo, state.clone(), None) => {}
        _ = pipe(ro, wi, state.clone(), forge) => {}
        _ = cut.changed() => {}
    }
}

/// Copies one direction, each chunk held for the link's current delay; with a forging
/// rule, what is copied is the rule's answer to each whole protocol frame.
async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, state: Arc<LinkState>, forge: Option<Rule>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(1024);
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            // Only touch the timer for a real delay: even a deadline already passed waits
            // for the timer's next millisecond tick, which throttled every hop.
            if due > tokio::time::Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut parser = Parser::default();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = tokio::time::Instant::now() + Duration::from_millis(state.delay_ms.load(Relaxed));
            let chunk = match &forge {
                None => buf[..n].to_vec(),
                Some(rule) => forged(&mut parser, rule, &buf[..n]),
            };
            if tx.send((due, chunk)).await.is_err() {
                break;
            }
        }
    };
    // Either side ending ends the direction; the writer drains what was read first.
    tokio::join!(reader, writer);
}

/// The rule's answer to every frame `bytes` completes.
fn forged(parser: &mut Parser, rule: &Rule, bytes: &[u8]) -> Vec<u8> {
    parser.push(bytes);
    let mut out = Vec::new();
    while let Some(frame) = parser.next_frame() {
        let answer: Vec<Frame> = match rule.lock() {
            Ok(mut r) => (*r)(frame),
            Err(_) => vec![frame],
        };
        answer.iter().for_each(|f| f.encode(&mut out));
    }
    out
}
