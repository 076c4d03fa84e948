//! The tasks that act on the cluster while a run goes on.
pub mod catch_up;
pub mod durable;
pub mod monitor;
pub mod operator;
pub mod publisher;
pub mod reader;

use crate::context::state::Ctx;
use std::sync::Arc;
use tokio::task::JoinSet;

/// Starts the publisher, the live reader and the stream monitor on `ctx`; they run until
/// `ctx.cancel`. The operator is separate: not every caller runs one.
pub fn spawn_core(ctx: &Arc<Ctx>, tasks: &mut JoinSet<anyhow::Result<()>>) {
    tasks.spawn(on_stream(ctx, publisher::run(ctx.clone())));
    let c = ctx.clone();
    tasks.spawn(on_stream(ctx, async move { reader::read(&c, reader::Until::Cancelled, &c.stats.verified).await.map(drop) }));
    tasks.spawn(on_stream(ctx, monitor::run(ctx.clone())));
}

/// `f` as a driver of `ctx`'s stream: the properties it fails name that stream.
pub fn on_stream<F: std::future::Future>(ctx: &Ctx, f: F) -> impl std::future::Future<Output = F::Output> {
    crate::history::on_stream(ctx.stream.clone(), f)
}

/// Cancels `ctx` and waits for every task; the first error is returned.
pub async fn stop(ctx: &Ctx, tasks: JoinSet<anyhow::Result<()>>) -> anyhow::Result<()> {
    ctx.cancel.cancel();
    join(tasks).await
}

/// Waits for every task (already told to stop); the first error is returned.
pub async fn join(mut tasks: JoinSet<anyhow::Result<()>>) -> anyhow::Result<()> {
    let mut first = Ok(());
    while let Some(res) = tasks.join_next().await {
        let res = res.map_err(anyhow::Error::from).and_then(|r| r);
        if let Err(e) = &res {
            tracing::error!("driver ended with an error: {e:#}");
        }
        if first.is_ok() {
            first = res;
        }
    }
    first
}
