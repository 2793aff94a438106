//! The receive side's stream window of a failover link, addressed by stream offset:
//! [`RecvWindow`] is where chunks are read into, straight from the socket, and where the
//! user reads whole frames in place.
//!
//! It is a ring whose memory is mapped twice, back to back, so every run of up to a
//! window's bytes is one slice wherever it starts: a frame is read in place even where it
//! wraps, and freeing the bytes the user consumed moves nothing. (A linear window moved its
//! live bytes to the front each time half of it was consumed: with the sender running
//! ahead, 0.53-0.56 bytes for every byte received in `failover_measure.sh`'s armed 64 MiB
//! all-reduce, sendrecv and all-to-all, two namespace hosts of two ranks, 2026-11-29, the
//! 2-core CPU machine.)

use std::io;
use std::ops::Range;
use std::ptr::NonNull;

/// `len` bytes of shared memory mapped at `ptr` and again at `ptr + len`: byte `i` and
/// byte `i + len` are the same memory.
struct Mirror {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mirror {
    /// `len` must be a multiple of the page size.
    fn new(len: usize) -> io::Result<Self> {
        let fd = memfd(len)?;
        // SAFETY: a fresh anonymous reservation of 2 * len bytes, nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        let reserved = match NonNull::new(base.cast::<u8>()) {
            Some(p) if base != libc::MAP_FAILED => Ok(Mirror { ptr: p, len }),
            _ => Err(io::Error::last_os_error()),
        };
        // Dropping `mirror` unmaps the reservation on every error below.
        let res = reserved.and_then(|mirror| mirror.map_halves(fd).map(|()| mirror));
        // SAFETY: the mappings keep the memory; the descriptor is ours and closed once.
        unsafe { libc::close(fd) };
        res
    }

    /// Maps the memory file `fd` over both halves of the reservation.
    fn map_halves(&self, fd: libc::c_int) -> io::Result<()> {
        for half in 0..2 {
            // SAFETY: both halves lie inside the reservation `new` made, which MAP_FIXED
            // replaces; the file is `len` bytes long.
            let p = unsafe {
                libc::mmap(
                    self.ptr.as_ptr().add(half * self.len).cast(),
                    self.len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
        }
        // A forked child (a data loader's worker, say) would share this memory, not copy it:
        // keep it out of children altogether. Advice only, so its failure changes nothing.
        // SAFETY: the reservation made in `new`, mapped above.
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), 2 * self.len, libc::MADV_DONTFORK) };
        Ok(())
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        // SAFETY: the whole reservation made in `new`, unmapped once; no slice of it
        // outlives the window (see `RecvWindow::frame`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), 2 * self.len) };
    }
}

/// A memory file of `len` zero bytes.
fn memfd(len: usize) -> io::Result<libc::c_int> {
    // SAFETY: a constant C string; the call returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"ccl-failover-window".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is the descriptor just created.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: ours, closed once.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

fn page_size() -> usize {
    // SAFETY: a query without side effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(1)
}

/// A ring of stream bytes: byte `off` at index `off % len`; the live ones are those from
/// `base` on, at most `len` of them.
///
/// Its bytes are written through a shared mapping because the user reads a committed frame
/// through a slice handed out while the link's lock is released, as the background thread
/// lands later chunks in other bytes of the same ring.
pub struct RecvWindow {
    mem: Mirror,
    base: u64,
}

// SAFETY: the memory is only written through `&mut RecvWindow` (`dst`) or read through
// slices of committed bytes that nothing writes until they are released (see `frame`); the
// window lives behind the link's mutex, so sending it to the background thread is sound.
unsafe impl Send for RecvWindow {}

impl RecvWindow {
    /// A window of at least `len` bytes (rounded up to whole pages: see [`Self::len`]).
    pub fn new(len: usize) -> io::Result<Self> {
        let len = len.max(1).next_multiple_of(page_size());
        Ok(RecvWindow {
            mem: Mirror::new(len)?,
            base: 0,
        })
    }

    /// Bytes the window holds.
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// The oldest stream offset still held.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Where stream bytes `[off, off + len)` lie, as an index into the doubled mapping.
    fn range(&self, off: u64, len: usize) -> Range<usize> {
        assert!(
            off >= self.base && off + len as u64 <= self.base + self.mem.len as u64,
            "outside the window"
        );
        let at = (off % self.mem.len as u64) as usize;
        at..at + len
    }

    /// Notes that a chunk will land at `[off, off + len)` (checks it is inside).
    pub fn reserve(&mut self, off: u64, len: usize) {
        self.range(off, len);
    }

    /// The place of stream bytes `[off, off + len)`, to land a chunk in.
    pub fn dst(&mut self, off: u64, len: usize) -> &mut [u8] {
        let r = self.range(off, len);
        // SAFETY: `&mut self` excludes other writers; the range lies in the doubled mapping
        // (its start is below len, its length at most len) and holds uncommitted bytes (the
        // ledger lands chunks at or past the committed end only, and below base + len), which
        // no slice handed out by `frame` covers, in either half.
        unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.as_ptr().add(r.start), r.len()) }
    }

    /// Stream bytes `[off, off + len)`: committed bytes, which nothing writes until
    /// [`release`](Self::release) lets them go.
    ///
    /// # Safety
    /// The slice must be dropped before `release` passes `off`, and the bytes must be
    /// committed (below the ledger's `done`), so no chunk lands in them meanwhile.
    pub unsafe fn frame<'a>(&self, off: u64, len: usize) -> &'a [u8] {
        let r = self.range(off, len);
        // SAFETY: in the doubled mapping (checked by `range`); unchanged while the caller
        // keeps it, as the caller promises; the mapping lives as long as the window.
        unsafe { std::slice::from_raw_parts(self.mem.ptr.as_ptr().add(r.start), r.len()) }
    }

    /// Makes `from` the new base: the bytes before it may be overwritten by chunks up to
    /// `from + len`. Nothing moves.
    pub fn release(&mut self, from: u64) {
        assert!(from >= self.base, "the window moves forward only");
        self.base = from;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_across_the_end_of_the_ring_is_one_slice() {
        let mut w = RecvWindow::new(1).unwrap();
        let n = w.len() as u64;
        assert!(n >= 4096 && n % 4096 == 0, "whole pages: {n}");
        w.reserve(0, 6);
        w.dst(0, 6).copy_from_slice(b"abcdef");
        w.release(4);
        // SAFETY: nothing lands or releases while the slice lives.
        assert_eq!(unsafe { w.frame(4, 2) }, b"ef");
        // Land bytes that wrap: the last 3 of the ring and the first 3 again.
        w.release(n - 3);
        w.reserve(n - 3, 6);
        w.dst(n - 3, 6).copy_from_slice(b"ghijkl");
        // SAFETY: as above.
        assert_eq!(unsafe { w.frame(n - 3, 6) }, b"ghijkl");
        // SAFETY: as above; index 0 is stream byte n, written through the second half.
        assert_eq!(unsafe { w.frame(n, 3) }, b"jkl");
    }

    #[test]
    #[should_panic(expected = "outside the window")]
    fn a_chunk_past_the_window_is_refused() {
        let mut w = RecvWindow::new(4096).unwrap();
        w.release(10);
        w.reserve(10 + w.len() as u64 - 2, 4);
    }
}
