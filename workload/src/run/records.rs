//! What a Test Composer driver acknowledged, kept on the volume the commands share: each
//! driver records which stream it used and how far its acknowledgements got, so that the
//! eventually_ and finally_ commands can verify every stream from its record alone.

use crate::sdk;
use crate::context::state::{Ctx, Stats, Suspect};
use crate::run::verify::{final_verification, FinalCheck};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What one driver acknowledged: enough to verify its stream without it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub run_id: String,
    pub seed: u64,
    pub payload_size: usize,
    /// Every sequence up to this one was acknowledged (while the driver runs, a lower bound).
    pub last_acked: u64,
    /// The replica count requested last.
    pub replicas: u64,
    /// The driver stopped: nothing publishes to or scales the stream any more.
    pub finished: bool,
    /// Suspicions still open when the driver stopped: the verifying commands answer them.
    #[serde(default)]
    pub open_suspicions: Vec<Suspect>,
    /// The driver verified its finished stream in full (every check held) at this time
    /// (Unix ms); the stream stays until newer verified ones push it out.
    #[serde(default)]
    pub verified_at_ms: Option<u64>,
    /// The stream was verified in full and then deleted: nothing is left to look at (the
    /// record stays, for the report).
    #[serde(default)]
    pub retired: bool,
}

/// A record file that could not be read.
#[derive(Clone, Debug, Serialize)]
pub struct Unreadable {
    pub file: String,
    pub error: String,
}

/// The directory the commands share.
#[derive(Clone, Debug)]
pub struct StateDir(pub PathBuf);

impl StateDir {
    fn streams(&self) -> PathBuf {
        self.0.join("streams")
    }

    /// Replaces the record of `r.run_id` at once (a reader never sees half of one). Each
    /// write has a temporary file of its own (process and write number): two commands
    /// writing one record at once (both retiring it) would otherwise share one, and one could
    /// rename the other's half-written file into place.
    pub fn write(&self, r: &Record) -> anyhow::Result<()> {
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = self.streams();
        std::fs::create_dir_all(&dir)?;
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{}.{}-{n}.tmp", r.run_id, std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(r)?)?;
        std::fs::rename(&tmp, dir.join(format!("{}.json", r.run_id))).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        Ok(())
    }

    /// Every record, in run-id order (run ids are seed-derived, not chronological), and
    /// the files that could not be read as records (the others are still returned).
    pub fn records(&self) -> anyhow::Result<(Vec<Record>, Vec<Unreadable>)> {
        let dir = self.streams();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(e) => anyhow::bail!("cannot read {}: {e}", dir.display()),
        };
        let (mut records, mut bad) = (Vec::new(), Vec::new());
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json") {
                match read(&path) {
                    Ok(r) => records.push(r),
                    Err(error) => bad.push(Unreadable { file: path.display().to_string(), error }),
                }
            }
        }
        records.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        Ok((records, bad))
    }

    /// The record of `run_id` as it is now, if readable.
    pub fn record(&self, run_id: &str) -> Option<Record> {
        read(&self.streams().join(format!("{run_id}.json"))).ok()
    }
}

fn read(path: &std::path::Path) -> Result<Record, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// Writes the driver's record now.
pub fn record(ctx: &Ctx, state: &StateDir, finished: bool) -> anyhow::Result<()> {
    state.write(&current(ctx, finished))
}

