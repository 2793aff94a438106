//! Following a path whose NIC was renumbered, on either end.
//!
//! A path's socket is connected to its peer path, so the kernel drops whatever comes from
//! elsewhere. When the peer's NIC comes back with another address, its probes would be
//! dropped forever. So while a path is failed its socket is *loose* ([`UdpPaths::loosen`]):
//! unconnected, it sends addressed to the last known peer and looks at the head of its
//! queue before taking anything ([`UdpPaths::admit`], by the rule of [`verdict`]): a
//! datagram from the known peer, or one carrying this connection's flow id from anywhere,
//! connects the socket to its sender again -- the peer's new address, if it moved, as QUIC
//! follows a connection by the source of its packets. Anything else is dropped. On the
//! renumbered side, [`UdpPaths::rebind`] puts a path's socket on the NIC's new address,
//! connected to the same peer path. Healthy (connected) paths are untouched: their send and
//! receive loops are the same as ever.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use crate::mpt::frame::Frame;

use super::batch::TxBatch;
use super::frag::{FRAG_HDR, FRAG_TYPE};
use super::limits::BATCH;
use super::paths::{open, path_mtu, transient, UdpPaths};

/// Bytes of a datagram's head that [`verdict`] reads: a data frame's prefix behind a
/// fragment header, or a whole control frame.
const HEAD: usize = 64;

/// What a loose path does with a datagram from `src`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It comes from the path's peer: the path connects to it again, as before.
    Known,
    /// It comes from elsewhere and is for this connection: the peer moved there.
    Adopt,
    /// It comes from elsewhere and is not for this connection (or no frame): dropped.
    Drop,
}

/// The rule of a loose path whose peer was at `peer`, for a datagram from `src` that starts
/// with `head`, on a connection whose flow id is `local_fid`. Of a fragmented datagram only
/// the first fragment carries the frame's header (the others are dropped from a stranger).
pub fn verdict(peer: Option<SocketAddr>, src: SocketAddr, head: &[u8], local_fid: u16) -> Verdict {
    if peer == Some(src) {
        return Verdict::Known;
    }
    let frame = match head {
        [FRAG_TYPE, 0, ..] => head.get(FRAG_HDR..),
        [FRAG_TYPE, ..] => None,
        _ => Some(head),
    };
    match frame.and_then(Frame::peek_flow) {
        Some(fid) if fid == local_fid => Verdict::Adopt,
        _ => Verdict::Drop,
    }
}

