//! Batches of datagrams: what goes out ([`TxBatch`]) and the `sendmmsg` arrays built for it
//! ([`TxScratch`]), and what came in ([`RxBatch`]).

use super::frag::FRAG_HDR;
use super::limits::{BATCH, GSO_MAX_SEGS, MAX_DATAGRAM, TX_MAX};

/// Bytes of one receive slot (a whole datagram, or a GRO-coalesced run of them, fits).
pub(super) const SLOT: usize = 65536;
/// Most datagrams recorded per receive batch: every slot coalesced to the smallest
/// segments that are worth coalescing would exceed this, and the rest of such a slot is
/// dropped (the protocol recovers), which does not happen with real chunk sizes.
const RX_MAX_SEGS: usize = BATCH * GSO_MAX_SEGS;
/// Control bytes per message: room for one `cmsghdr` with an `int` (GRO) or `u16` (GSO).
pub(super) const CMSG_BYTES: usize = 32;
/// Most iovecs built for one `sendmmsg` call.
pub(super) const IOV_CAP: usize = 1024;

/// Datagrams waiting to go out, each tagged with its path, packed one after the other in
/// one buffer (so a batch holds many small datagrams or [`BATCH`] of the largest).
pub struct TxBatch {
    pub(super) buf: Vec<u8>,
    starts: Vec<usize>,
    lens: Vec<usize>,
    /// Per datagram: bytes that follow its bytes in `buf`, sent from where they lie (address
    /// and length; length 0: none), so a chunk's payload is not copied into the batch.
    ext: Vec<(usize, usize)>,
    pub(super) paths: Vec<u16>,
    pub(super) count: usize,
    used: usize,
    /// Bytes of every datagram, borrowed payloads included: a batch holds no more than the
    /// buffer could, so one transmit burst stays as long as when payloads were copied.
    bytes: usize,
}

impl Default for TxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl TxBatch {
    /// An empty batch with room for [`BATCH`] datagrams of the largest size, or up to
    /// [`TX_MAX`] smaller ones.
    pub fn new() -> Self {
        TxBatch {
            buf: vec![0; SLOT * BATCH],
            starts: vec![0; TX_MAX],
            lens: vec![0; TX_MAX],
            ext: vec![(0, 0); TX_MAX],
            paths: vec![0; TX_MAX],
            count: 0,
            used: 0,
            bytes: 0,
        }
    }

    /// Datagrams in the batch.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether no more datagrams fit (the next one might be of the largest size).
    pub fn is_full(&self) -> bool {
        self.count == TX_MAX || self.bytes + MAX_DATAGRAM > self.buf.len()
    }

    /// Forgets every datagram.
    pub fn clear(&mut self) {
        self.count = 0;
        self.used = 0;
        self.bytes = 0;
    }

    /// The next free slot ([`MAX_DATAGRAM`] bytes), to be filled and then committed with
    /// [`TxBatch::commit`]; `None` when full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        self.buf.get_mut(self.used..self.used + MAX_DATAGRAM)
    }

    /// Commits the slot returned by [`TxBatch::slot`] as a datagram of `len` bytes on `path`.
    pub fn commit(&mut self, path: u16, len: usize) {
        // SAFETY: an empty payload refers to no memory.
        unsafe { self.commit_with(path, len, &[]) }
    }

    /// Commits the slot's first `len` bytes followed by `payload` as one datagram on `path`.
    /// The payload is not copied: the batch keeps its address.
    ///
    /// # Safety
    /// `payload` stays valid and unchanged until the batch has been sent or cleared.
    pub unsafe fn commit_with(&mut self, path: u16, len: usize, payload: &[u8]) {
        if !self.is_full() && len + payload.len() <= MAX_DATAGRAM {
            self.starts[self.count] = self.used;
            self.lens[self.count] = len;
            self.ext[self.count] = (payload.as_ptr() as usize, payload.len());
            self.paths[self.count] = path;
            self.count += 1;
            self.used += len;
            self.bytes += len + payload.len();
        }
    }

    /// Length of datagram `i`: its bytes in the buffer and its payload.
    pub(super) fn datagram_len(&self, i: usize) -> usize {
        self.lens[i] + self.ext[i].1
    }

    /// Bytes `[lo, hi)` of datagram `i` as at most two iovecs (buffer part, payload part),
    /// written to `out`; returns how many.
    pub(super) fn iovecs(&self, i: usize, lo: usize, hi: usize, out: &mut [libc::iovec]) -> usize {
        let (head, (ext, _)) = (self.lens[i], self.ext[i]);
        let mut k = 0;
        if lo < head {
            let end = hi.min(head);
            out[k] = libc::iovec {
                iov_base: self.buf[self.starts[i] + lo..].as_ptr().cast_mut().cast(),
                iov_len: end - lo,
            };
            k += 1;
        }
        if hi > head {
            let from = lo.max(head) - head;
            out[k] = libc::iovec {
                iov_base: (ext + from) as *mut libc::c_void,
                iov_len: hi - head - from,
            };
            k += 1;
        }
        k
    }
}

