//! A power cut for one node's disk: a FUSE layer (on the `fuser` crate) mounted over a
//! node's data directory that passes everything through to a backing directory but keeps
//! what is written to a file volatile until that file is fsynced, as Jepsen's lazyfs does.
//! [`Mounted::lose_unsynced`] throws every unsynced write away: with the node killed at
//! the same moment, that is what a power cut leaves on a disk that honours fsync and
//! nothing more.
//!
//! What is volatile: file contents and sizes (writes and truncations). What is not:
//! creating, removing and renaming files and directories, which reach the backing
//! directory at once (a journaling filesystem commits such metadata on its own; a file
//! created and written but never fsynced therefore comes back empty, or short). Files are
//! opened with direct I/O, so the kernel's page cache never serves what was thrown away.
//! A file opened with O_SYNC or O_DSYNC is written through: each write is synced before it
//! returns, as the flag promises.

use fuser::consts::FOPEN_DIRECT_IO;
use fuser::{FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// No attribute or entry caching in the kernel: sizes change under it when writes are lost.
const TTL: Duration = Duration::ZERO;

/// What was written to one file and not fsynced yet, over its backing file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overlay {
    /// Written bytes by offset, not overlapping.
    extents: BTreeMap<u64, Vec<u8>>,
    /// The file's length as written (the backing file's, before any write).
    size: u64,
    /// From here on the backing file's bytes are gone (a truncation below them).
    cut_at: Option<u64>,
}

impl Overlay {
    fn new(backing_len: u64) -> Self {
        Self { extents: BTreeMap::new(), size: backing_len, cut_at: None }
    }

    /// Bytes not yet on the backing file.
    pub fn pending(&self) -> u64 {
        self.extents.values().map(|e| e.len() as u64).sum()
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let overlapping: Vec<u64> = self.extents.range(..end).filter(|(s, e)| **s + e.len() as u64 > offset).map(|(s, _)| *s).collect();
        for s in overlapping {
            let e = self.extents.remove(&s).unwrap_or_default();
            if s < offset {
                self.extents.insert(s, e[..(offset - s) as usize].to_vec());
            }
            let e_end = s + e.len() as u64;
            if e_end > end {
                self.extents.insert(end, e[(end - s) as usize..].to_vec());
            }
        }
        self.extents.insert(offset, data.to_vec());
        self.size = self.size.max(end);
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            self.cut_at = Some(self.cut_at.map_or(size, |c| c.min(size)));
        }
        self.extents.retain(|s, _| *s < size);
        if let Some((s, e)) = self.extents.iter_mut().next_back() {
            e.truncate((size - *s).min(e.len() as u64) as usize);
        }
        self.size = size;
    }

    /// `len` bytes at `offset`, given the backing file's bytes there (`backing`, possibly
    /// shorter: past its end reads zero).
    fn read(&self, offset: u64, len: u64, backing: &[u8]) -> Vec<u8> {
        let end = (offset + len).min(self.size);
        if end <= offset {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let kept = self.cut_at.map_or(u64::MAX, |c| c.saturating_sub(offset)) as usize;
        let n = backing.len().min(out.len()).min(kept);
        out[..n].copy_from_slice(&backing[..n]);
        for (s, e) in self.extents.range(..end) {
            let e_end = s + e.len() as u64;
            if e_end <= offset {
                continue;
            }
            let (from, to) = ((*s).max(offset), e_end.min(end));
            out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(&e[(from - s) as usize..(to - s) as usize]);
        }
        out
    }

    /// Makes the backing file what the overlay says, and syncs it.
    fn flush_to(&self, file: &mut fs::File) -> io::Result<()> {
        if let Some(cut) = self.cut_at {
            file.set_len(cut)?;
        }
        for (s, e) in &self.extents {
            file.seek(SeekFrom::Start(*s))?;
            file.write_all(e)?;
        }
        file.set_len(self.size)?;
        file.sync_all()
    }
}

