//! The UDP datapath: a path is one UDP socket with its own source port, connected to the
//! peer's socket of the same index, so the kernel's (and any ECMP fabric's) flow hashing sees
//! N distinct 5-tuples.
//!
//! Sockets are non-blocking. Datagrams go out in batches with `sendmmsg` (one syscall per
//! path per batch) and come in with `recvmmsg`. `drop_rate` discards that fraction of
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
/// Datagrams per `sendmmsg` / `recvmmsg` batch.
pub const BATCH: usize = 32;
/// Bytes of one batch slot (a whole datagram fits).
const SLOT: usize = 65536;
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
}

/// Datagrams waiting to go out, each tagged with its path.
pub struct TxBatch {
    buf: Vec<u8>,
    lens: [usize; BATCH],
    paths: [u16; BATCH],
    count: usize,
}

impl Default for TxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl TxBatch {
    /// An empty batch with room for [`BATCH`] datagrams.
    pub fn new() -> Self {
        TxBatch {
            buf: vec![0; SLOT * BATCH],
            lens: [0; BATCH],
            paths: [0; BATCH],
            count: 0,
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

    /// Whether no more datagrams fit.
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }

    /// Forgets every datagram.
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// The next free slot, to be filled and then committed with [`TxBatch::commit`];
    /// `None` when full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.count * SLOT;
        self.buf.get_mut(start..start + MAX_DATAGRAM)
    }

    /// Commits the slot returned by [`TxBatch::slot`] as a datagram of `len` bytes on `path`.
    pub fn commit(&mut self, path: u16, len: usize) {
        if self.count < BATCH && len <= MAX_DATAGRAM {
            self.lens[self.count] = len;
            self.paths[self.count] = path;
            self.count += 1;
        }
    }
}

/// Received datagrams of one `recvmmsg` call.
pub struct RxBatch {
    buf: Vec<u8>,
    lens: [usize; BATCH],
    count: usize,
}

impl Default for RxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RxBatch {
    /// Room for [`BATCH`] datagrams.
    pub fn new() -> Self {
        RxBatch {
            buf: vec![0; SLOT * BATCH],
            lens: [0; BATCH],
            count: 0,
        }
    }

    /// Datagrams received by the last call.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` of the last call.
    pub fn get(&self, i: usize) -> &[u8] {
        if i >= self.count {
            return &[];
        }
        let start = i * SLOT;
        self.buf.get(start..start + self.lens[i]).unwrap_or(&[])
    }
}

