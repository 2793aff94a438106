//! The UDP datapath: a path is one UDP socket with its own source port, connected to the
//! peer's socket of the same index, so the kernel's (and any ECMP fabric's) flow hashing sees
//! N distinct 5-tuples.
//!
//! Sockets are non-blocking. Datagrams go out in batches with `sendmmsg` (one syscall per
//! path per batch) and come in with `recvmmsg`. Where the kernel supports it, runs of
//! equal-sized datagrams of one path that fit the path MTU leave as one UDP GSO send
//! (`UDP_SEGMENT`: the stack, veth and bridges handle one 64 KB buffer instead of 40
//! packets) and arrive coalesced (`UDP_GRO`), split here again into datagrams.
//!
//! A datagram larger than the path MTU would be cut into IP fragments, which the kernel
//! builds, routes, bridges and reassembles one by one (on a veth pair with MTU 1500 that cost
//! 4-8x in throughput). Instead it leaves as one GSO send of MTU-sized *datapath fragments*,
//! each with a 12-byte header (type `0xF7`, index, count, stride, datagram id); the receiver
//! joins them again (in one copy when they arrive coalesced, as on veth, otherwise through a
//! per-path reassembly buffer). A lost fragment loses the datagram, as with IP fragments, and
//! the protocol retransmits the chunk. `drop_rate` discards that fraction of
//! outgoing datagrams before they reach the kernel (`CCL_MPT_DROP`), so loss recovery can be
//! exercised on a loss-free loopback. The datapath keeps no per-datagram allocations: the
//! batches are preallocated slabs of `MAX_DATAGRAM`-byte slots.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use super::rng::Rng;

/// Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP).
pub const MAX_DATAGRAM: usize = 65507;
/// Default number of paths on this datapath: each is a socket, so keep fd counts modest.
pub const DEFAULT_UDP_PATHS: u16 = 8;
/// Messages per `recvmmsg` batch (and datagrams per `sendmmsg` batch of large datagrams).
pub const BATCH: usize = 32;
/// Most datagrams in one transmit batch (small datagrams pack densely into its buffer).
pub const TX_MAX: usize = 256;
/// Bytes of one receive slot (a whole datagram, or a GRO-coalesced run of them, fits).
const SLOT: usize = 65536;
/// Most segments of one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 or more).
const GSO_MAX_SEGS: usize = 64;
/// Most payload bytes of one GSO send (an IPv4 datagram's length field).
const GSO_MAX_BYTES: usize = MAX_DATAGRAM;
/// Most datagrams recorded per receive batch: every slot coalesced to the smallest
/// segments that are worth coalescing would exceed this, and the rest of such a slot is
/// dropped (the protocol recovers), which does not happen with real chunk sizes.
const RX_MAX_SEGS: usize = BATCH * GSO_MAX_SEGS;
/// `setsockopt`/`cmsg` level and names of UDP GSO/GRO (linux/udp.h).
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Control bytes per message: room for one `cmsghdr` with an `int` (GRO) or `u16` (GSO).
const CMSG_BYTES: usize = 32;
/// First byte of a datapath fragment (no frame of the protocol starts with it).
const FRAG_TYPE: u8 = 0xF7;
/// Datapath fragment header: type u8 | index u8 | count u8 | 0 | stride u16 | 0 0 | id u32
/// (big-endian). `stride` is the payload of every fragment but the last, so fragment `i`
/// carries the datagram's bytes from `i * stride`.
const FRAG_HDR: usize = 12;
/// Most iovecs built for one `sendmmsg` call.
const IOV_CAP: usize = 1024;
/// Socket buffer size asked for; the kernel may cap it (`rmem_max`), which is fine.
const SOCK_BUF: libc::c_int = 8 << 20;

