//! The tasks that act on the cluster while a run goes on.
pub mod catch_up;
pub mod durable;
pub mod monitor;
pub mod operator;
pub mod outages;
pub mod publisher;
pub mod reader;

use crate::context::state::Ctx;
use std::sync::Arc;
use tokio::task::JoinSet;

/// Starts the publisher, the live reader and the stream monitor on `ctx`. The publisher and
/// the reader run until they have finished what was open when `finishing` came (see
/// [`finish`]), the monitor until `finishing`. The operator is separate: not every caller
/// runs one.
pub fn spawn_core(ctx: &Arc<Ctx>, tasks: &mut JoinSet<anyhow::Result<()>>) {
    tasks.spawn(on_stream(ctx, publisher::run(ctx.clone())));
    let c = ctx.clone();
    tasks.spawn(on_stream(ctx, async move { reader::read(&c, reader::Until::Cancelled, &c.stats.verified).await.map(drop) }));
    tasks.spawn(on_stream(ctx, monitor::run(until_finishing(ctx))));
    tasks.spawn(on_stream(ctx, outages::run(ctx.clone())));
}

/// `ctx` for a driver that has nothing to finish: it stops when the run's time is up.
pub fn until_finishing(ctx: &Ctx) -> Arc<Ctx> {
    Arc::new(ctx.with_cancel(&ctx.live.finishing, ctx.live.give_up))
}

/// Ends the drivers of the streams `ctxs` when the run's time is up: first `finishing`, on
/// which nothing new is started and what is open is finished (the publisher's sends not yet
/// acknowledged, each reader's catch-up to the last ack, the operator's operation), each
/// within its own liveness window; faults are paused by then. Whatever still runs after
/// `bound` without progress (no ack, no read, no delivery on any stream; at most ten times
/// `bound` in all) is stopped, and the windows it leaves are reported unknown. The first
/// error is returned.
pub async fn finish(ctxs: &[Arc<Ctx>], mut tasks: JoinSet<anyhow::Result<()>>, bound: std::time::Duration) -> anyhow::Result<()> {
    use crate::context::state::Stats;
    ctxs.iter().for_each(|c| c.live.finishing.cancel());
    let mut first = Ok(());
    let started = tokio::time::Instant::now();
    let progress = || ctxs.iter().map(|c| Stats::get(&c.stats.acked) + Stats::get(&c.stats.verified) + Stats::get(&c.stats.durable_delivered)).sum::<u64>();
    let (mut seen, mut deadline) = (progress(), started + bound);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tokio::select! {
            next = tasks.join_next() => match next {
                Some(res) => keep_first(&mut first, res),
                None => break,
            },
            _ = tick.tick() => {
                let now = progress();
                if now != seen {
                    seen = now;
                    deadline = (tokio::time::Instant::now() + bound).min(started + 10 * bound);
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(running = tasks.len(), "drivers still finishing after {bound:?} without progress: stopped (what they had open is unknown)");
                    break;
                }
            }
        }
    }
    ctxs.iter().for_each(|c| c.cancel.cancel());
    while let Some(res) = tasks.join_next().await {
        keep_first(&mut first, res);
    }
    first
}

fn keep_first(first: &mut anyhow::Result<()>, res: Result<anyhow::Result<()>, tokio::task::JoinError>) {
    let res = res.map_err(anyhow::Error::from).and_then(|r| r);
    if let Err(e) = &res {
        tracing::error!("driver ended with an error: {e:#}");
    }
    if first.is_ok() {
        *first = res;
    }
}

/// `f` as a driver of `ctx`'s stream: the properties it fails name that stream.
pub fn on_stream<F: std::future::Future>(ctx: &Ctx, f: F) -> impl std::future::Future<Output = F::Output> {
    crate::history::on_stream(ctx.stream.clone(), f)
}

/// Cancels `ctx` at once (nothing is finished: for measurements, not runs) and waits for
/// every task; the first error is returned.
pub async fn stop(ctx: &Ctx, tasks: JoinSet<anyhow::Result<()>>) -> anyhow::Result<()> {
    ctx.live.finishing.cancel(); // what stops there (the monitor) stops too
    ctx.cancel.cancel();
    join(tasks).await
}

/// Waits for every task (already told to stop); the first error is returned.
pub async fn join(mut tasks: JoinSet<anyhow::Result<()>>) -> anyhow::Result<()> {
    let mut first = Ok(());
    while let Some(res) = tasks.join_next().await {
        keep_first(&mut first, res);
    }
    first
}
