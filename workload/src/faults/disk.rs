//! Disk faults on a stopped node's JetStream store (seed 002: Jepsen lost acknowledged
//! writes to one flipped bit or a truncation in a minority's files, and lost streams to a
//! snapshot rolled back). Plain file operations on the store directory, so the local
//! injector (the node's data dir) and the Docker one (the node's volume, mounted by
//! docker-compose.faults.yaml) share them. Every touch is returned for the fault log: the
//! file, what was done, where and how much.

use rand::Rng;
use serde::Serialize;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// One change made to one file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Touch {
    /// Relative to the store directory.
    pub file: String,
    /// "flip", "truncate" or "restore".
    pub op: &'static str,
    /// Bits flipped, as (byte offset, bit).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bits: Vec<(u64, u8)>,
    pub size_before: u64,
    pub size_after: u64,
    /// Whether the file belongs to the run's stream (its store or its Raft group), rather
    /// than to the meta layer.
    pub stream_file: bool,
}

/// What the stream's files are, for drawing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// Message blocks (`msgs/*.blk`).
    Block,
    /// Indexes and state (`index.db`, `*.idx`, `meta.inf`, `meta.sum`).
    Index,
    /// The Raft group's log and snapshots.
    Raft,
}

/// The files of `stream` in the store at `store` (the server's `store_dir`): its message
/// blocks and index, and its Raft group's files, with their class.
fn stream_files(store: &Path, stream: &str) -> Vec<(PathBuf, Class)> {
    let accounts = dirs(&store.join("jetstream"));
    let mut out = Vec::new();
    for own in accounts.iter().map(|a| a.join("streams").join(stream)).filter(|d| d.is_dir()) {
        // The consumers' state (obs/) is not the stream's.
        for f in files_under(&own).into_iter().filter(|f| !f.starts_with(own.join("obs"))) {
            let class = if f.extension().is_some_and(|e| e == "blk") { Class::Block } else { Class::Index };
            out.push((f, class));
        }
    }
    // A node without the stream's store holds none of its Raft groups worth touching. The
    // groups (S-…, under the system account) are the run's stream's: the only one here.
    if !out.is_empty() {
        for group in accounts.iter().flat_map(|a| dirs(&a.join("_js_"))).filter(|g| g.file_name().is_some_and(|n| n.to_string_lossy().starts_with("S-"))) {
            out.extend(files_under(&group).into_iter().map(|f| (f, Class::Raft)));
        }
    }
    out.sort();
    out
}

fn dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    out.sort();
    out
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if path.is_file() {
            out.push(path);
        }
    }
    out
}

fn relative(store: &Path, file: &Path) -> String {
    file.strip_prefix(store).unwrap_or(file).display().to_string()
}

/// Flips a few bits in, or truncates, one of the stream's files on a stopped node: a
/// message block most often (the last one, where the newest writes are, half the time),
/// else an index or a Raft file. Nothing to touch: no touch (the node holds no copy).
pub fn corrupt(store: &Path, stream: &str, rng: &mut impl Rng) -> std::io::Result<Vec<Touch>> {
    let files = stream_files(store, stream);
    let of = |class: Class| files.iter().filter(|(_, c)| *c == class).map(|(f, _)| f.clone()).collect::<Vec<_>>();
    let roll = rng.gen::<f64>();
    let wanted = if roll < 0.6 { Class::Block } else if roll < 0.85 { Class::Index } else { Class::Raft };
    let Some((class, pool)) = [wanted, Class::Block, Class::Index, Class::Raft].into_iter().map(|c| (c, of(c))).find(|(_, p)| !p.is_empty()) else {
        return Ok(Vec::new());
    };
    let newest = || pool.iter().max_by_key(|f| f.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)).cloned();
    // Half the time the newest block: the highest number, where the latest writes are.
    let file = match newest() {
        Some(f) if class == Class::Block && rng.gen_bool(0.5) => f,
        _ => pool[rng.gen_range(0..pool.len())].clone(),
    };
    let size = fs::metadata(&file)?.len();
    let touch = if size > 0 && rng.gen_bool(0.7) { flip(&file, size, rng)? } else { truncate(&file, size, rng)? };
    Ok(vec![Touch { file: relative(store, &file), stream_file: true, ..touch }])
}