fn current(ctx: &Ctx, finished: bool) -> Record {
    Record {
        run_id: ctx.run.run_id.clone(),
        seed: ctx.run.seed,
        payload_size: ctx.run.payload_size,
        last_acked: Stats::get(&ctx.stats.last_acked_seq),
        replicas: Stats::get(&ctx.stats.replicas),
        finished,
        open_suspicions: ctx.suspicions.open_now(),
        verified_at_ms: None,
        retired: false,
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The verified, unretired records beyond the newest `keep` (by verification time): the
/// streams to retire.
pub fn beyond_kept(records: &[Record], keep: usize) -> Vec<&Record> {
    let mut verified: Vec<&Record> = records.iter().filter(|r| !r.retired && r.verified_at_ms.is_some()).collect();
    verified.sort_by_key(|r| std::cmp::Reverse(r.verified_at_ms));
    verified.into_iter().skip(keep).collect()
}

/// A finished driver's own last word on its stream: the full final verification (without
/// pausing faults: other drivers go on). When every question held, the record says so, and
/// the verified streams beyond the newest `composer.keep_verified` are retired: each record
/// is marked retired first (so no command looks at the stream any more), then the stream
/// is deleted. The kept ones are judged again by anytime_, eventually_ and finally_ after
/// later faults; the retired ones keep a long timeline's verifying commands from growing
/// with it. A failed check leaves the stream for those commands, and so does a `stop` that
/// came meanwhile.
pub async fn check_and_retire(ctx: &Arc<Ctx>, state: &StateDir, stop: &tokio_util::sync::CancellationToken) -> FinalCheck {
    let check = final_verification(ctx, true, false).await;
    if !check.all_held() || stop.is_cancelled() {
        return check;
    }
    if let Err(e) = state.write(&Record { verified_at_ms: Some(unix_ms()), ..current(ctx, true) }) {
        tracing::warn!("cannot record {} verified: {e:#}", ctx.stream);
        return check;
    }
    let records = match state.records() {
        Ok((records, _)) => records,
        Err(e) => {
            tracing::warn!("cannot read the records to retire the oldest verified streams: {e:#}");
            return check;
        }
    };
    for r in beyond_kept(&records, ctx.cfg.composer.keep_verified) {
        if let Err(e) = state.write(&Record { retired: true, ..r.clone() }) {
            tracing::warn!("cannot mark {} retired: {e:#}", r.run_id);
            continue;
        }
        let (stream, _) = crate::context::state::names(&r.run_id);
        sdk::check!(Property::StreamRetiredAfterFullCheck, true, &json!({ "stream": stream, "last_acked": r.last_acked }));
        crate::run::verify::delete_named(ctx, &stream, "verified in full and deleted").await;
    }
    check
}

/// Keeps the driver's record current while it runs, so a driver that is killed still
/// leaves what it had acknowledged a moment before; until the publisher has ended (the
/// driver records the last of it then).
pub async fn record_while_running(ctx: Arc<Ctx>, state: StateDir) -> anyhow::Result<()> {
    loop {
        if let Err(e) = record(&ctx, &state, false) {
            tracing::warn!("cannot record the run in {}: {e:#}", state.0.display());
        }
        tokio::select! {
            _ = ctx.cancel.cancelled() => return Ok(()),
            _ = ctx.published.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// How many composer command outputs `runs/` keeps: a long Antithesis timeline runs
/// thousands of commands, each writing a directory of its own on the shared volume.
pub const KEEP_RUNS: usize = 200;

/// Deletes the oldest command outputs in `runs` (named `<command>-<unix ms>-<pid>`) beyond
/// the newest `keep`, sparing the entrypoint's (it runs for the whole timeline) and any
/// touched in the last ten minutes (a command still running). Returns how many went.
pub fn prune_oldest(runs: &std::path::Path, keep: usize) -> usize {
    let Ok(entries) = std::fs::read_dir(runs) else { return 0 };
    let mut dirs: Vec<(u128, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let millis = name.rsplit('-').nth(1)?.parse().ok()?;
            (!name.starts_with("entrypoint-")).then(|| (millis, e.path()))
        })
        .collect();
    dirs.sort();
    let recent = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age < Duration::from_secs(600)));
    let excess = dirs.len().saturating_sub(keep);
    dirs.into_iter().take(excess).filter(|(_, p)| !recent(p) && std::fs::remove_dir_all(p).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_oldest_finished_command_outputs_beyond_the_newest_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        for (name, aged) in [("driver-1000-7", true), ("entrypoint-900-1", true), ("anytime-2000-8", true), ("operator-1500-9", false), ("eventually-3000-3", true), ("notes", true)] {
            let p = dir.path().join(name);
            std::fs::create_dir(&p).unwrap();
            if aged {
                std::fs::File::open(&p).unwrap().set_modified(old).unwrap();
            }
        }
        // Four numbered outputs besides the entrypoint's; keep 2: of the two oldest,
        // driver-1000 goes and operator-1500 (touched just now, maybe running) stays.
        assert_eq!(prune_oldest(dir.path(), 2), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
        left.sort();
        assert_eq!(left, ["anytime-2000-8", "entrypoint-900-1", "eventually-3000-3", "notes", "operator-1500-9"]);
        assert_eq!(prune_oldest(&dir.path().join("absent"), 2), 0);
    }

    /// Two commands retiring one record at once (issue 39: they shared one temporary file,
    /// so one could rename the other's half-written file into place and a reader failed
    /// `driver-record-unreadable`): a reader beside them only ever finds whole records.
    #[test]
    fn writers_of_one_record_at_once_never_leave_it_torn() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir(dir.path().to_path_buf());
        let r = Record { run_id: "r1".into(), seed: 7, payload_size: 128, last_acked: 42, replicas: 3, finished: true, open_suspicions: vec![], verified_at_ms: Some(1), retired: false };
        state.write(&r).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (state, r) = (state.clone(), r.clone());
                std::thread::spawn(move || {
                    for i in 0..400 {
                        // Records of different sizes, so a torn one would not parse.
                        let open_suspicions = if (i + w) % 2 == 0 { vec![] } else { vec![crate::context::state::Suspect::PublishStreamBehind; 50] };
                        state.write(&Record { retired: true, last_acked: 42 + i, open_suspicions, ..r.clone() }).unwrap();
                    }
                })
            })
            .collect();
        let reader = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut looks = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (records, bad) = state.records().unwrap();
                    assert!(bad.is_empty(), "a torn record: {bad:?}");
                    assert_eq!(records.len(), 1);
                    looks += 1;
                }
                looks
            })
        };
        writers.into_iter().for_each(|w| w.join().unwrap());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        let left: Vec<_> = std::fs::read_dir(dir.path().join("streams")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["r1.json"], "no temporary file left behind");
    }

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir(dir.path().to_path_buf());
        assert!(state.records().unwrap().0.is_empty(), "no driver ran yet");
        let r = Record { run_id: "b1".into(), seed: 7, payload_size: 128, last_acked: 42, replicas: 3, finished: false, open_suspicions: vec![], verified_at_ms: None, retired: false };
        state.write(&r).unwrap();
        state.write(&Record { last_acked: 43, finished: true, ..r.clone() }).unwrap();
        state.write(&Record { run_id: "a0".into(), ..r.clone() }).unwrap();
        let (got, bad) = state.records().unwrap();
        assert_eq!(got.iter().map(|r| (r.run_id.as_str(), r.last_acked)).collect::<Vec<_>>(), [("a0", 42), ("b1", 43)]);
        assert!(bad.is_empty());
        std::fs::write(dir.path().join("streams/c2.json"), "{\"run_id\": 1}").unwrap();
        let (got, bad) = state.records().unwrap();
        assert_eq!(got.len(), 2, "the readable ones are still there");
        assert!(bad[0].file.ends_with("c2.json"), "{bad:?}");
        assert_eq!(state.record("b1").unwrap().last_acked, 43);
    }
}