/// Counters of the datapath.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams discarded by loss injection.
    pub injected_drops: u64,
    /// Datagrams the kernel refused (send buffer full): lost, the protocol recovers.
    pub send_refused: u64,
    /// Datagrams received.
    pub received: u64,
    /// Sends that carried several datagrams as one UDP GSO buffer.
    pub gso_sends: u64,
    /// Receives that returned several datagrams coalesced by UDP GRO.
    pub gro_receives: u64,
    /// Datagrams sent as datapath fragments (larger than the path MTU).
    pub fragmented: u64,
    /// Datagrams joined again from datapath fragments.
    pub joined: u64,
    /// Incomplete fragmented datagrams given up (a fragment was lost or reordered).
    pub join_drops: u64,
}

/// Datagrams waiting to go out, each tagged with its path, packed one after the other in
/// one buffer (so a batch holds many small datagrams or [`BATCH`] of the largest).
pub struct TxBatch {
    buf: Vec<u8>,
    starts: Vec<usize>,
    lens: Vec<usize>,
    /// Per datagram: bytes that follow its bytes in `buf`, sent from where they lie (address
    /// and length; length 0: none), so a chunk's payload is not copied into the batch.
    ext: Vec<(usize, usize)>,
    paths: Vec<u16>,
    count: usize,
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
    fn datagram_len(&self, i: usize) -> usize {
        self.lens[i] + self.ext[i].1
    }

    /// Bytes `[lo, hi)` of datagram `i` as at most two iovecs (buffer part, payload part),
    /// written to `out`; returns how many.
    fn iovecs(&self, i: usize, lo: usize, hi: usize, out: &mut [libc::iovec]) -> usize {
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
    buf: Vec<u8>,
    /// Control bytes of each message, 8-aligned.
    ctrl: Vec<u64>,
    /// Datagrams joined from datapath fragments (never more bytes than were received).
    joined: Vec<u8>,
    joined_used: usize,
    /// Start and length of each datagram in `buf` followed by `joined` (a start past
    /// `buf.len()` lies in `joined`).
    segs: Vec<(u32, u32)>,
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
    fn push(&mut self, start: usize, len: usize) {
        if self.segs.len() < RX_MAX_SEGS {
            self.segs.push((start as u32, len as u32));
        }
    }

    /// Room for a joined datagram of up to `len` bytes, at the end of `joined`.
    fn join_room(&mut self, len: usize) -> Option<&mut [u8]> {
        self.joined
            .get_mut(self.joined_used..self.joined_used + len)
    }

    /// Appends the first `len` bytes of the room given by `join_room` as a datagram.
    fn push_joined(&mut self, len: usize) {
        if self.segs.len() < RX_MAX_SEGS && self.joined_used + len <= self.joined.len() {
            self.segs
                .push(((self.buf.len() + self.joined_used) as u32, len as u32));
            self.joined_used += len;
        }
    }
}

/// A fragmented datagram being joined on one path, across receive calls.
#[derive(Default)]
struct Partial {
    id: u32,
    count: u8,
    /// Fragments present, bit per index.
    have: u64,
    /// Datagram length, once the last fragment is in.
    len: usize,
    /// Allocated on first use: most paths never see a fragment that needs it.
    buf: Vec<u8>,
}

/// A parsed datapath fragment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FragHdr {
    index: u8,
    count: u8,
    stride: u16,
    id: u32,
}

impl FragHdr {
    fn encode(&self) -> [u8; FRAG_HDR] {
        let mut h = [0u8; FRAG_HDR];
        h[0] = FRAG_TYPE;
        h[1] = self.index;
        h[2] = self.count;
        h[4..6].copy_from_slice(&self.stride.to_be_bytes());
        h[8..12].copy_from_slice(&self.id.to_be_bytes());
        h
    }

    /// The header of `dg` and where its payload goes in the datagram, if `dg` is a
    /// well-formed fragment.
    fn parse(dg: &[u8]) -> Option<(FragHdr, usize)> {
        if dg.len() < FRAG_HDR || dg[0] != FRAG_TYPE {
            return None;
        }
        let h = FragHdr {
            index: dg[1],
            count: dg[2],
            stride: u16::from_be_bytes([dg[4], dg[5]]),
            id: u32::from_be_bytes([dg[8], dg[9], dg[10], dg[11]]),
        };
        let body = dg.len() - FRAG_HDR;
        let last = h.index.checked_add(1) == Some(h.count);
        let ok = h.count >= 2
            && usize::from(h.count) <= GSO_MAX_SEGS
            && h.index < h.count
            && h.stride > 0
            && if last {
                body <= usize::from(h.stride)
            } else {
                body == usize::from(h.stride)
            };
        let off = usize::from(h.index) * usize::from(h.stride);
        (ok && off + body <= MAX_DATAGRAM).then_some((h, off))
    }
}

