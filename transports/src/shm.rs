//! Shared-memory links between ranks of one host.
//!
//! Each direction is a ring of fixed-size slots in a file under `/dev/shm`, created by the
//! receiving rank (so the pages live near the reader) and mapped by the sender. The sender owns
//! `head` (frames produced), the receiver owns `tail` (frames consumed); each sits on its own
//! cache line so the two sides never write the same line. A frame never spans slots, which is
//! what lets a reader reduce straight out of the ring.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use ccl_monitor::Engine;

use crate::frame_mon::{FrameMon, NIC_NONE, SHM_PATH};
use crate::{Error, Link, Result};

const MAGIC: u64 = 0x6363_6c2d_7368_6d31; // "ccl-shm1"
const HEAD_OFF: usize = 128;
const TAIL_OFF: usize = 256;
const LENS_OFF: usize = 384;
const DATA_ALIGN: usize = 4096;

// Ring geometry comes from the communicator: NCCL_BUFFSIZE bytes per direction in slots of
// CCL_SHM_SLOT_BYTES (4 MiB in 256 KiB slots by default) — a few L2-sized frames in flight,
// which is what a memcpy pipeline between two cores needs.

fn data_offset(nslots: usize) -> usize {
    (LENS_OFF + nslots * 8).div_ceil(DATA_ALIGN) * DATA_ALIGN
}

/// Maps `len` bytes of `file` shared; the caller unmaps them.
fn map_shared(file: &File, len: usize, path: &str) -> Result<NonNull<u8>> {
    // SAFETY: mapping a regular file we hold open with a length it has; the result is checked
    // before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::io(
            format!("mmap {path}"),
            std::io::Error::last_os_error(),
        ));
    }
    NonNull::new(ptr.cast::<u8>())
        .ok_or_else(|| Error::Protocol(format!("mmap {path} returned NULL")))
}

/// Creates `path` (which must not exist) with `len` bytes.
fn create_file(path: &str, len: usize) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("create {path}"), e))?;
    file.set_len(len as u64)
        .map_err(|e| Error::io(format!("size {path} to {len} bytes"), e))?;
    Ok(file)
}

/// A small array of 64-bit words in `/dev/shm` that one process writes and others on the host
/// read (a notice board: e.g. what each rank last called, for mismatch checks off the data
/// path).
pub struct ShmBoard {
    base: NonNull<u8>,
    words: usize,
    path: String,
}

// SAFETY: the mapping is process-wide memory accessed only through atomics.
unsafe impl Send for ShmBoard {}
// SAFETY: as above.
unsafe impl Sync for ShmBoard {}

const BOARD_MAGIC: u64 = 0x6363_6c2d_6272_6431; // "ccl-brd1"

impl ShmBoard {
    /// Creates the board `name` (a file name under `/dev/shm`, made of letters, digits, '-'
    /// and '_') with `words` zeroed words after a header.
    pub fn create(name: &str, words: usize) -> Result<Self> {
        let path = Self::path_of(name)?;
        let len = (words + 2) * 8;
        let file = create_file(&path, len)?;
        let b = ShmBoard {
            base: map_shared(&file, len, &path)?,
            words,
            path,
        };
        b.raw(1).store(words as u64, Ordering::Relaxed);
        b.raw(0).store(BOARD_MAGIC, Ordering::Release);
        Ok(b)
    }

