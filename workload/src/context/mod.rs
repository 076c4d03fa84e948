//! What the drivers of one stream share: the run context (`Ctx`: config, counters, open
//! suspicions), the bounded liveness windows every wait goes through, the operations'
//! tally, and the streams a run drives now.

pub mod ops;
pub mod retry;
pub mod state;
pub mod streams;
