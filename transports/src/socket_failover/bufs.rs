//! The receive side's stream window of a failover link, addressed by stream offset:
//! [`RecvWindow`] is where chunks are read into, straight from the socket, and where the
//! user reads whole frames in place. It is linear (a frame is always one slice) and moves
//! its live bytes to the front now and then.

use std::cell::UnsafeCell;
use std::ops::Range;

/// A linear buffer of stream bytes: byte `base + i` at index `i`.
///
/// Its bytes are cells because the user reads a committed frame through a slice handed
/// out while the link's lock is released, as the background thread lands later chunks in
/// other bytes of the same buffer.
pub struct RecvWindow {
    buf: Box<[UnsafeCell<u8>]>,
    base: u64,
    /// End of the furthest chunk being or having been landed: the live bytes end there.
    high: u64,
}

// SAFETY: the cells are only reached through `&mut RecvWindow` (writes) or through slices
// of committed bytes that nothing writes until they are released (see `frame`); the window
// lives behind the link's mutex, so sending it to the background thread is sound.
unsafe impl Send for RecvWindow {}

impl RecvWindow {
    pub fn new(len: usize) -> Self {
        // Zeroed memory from the allocator (pages the kernel zeroes lazily) rather than a
        // loop over cells: an unoptimised build took a noticeable while per link for that.
        let bytes = Box::into_raw(vec![0u8; len].into_boxed_slice());
        // SAFETY: `UnsafeCell<u8>` has the layout of `u8` (`repr(transparent)`), so the
        // allocation is a valid `[UnsafeCell<u8>]` of the same length, owned once.
        let buf = unsafe { Box::from_raw(bytes as *mut [UnsafeCell<u8>]) };
        RecvWindow {
            buf,
            base: 0,
            high: 0,
        }
    }

    /// Stream offset of index 0.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The buffer's first byte; writable through a shared reference as the bytes are cells.
    fn ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.buf.as_ptr())
    }

    fn range(&self, off: u64, len: usize) -> Range<usize> {
        let at = (off - self.base) as usize;
        assert!(
            off >= self.base && at + len <= self.buf.len(),
            "outside the window"
        );
        at..at + len
    }

    /// Notes that a chunk will land at `[off, off + len)`.
    pub fn reserve(&mut self, off: u64, len: usize) {
        self.range(off, len);
        self.high = self.high.max(off + len as u64);
    }

    /// The place of stream bytes `[off, off + len)`, to land a chunk in.
    pub fn dst(&mut self, off: u64, len: usize) -> &mut [u8] {
        let r = self.range(off, len);
        // SAFETY: `&mut self` excludes other writers; the range is inside the buffer and
        // holds uncommitted bytes (the ledger lands chunks at or past the committed end
        // only), which no slice handed out by `frame` covers.
        unsafe { std::slice::from_raw_parts_mut(self.ptr().add(r.start), r.len()) }
    }

    /// Stream bytes `[off, off + len)`: committed bytes, which nothing writes until
    /// [`compact`](Self::compact) moves them.
    ///
    /// # Safety
    /// The slice must be dropped before the next `compact`, and the bytes must be
    /// committed (below the ledger's `done`), so no chunk lands in them meanwhile.
    pub unsafe fn frame<'a>(&self, off: u64, len: usize) -> &'a [u8] {
        let r = self.range(off, len);
        // SAFETY: in the buffer (checked by `range`); unchanged while the caller keeps it,
        // as the caller promises; the buffer is never reallocated.
        unsafe { std::slice::from_raw_parts(self.ptr().add(r.start), r.len()) }
    }

    /// Makes `from` the new base: moves the live bytes `[from, high)` to the front.
    pub fn compact(&mut self, from: u64) {
        let used = self.range(from, 0).start;
        let live = (self.high.max(from) - from) as usize;
        let p = self.ptr();
        // SAFETY: `&mut self`: no slice from `frame` is alive (its contract); source and
        // destination are inside the buffer (`live` ends at most at a reserved end) and
        // `copy` allows them to overlap.
        unsafe { std::ptr::copy(p.add(used), p, live) };
        self.base = from;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_compacts_live_bytes() {
        let mut w = RecvWindow::new(8);
        w.reserve(0, 6);
        w.dst(0, 6).copy_from_slice(b"abcdef");
        w.compact(4);
        // SAFETY: nothing lands or compacts while the slice lives.
        assert_eq!(unsafe { w.frame(4, 2) }, b"ef");
        w.reserve(6, 6);
        w.dst(6, 6).copy_from_slice(b"ghijkl");
        // SAFETY: as above.
        assert_eq!(unsafe { w.frame(4, 8) }, b"efghijkl");
    }
}