    /// Maps another process's board.
    pub fn open(name: &str) -> Result<Self> {
        let path = Self::path_of(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("open {path}"), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {path}"), e))?
            .len() as usize;
        if len < 16 || len % 8 != 0 {
            return Err(Error::Protocol(format!("{path} is not a libccl board")));
        }
        let b = ShmBoard {
            base: map_shared(&file, len, &path)?,
            words: len / 8 - 2,
            path,
        };
        if b.raw(0).load(Ordering::Acquire) != BOARD_MAGIC
            || b.raw(1).load(Ordering::Relaxed) != b.words as u64
        {
            return Err(Error::Protocol(format!("{} is not a libccl board", b.path)));
        }
        Ok(b)
    }

    fn path_of(name: &str) -> Result<String> {
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
        if !ok {
            return Err(Error::Protocol(format!("refusing shm board name {name:?}")));
        }
        Ok(format!("/dev/shm/ccl-{name}"))
    }

    /// Word `i` (`None` past the end).
    pub fn word(&self, i: usize) -> Option<&AtomicU64> {
        (i < self.words).then(|| self.raw(i + 2))
    }

    pub fn words(&self) -> usize {
        self.words
    }

    fn raw(&self, i: usize) -> &AtomicU64 {
        // SAFETY: callers pass i < words + 2, inside the mapping; 8-aligned (page-aligned
        // base); accessed only atomically.
        unsafe { &*self.base.as_ptr().add(i * 8).cast::<AtomicU64>() }
    }

    /// Removes the file; mappings stay valid.
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for ShmBoard {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped at creation; no references outlive self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), (self.words + 2) * 8);
        }
    }
}

/// A page-aligned region of bytes in `/dev/shm` that two processes map (a staging area whose
/// use the users order themselves, e.g. with GPU stream flags). No header: the opener must
/// expect the creator's exact length. The creator's value removes the file when it drops, if
/// [`ShmRegion::unlink`] has not already.
pub struct ShmRegion {
    base: NonNull<u8>,
    len: usize,
    path: String,
    owner: bool,
}

// SAFETY: the mapping is process-wide memory whose accesses the users synchronize.
unsafe impl Send for ShmRegion {}
// SAFETY: as above; `&ShmRegion` only hands out the address.
unsafe impl Sync for ShmRegion {}

impl ShmRegion {
    /// Creates the region `name` (as [`ShmBoard::create`] names it) of `len` bytes, all of
    /// them backed now: a `/dev/shm` too small for it fails here with ENOSPC, instead of
    /// killing the process with SIGBUS at the first touch of a page it cannot hold (a
    /// container's 64 MiB `/dev/shm`).
    pub fn create(name: &str, len: usize) -> Result<Self> {
        let path = ShmBoard::path_of(name)?;
        if len == 0 {
            return Err(Error::Protocol(format!("empty shm region {path}")));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io(format!("create {path}"), e))?;
        // SAFETY: plain syscall on a descriptor we own.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if r != 0 {
            let _ = std::fs::remove_file(&path);
            return Err(Error::io(
                format!("reserve {len} bytes for {path}"),
                std::io::Error::from_raw_os_error(r),
            ));
        }
        let base = map_shared(&file, len, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        Ok(ShmRegion {
            base,
            len,
            path,
            owner: true,
        })
    }

    /// Maps the region `name` another process created with `len` bytes.
    pub fn open(name: &str, len: usize) -> Result<Self> {
        let path = ShmBoard::path_of(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("open {path}"), e))?;
        let have = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {path}"), e))?
            .len();
        if have != len as u64 || len == 0 {
            return Err(Error::Protocol(format!(
                "{path} holds {have} bytes, not the {len} expected"
            )));
        }
        let base = map_shared(&file, len, &path)?;
        Ok(ShmRegion {
            base,
            len,
            path,
            owner: false,
        })
    }

    /// The first byte (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Removes the file; mappings stay valid.
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        if self.owner {
            self.unlink();
        }
        // SAFETY: unmapping exactly the region mapped at creation or opening; no references
        // outlive self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// One mapped ring (one direction).
pub struct ShmRing {
    base: NonNull<u8>,
    len: usize,
    nslots: usize,
    slot_bytes: usize,
    path: String,
}

// SAFETY: the mapping is process-wide memory; all cross-thread/process access to the shared
// words goes through atomics, and the data slots are handed over by the head/tail protocol.
unsafe impl Send for ShmRing {}

