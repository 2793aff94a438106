//! The path sockets ([`UdpPaths`]): binding them (over one or several local addresses),
//! connecting each to its peer path, the route MTU, loss injection and the counters.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use crate::mpt::rng::Rng;

use super::batch::TxScratch;
use super::frag::Partial;
use super::limits::MAX_DATAGRAM;
use super::poll::PollSet;

/// `setsockopt`/`cmsg` level and names of UDP GSO/GRO (linux/udp.h).
pub(super) const SOL_UDP: libc::c_int = 17;
pub(super) const UDP_SEGMENT: libc::c_int = 103;
pub(super) const UDP_GRO: libc::c_int = 104;
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
    /// Datagrams a loose path dropped: from an address other than its peer's, and not for
    /// this connection.
    pub strangers: u64,
    /// Times a failed path was made loose ([`UdpPaths::loosen`]).
    pub loosened: u64,
    /// Loose paths that took a new peer address (the peer's NIC was renumbered).
    pub peers_moved: u64,
}

/// The N path sockets of one connection endpoint.
pub struct UdpPaths {
    pub(super) socks: Vec<UdpSocket>,
    drop_rate: f64,
    rng: Rng,
    pub(super) stats: UdpStats,
    /// Largest datagram that fits the path MTU unfragmented, once connected (0: unknown).
    pub(super) mtu_payload: usize,
    /// Whether sends may use UDP GSO (cleared if the kernel refuses it).
    pub(super) gso: bool,
    /// Id of the next fragmented datagram.
    pub(super) next_frag_id: u32,
    /// Per path: the fragmented datagram being joined.
    pub(super) partial: Vec<Partial>,
    /// `send_run`'s message headers and vectors, kept between calls.
    pub(super) tx_scratch: TxScratch,
    /// What `readable` polls.
    pub(super) polls: PollSet,
    /// Per path, the peer path's address, once connected.
    pub(super) peers: Vec<Option<SocketAddr>>,
    /// Per path, whether its socket is unconnected so that the peer's path may come from a
    /// new address ([`UdpPaths::loosen`]): it sends with an address and receives through
    /// [`UdpPaths::admit`].
    pub(super) loose: Vec<bool>,
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

/// A path socket bound to `at`: non-blocking, with large buffers and GRO.
pub(super) fn open(at: SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(at)?;
    s.set_nonblocking(true)?;
    set_buf(s.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
    set_buf(s.as_raw_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
    // Coalesced receives are split in `recv_batch`; without GRO the kernel hands over a GSO
    // buffer segment by segment, which is correct too.
    set_int(s.as_raw_fd(), SOL_UDP, UDP_GRO, 1);
    Ok(s)
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
            socks.push(open(SocketAddr::new(ips[i % ips.len()], 0))?);
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
            peers: vec![None; usize::from(paths)],
            loose: vec![false; usize::from(paths)],
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
        for ((s, &p), at) in self.socks.iter().zip(peers).zip(&mut self.peers) {
            s.connect(p)?;
            *at = Some(p);
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
}

/// Sets an integer socket option; failure only means the feature is not there.
pub(super) fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket owned by the caller; `v` outlives the call and `len`
    // is its size.
    unsafe { libc::setsockopt(fd, level, name, (&v as *const libc::c_int).cast(), len) == 0 }
}

/// The MTU of the route of a connected socket, and the IP plus UDP header bytes of its
/// address family.
pub(super) fn path_mtu(s: &UdpSocket, peer: IpAddr) -> Option<(usize, usize)> {
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
/// went down or lost the address a path is bound to (a link may come back, renumbered or
/// not, and the other NICs' paths carry on meanwhile; the connection's retransmission
/// budget decides when to give up).
pub(super) fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused
    ) || matches!(
        e.raw_os_error(),
        Some(
            libc::ENETUNREACH
                | libc::EHOSTUNREACH
                | libc::ENETDOWN
                | libc::ENOBUFS
                | libc::EPERM
                | libc::EADDRNOTAVAIL
        )
    )
}
