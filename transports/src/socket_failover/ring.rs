//! The send side's stream window: the bytes sent and not yet acknowledged (and not yet
//! written by a connection that queued them), addressed by stream offset.
//!
//! Frames handed over with `try_send` are copied in. Frames handed over with
//! `try_send_deferred` stay in the caller's memory, which the caller keeps unchanged until
//! the link says the send is done: their place in the ring is reserved (a hole) and only
//! filled by [`SendRing::materialize`], when the send is to complete while some of those
//! bytes still await their acknowledgement (usually a short tail: the acks follow the data
//! closely). Connections write chunks straight out of the ring and the holes' memory.

use std::collections::VecDeque;

/// Stream bytes `[off, off + len)` that lie at `ptr`, in the caller's memory.
#[derive(Clone, Copy, Debug)]
struct Hole {
    off: u64,
    ptr: *const u8,
    len: usize,
}

/// A ring of `cap` bytes holding stream bytes `[start, end)`, some of them in holes.
pub struct SendRing {
    buf: Box<[u8]>,
    start: u64,
    end: u64,
    /// In stream order, none ending at or before `start`.
    holes: VecDeque<Hole>,
}

// SAFETY: the only fields that are not `Send` are the holes' pointers, to memory the
// link's user lent until the send completes or the link is quiesced, and which nothing
// writes meanwhile; they are read only under the link's lock, from whichever thread holds
// it, and dropped (`materialize`) before the loan ends.
unsafe impl Send for SendRing {}

impl SendRing {
    pub fn new(cap: usize) -> Self {
        SendRing {
            buf: vec![0; cap].into_boxed_slice(),
            start: 0,
            end: 0,
            holes: VecDeque::new(),
        }
    }

    /// Forgets the bytes before `to` (acknowledged and written everywhere).
    pub fn release(&mut self, to: u64) {
        self.start = self.start.max(to.min(self.end));
        while self
            .holes
            .front()
            .is_some_and(|h| h.off + h.len as u64 <= self.start)
        {
            self.holes.pop_front();
        }
    }

    /// The stream offset just past the last byte appended.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes that can be appended now.
    pub fn room(&self) -> usize {
        self.buf.len() - (self.end - self.start) as usize
    }

    /// Appends copies of `parts`, one after the other; the caller checked
    /// [`room`](Self::room).
    pub fn append(&mut self, parts: &[&[u8]]) {
        for p in parts {
            self.fill(self.end, p);
            self.end += p.len() as u64;
        }
    }

    /// Appends `bytes` without copying them: the ring reads them where they are until
    /// they are released or [`materialize`](Self::materialize)d; the caller checked
    /// [`room`](Self::room).
    ///
    /// # Safety
    /// `bytes` must stay valid and unchanged until `materialize` has run (or the ring is
    /// dropped).
    pub unsafe fn append_lent(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.holes.push_back(Hole {
                off: self.end,
                ptr: bytes.as_ptr(),
                len: bytes.len(),
            });
        }
        self.end += bytes.len() as u64;
    }

    /// Whether some bytes still lie in lent memory.
    pub fn has_holes(&self) -> bool {
        !self.holes.is_empty()
    }

    /// Copies the lent bytes not yet released into their place: the lender may take its
    /// memory back.
    pub fn materialize(&mut self) {
        while let Some(h) = self.holes.pop_front() {
            let skip = self.start.saturating_sub(h.off).min(h.len as u64) as usize;
            // SAFETY: lent bytes, valid until this call (`append_lent`'s contract).
            let bytes = unsafe { std::slice::from_raw_parts(h.ptr, h.len) };
            self.fill(h.off + skip as u64, &bytes[skip..]);
        }
    }

    /// Writes `p` at stream offset `off` of the ring (wrapping).
    fn fill(&mut self, off: u64, p: &[u8]) {
        let cap = self.buf.len();
        let at = (off % cap as u64) as usize;
        let first = p.len().min(cap - at);
        self.buf[at..at + first].copy_from_slice(&p[..first]);
        self.buf[..p.len() - first].copy_from_slice(&p[first..]);
    }

    /// Calls `f` with stream bytes `[off, off + len)` in order, as consecutive slices;
    /// false (and no call) if any of them was released or not yet appended.
    pub fn pieces<'a>(&'a self, off: u64, len: usize, mut f: impl FnMut(&'a [u8])) -> bool {
        let end = off + len as u64;
        if off < self.start || end > self.end {
            return false;
        }
        let mut at = off;
        let mut i = self.holes.partition_point(|h| h.off + h.len as u64 <= at);
        while at < end {
            match self.holes.get(i) {
                Some(h) if h.off <= at => {
                    let stop = end.min(h.off + h.len as u64);
                    // SAFETY: lent bytes, valid while the hole is kept (`append_lent`'s
                    // contract); `[at, stop)` lies inside the hole.
                    let s = unsafe {
                        std::slice::from_raw_parts(
                            h.ptr.add((at - h.off) as usize),
                            (stop - at) as usize,
                        )
                    };
                    f(s);
                    at = stop;
                    i += 1;
                }
                next => {
                    let stop = next.map_or(end, |h| end.min(h.off));
                    let cap = self.buf.len();
                    let from = (at % cap as u64) as usize;
                    let n = (stop - at) as usize;
                    let first = n.min(cap - from);
                    f(&self.buf[from..from + first]);
                    if n > first {
                        f(&self.buf[..n - first]);
                    }
                    at = stop;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(r: &SendRing, off: u64, len: usize) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        r.pieces(off, len, |s| v.extend_from_slice(s)).then_some(v)
    }

    #[test]
    fn ring_wraps_and_releases() {
        let mut r = SendRing::new(8);
        r.append(&[b"abc", b"defg"]);
        assert_eq!(r.room(), 1);
        r.release(5);
        r.append(&[b"xyz"]);
        assert_eq!(r.room(), 3);
        assert_eq!(get(&r, 5, 5).unwrap(), b"fgxyz");
        assert!(get(&r, 4, 2).is_none());
        assert!(get(&r, 9, 2).is_none());
    }

    #[test]
    fn lent_bytes_are_read_in_place_until_materialized() {
        let mut r = SendRing::new(16);
        let mut lent = *b"LENT";
        r.append(&[b"ab"]);
        // SAFETY: `lent` outlives the ring's use of it (materialized below).
        unsafe { r.append_lent(&lent) };
        r.append(&[b"cd"]);
        assert_eq!(get(&r, 1, 6).unwrap(), b"bLENTc");
        let mut n = 0;
        assert!(r.pieces(0, 8, |_| n += 1));
        assert_eq!(n, 3, "ring, hole, ring");
        r.release(3);
        r.materialize();
        assert!(!r.has_holes());
        lent.copy_from_slice(b"gone");
        assert_eq!(get(&r, 3, 5).unwrap(), b"ENTcd");
    }
}