/// The N path sockets of one connection endpoint.
pub struct UdpPaths {
    socks: Vec<UdpSocket>,
    drop_rate: f64,
    rng: Rng,
    stats: UdpStats,
    /// Largest datagram that fits the path MTU unfragmented, once connected (0: unknown).
    mtu_payload: usize,
    /// Whether sends may use UDP GSO (cleared if the kernel refuses it).
    gso: bool,
    /// Id of the next fragmented datagram.
    next_frag_id: u32,
    /// Per path: the fragmented datagram being joined.
    partial: Vec<Partial>,
    /// `send_run`'s message headers and vectors, kept between calls.
    tx_scratch: TxScratch,
    /// What `readable` polls.
    polls: PollSet,
}

/// `readable` polls every path only every [`FULL_POLL_EVERY`]th round (and after the caller
/// slept: [`UdpPaths::poll_all_next`]); in the others only the paths that sent or received
/// within the last [`HOT_ROUNDS`] rounds -- unless they are half the paths or more. A small
/// operation's datagrams use one of a link's paths (small messages keep to one path, and
/// acknowledgements return on the path of what they acknowledge), and the per-socket cost of `poll` over all of them was most of a quarter of a
/// four-rank small operation's CPU (`fdget`, `fput`, `sock_poll`, `udp_poll`). A datagram on
/// a path gone quiet waits at most `FULL_POLL_EVERY - 1` rounds more.
struct PollSet {
    /// One entry per path, in path order (the kernel rewrites only `revents`).
    all: Vec<libc::pollfd>,
    /// The round in which each path last sent or received.
    active: Vec<u32>,
    /// The entries polled this round when not all, and the path of each.
    some: Vec<libc::pollfd>,
    some_path: Vec<u16>,
    round: u32,
    full_next: bool,
}

/// See [`PollSet`].
const FULL_POLL_EVERY: u32 = 8;
/// See [`PollSet`].
const HOT_ROUNDS: u32 = 4096;

// SAFETY: `pollfd` holds only a descriptor number and flags; the set is reached only through
// `&mut UdpPaths`.
unsafe impl Send for PollSet {}

impl PollSet {
    fn new(fds: impl Iterator<Item = RawFd>) -> Self {
        let all: Vec<libc::pollfd> = fds
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let n = all.len();
        PollSet {
            all,
            // `round - active >= HOT_ROUNDS`: every path starts quiet.
            active: vec![0; n],
            some: Vec::with_capacity(n),
            some_path: Vec::with_capacity(n),
            round: HOT_ROUNDS,
            full_next: true,
        }
    }

    fn touch(&mut self, path: usize) {
        if let Some(a) = self.active.get_mut(path) {
            *a = self.round;
        }
    }

    /// Polls (without blocking) and writes the readable paths into `out`; returns how many.
    fn poll(&mut self, out: &mut [u16]) -> usize {
        self.round = self.round.wrapping_add(1);
        let mut full = std::mem::take(&mut self.full_next) || self.round % FULL_POLL_EVERY == 0;
        if !full {
            self.some.clear();
            self.some_path.clear();
            for (p, &a) in self.active.iter().enumerate() {
                if self.round.wrapping_sub(a) < HOT_ROUNDS {
                    self.some.push(self.all[p]);
                    self.some_path.push(p as u16);
                }
            }
            full = self.some.len() * 2 >= self.all.len();
        }
        let set = if full { &mut self.all } else { &mut self.some };
        let n = set.len().min(out.len());
        if n == 0 {
            return 0;
        }
        // SAFETY: `set[..n]` are initialised pollfds; a zero timeout never blocks.
        let r = unsafe { libc::poll(set.as_mut_ptr(), n as libc::nfds_t, 0) };
        if r <= 0 {
            return 0;
        }
        let mut k = 0;
        for (i, p) in set.iter().enumerate().take(n) {
            // POLLERR too: reading clears a pending ICMP error.
            if p.revents & (libc::POLLIN | libc::POLLERR) != 0 {
                let path = if full {
                    i
                } else {
                    usize::from(self.some_path[i])
                };
                out[k] = path as u16;
                k += 1;
            }
        }
        for &p in &out[..k] {
            self.touch(usize::from(p));
        }
        k
    }
}

