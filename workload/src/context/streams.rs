//! The streams a run drives right now, and what the epochs it already finished counted.
//! A long run rotates to fresh streams (see `stream.rotate_after`), so the progress lines,
//! the timeline and the metrics read the run through this instead of holding contexts.

use crate::context::state::{Ctx, Stats};
use serde_json::Value;
use std::sync::{Arc, Mutex, RwLock};

pub struct Streams {
    now: RwLock<Vec<Arc<Ctx>>>,
    /// The counters of the contexts rotated out (one per stream and finished epoch).
    retired: Mutex<Vec<Arc<Stats>>>,
}

impl Streams {
    pub fn new(ctxs: Vec<Arc<Ctx>>) -> Arc<Self> {
        Arc::new(Self { now: RwLock::new(ctxs), retired: Mutex::default() })
    }

    /// The contexts of the current epoch (the first stream first).
    pub fn now(&self) -> Vec<Arc<Ctx>> {
        self.now.read().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn first(&self) -> Arc<Ctx> {
        self.now()[0].clone()
    }

    /// The next epoch's contexts replace the current ones, whose counters count on in the totals.
    pub fn rotate(&self, next: Vec<Arc<Ctx>>) {
        let Ok(mut now) = self.now.write() else { return };
        let old = std::mem::replace(&mut *now, next);
        if let Ok(mut r) = self.retired.lock() {
            r.extend(old.iter().map(|c| c.stats.clone()));
        }
    }

    /// `counter` summed over every stream of every epoch.
    pub fn total(&self, counter: impl Fn(&Stats) -> u64) -> u64 {
        let retired: u64 = self.retired.lock().map(|r| r.iter().map(|s| counter(s)).sum()).unwrap_or(0);
        retired + self.now().iter().map(|c| counter(&c.stats)).sum::<u64>()
    }

    /// Every counter over every stream of every epoch ([`Stats::total`]).
    pub fn totals(&self) -> Value {
        let retired = self.retired.lock().map(|r| r.clone()).unwrap_or_default();
        let now = self.now();
        Stats::total(retired.iter().map(|s| &**s).chain(now.iter().map(|c| &*c.stats)))
    }
}