/// Flips one to four bits at random offsets.
fn flip(file: &Path, size: u64, rng: &mut impl Rng) -> std::io::Result<Touch> {
    let mut f = fs::OpenOptions::new().read(true).write(true).open(file)?;
    let mut bits = Vec::new();
    for _ in 0..rng.gen_range(1..=4) {
        let (offset, bit) = (rng.gen_range(0..size), rng.gen_range(0..8u8));
        let mut byte = [0u8];
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(&mut byte)?;
        byte[0] ^= 1 << bit;
        f.seek(SeekFrom::Start(offset))?;
        f.write_all(&byte)?;
        bits.push((offset, bit));
    }
    f.sync_all()?;
    Ok(Touch { file: String::new(), op: "flip", bits, size_before: size, size_after: size, stream_file: false })
}

/// Cuts the file at a random length (possibly 0).
fn truncate(file: &Path, size: u64, rng: &mut impl Rng) -> std::io::Result<Touch> {
    let to = if size == 0 { 0 } else { rng.gen_range(0..size) };
    let f = fs::OpenOptions::new().write(true).open(file)?;
    f.set_len(to)?;
    f.sync_all()?;
    Ok(Touch { file: String::new(), op: "truncate", bits: Vec::new(), size_before: size, size_after: to, stream_file: false })
}

/// Copies of nodes' Raft snapshots taken earlier in the run, one per server name, to roll
/// a node back to.
pub struct SnapshotCopies {
    dir: PathBuf,
}

/// The snapshot directories of every Raft group (the meta layer's and the stream's), as
/// paths relative to the store.
fn snapshot_dirs(store: &Path) -> Vec<PathBuf> {
    let js = store.join("jetstream");
    dirs(&js).iter().flat_map(|account| dirs(&account.join("_js_"))).map(|g| g.join("snapshots")).filter(|d| d.is_dir()).filter_map(|d| d.strip_prefix(store).ok().map(Path::to_path_buf)).collect()
}

impl SnapshotCopies {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn of(&self, server: &str) -> PathBuf {
        self.dir.join(server)
    }

    /// Replaces the copy of `server` with what its store holds now. A snapshot being
    /// written as it is copied may come out partial: that is corruption too.
    pub fn take(&self, server: &str, store: &Path) -> std::io::Result<usize> {
        let to = self.of(server);
        if to.exists() {
            fs::remove_dir_all(&to)?;
        }
        let mut copied = 0;
        for rel in snapshot_dirs(store) {
            fs::create_dir_all(to.join(&rel))?;
            for f in files_under(&store.join(&rel)) {
                if let Some(name) = f.file_name() {
                    if fs::copy(&f, to.join(&rel).join(name)).is_ok() {
                        copied += 1;
                    }
                }
            }
        }
        Ok(copied)
    }

    /// Whether a copy of `server` exists.
    pub fn has(&self, server: &str) -> bool {
        self.of(server).is_dir()
    }