/// `send_run`'s arrays. On the stack they were zeroed on every call (50 KiB: 10% of a
/// one-engine 8 B send/receive's CPU on the sending side); here each call writes only the
/// entries it hands to the kernel. The default has no arrays (no allocation): what `send_run`
/// leaves in place while it holds the real ones.
#[derive(Default)]
struct TxScratch {
    iov: Vec<libc::iovec>,
    hdr: Vec<libc::mmsghdr>,
    ctrl: Vec<[u64; CMSG_BYTES / 8]>,
    frag_hdrs: Vec<[u8; FRAG_HDR]>,
    /// Per message: its first datagram (position in the run), datagrams and segments.
    first: Vec<usize>,
    dgs: Vec<usize>,
    segs: Vec<usize>,
}

// SAFETY: the raw pointers inside `iov` and `hdr` are written by `send_run` before the
// kernel reads them in the same call and are never dereferenced afterwards (stale between
// calls); the scratch is reached only through `&mut UdpPaths`.
unsafe impl Send for TxScratch {}

impl TxScratch {
    fn new() -> Self {
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

fn set_buf(fd: RawFd, force: libc::c_int, plain: libc::c_int) {
    let v: libc::c_int = SOCK_BUF;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket owned by the caller; `v` outlives the calls and `len`
    // is its size. Failure only means a smaller buffer, so the results are not needed.
    unsafe {
        let p = (&v as *const libc::c_int).cast::<libc::c_void>();
        // The *FORCE variant passes rmem_max where we are privileged; otherwise the plain
        // one gets what the sysctl allows.
        if libc::setsockopt(fd, libc::SOL_SOCKET, force, p, len) != 0 {
            libc::setsockopt(fd, libc::SOL_SOCKET, plain, p, len);
        }
    }
}

impl UdpPaths {
    /// Binds `paths` non-blocking sockets on `ip`, each on a port the kernel picks.
    /// `drop_rate` in `[0, 1]` is the injected loss of outgoing datagrams, drawn from a
    /// generator seeded with `seed`.
    pub fn bind(ip: IpAddr, paths: u16, drop_rate: f64, seed: u64) -> io::Result<Self> {
        Self::bind_on(&[ip], paths, drop_rate, seed)
    }

    /// [`UdpPaths::bind`] with the paths spread over several local addresses (one per NIC):
    /// path `i` binds `ips[i % ips.len()]`, so a NIC that goes down takes only its share of
    /// the paths with it and the connection goes on over the others.
    pub fn bind_on(ips: &[IpAddr], paths: u16, drop_rate: f64, seed: u64) -> io::Result<Self> {
        if ips.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "udp paths need a local address",
            ));
        }
        if paths == 0 || paths > 256 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "udp paths must be in 1..=256",
            ));
        }
        let mut socks = Vec::with_capacity(usize::from(paths));
        for i in 0..usize::from(paths) {
            let s = UdpSocket::bind(SocketAddr::new(ips[i % ips.len()], 0))?;
            s.set_nonblocking(true)?;
            set_buf(s.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
            set_buf(s.as_raw_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
            // Coalesced receives are split in `recv_batch`; without GRO the kernel hands
            // over a GSO buffer segment by segment, which is correct too.
            set_int(s.as_raw_fd(), SOL_UDP, UDP_GRO, 1);
            socks.push(s);
        }
        let polls = PollSet::new(socks.iter().map(|s| s.as_raw_fd()));
        Ok(UdpPaths {
            socks,
            drop_rate: if drop_rate.is_finite() {
                drop_rate.clamp(0.0, 1.0)
            } else {
                0.0
            },
            rng: Rng::new(seed),
            stats: UdpStats::default(),
            mtu_payload: 0,
            gso: true,
            next_frag_id: 0,
            partial: (0..paths).map(|_| Partial::default()).collect(),
            tx_scratch: TxScratch::new(),
            polls,
        })
    }

    /// Number of paths.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    /// Whether there are no paths (never, once bound).
    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// The local port of each path, in path order (sent to the peer in the hello).
    pub fn local_ports(&self) -> io::Result<Vec<u16>> {
        self.socks
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect()
    }

    /// Connects path `i` to `peer:ports[i]`; afterwards each socket only exchanges
    /// datagrams with its peer path, so stray traffic to a reused port is filtered by the
    /// kernel.
    pub fn connect(&mut self, peer: IpAddr, ports: &[u16]) -> io::Result<()> {
        let peers: Vec<SocketAddr> = ports.iter().map(|&p| SocketAddr::new(peer, p)).collect();
        self.connect_each(&peers)
    }

    /// Connects path `i` to `peers[i]` (the peer's paths may sit on several of its NICs).
    /// The datagram size follows the smallest route MTU of them all, so a chunk fits
    /// whichever path carries it (a retransmission may take another NIC).
    pub fn connect_each(&mut self, peers: &[SocketAddr]) -> io::Result<()> {
        if peers.len() != self.socks.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "peer has {} udp paths, this side {}",
                    peers.len(),
                    self.socks.len()
                ),
            ));
        }
        for (s, &p) in self.socks.iter().zip(peers) {
            s.connect(p)?;
        }
        let mut routes: Vec<(IpAddr, IpAddr)> = Vec::new();
        let mut mtu: Option<usize> = None;
        for (s, p) in self.socks.iter().zip(peers) {
            let Ok(local) = s.local_addr() else { continue };
            if routes.contains(&(local.ip(), p.ip())) {
                continue;
            }
            routes.push((local.ip(), p.ip()));
            if let Some((m, hdr)) = path_mtu(s, p.ip()) {
                let m = m.saturating_sub(hdr);
                mtu = Some(mtu.map_or(m, |x| x.min(m)));
            }
        }
        self.mtu_payload = mtu.unwrap_or(0);
        Ok(())
    }

    /// The local address of each path, in path order.
    pub fn local_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        self.socks.iter().map(|s| s.local_addr()).collect()
    }

    /// The largest datagram that crosses the route to the peer without IP fragmentation
    /// (the route's MTU less IP and UDP headers), once connected; `None` if unknown.
    pub fn mtu_payload(&self) -> Option<usize> {
        (self.mtu_payload > 0).then_some(self.mtu_payload)
    }

    /// The raw descriptors, for `poll`.
    pub fn fds(&self) -> Vec<RawFd> {
        self.socks.iter().map(|s| s.as_raw_fd()).collect()
    }

    /// Counters.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// Whether the next outgoing datagram is to be discarded (loss injection).
    pub fn inject_drop(&mut self) -> bool {
        if self.drop_rate > 0.0 && self.rng.chance(self.drop_rate) {
            self.stats.injected_drops += 1;
            return true;
        }
        false
    }

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
    fn frag_plan(&self, len: usize) -> Option<(usize, usize)> {
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
    fn join_one(&mut self, path: usize, rx: &mut RxBatch, start: usize, len: usize) {
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

/// Sets an integer socket option; failure only means the feature is not there.
fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket owned by the caller; `v` outlives the call and `len`
    // is its size.
    unsafe { libc::setsockopt(fd, level, name, (&v as *const libc::c_int).cast(), len) == 0 }
}

/// The MTU of the route of a connected socket, and the IP plus UDP header bytes of its
/// address family.
fn path_mtu(s: &UdpSocket, peer: IpAddr) -> Option<(usize, usize)> {
    let (level, name, hdr) = match peer {
        IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU, 28),
        IpAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MTU, 48),
    };
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the socket is open; `v` and `len` outlive the call and `len` is `v`'s size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    let mtu = usize::try_from(v).ok().filter(|&m| r == 0 && m > hdr)?;
    Some((mtu.min(MAX_DATAGRAM + hdr), hdr))
}

