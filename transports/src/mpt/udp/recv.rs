//! Receiving: which paths are readable, one `recvmmsg` batch of a path with GRO-coalesced
//! messages split again, and datapath fragments joined (whole in one copy, or one by one).

use std::io;
use std::os::fd::AsRawFd;

use super::batch::{RxBatch, CMSG_BYTES, SLOT};
use super::frag::{FragHdr, Partial, FRAG_HDR, FRAG_TYPE};
use super::limits::{BATCH, MAX_DATAGRAM};
use super::paths::{transient, UdpPaths, SOL_UDP, UDP_GRO};

impl UdpPaths {
    /// Writes the indices of the paths with datagrams waiting into `out` (which must hold
    /// one entry per path) and returns how many there are; does not block.
    pub fn readable(&mut self, out: &mut [u16]) -> usize {
        self.polls.poll(out)
    }

    /// The next [`UdpPaths::readable`] polls every path (the caller slept on all of them and
    /// may have been woken by any).
    pub fn poll_all_next(&mut self) {
        self.polls.full_next = true;
    }

    /// Receives up to [`BATCH`] messages from path `path` into `rx` (non-blocking);
    /// returns how many messages arrived. A message coalesced by GRO is split into its
    /// datagrams, so `rx.len()` may be larger.
    pub fn recv_batch(&mut self, path: usize, rx: &mut RxBatch) -> io::Result<usize> {
        rx.segs.clear();
        rx.joined_used = 0;
        let Some(sock) = self.socks.get(path) else {
            return Ok(0);
        };
        // SAFETY: all-zero mmsghdr / iovec are valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdr: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        let ctrl = rx.ctrl.as_mut_ptr();
        for k in 0..BATCH {
            iov[k] = libc::iovec {
                iov_base: rx.buf[k * SLOT..].as_mut_ptr().cast(),
                iov_len: SLOT,
            };
            hdr[k].msg_hdr.msg_iov = &mut iov[k];
            hdr[k].msg_hdr.msg_iovlen = 1;
            // SAFETY: `rx.ctrl` holds BATCH * CMSG_BYTES bytes; this is message k's share.
            hdr[k].msg_hdr.msg_control = unsafe { ctrl.add(k * CMSG_BYTES / 8) }.cast();
            hdr[k].msg_hdr.msg_controllen = CMSG_BYTES as _;
        }
        loop {
            // SAFETY: each header points at a SLOT-byte region of `rx.buf` and at
            // CMSG_BYTES of `rx.ctrl`, which outlive the call; MSG_DONTWAIT keeps it
            // non-blocking; no timeout is passed.
            let r = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    hdr.as_mut_ptr(),
                    BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Nothing to read, or an ICMP error reported for an earlier send.
                return if transient(&e) { Ok(0) } else { Err(e) };
            }
            let n = r as usize;
            for (k, h) in hdr.iter().enumerate().take(n) {
                let len = (h.msg_len as usize).min(SLOT);
                let start = k * SLOT;
                let seg = match gro_size(&h.msg_hdr).filter(|&g| g > 0 && g < len) {
                    Some(g) => {
                        self.stats.gro_receives += 1;
                        g
                    }
                    None => len.max(1),
                };
                if rx.buf.get(start) == Some(&FRAG_TYPE) && self.join_whole(rx, start, len, seg) {
                    continue;
                }
                let mut off = 0;
                while off < len {
                    let l = seg.min(len - off);
                    if rx.buf.get(start + off) == Some(&FRAG_TYPE) {
                        self.join_one(path, rx, start + off, l);
                    } else {
                        rx.push(start + off, l);
                    }
                    off += l;
                }
            }
            self.stats.received += rx.segs.len() as u64;
            return Ok(n);
        }
    }

    /// The fast way: the message at `start..start + len` of `rx.buf`, coalesced from
    /// `seg`-byte segments, is exactly every fragment of one datagram in order (what a GSO
    /// send becomes when nothing on the way splits it). Joins it into `rx` in one copy and
    /// returns `true`; `false` (having changed nothing) if the message is anything else.
    fn join_whole(&mut self, rx: &mut RxBatch, start: usize, len: usize, seg: usize) -> bool {
        let Some(msg) = rx.buf.get(start..start + len) else {
            return false;
        };
        let Some((h0, _)) = FragHdr::parse(&msg[..seg.min(len)]) else {
            return false;
        };
        let count = usize::from(h0.count);
        let stride = usize::from(h0.stride);
        if h0.index != 0 || seg != FRAG_HDR + stride || len.div_ceil(seg) != count {
            return false;
        }
        let total = len - count * FRAG_HDR;
        for k in 0..count {
            let piece = &msg[k * seg..((k + 1) * seg).min(len)];
            match FragHdr::parse(piece) {
                Some((h, _)) if h.index as usize == k && h.count == h0.count && h.id == h0.id => {}
                _ => return false,
            }
        }
        let at = rx.joined_used;
        let Some(out) = rx.joined.get_mut(at..at + total) else {
            return false;
        };
        for k in 0..count {
            let body = &msg[k * seg + FRAG_HDR..((k + 1) * seg).min(len)];
            out[k * stride..k * stride + body.len()].copy_from_slice(body);
        }
        rx.push_joined(total);
        self.stats.joined += 1;
        true
    }

    /// The slow way: one fragment at `start..start + len` of `rx.buf`, joined through the
    /// path's reassembly buffer; a completed datagram is appended to `rx`.
    pub(super) fn join_one(&mut self, path: usize, rx: &mut RxBatch, start: usize, len: usize) {
        let Some(dg) = rx.buf.get(start..start + len) else {
            return;
        };
        let Some(p) = self.partial.get_mut(path) else {
            return;
        };
        let Some((h, off)) = FragHdr::parse(dg) else {
            self.stats.join_drops += 1;
            return;
        };
        if p.have == 0 || p.id != h.id || p.count != h.count {
            if p.have != 0 {
                self.stats.join_drops += 1;
            }
            *p = Partial {
                id: h.id,
                count: h.count,
                have: 0,
                len: 0,
                buf: std::mem::take(&mut p.buf),
            };
            if p.buf.is_empty() {
                p.buf = vec![0; MAX_DATAGRAM];
            }
        }
        let body = &dg[FRAG_HDR..];
        let Some(dst) = p.buf.get_mut(off..off + body.len()) else {
            return;
        };
        dst.copy_from_slice(body);
        p.have |= 1u64 << h.index;
        if h.index + 1 == h.count {
            p.len = off + body.len();
        }
        let all = if h.count >= 64 {
            u64::MAX
        } else {
            (1u64 << h.count) - 1
        };
        if p.have != all {
            return;
        }
        let n = p.len;
        p.have = 0;
        if let (Some(out), Some(src)) = (rx.join_room(n), p.buf.get(..n)) {
            out.copy_from_slice(src);
            rx.push_joined(n);
            self.stats.joined += 1;
        }
    }
}

/// The segment size of a GRO-coalesced message (its `UDP_GRO` control message), if any.
fn gro_size(h: &libc::msghdr) -> Option<usize> {
    if h.msg_control.is_null()
        || (h.msg_controllen as u64) < std::mem::size_of::<libc::cmsghdr>() as u64
    {
        return None;
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer `h` points at
    // with well-formed control messages; the CMSG_* walkers stay within that length.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(h);
        while !cm.is_null() {
            if (*cm).cmsg_level == SOL_UDP && (*cm).cmsg_type == UDP_GRO {
                let v = libc::CMSG_DATA(cm).cast::<libc::c_int>().read_unaligned();
                return usize::try_from(v).ok();
            }
            cm = libc::CMSG_NXTHDR(h, cm);
        }
    }
    None
}