    /// A stopped node's snapshots rolled back to the copy: every snapshot directory the
    /// copy has is emptied and refilled from it, where the two differ. `stream` tells the
    /// stream's groups (S-…) from the meta layer's.
    pub fn roll_back(&self, server: &str, store: &Path) -> std::io::Result<Vec<Touch>> {
        let from = self.of(server);
        let mut touches = Vec::new();
        for rel in snapshot_dirs(&from) {
            let (old, now) = (from.join(&rel), store.join(&rel));
            let names = |d: &Path| -> Vec<(String, Vec<u8>)> {
                let mut v: Vec<(String, Vec<u8>)> = files_under(d).iter().filter_map(|f| Some((f.file_name()?.to_string_lossy().to_string(), fs::read(f).ok()?))).collect();
                v.sort();
                v
            };
            let (old_files, now_files) = (names(&old), names(&now));
            if old_files == now_files {
                continue;
            }
            let stream_file = rel.components().any(|c| c.as_os_str().to_string_lossy().starts_with("S-"));
            for (name, bytes) in &now_files {
                fs::remove_file(now.join(name))?;
                if !old_files.iter().any(|(n, _)| n == name) {
                    touches.push(Touch { file: relative(store, &now.join(name)), op: "remove", bits: Vec::new(), size_before: bytes.len() as u64, size_after: 0, stream_file });
                }
            }
            fs::create_dir_all(&now)?;
            for (name, bytes) in &old_files {
                fs::write(now.join(name), bytes)?;
                let before = now_files.iter().find(|(n, _)| n == name).map_or(0, |(_, b)| b.len() as u64);
                touches.push(Touch { file: relative(store, &now.join(name)), op: "restore", bits: Vec::new(), size_before: before, size_after: bytes.len() as u64, stream_file });
            }
        }
        Ok(touches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A store laid out as nats-server lays it out, with one stream and its group.
    fn store() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let js = d.path().join("jetstream");
        let stream = js.join("APP/streams/WORKLOAD_x");
        fs::create_dir_all(stream.join("msgs")).unwrap();
        fs::create_dir_all(stream.join("obs/durable")).unwrap();
        for (f, n) in [("msgs/1.blk", 4096), ("msgs/2.blk", 4096), ("msgs/index.db", 64), ("meta.inf", 100), ("obs/durable/o.dat", 10)] {
            fs::write(stream.join(f), vec![0xAAu8; n]).unwrap();
        }
        for group in ["S-R3F-abc", "_meta_"] {
            let g = js.join("SYS/_js_").join(group);
            fs::create_dir_all(g.join("snapshots")).unwrap();
            fs::write(g.join("peers.idx"), b"peers").unwrap();
            fs::write(g.join("snapshots/snap.1.10"), format!("{group} at 10")).unwrap();
        }
        d
    }

    #[test]
    fn the_stream_files_are_its_blocks_index_and_raft_group_not_its_consumers() {
        let d = store();
        let files: Vec<String> = stream_files(d.path(), "WORKLOAD_x").iter().map(|(f, _)| relative(d.path(), f)).collect();
        assert!(files.contains(&"jetstream/APP/streams/WORKLOAD_x/msgs/2.blk".to_string()), "{files:?}");
        assert!(files.contains(&"jetstream/SYS/_js_/S-R3F-abc/peers.idx".to_string()));
        assert!(!files.iter().any(|f| f.contains("obs/") || f.contains("_meta_")), "{files:?}");
    }

    #[test]
    fn corruption_really_changes_the_file_it_names() {
        let d = store();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20 {
            let t = corrupt(d.path(), "WORKLOAD_x", &mut rng).unwrap().remove(0);
            let now = fs::read(d.path().join(&t.file)).unwrap();
            assert_eq!(now.len() as u64, t.size_after, "{t:?}");
            match t.op {
                "flip" => assert!(t.bits.iter().any(|&(o, _)| now[o as usize] != 0xAA), "{t:?}"),
                "truncate" => assert!(t.size_after < t.size_before || t.size_before == 0, "{t:?}"),
                other => panic!("{other}"),
            }
            fs::write(d.path().join(&t.file), vec![0xAAu8; t.size_before as usize]).unwrap();
        }
        assert!(corrupt(d.path(), "WORKLOAD_other", &mut rng).unwrap().is_empty(), "no copy, nothing touched");
    }

    #[test]
    fn a_rollback_puts_the_older_snapshots_back_and_removes_newer_ones() {
        let d = store();
        let copies = SnapshotCopies::new(d.path().join("copies"));
        let store = d.path().to_path_buf();
        assert_eq!(copies.take("n1", &store).unwrap(), 2);
        assert!(copies.roll_back("n1", &store).unwrap().is_empty(), "nothing changed since");
        let snaps = store.join("jetstream/SYS/_js_/_meta_/snapshots");
        fs::remove_file(snaps.join("snap.1.10")).unwrap();
        fs::write(snaps.join("snap.2.20"), "meta at 20").unwrap();
        let touches = copies.roll_back("n1", &store).unwrap();
        assert_eq!(touches.iter().map(|t| (t.op, t.file.rsplit('/').next().unwrap())).collect::<Vec<_>>(), vec![("remove", "snap.2.20"), ("restore", "snap.1.10")]);
        assert!(touches.iter().all(|t| !t.stream_file), "the meta layer's");
        assert_eq!(fs::read_to_string(snaps.join("snap.1.10")).unwrap(), "_meta_ at 10");
        assert!(!snaps.join("snap.2.20").exists());
        assert!(!copies.has("n2"));
    }
}