/// `a` as a socket address for the C calls, and its length.
fn to_c(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid (family AF_UNSPEC).
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for any sockaddr.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address the kernel wrote into `ss`, if it is an IPv4 or IPv6 one.
fn from_c(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says `ss` holds a sockaddr_in.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes());
            Some(SocketAddr::new(ip, u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says `ss` holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = IpAddr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip, u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl UdpPaths {
    /// Whether path `path` is loose (see the module's documentation).
    pub fn is_loose(&self, path: usize) -> bool {
        self.loose.get(path).copied().unwrap_or(false)
    }

    /// The address path `path` sends to (its peer path's, as last known).
    pub fn peer(&self, path: usize) -> Option<SocketAddr> {
        self.peers.get(path).copied().flatten()
    }

    /// Unconnects path `path`'s socket, keeping its local address and port, so that the
    /// peer path may come back from another address; until [`UdpPaths::admit`] takes it,
    /// the path sends to the peer's last known address.
    pub fn loosen(&mut self, path: usize) -> io::Result<()> {
        let (Some(s), Some(false)) = (self.socks.get(path), self.loose.get(path).copied()) else {
            return Ok(());
        };
        let local = s.local_addr()?;
        // SAFETY: an all-zero sockaddr_storage is family AF_UNSPEC.
        let unspec: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: connecting to an AF_UNSPEC address dissolves the socket's association;
        // `unspec` outlives the call and its size is passed.
        cvt(unsafe {
            libc::connect(
                s.as_raw_fd(),
                (&unspec as *const libc::sockaddr_storage).cast(),
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            )
        })?;
        // Unconnected from here on: its datagrams must be addressed.
        self.loose[path] = true;
        self.stats.loosened += 1;
        // The kernel lets go of a port it chose itself when a socket disconnects: take the
        // same one back, so the peer's datagrams still find this path. (Where the address
        // is gone, the socket takes another port when it next sends; the path failed anyway.)
        if s.local_addr()? != local {
            let (ss, len) = to_c(local);
            // SAFETY: `ss` holds a socket address of `len` bytes and outlives the call.
            cvt(unsafe {
                libc::bind(
                    s.as_raw_fd(),
                    (&ss as *const libc::sockaddr_storage).cast(),
                    len,
                )
            })?;
        }
        Ok(())
    }

    /// Connects path `path` to `to` (its peer path, maybe at a new address); it is no longer
    /// loose. The datagram size follows the new route's MTU if that is smaller.
    pub fn connect_path(&mut self, path: usize, to: SocketAddr) -> io::Result<()> {
        let Some(s) = self.socks.get(path) else {
            return Ok(());
        };
        s.connect(to)?;
        self.connected(path, to);
        Ok(())
    }

    /// Path `path`'s socket is connected to `to`: the datagram size follows the new route's
    /// MTU if that is smaller.
    fn connected(&mut self, path: usize, to: SocketAddr) {
        if let Some((m, hdr)) = path_mtu(&self.socks[path], to.ip()) {
            let m = m.saturating_sub(hdr);
            if self.mtu_payload == 0 || m < self.mtu_payload {
                self.mtu_payload = m;
            }
        }
        self.peers[path] = Some(to);
        self.loose[path] = false;
    }

    /// A loose path `path` that is readable: drops the datagrams at the head of its queue
    /// that [`verdict`] drops, until one connects the path again (to its peer's address,
    /// or to the new one it came from: `peers_moved` counts those). Returns whether the path
    /// is connected now, so that its queue can be received as usual; a path that is not
    /// loose is connected.
    pub fn admit(&mut self, path: usize, local_fid: u16) -> io::Result<bool> {
        if !self.is_loose(path) {
            return Ok(true);
        }
        let fd = self.socks[path].as_raw_fd();
        for _ in 0..BATCH {
            let mut head = [0u8; HEAD];
            let mut iov = libc::iovec {
                iov_base: head.as_mut_ptr().cast(),
                iov_len: HEAD,
            };
            // SAFETY: all-zero msghdr and sockaddr_storage are valid.
            let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            // SAFETY: `msg` points at `head` (HEAD bytes) and `name`, which outlive the call;
            // MSG_PEEK leaves the datagram queued, MSG_TRUNC only changes the returned length.
            let r = unsafe {
                libc::recvmsg(
                    fd,
                    &mut msg,
                    libc::MSG_PEEK | libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Ok(false);
                }
                // An error reported for an earlier send is cleared by reading it.
                if e.kind() == io::ErrorKind::Interrupted || transient(&e) {
                    continue;
                }
                return Err(e);
            }
            let len = (r as usize).min(HEAD);
            let Some(src) = from_c(&name) else {
                self.drop_head(fd);
                continue;
            };
            match verdict(self.peer(path), src, &head[..len], local_fid) {
                Verdict::Drop => {
                    self.drop_head(fd);
                    self.stats.strangers += 1;
                }
                v => {
                    let was = self.peer(path);
                    self.connect_path(path, src)?;
                    if v == Verdict::Adopt {
                        self.stats.peers_moved += 1;
                        tracing::info!(
                            "mpt udp path {path}: the peer path moved from {} to {src}",
                            was.map_or_else(|| "nowhere".to_string(), |a| a.to_string())
                        );
                    }
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Discards the datagram at the head of `fd`'s queue.
    fn drop_head(&self, fd: libc::c_int) {
        let mut b = [0u8; 1];
        // SAFETY: `b` is one writable byte that outlives the call; the rest of the datagram
        // is discarded by the kernel.
        unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) };
    }

    /// Moves path `path` onto local address `ip` (its NIC was renumbered): a new socket,
    /// on the old port if it is free there, connected to the same peer path, takes the old
    /// one's descriptor number, so whatever polls the paths needs no change. Returns the
    /// new local address. Nothing changes when the new socket cannot be bound or connected
    /// (the address is not up yet, the NIC has no route yet): the caller tries again later.
    pub fn rebind(&mut self, path: usize, ip: IpAddr) -> io::Result<SocketAddr> {
        let Some(old) = self.socks.get(path) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no such path"));
        };
        let port = old.local_addr().map_or(0, |a| a.port());
        let s = open(SocketAddr::new(ip, port)).or_else(|_| open(SocketAddr::new(ip, 0)))?;
        let at = s.local_addr()?;
        let to = self.peer(path);
        if let Some(to) = to {
            s.connect(to)?;
        }
        // SAFETY: both descriptors are open sockets owned here; dup3 atomically makes the old
        // number refer to the new socket (closing the old one) and keeps it close-on-exec;
        // `s` then closes only its own, now spare, number.
        cvt(unsafe { libc::dup3(s.as_raw_fd(), old.as_raw_fd(), libc::O_CLOEXEC) })?;
        drop(s);
        self.partial[path].have = 0;
        match to {
            Some(to) => self.connected(path, to),
            // Never connected: nowhere to send yet, as before.
            None => self.loose[path] = false,
        }
        Ok(at)
    }

    /// Cuts path `path` off as a NIC that lost its address would, for tests: its descriptor
    /// now holds a socket bound to an address no interface has (TEST-NET-1, 192.0.2.1, by
    /// `IP_FREEBIND`), which the kernel refuses to route from (`ENETUNREACH`, a loss) and
    /// nothing can reach. Such a socket cannot connect, so the path is loose from then on.
    #[cfg(test)]
    pub(crate) fn cut(&mut self, path: usize) {
        let s = unroutable_socket();
        // SAFETY: as in `rebind`.
        cvt(unsafe { libc::dup3(s.as_raw_fd(), self.socks[path].as_raw_fd(), libc::O_CLOEXEC) })
            .unwrap();
        self.loose[path] = true;
    }

    /// Sends the datagrams `idx` of `batch` on the loose socket `fd` of one path, each
    /// addressed to the path's peer, whole (the kernel fragments a large one).
    pub(super) fn send_loose(&mut self, fd: RawFd, batch: &TxBatch, idx: &[u16]) -> io::Result<()> {
        let Some(&path) = idx.first().map(|&i| &batch.paths[usize::from(i)]) else {
            return Ok(());
        };
        let Some(to) = self.peer(usize::from(path)) else {
            self.stats.send_refused += idx.len() as u64;
            return Ok(());
        };
        let (name, namelen) = to_c(to);
        for &i in idx {
            let i = usize::from(i);
            // SAFETY: all-zero iovecs and msghdr are valid.
            let mut iov: [libc::iovec; 2] = unsafe { std::mem::zeroed() };
            let n = batch.iovecs(i, 0, batch.datagram_len(i), &mut iov);
            // SAFETY: as above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&name as *const libc::sockaddr_storage).cast_mut().cast();
            msg.msg_namelen = namelen;
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = n as _;
            loop {
                // SAFETY: the iovecs point into `batch` and at payloads committed with it
                // (valid until it is sent or cleared), `name` is a socket address of
                // `namelen` bytes; all outlive the call.
                let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
                if r >= 0 {
                    self.stats.sent += 1;
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if transient(&e) {
                    self.stats.send_refused += 1;
                    break;
                }
                return Err(e);
            }
        }
        Ok(())
    }
}

/// A UDP socket bound to 192.0.2.1 (an address no interface holds) with `IP_FREEBIND`.
#[cfg(test)]
fn unroutable_socket() -> std::net::UdpSocket {
    use std::os::fd::FromRawFd;
    // SAFETY: socket() returns a new descriptor (checked), owned by the UdpSocket made of it.
    let s = unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        std::net::UdpSocket::from_raw_fd(fd)
    };
    assert!(super::paths::set_int(
        s.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_FREEBIND,
        1
    ));
    let (ss, len) = to_c(SocketAddr::new(IpAddr::from([192, 0, 2, 1]), 0));
    // SAFETY: `ss` holds a socket address of `len` bytes and outlives the call.
    cvt(unsafe {
        libc::bind(
            s.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
    .unwrap();
    s
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