impl ShmRing {
    /// Creates a new ring file under `/dev/shm` and maps it. Returns the ring; its name is
    /// [`ShmRing::path`], to be sent to the peer.
    pub fn create(nslots: usize, slot_bytes: usize) -> Result<Self> {
        if nslots == 0 || slot_bytes == 0 || slot_bytes % 64 != 0 {
            return Err(Error::Protocol(format!(
                "bad shm ring geometry: {nslots} slots of {slot_bytes} bytes"
            )));
        }
        let len = data_offset(nslots) + nslots * slot_bytes;
        let path = format!(
            "/dev/shm/ccl-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        let file = create_file(&path, len)?;
        let ring = Self::map(&file, len, nslots, slot_bytes, path)?;
        ring.word(0).store(nslots as u64, Ordering::Relaxed);
        ring.word(8).store(slot_bytes as u64, Ordering::Relaxed);
        ring.word(16).store(MAGIC, Ordering::Release);
        Ok(ring)
    }

    /// Maps a ring the peer created.
    pub fn open(path: &str) -> Result<Self> {
        if !path.starts_with("/dev/shm/ccl-") || path.contains("..") {
            return Err(Error::Protocol(format!("refusing shm path {path:?}")));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(format!("open {path}"), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {path}"), e))?
            .len() as usize;
        if len < LENS_OFF {
            return Err(Error::Protocol(format!(
                "{path} is too small ({len} bytes)"
            )));
        }
        let mut ring = Self::map(&file, len, 0, 0, path.to_string())?;
        if ring.word(16).load(Ordering::Acquire) != MAGIC {
            return Err(Error::Protocol(format!("{path} is not a libccl ring")));
        }
        let nslots = ring.word(0).load(Ordering::Relaxed) as usize;
        let slot_bytes = ring.word(8).load(Ordering::Relaxed) as usize;
        if nslots == 0 || data_offset(nslots) + nslots * slot_bytes != len {
            return Err(Error::Protocol(format!("{path} has inconsistent geometry")));
        }
        ring.nslots = nslots;
        ring.slot_bytes = slot_bytes;
        Ok(ring)
    }

    fn map(
        file: &File,
        len: usize,
        nslots: usize,
        slot_bytes: usize,
        path: String,
    ) -> Result<Self> {
        let base = map_shared(file, len, &path)?;
        Ok(ShmRing {
            base,
            len,
            nslots,
            slot_bytes,
            path,
        })
    }

    /// The ring's file name, for the peer's [`ShmRing::open`].
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Removes the file; both sides keep their mappings. Called once both have mapped it, so
    /// a crash later leaves nothing behind in `/dev/shm`.
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.len && off % 8 == 0);
        // SAFETY: `off` is inside the mapping and 8-aligned (the mapping is page-aligned);
        // the word is only ever accessed atomically by either process.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    fn slot(&self, idx: usize) -> *mut u8 {
        // SAFETY: idx < nslots, so the slot lies inside the mapping.
        unsafe {
            self.base
                .as_ptr()
                .add(data_offset(self.nslots) + idx * self.slot_bytes)
        }
    }
}

impl Drop for ShmRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in `map`; no references outlive self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// A link to a peer on this host: our incoming ring and the peer's incoming ring.
pub struct ShmLink {
    rx: ShmRing,
    tx: ShmRing,
    /// Cached copy of the peer-owned counter, refreshed only when it looks exhausted, so the
    /// common path does not touch the other side's cache line.
    tx_tail_cache: u64,
    tx_head: u64,
    rx_head_cache: u64,
    rx_tail: u64,
    mon: FrameMon,
}

impl ShmLink {
    /// `rx` is the ring we created (peer writes it), `tx` the one the peer created.
    pub fn new(rx: ShmRing, tx: ShmRing) -> Self {
        let tx_head = tx.word(HEAD_OFF).load(Ordering::Acquire);
        let tx_tail_cache = tx.word(TAIL_OFF).load(Ordering::Acquire);
        let rx_tail = rx.word(TAIL_OFF).load(Ordering::Acquire);
        ShmLink {
            rx,
            tx,
            tx_tail_cache,
            tx_head,
            rx_head_cache: rx_tail,
            rx_tail,
            mon: FrameMon::off(Engine::Shm, SHM_PATH, NIC_NONE),
        }
    }
}

impl Link for ShmLink {
    fn max_frame(&self) -> usize {
        self.tx.slot_bytes
    }