/// Errors that mean "this datagram is lost for now", not "the endpoint is broken": a full
/// buffer, an ICMP report that the peer or its network is unreachable, or a local NIC that
/// went down (a link may come back, and the other NICs' paths carry on meanwhile; the
/// connection's retransmission budget decides when to give up).
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused
    ) || matches!(
        e.raw_os_error(),
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENETDOWN | libc::ENOBUFS | libc::EPERM)
    )
}

/// Waits until one of `fds` is readable or `timeout` passes.
pub fn wait_readable(fds: &[RawFd], timeout: std::time::Duration) {
    const MAX: usize = 256;
    // SAFETY: all-zero pollfd is valid.
    let mut pfd: [libc::pollfd; MAX] = unsafe { std::mem::zeroed() };
    let n = fds.len().min(MAX);
    for (p, &fd) in pfd.iter_mut().zip(fds).take(n) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd[..n]` is initialised, `ts` lives across the call, no signal mask is
    // passed. The result does not matter: the caller re-polls the sockets either way.
    unsafe {
        libc::ppoll(pfd.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// Two connected one-path endpoints on loopback; the sender behaves as if the path MTU
    /// were 1500 (loopback's is 64 KiB), so large datagrams become datapath fragments.
    fn pair(gro: bool) -> (UdpPaths, UdpPaths) {
        let mut a = UdpPaths::bind(LO, 1, 0.0, 1).unwrap();
        let mut b = UdpPaths::bind(LO, 1, 0.0, 2).unwrap();
        let (pa, pb) = (a.local_ports().unwrap(), b.local_ports().unwrap());
        a.connect(LO, &pb).unwrap();
        b.connect(LO, &pa).unwrap();
        a.mtu_payload = 1472;
        if !gro {
            for fd in b.fds() {
                set_int(fd, SOL_UDP, UDP_GRO, 0);
            }
        }
        (a, b)
    }

    fn datagram(len: usize, tag: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ tag ^ (i >> 8) as u8)
            .collect()
    }

    /// Sends `dgs` in one batch and returns what arrives, in order.
    fn exchange(a: &mut UdpPaths, b: &mut UdpPaths, dgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
        exchange_split(a, b, dgs, |len| len)
    }

    /// As [`exchange`], with the first `head(len)` bytes of each datagram in the batch and
    /// the rest committed as a borrowed payload.
    fn exchange_split(
        a: &mut UdpPaths,
        b: &mut UdpPaths,
        dgs: &[Vec<u8>],
        head: impl Fn(usize) -> usize,
    ) -> Vec<Vec<u8>> {
        let mut tx = TxBatch::new();
        for d in dgs {
            let h = head(d.len()).min(d.len());
            tx.slot().unwrap()[..h].copy_from_slice(&d[..h]);
            // SAFETY: `dgs` outlives the batch, which is sent below.
            unsafe { tx.commit_with(0, h, &d[h..]) };
        }
        a.send_batch(&mut tx).unwrap();
        let mut rx = RxBatch::new();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < dgs.len() && Instant::now() < deadline {
            b.recv_batch(0, &mut rx).unwrap();
            got.extend((0..rx.len()).map(|i| rx.get(i).to_vec()));
        }
        got
    }

    /// Sends one datagram on `path` of `a`; the peer's path `path` receives it.
    fn send_on(a: &mut UdpPaths, path: u16) {
        let mut tx = TxBatch::new();
        tx.slot().unwrap()[..8].copy_from_slice(&[path as u8; 8]);
        tx.commit(path, 8);
        a.send_batch(&mut tx).unwrap();
    }

    /// Calls `readable` until it reports `path` (then drains it); returns how many calls.
    fn rounds_until_readable(b: &mut UdpPaths, path: u16) -> usize {
        let mut ready = [0u16; 8];
        let mut rx = RxBatch::new();
        for call in 1..=64 {
            let k = b.readable(&mut ready);
            if ready[..k].contains(&path) {
                while b.recv_batch(usize::from(path), &mut rx).unwrap() > 0 {}
                return call;
            }
        }
        usize::MAX
    }

    /// Paths that sent or received lately are polled every round, quiet ones every
    /// FULL_POLL_EVERY rounds, and all of them after `poll_all_next`.
    #[test]
    fn quiet_paths_are_polled_every_few_rounds_busy_ones_every_round() {
        let mut a = UdpPaths::bind(LO, 8, 0.0, 1).unwrap();
        let mut b = UdpPaths::bind(LO, 8, 0.0, 2).unwrap();
        let (pa, pb) = (a.local_ports().unwrap(), b.local_ports().unwrap());
        a.connect(LO, &pb).unwrap();
        b.connect(LO, &pa).unwrap();
        // Loopback delivers within the send call.
        send_on(&mut a, 5);
        assert_eq!(
            rounds_until_readable(&mut b, 5),
            1,
            "the first poll is full"
        );
        for _ in 0..3 {
            send_on(&mut a, 5);
            assert_eq!(rounds_until_readable(&mut b, 5), 1, "a busy path");
        }
        // Path 2 is quiet: found at the next full poll at the latest.
        send_on(&mut a, 2);
        let n = rounds_until_readable(&mut b, 2);
        assert!((1..=FULL_POLL_EVERY as usize).contains(&n), "{n} rounds");
        // b sent on path 6: the answer there is polled for every round.
        send_on(&mut b, 6);
        send_on(&mut a, 6);
        assert_eq!(rounds_until_readable(&mut b, 6), 1, "a path just sent on");
        // Every path busy: every poll is full.
        for p in 0..8 {
            send_on(&mut a, p);
            assert!(rounds_until_readable(&mut b, p) <= FULL_POLL_EVERY as usize);
        }
        for p in 0..8 {
            send_on(&mut a, p);
            assert_eq!(rounds_until_readable(&mut b, p), 1, "path {p}");
        }
        // A quiet path again, announced by `poll_all_next`.
        for _ in 0..HOT_ROUNDS {
            b.readable(&mut [0u16; 8]);
        }
        send_on(&mut a, 3);
        b.poll_all_next();
        assert_eq!(rounds_until_readable(&mut b, 3), 1, "after poll_all_next");
    }

    #[test]
    fn frag_header_round_trip_and_checks() {
        let h = FragHdr {
            index: 2,
            count: 3,
            stride: 1460,
            id: 0xDEAD_BEEF,
        };
        let mut dg = h.encode().to_vec();
        dg.extend_from_slice(&[7; 100]);
        assert_eq!(FragHdr::parse(&dg), Some((h, 2 * 1460)));
        // A middle fragment must carry exactly `stride` bytes.
        let mid = FragHdr { index: 1, ..h };
        let mut dg = mid.encode().to_vec();
        dg.extend_from_slice(&[7; 100]);
        assert_eq!(FragHdr::parse(&dg), None);
        assert_eq!(FragHdr::parse(&[FRAG_TYPE; 4]), None);
        let one = FragHdr {
            count: 1,
            index: 0,
            ..h
        };
        assert_eq!(FragHdr::parse(&one.encode()), None);
    }

    fn fragments_arrive_whole(gro: bool) {
        let (mut a, mut b) = pair(gro);
        let dgs = vec![
            datagram(32 * 1024 + 16, 1),
            datagram(44, 2),
            datagram(1472, 3),
            datagram(1473, 4),
            datagram(60_000, 5),
            datagram(44, 6),
            datagram(44, 7),
        ];
        let got = exchange(&mut a, &mut b, &dgs);
        assert_eq!(got, dgs);
        assert_eq!(a.stats().fragmented, 3);
        assert_eq!(b.stats().joined, 3);
        assert_eq!(b.stats().join_drops, 0);
        // On loopback a GSO send reaches a GRO socket in one piece, else in segments.
        assert_eq!(b.stats().gro_receives > 0, gro);
    }

    /// Paths bound over two addresses alternate between them, and each connects to the
    /// peer path of the same index (on the peer's address of that index).
    #[test]
    fn paths_alternate_over_local_addresses() {
        let two = [LO, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))];
        let mut a = UdpPaths::bind_on(&two, 4, 0.0, 1).unwrap();
        let b = UdpPaths::bind_on(&two, 4, 0.0, 2).unwrap();
        let ips: Vec<IpAddr> = a.local_addrs().unwrap().iter().map(|x| x.ip()).collect();
        assert_eq!(ips, [two[0], two[1], two[0], two[1]]);
        let to = b.local_addrs().unwrap();
        a.connect_each(&to).unwrap();
        for (s, want) in a.socks.iter().zip(&to) {
            assert_eq!(s.peer_addr().unwrap(), *want);
        }
        assert!(a.connect_each(&to[..3]).is_err(), "path counts must match");
        assert!(UdpPaths::bind_on(&[], 4, 0.0, 1).is_err());
    }

    #[test]
    fn fragments_arrive_whole_with_gro() {
        fragments_arrive_whole(true);
    }

    /// Datagrams whose payload is borrowed rather than copied into the batch (a chunk's bytes
    /// sent from the send slab) arrive byte for byte, whether a datapath fragment or GSO
    /// segment boundary falls in the batch part, on the seam, or in the payload.
    #[test]
    fn borrowed_payloads_arrive_whole_across_fragment_boundaries() {
        let (mut a, mut b) = pair(true);
        let dgs = vec![
            datagram(32 * 1024 + 16, 1),
            datagram(44, 2),
            datagram(44, 3),
            datagram(1472, 4),
            datagram(1473, 5),
            datagram(60_000, 6),
            datagram(1000, 7),
            datagram(1000, 8),
            datagram(1000, 9),
        ];
        for head in [0, 1, 12, 13, 1459, 1460, 1461, 3000] {
            let got = exchange_split(&mut a, &mut b, &dgs, |_| head);
            assert_eq!(got, dgs, "head {head}");
        }
        assert_eq!(b.stats().join_drops, 0);
    }

    #[test]
    fn fragments_arrive_whole_without_gro() {
        fragments_arrive_whole(false);
    }

    #[test]
    fn slow_join_handles_reordering_and_loss() {
        let (mut a, _b) = pair(true);
        let dg = datagram(5000, 9);
        let (stride, count) = a.frag_plan(dg.len()).unwrap();
        assert_eq!(count, dg.len().div_ceil(stride));
        let frag = |k: usize, id: u32| {
            let mut f = FragHdr {
                index: k as u8,
                count: count as u8,
                stride: stride as u16,
                id,
            }
            .encode()
            .to_vec();
            f.extend_from_slice(&dg[k * stride..((k + 1) * stride).min(dg.len())]);
            f
        };
        let mut rx = RxBatch::new();
        let feed = |a: &mut UdpPaths, rx: &mut RxBatch, f: Vec<u8>| {
            rx.buf[..f.len()].copy_from_slice(&f);
            a.join_one(0, rx, 0, f.len());
        };
        // Out of order: joined once the last one is in.
        for k in (0..count).rev() {
            feed(&mut a, &mut rx, frag(k, 1));
        }
        assert_eq!(rx.len(), 1);
        assert_eq!(rx.get(0), &dg[..]);
        // A datagram missing a fragment is given up when the next one starts.
        feed(&mut a, &mut rx, frag(0, 2));
        for k in 0..count {
            feed(&mut a, &mut rx, frag(k, 3));
        }
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.get(1), &dg[..]);
        assert_eq!(a.stats().join_drops, 1);
    }
}
