//! Sending a batch: one `sendmmsg` per path, runs of equal datagrams as one UDP GSO send,
//! datagrams over the path MTU as datapath fragments.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::batch::{TxBatch, TxScratch, IOV_CAP};
use super::frag::{FragHdr, FRAG_HDR};
use super::limits::{GSO_MAX_BYTES, GSO_MAX_SEGS, TX_MAX};
use super::paths::{transient, UdpPaths, SOL_UDP, UDP_SEGMENT};

impl UdpPaths {
    /// Sends every datagram of `batch` (one `sendmmsg` per path present) and clears it.
    /// Runs of datagrams of one path of equal size (the last may be shorter) that fit the
    /// path MTU go out as one UDP GSO message each. Datagrams the kernel refuses for lack
    /// of buffer space are dropped and counted: the protocol retransmits them.
    pub fn send_batch(&mut self, batch: &mut TxBatch) -> io::Result<()> {
        let n = batch.count;
        // Order the batch by path so each path's datagrams leave in one syscall; the sort
        // is stable, so a path's datagrams keep their order.
        let mut order = [0u16; TX_MAX];
        for (i, o) in order.iter_mut().enumerate().take(n) {
            *o = i as u16;
        }
        order[..n].sort_by_key(|&i| batch.paths[usize::from(i)]);
        let mut start = 0;
        while start < n {
            let path = batch.paths[usize::from(order[start])];
            // Its answers (acknowledgements echo the path of what they acknowledge) come back
            // here.
            self.polls.touch(usize::from(path));
            let mut end = start + 1;
            while end < n && batch.paths[usize::from(order[end])] == path {
                end += 1;
            }
            let fd = self
                .socks
                .get(usize::from(path))
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "transmit on unknown path")
                })?
                .as_raw_fd();
            // A loose path (its peer may have moved) is unconnected: its few datagrams
            // (probes, mostly) go one by one, addressed.
            if self.loose[usize::from(path)] {
                self.send_loose(fd, batch, &order[start..end])?;
                start = end;
                continue;
            }
            let mut from = start;
            while from < end {
                from = self
                    .send_run(fd, batch, &order[from..end])
                    .map(|k| from + k)?;
            }
            start = end;
        }
        batch.clear();
        Ok(())
    }

    /// How a datagram of `len` bytes is cut into datapath fragments: the stride and the
    /// count, or `None` if it goes whole (it fits the MTU, or GSO is not available).
    pub(super) fn frag_plan(&self, len: usize) -> Option<(usize, usize)> {
        if !self.gso || len <= self.mtu_payload || self.mtu_payload <= FRAG_HDR {
            return None;
        }
        let stride = (self.mtu_payload - FRAG_HDR).min(usize::from(u16::MAX));
        let count = len.div_ceil(stride);
        (count <= GSO_MAX_SEGS && len + count * FRAG_HDR <= GSO_MAX_BYTES)
            .then_some((stride, count))
    }

    /// Sends some of the datagrams `idx` (indices into `batch`, all on the socket `fd`)
    /// and returns how many of them are done with (sent or counted as refused). Fewer than
    /// all when the iovecs ran out, or when the kernel refused GSO (which is then turned
    /// off, so the rest goes without it).
    fn send_run(&mut self, fd: RawFd, batch: &TxBatch, idx: &[u16]) -> io::Result<usize> {
        let mut scratch = std::mem::take(&mut self.tx_scratch);
        let r = self.send_run_with(&mut scratch, fd, batch, idx);
        self.tx_scratch = scratch;
        r
    }

    fn send_run_with(
        &mut self,
        scratch: &mut TxScratch,
        fd: RawFd,
        batch: &TxBatch,
        idx: &[u16],
    ) -> io::Result<usize> {
        let TxScratch {
            iov,
            hdr,
            ctrl,
            frag_hdrs,
            first,
            dgs,
            segs,
        } = scratch;
        let gso_max = if self.gso { self.mtu_payload } else { 0 };
        let (mut d, mut msgs, mut iv, mut fh) = (0, 0, 0, 0);
        while d < idx.len() && msgs < TX_MAX {
            let i0 = usize::from(idx[d]);
            let seg = batch.datagram_len(i0);
            let iov_first = iv;
            // One message: a fragmented datagram, or a run of whole datagrams.
            let (cnt, nseg, gso_seg) = if let Some((stride, count)) = self.frag_plan(seg) {
                // A fragment: its header, then up to two pieces of the datagram.
                if iv + 3 * count > IOV_CAP {
                    break;
                }
                let id = self.next_frag_id;
                self.next_frag_id = id.wrapping_add(1);
                for k in 0..count {
                    let (lo, hi) = (k * stride, ((k + 1) * stride).min(seg));
                    frag_hdrs[fh] = FragHdr {
                        index: k as u8,
                        count: count as u8,
                        stride: stride as u16,
                        id,
                    }
                    .encode();
                    iov[iv] = libc::iovec {
                        iov_base: frag_hdrs[fh].as_mut_ptr().cast(),
                        iov_len: FRAG_HDR,
                    };
                    iv += 1 + batch.iovecs(i0, lo, hi, &mut iov[iv + 1..]);
                    fh += 1;
                }
                (1, count, FRAG_HDR + stride)
            } else {
                let (mut cnt, mut total) = (1, seg);
                if seg > 0 && seg <= gso_max {
                    while d + cnt < idx.len() && cnt < GSO_MAX_SEGS {
                        let l = batch.datagram_len(usize::from(idx[d + cnt]));
                        if l == 0 || l > seg || total + l > GSO_MAX_BYTES {
                            break;
                        }
                        cnt += 1;
                        total += l;
                        if l < seg {
                            break; // only the last segment may be shorter
                        }
                    }
                }
                if iv + 2 * cnt > IOV_CAP {
                    break;
                }
                for k in 0..cnt {
                    let i = usize::from(idx[d + k]);
                    let len = batch.datagram_len(i);
                    iv += batch.iovecs(i, 0, len, &mut iov[iv..]);
                }
                (cnt, cnt, seg)
            };
            // SAFETY: an all-zero mmsghdr is valid (no name, no control, no flags).
            hdr[msgs] = unsafe { std::mem::zeroed() };
            let h = &mut hdr[msgs].msg_hdr;
            h.msg_iov = &mut iov[iov_first];
            h.msg_iovlen = (iv - iov_first) as _;
            if nseg > 1 {
                let c = &mut ctrl[msgs];
                // SAFETY: `c` is 8-aligned, CMSG_BYTES long, and holds a cmsghdr followed by
                // a u16 (CMSG_SPACE(2) <= CMSG_BYTES); the writes stay inside it.
                unsafe {
                    let cm = c.as_mut_ptr().cast::<libc::cmsghdr>();
                    (*cm).cmsg_len = libc::CMSG_LEN(2) as _;
                    (*cm).cmsg_level = SOL_UDP;
                    (*cm).cmsg_type = UDP_SEGMENT;
                    libc::CMSG_DATA(cm)
                        .cast::<u16>()
                        .write_unaligned(gso_seg as u16);
                    h.msg_control = cm.cast();
                    h.msg_controllen = libc::CMSG_SPACE(2) as _;
                }
            }
            first[msgs] = d;
            dgs[msgs] = cnt;
            segs[msgs] = nseg;
            d += cnt;
            msgs += 1;
        }
        let mut done = 0;
        while done < msgs {
            // SAFETY: `hdr[done..msgs]` point at iovecs into `batch.buf`, `frag_hdrs` and the
            // payloads committed with the batch (valid until it is sent or cleared: the
            // contract of `commit_with`) and at control bytes in `ctrl`, all of which live and
            // are not touched until the call returns; the socket is connected, so no address
            // is needed.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdr[done..].as_mut_ptr(),
                    (msgs - done) as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if segs[done] > 1 && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) {
                    // No GSO on this route or kernel: send the rest datagram by datagram.
                    tracing::debug!("udp: GSO refused ({e}); sending datagrams singly");
                    self.gso = false;
                    return Ok(first[done]);
                }
                if transient(&e) {
                    let left: usize = dgs[done..msgs].iter().sum();
                    self.stats.send_refused += left as u64;
                    break;
                }
                return Err(e);
            }
            for m in done..done + r as usize {
                self.stats.sent += dgs[m] as u64;
                if segs[m] > 1 {
                    self.stats.gso_sends += 1;
                }
                if segs[m] > dgs[m] {
                    self.stats.fragmented += 1;
                }
            }
            done += r as usize;
        }
        // Refused datagrams are counted and done with; otherwise `d` were sent.
        Ok(if done < msgs { idx.len() } else { d })
    }
}