    fn try_send(&mut self, frame: &[u8]) -> Result<bool> {
        if frame.len() > self.tx.slot_bytes {
            return Err(Error::Protocol(format!(
                "frame of {} bytes exceeds shm slot of {}",
                frame.len(),
                self.tx.slot_bytes
            )));
        }
        let n = self.tx.nslots as u64;
        if self.tx_head - self.tx_tail_cache >= n {
            self.tx_tail_cache = self.tx.word(TAIL_OFF).load(Ordering::Acquire);
            if self.tx_head - self.tx_tail_cache >= n {
                return Ok(false);
            }
        }
        let idx = (self.tx_head % n) as usize;
        let t0 = self.mon.now_ns();
        // SAFETY: slot `idx` is free (the reader has consumed it: head - tail < n, observed
        // with Acquire), it is `slot_bytes` long and frame.len() <= slot_bytes; the frame is
        // our memory, disjoint from the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), self.tx.slot(idx), frame.len());
        }
        self.tx
            .word(LENS_OFF + idx * 8)
            .store(frame.len() as u64, Ordering::Relaxed);
        self.tx_head += 1;
        self.tx
            .word(HEAD_OFF)
            .store(self.tx_head, Ordering::Release);
        if self.mon.is_on() {
            // Delivered once written: the copy is the frame's whole time on the link.
            self.mon.posted(t0, frame.len() as u64);
            self.mon.completed(self.mon.now_ns(), frame.len() as u64);
        }
        Ok(true)
    }

    fn peek(&mut self) -> Result<Option<&[u8]>> {
        if self.rx_tail == self.rx_head_cache {
            self.rx_head_cache = self.rx.word(HEAD_OFF).load(Ordering::Acquire);
            if self.rx_tail == self.rx_head_cache {
                return Ok(None);
            }
        }
        let idx = (self.rx_tail % self.rx.nslots as u64) as usize;
        let len = self.rx.word(LENS_OFF + idx * 8).load(Ordering::Relaxed) as usize;
        if len > self.rx.slot_bytes {
            return Err(Error::Protocol(format!(
                "shm frame length {len} exceeds slot size"
            )));
        }
        // SAFETY: the writer published this slot with a Release store of head that we
        // observed with Acquire; it will not touch it again until we advance tail.
        Ok(Some(unsafe {
            std::slice::from_raw_parts(self.rx.slot(idx), len)
        }))
    }

    fn pop(&mut self) {
        if self.rx_tail < self.rx_head_cache {
            self.rx_tail += 1;
            self.rx
                .word(TAIL_OFF)
                .store(self.rx_tail, Ordering::Release);
        }
    }

    fn flush(&mut self) -> Result<bool> {
        Ok(false)
    }

    fn has_pending(&self) -> bool {
        false
    }