/// Unsynced writes by file (relative path), shared by the filesystem and its controller.
type Volatile = Arc<Mutex<HashMap<PathBuf, Overlay>>>;

struct LazyFs {
    backing: PathBuf,
    volatile: Volatile,
    /// Inode numbers by relative path and back (the root is 1, the empty path).
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next: u64,
    /// Open files whose every write is synchronous (opened with O_SYNC or O_DSYNC, as
    /// nats-server writes its snapshots and state files), by handle.
    sync_handles: std::collections::HashSet<u64>,
    next_handle: u64,
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl LazyFs {
    fn new(backing: PathBuf, volatile: Volatile) -> Self {
        let root = PathBuf::new();
        Self { backing, volatile, paths: HashMap::from([(1, root.clone())]), inodes: HashMap::from([(root, 1)]), next: 2, sync_handles: Default::default(), next_handle: 1 }
    }

    fn ino(&mut self, rel: &Path) -> u64 {
        if let Some(i) = self.inodes.get(rel) {
            return *i;
        }
        let i = self.next;
        self.next += 1;
        self.paths.insert(i, rel.to_path_buf());
        self.inodes.insert(rel.to_path_buf(), i);
        i
    }

    fn rel(&self, ino: u64) -> Option<PathBuf> {
        self.paths.get(&ino).cloned()
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        self.rel(parent).map(|p| p.join(name))
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(i) = self.inodes.remove(rel) {
            self.paths.remove(&i);
        }
        self.volatile.lock().unwrap_or_else(|p| p.into_inner()).remove(rel);
    }

    /// Removes `name` under `parent` from the backing store with `remove` (a file or an
    /// empty directory) and forgets it.
    fn remove(&mut self, parent: u64, name: &OsStr, reply: ReplyEmpty, remove: fn(PathBuf) -> io::Result<()>) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        match remove(self.backing.join(&rel)) {
            Ok(()) => {
                self.forget_path(&rel);
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The attributes of `rel`: the backing file's, with the size as written.
    fn attr(&mut self, rel: &Path) -> io::Result<FileAttr> {
        let m = fs::symlink_metadata(self.backing.join(rel))?;
        let size = self.volatile.lock().unwrap_or_else(|p| p.into_inner()).get(rel).map_or(m.len(), |o| o.size);
        let kind = if m.is_dir() { FileType::Directory } else if m.file_type().is_symlink() { FileType::Symlink } else { FileType::RegularFile };
        let time = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32);
        Ok(FileAttr {
            ino: self.ino(rel),
            size,
            blocks: size.div_ceil(512),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: 4096,
            flags: 0,
        })
    }

    fn read_at(&self, rel: &Path, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let path = self.backing.join(rel);
        let mut backing = Vec::new();
        let mut f = fs::File::open(&path)?;
        f.seek(SeekFrom::Start(offset))?;
        f.take(len).read_to_end(&mut backing)?;
        let volatile = self.volatile.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match volatile.get(rel) {
            Some(o) => o.read(offset, len, &backing),
            None => backing,
        })
    }

    fn overlay<T>(&self, rel: &Path, f: impl FnOnce(&mut Overlay) -> T) -> io::Result<T> {
        let len = fs::metadata(self.backing.join(rel))?.len();
        let mut volatile = self.volatile.lock().unwrap_or_else(|p| p.into_inner());
        Ok(f(volatile.entry(rel.to_path_buf()).or_insert_with(|| Overlay::new(len))))
    }

    /// A handle for a file opened with `flags`; writes through it are synchronous when the
    /// flags say so.
    fn handle(&mut self, flags: i32) -> u64 {
        let fh = self.next_handle;
        self.next_handle += 1;
        if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            self.sync_handles.insert(fh);
        }
        fh
    }

    fn sync(&self, rel: &Path) -> io::Result<()> {
        let Some(o) = self.volatile.lock().unwrap_or_else(|p| p.into_inner()).remove(rel) else { return Ok(()) };
        let mut f = fs::OpenOptions::new().write(true).open(self.backing.join(rel))?;
        o.flush_to(&mut f)
    }
}