/// Received datagrams of one `recvmmsg` call (a GRO-coalesced message is split into its
/// datagrams).
pub struct RxBatch {
    pub(super) buf: Vec<u8>,
    /// Control bytes of each message, 8-aligned.
    pub(super) ctrl: Vec<u64>,
    /// Datagrams joined from datapath fragments (never more bytes than were received).
    pub(super) joined: Vec<u8>,
    pub(super) joined_used: usize,
    /// Start and length of each datagram in `buf` followed by `joined` (a start past
    /// `buf.len()` lies in `joined`).
    pub(super) segs: Vec<(u32, u32)>,
}

impl Default for RxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RxBatch {
    /// Room for [`BATCH`] messages.
    pub fn new() -> Self {
        RxBatch {
            buf: vec![0; SLOT * BATCH],
            ctrl: vec![0; BATCH * CMSG_BYTES / 8],
            joined: vec![0; SLOT * BATCH],
            joined_used: 0,
            segs: Vec::with_capacity(RX_MAX_SEGS),
        }
    }

    /// Datagrams received by the last call.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Datagram `i` of the last call.
    pub fn get(&self, i: usize) -> &[u8] {
        let Some(&(start, len)) = self.segs.get(i) else {
            return &[];
        };
        let (start, len) = (start as usize, len as usize);
        if let Some(j) = start.checked_sub(self.buf.len()) {
            return self.joined.get(j..j + len).unwrap_or(&[]);
        }
        self.buf.get(start..start + len).unwrap_or(&[])
    }

    /// Appends a received datagram at `start..start + len` of `buf`.
    pub(super) fn push(&mut self, start: usize, len: usize) {
        if self.segs.len() < RX_MAX_SEGS {
            self.segs.push((start as u32, len as u32));
        }
    }

    /// Room for a joined datagram of up to `len` bytes, at the end of `joined`.
    pub(super) fn join_room(&mut self, len: usize) -> Option<&mut [u8]> {
        self.joined
            .get_mut(self.joined_used..self.joined_used + len)
    }

    /// Appends the first `len` bytes of the room given by `join_room` as a datagram.
    pub(super) fn push_joined(&mut self, len: usize) {
        if self.segs.len() < RX_MAX_SEGS && self.joined_used + len <= self.joined.len() {
            self.segs
                .push(((self.buf.len() + self.joined_used) as u32, len as u32));
            self.joined_used += len;
        }
    }
}

/// `send_run`'s arrays. On the stack they were zeroed on every call (50 KiB: 10% of a
/// one-engine 8 B send/receive's CPU on the sending side); here each call writes only the
/// entries it hands to the kernel. The default has no arrays (no allocation): what `send_run`
/// leaves in place while it holds the real ones.
#[derive(Default)]
pub(super) struct TxScratch {
    pub(super) iov: Vec<libc::iovec>,
    pub(super) hdr: Vec<libc::mmsghdr>,
    pub(super) ctrl: Vec<[u64; CMSG_BYTES / 8]>,
    pub(super) frag_hdrs: Vec<[u8; FRAG_HDR]>,
    /// Per message: its first datagram (position in the run), datagrams and segments.
    pub(super) first: Vec<usize>,
    pub(super) dgs: Vec<usize>,
    pub(super) segs: Vec<usize>,
}

// SAFETY: the raw pointers inside `iov` and `hdr` are written by `send_run` before the
// kernel reads them in the same call and are never dereferenced afterwards (stale between
// calls); the scratch is reached only through `&mut UdpPaths`.
unsafe impl Send for TxScratch {}

impl TxScratch {
    pub(super) fn new() -> Self {
        // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is valid.
        let (iov, hdr) = unsafe {
            (
                std::mem::zeroed::<libc::iovec>(),
                std::mem::zeroed::<libc::mmsghdr>(),
            )
        };
        TxScratch {
            iov: vec![iov; IOV_CAP],
            hdr: vec![hdr; TX_MAX],
            ctrl: vec![[0u64; CMSG_BYTES / 8]; TX_MAX],
            frag_hdrs: vec![[0u8; FRAG_HDR]; IOV_CAP / 2],
            first: vec![0; TX_MAX],
            dgs: vec![0; TX_MAX],
            segs: vec![0; TX_MAX],
        }
    }
}