    fn kind(&self) -> &'static str {
        "shm"
    }

    fn attach_monitor(&mut self, m: &crate::LinkMonitor) {
        self.mon.attach(m);
    }

    fn begin_op(&mut self, op: ccl_monitor::Op, seq: u64) {
        self.mon.begin_op(op, seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_shared_and_refused_at_another_length() {
        let name = format!(
            "test-region-{}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let a = ShmRegion::create(&name, 3 * 4096).unwrap();
        assert_eq!(a.as_ptr() as usize % 4096, 0);
        // SAFETY: inside the mapping, no other user.
        unsafe { *a.as_ptr().add(3 * 4096 - 1) = 0x5a };
        let b = ShmRegion::open(&name, 3 * 4096).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { *b.as_ptr().add(3 * 4096 - 1) }, 0x5a);
        assert!(ShmRegion::open(&name, 4096).is_err());
        assert!(ShmRegion::create(&name, 4096).is_err(), "the name is taken");
        drop(b);
        drop(a);
        assert!(
            ShmRegion::open(&name, 3 * 4096).is_err(),
            "the creator removes it"
        );
        assert!(ShmRegion::create("../etc", 4096).is_err());
    }

    /// A region larger than `/dev/shm` can hold is refused when it is made (ENOSPC from
    /// `posix_fallocate`, before any page is touched), and leaves no file behind.
    #[test]
    fn a_region_too_large_for_dev_shm_fails_at_creation_and_leaves_nothing() {
        // SAFETY: statvfs is plain old data; all zeroes is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: statvfs fills the struct we pass; the path is a NUL-terminated literal.
        let r = unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) };
        let total = st.f_blocks as u128 * st.f_frsize as u128;
        if r != 0 || total == 0 {
            eprintln!("skipped: /dev/shm reports no size");
            return;
        }
        let len = (total * 2).min(usize::MAX as u128 / 2) as usize;
        let name = format!(
            "test-huge-{}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let e = ShmRegion::create(&name, len)
            .err()
            .expect("a region twice /dev/shm's size");
        assert!(e.to_string().contains("reserve"), "{e}");
        assert!(!std::path::Path::new(&format!("/dev/shm/ccl-{name}")).exists());
    }

    fn pair(nslots: usize, slot: usize) -> (ShmLink, ShmLink) {
        let a_rx = ShmRing::create(nslots, slot).unwrap();
        let b_rx = ShmRing::create(nslots, slot).unwrap();
        let a_tx = ShmRing::open(b_rx.path()).unwrap();
        let b_tx = ShmRing::open(a_rx.path()).unwrap();
        a_rx.unlink();
        b_rx.unlink();
        (ShmLink::new(a_rx, a_tx), ShmLink::new(b_rx, b_tx))
    }

    #[test]
    fn frames_arrive_in_order_and_ring_fills() {
        let (mut a, mut b) = pair(4, 64);
        for i in 0..4u8 {
            assert!(a.try_send(&[i; 10]).unwrap());
        }
        assert!(!a.try_send(&[9; 10]).unwrap(), "ring of 4 slots is full");
        for i in 0..4u8 {
            let f = b.peek().unwrap().unwrap().to_vec();
            assert_eq!(f, vec![i; 10]);
            b.pop();
        }
        assert!(b.peek().unwrap().is_none());
        assert!(a.try_send(&[7; 64]).unwrap());
        assert_eq!(b.peek().unwrap().unwrap(), &[7; 64][..]);
    }

    #[test]
    fn oversized_frame_is_an_error() {
        let (mut a, _b) = pair(2, 64);
        assert!(a.try_send(&[0; 65]).is_err());
    }

    #[test]
    fn a_board_written_here_is_read_there() {
        let name = format!("test-board-{}", std::process::id());
        let w = ShmBoard::create(&name, 16).unwrap();
        let r = ShmBoard::open(&name).unwrap();
        w.unlink();
        assert_eq!(r.words(), 16);
        w.word(3).unwrap().store(42, Ordering::Release);
        assert_eq!(r.word(3).unwrap().load(Ordering::Acquire), 42);
        assert!(r.word(16).is_none());
        assert!(ShmBoard::open(&name).is_err(), "unlinked");
        assert!(ShmBoard::create("../etc", 1).is_err());
    }

    #[test]
    fn open_rejects_foreign_paths() {
        assert!(ShmRing::open("/etc/passwd").is_err());
        assert!(ShmRing::open("/dev/shm/ccl-../../etc/passwd").is_err());
    }

    #[test]
    fn threads_stream_many_frames() {
        let (mut a, mut b) = pair(8, 4096);
        let t = std::thread::spawn(move || {
            for i in 0..10_000u32 {
                let f = i.to_le_bytes().repeat(1 + (i as usize % 500));
                while !a.try_send(&f).unwrap() {
                    std::thread::yield_now();
                }
            }
        });
        for i in 0..10_000u32 {
            loop {
                if let Some(f) = b.peek().unwrap() {
                    assert_eq!(f.len(), 4 * (1 + (i as usize % 500)));
                    assert_eq!(&f[..4], &i.to_le_bytes());
                    b.pop();
                    break;
                }
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }
}