impl Filesystem for LazyFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        match self.attr(&rel) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        match self.attr(&rel) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        let done = (|| -> io::Result<FileAttr> {
            if let Some(mode) = mode {
                fs::set_permissions(self.backing.join(&rel), fs::Permissions::from_mode(mode & 0o7777))?;
            }
            if let Some(size) = size {
                self.overlay(&rel, |o| o.truncate(size))?;
            }
            self.attr(&rel)
        })();
        match done {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        let path = self.backing.join(&rel);
        match fs::create_dir(&path).and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777))).and_then(|()| self.attr(&rel)) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, fs::remove_file);
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, fs::remove_dir);
    }

    fn rename(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        let (Some(from), Some(to)) = (self.child(parent, name), self.child(newparent, newname)) else { return reply.error(libc::ENOENT) };
        if flags & libc::RENAME_NOREPLACE != 0 && self.backing.join(&to).exists() {
            return reply.error(libc::EEXIST);
        }
        if let Err(e) = fs::rename(self.backing.join(&from), self.backing.join(&to)) {
            return reply.error(errno(&e));
        }
        self.forget_path(&to);
        // The path and everything under it (a directory) move, with what is unsynced.
        let moved: Vec<(PathBuf, u64)> = self.inodes.iter().filter(|(p, _)| p.starts_with(&from)).map(|(p, i)| (p.clone(), *i)).collect();
        let mut volatile = self.volatile.lock().unwrap_or_else(|p| p.into_inner());
        for (old, i) in moved {
            // (joining an empty suffix would add a trailing slash)
            let new = match old.strip_prefix(&from) {
                Ok(rest) if !rest.as_os_str().is_empty() => to.join(rest),
                _ => to.clone(),
            };
            self.inodes.remove(&old);
            self.inodes.insert(new.clone(), i);
            self.paths.insert(i, new.clone());
            if let Some(o) = volatile.remove(&old) {
                volatile.insert(new, o);
            }
        }
        reply.ok()
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        if flags & libc::O_TRUNC != 0 {
            if let Err(e) = self.overlay(&rel, |o| o.truncate(0)) {
                return reply.error(errno(&e));
            }
        }
        reply.opened(self.handle(flags), FOPEN_DIRECT_IO)
    }

    fn create(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, _umask: u32, flags: i32, reply: ReplyCreate) {
        let Some(rel) = self.child(parent, name) else { return reply.error(libc::ENOENT) };
        let path = self.backing.join(&rel);
        let mut open = fs::OpenOptions::new();
        open.write(true).create(true);
        if flags & libc::O_EXCL != 0 {
            open.create_new(true);
        }
        let created = open.open(&path).and_then(|_| fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777)));
        if let Err(e) = created {
            return reply.error(errno(&e));
        }
        if flags & libc::O_TRUNC != 0 {
            if let Err(e) = self.overlay(&rel, |o| o.truncate(0)) {
                return reply.error(errno(&e));
            }
        }
        match self.attr(&rel) {
            Ok(a) => {
                let fh = self.handle(flags);
                reply.created(&TTL, &a, 0, fh, FOPEN_DIRECT_IO)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, size: u32, _flags: i32, _lock: Option<u64>, reply: ReplyData) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        match self.read_at(&rel, offset.max(0) as u64, u64::from(size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(&mut self, _req: &Request<'_>, ino: u64, fh: u64, offset: i64, data: &[u8], _wflags: u32, _flags: i32, _lock: Option<u64>, reply: ReplyWrite) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        let written = self.overlay(&rel, |o| o.write(offset.max(0) as u64, data));
        // A synchronous write is on the disk when it returns.
        let written = written.and_then(|()| if self.sync_handles.contains(&fh) { self.sync(&rel) } else { Ok(()) });
        match written {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, _lock: Option<u64>, _flush: bool, reply: ReplyEmpty) {
        self.sync_handles.remove(&fh);
        reply.ok()
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok() // a close is not a sync
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        match self.sync(&rel) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        reply.ok() // directory entries are never volatile here
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let Some(rel) = self.rel(ino) else { return reply.error(libc::ENOENT) };
        let listed = match fs::read_dir(self.backing.join(&rel)) {
            Ok(d) => d,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut entries = vec![(ino, FileType::Directory, ".".into()), (ino, FileType::Directory, "..".into())];
        for e in listed.flatten() {
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            let child = rel.join(e.file_name());
            entries.push((self.ino(&child), kind, e.file_name()));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(ino, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        match nix::sys::statvfs::statvfs(&self.backing) {
            Ok(s) => reply.statfs(s.blocks(), s.blocks_free(), s.blocks_available(), s.files(), s.files_free(), s.block_size() as u32, s.name_max() as u32, s.fragment_size() as u32),
            Err(e) => reply.error(e as i32),
        }
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        reply.ok()
    }
}

/// A mounted layer: unmounted when dropped.
pub struct Mounted {
    _session: fuser::BackgroundSession,
    volatile: Volatile,
    pub mountpoint: PathBuf,
    pub backing: PathBuf,
}

/// What a power cut threw away.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Lost {
    /// The files whose unsynced writes or truncations were thrown away (relative paths).
    pub files: Vec<String>,
    pub bytes: u64,
}

impl Mounted {
    /// Mounts a layer at `mountpoint` over `backing` (both created when missing).
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<Mounted> {
        fs::create_dir_all(backing)?;
        fs::create_dir_all(mountpoint)?;
        let volatile = Volatile::default();
        let fs = LazyFs::new(backing.to_path_buf(), volatile.clone());
        let options = [MountOption::FSName("workload-lazyfs".into()), MountOption::DefaultPermissions];
        let session = fuser::spawn_mount2(fs, mountpoint, &options)?;
        Ok(Mounted { _session: session, volatile, mountpoint: mountpoint.to_path_buf(), backing: backing.to_path_buf() })
    }

    /// Throws away every write not fsynced yet (kill the node first: a power cut stops it).
    pub fn lose_unsynced(&self) -> Lost {
        let mut volatile = self.volatile.lock().unwrap_or_else(|p| p.into_inner());
        let mut files: Vec<String> = volatile.iter().filter(|(_, o)| o.pending() > 0 || o.cut_at.is_some()).map(|(p, _)| p.display().to_string()).collect();
        files.sort();
        let lost = Lost { files, bytes: volatile.values().map(Overlay::pending).sum() };
        volatile.clear();
        lost
    }

    /// Bytes written and not fsynced yet.
    pub fn unsynced_bytes(&self) -> u64 {
        self.volatile.lock().unwrap_or_else(|p| p.into_inner()).values().map(Overlay::pending).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_reads_as_written_over_its_backing_bytes() {
        let backing = b"0123456789".to_vec();
        let mut o = Overlay::new(10);
        o.write(2, b"ab");
        o.write(3, b"XYZ");
        assert_eq!(o.read(0, 10, &backing), b"01aXYZ6789");
        o.write(12, b"!");
        assert_eq!(o.size, 13);
        assert_eq!(o.read(8, 10, &backing[8..]), b"89\0\0!");
        o.truncate(4);
        assert_eq!(o.read(0, 100, &backing), b"01aX");
        o.write(6, b"Q");
        assert_eq!(o.read(0, 100, &backing), b"01aX\0\0Q", "bytes cut off read zero when the file grows again");
        assert_eq!(o.pending(), 3, "a, X and Q");
    }

    #[test]
    fn flushing_makes_the_backing_file_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"0123456789").unwrap();
        let mut o = Overlay::new(10);
        o.write(1, b"AB");
        o.truncate(5);
        o.write(7, b"C");
        let expected = o.read(0, 100, b"0123456789");
        o.flush_to(&mut fs::OpenOptions::new().write(true).open(&path).unwrap()).unwrap();
        assert_eq!(fs::read(&path).unwrap(), expected);
        assert_eq!(expected, b"0AB34\0\0C");
    }
}