/// The N path sockets of one connection endpoint.
pub struct UdpPaths {
    socks: Vec<UdpSocket>,
    drop_rate: f64,
    rng: Rng,
    stats: UdpStats,
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
        if paths == 0 || paths > 256 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "udp paths must be in 1..=256",
            ));
        }
        let mut socks = Vec::with_capacity(usize::from(paths));
        for _ in 0..paths {
            let s = UdpSocket::bind(SocketAddr::new(ip, 0))?;
            s.set_nonblocking(true)?;
            set_buf(s.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
            set_buf(s.as_raw_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
            socks.push(s);
        }
        Ok(UdpPaths {
            socks,
            drop_rate: if drop_rate.is_finite() {
                drop_rate.clamp(0.0, 1.0)
            } else {
                0.0
            },
            rng: Rng::new(seed),
            stats: UdpStats::default(),
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
        if ports.len() != self.socks.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "peer has {} udp paths, this side {}",
                    ports.len(),
                    self.socks.len()
                ),
            ));
        }
        for (s, &p) in self.socks.iter().zip(ports) {
            s.connect(SocketAddr::new(peer, p))?;
        }
        Ok(())
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
    /// Datagrams the kernel refuses for lack of buffer space are dropped and counted: the
    /// protocol retransmits them.
    pub fn send_batch(&mut self, batch: &mut TxBatch) -> io::Result<()> {
        let n = batch.count;
        // Order the batch by path so each path's datagrams leave in one syscall.
        let mut order = [0usize; BATCH];
        for (i, o) in order.iter_mut().enumerate().take(n) {
            *o = i;
        }
        order[..n].sort_unstable_by_key(|&i| batch.paths[i]);
        let mut start = 0;
        while start < n {
            let path = batch.paths[order[start]];
            let mut end = start + 1;
            while end < n && batch.paths[order[end]] == path {
                end += 1;
            }
            let sock = self.socks.get(usize::from(path)).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "transmit on unknown path")
            })?;
            // SAFETY: mmsghdr and iovec are plain C structs for which all-zero is valid.
            let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut hdr: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            let cnt = end - start;
            for k in 0..cnt {
                let i = order[start + k];
                iov[k] = libc::iovec {
                    iov_base: batch.buf[i * SLOT..].as_mut_ptr().cast(),
                    iov_len: batch.lens[i],
                };
                hdr[k].msg_hdr.msg_iov = &mut iov[k];
                hdr[k].msg_hdr.msg_iovlen = 1;
            }
            let mut done = 0;
            while done < cnt {
                // SAFETY: `hdr[done..cnt]` point at iovecs into `batch.buf`, which lives and
                // is not touched until the call returns; the socket is connected, so no
                // address is needed.
                let r = unsafe {
                    libc::sendmmsg(
                        sock.as_raw_fd(),
                        hdr[done..].as_mut_ptr(),
                        (cnt - done) as libc::c_uint,
                        0,
                    )
                };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    if transient(&e) {
                        self.stats.send_refused += (cnt - done) as u64;
                        break;
                    }
                    return Err(e);
                }
                done += r as usize;
                self.stats.sent += r as u64;
            }
            start = end;
        }
        batch.clear();
        Ok(())
    }

    /// Writes the indices of the paths with datagrams waiting into `out` (which must hold
    /// one entry per path) and returns how many there are; does not block.
    pub fn readable(&mut self, out: &mut [u16]) -> usize {
        const MAX: usize = 256;
        // SAFETY: all-zero pollfd is valid.
        let mut pfd: [libc::pollfd; MAX] = unsafe { std::mem::zeroed() };
        let n = self.socks.len().min(MAX).min(out.len());
        for (p, s) in pfd.iter_mut().zip(&self.socks).take(n) {
            p.fd = s.as_raw_fd();
            p.events = libc::POLLIN;
        }
        // SAFETY: `pfd[..n]` is initialised; a zero timeout never blocks.
        let r = unsafe { libc::poll(pfd.as_mut_ptr(), n as libc::nfds_t, 0) };
        if r <= 0 {
            return 0;
        }
        let mut k = 0;
        for (i, p) in pfd.iter().enumerate().take(n) {
            // POLLERR too: reading clears a pending ICMP error.
            if p.revents & (libc::POLLIN | libc::POLLERR) != 0 {
                out[k] = i as u16;
                k += 1;
            }
        }
        k
    }

    /// Receives up to [`BATCH`] datagrams from path `path` into `rx` (non-blocking);
    /// returns how many arrived.
    pub fn recv_batch(&mut self, path: usize, rx: &mut RxBatch) -> io::Result<usize> {
        rx.count = 0;
        let Some(sock) = self.socks.get(path) else {
            return Ok(0);
        };
        // SAFETY: all-zero mmsghdr / iovec are valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdr: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for k in 0..BATCH {
            iov[k] = libc::iovec {
                iov_base: rx.buf[k * SLOT..].as_mut_ptr().cast(),
                iov_len: SLOT,
            };
            hdr[k].msg_hdr.msg_iov = &mut iov[k];
            hdr[k].msg_hdr.msg_iovlen = 1;
        }
        loop {
            // SAFETY: each header points at a SLOT-byte region of `rx.buf`, which outlives
            // the call; MSG_DONTWAIT keeps it non-blocking; no timeout is passed.
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
                rx.lens[k] = (h.msg_len as usize).min(SLOT);
            }
            rx.count = n;
            self.stats.received += n as u64;
            return Ok(n);
        }
    }
}

/// Errors that mean "this datagram is lost for now", not "the endpoint is broken": a full
/// buffer, or an ICMP report that the peer or its network is unreachable (a link may come
/// back; the connection's retransmission budget decides when to give up).
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused
    ) || matches!(
        e.raw_os_error(),
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENOBUFS | libc::EPERM)
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
