//! One TCP connection of a failover link: breakpoint-protocol messages framed on a
//! non-blocking stream.
//!
//! Every message is a 32-byte header -- kind (u8), destination (u8: 0 the peer's receiving
//! end, 1 its sending end), two zero bytes, epoch (u32), then three u64 fields, all little
//! endian -- and a `Data` message is followed by its payload. One connection carries both
//! directions' machines, so the destination byte says which of the peer's two gets it.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};

use ccl_faulttol::Message;

use super::bufs::RecvWindow;
use super::ring::SendRing;
use crate::{Error, Result};

/// Bytes of a message header.
pub const MSG_HDR: usize = 32;

/// Which of the peer's two machines a message is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// The end receiving this side's stream (data, commits, rollback requests, probes).
    Receiver,
    /// The end sending the stream this side receives (grants, acks, rollbacks).
    Sender,
}

/// A message read off the wire. A `Data` message's payload follows: the caller says where
/// it goes with [`Wire::land`] before the next [`Wire::next`], or it is read and dropped.
pub struct Incoming {
    pub to: To,
    pub msg: Message,
}

/// What [`Wire::next`] read: a breakpoint-protocol message, or the link's own word that the
/// peer's primary moved to a new address (its NIC was renumbered while it was down).
pub enum Arrived {
    Message(Incoming),
    Moved(SocketAddr),
}

/// The kind byte of a [`Arrived::Moved`] message (the protocol's own kinds are 0-7).
const KIND_MOVED: u8 = 8;

/// A moved message's fields: family and port, then the address's 4 or 16 bytes.
fn moved_fields(a: SocketAddr) -> [u64; 3] {
    let mut ip = [0u8; 16];
    let family = match a.ip() {
        IpAddr::V4(v4) => {
            ip[..4].copy_from_slice(&v4.octets());
            4u64
        }
        IpAddr::V6(v6) => {
            ip.copy_from_slice(&v6.octets());
            6
        }
    };
    [
        family << 16 | u64::from(a.port()),
        u64_at(&ip, 0),
        u64_at(&ip, 8),
    ]
}

fn moved_addr(f: [u64; 3]) -> Result<SocketAddr> {
    let mut ip = [0u8; 16];
    ip[..8].copy_from_slice(&f[1].to_le_bytes());
    ip[8..].copy_from_slice(&f[2].to_le_bytes());
    let port = (f[0] & 0xffff) as u16;
    let ip = match f[0] >> 16 {
        4 => IpAddr::from([ip[0], ip[1], ip[2], ip[3]]),
        6 => IpAddr::from(ip),
        k => {
            return Err(Error::Protocol(format!(
                "failover link: address family {k}"
            )))
        }
    };
    Ok(SocketAddr::new(ip, port))
}

/// Bytes of the header buffer: a burst of small messages in one read, and at most this
/// much of a payload copied rather than read in place.
const IN_BYTES: usize = 4096;
/// Slices handed to the kernel in one `writev` (headers and pieces of payloads).
const WRITE_SLICES: usize = 64;

/// A queued message: its header and, for `Data`, its payload's place in the send stream
/// (or its own copy, once the stream let those bytes go).
struct Item {
    hdr: [u8; MSG_HDR],
    off: u64,
    len: usize,
    owned: Option<Box<[u8]>>,
}

/// One TCP connection. Sending writes headers and payloads straight out of the send ring
/// (one `writev` for several messages); receiving reads headers through a small buffer and
/// payloads straight into the receive window.
pub struct Wire {
    stream: TcpStream,
    queue: VecDeque<Item>,
    /// Bytes of the first queued message the kernel took already.
    head_done: usize,
    queued: usize,
    inb: Box<[u8]>,
    in_start: usize,
    in_end: usize,
    max_payload: usize,
    /// Payload bytes of the last `Data` message not read yet, and the stream offset the
    /// next one lands at (`None`: dropped) with the epoch it was taken in.
    pay_left: usize,
    pay_to: Option<u64>,
    pay_epoch: u32,
    dead: bool,
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

fn fields(msg: Message) -> (u8, u32, [u64; 3]) {
    match msg {
        Message::Cts { posted } => (0, 0, [posted, 0, 0]),
        Message::Data { epoch, offset, len } => (1, epoch, [offset, len, 0]),
        Message::Commit { epoch, offset } => (2, epoch, [offset, 0, 0]),
        Message::Ack { epoch, done } => (3, epoch, [done, 0, 0]),
        Message::RollbackRequest { epoch } => (4, epoch, [0, 0, 0]),
        Message::Rollback {
            epoch,
            done,
            posted,
        } => (5, epoch, [done, posted, 0]),
        Message::Probe { seq } => (6, 0, [seq, 0, 0]),
        Message::ProbeAnswer { seq } => (7, 0, [seq, 0, 0]),
    }
}

fn message(kind: u8, epoch: u32, f: [u64; 3]) -> Result<Message> {
    Ok(match kind {
        0 => Message::Cts { posted: f[0] },
        1 => Message::Data {
            epoch,
            offset: f[0],
            len: f[1],
        },
        2 => Message::Commit {
            epoch,
            offset: f[0],
        },
        3 => Message::Ack { epoch, done: f[0] },
        4 => Message::RollbackRequest { epoch },
        5 => Message::Rollback {
            epoch,
            done: f[0],
            posted: f[1],
        },
        6 => Message::Probe { seq: f[0] },
        7 => Message::ProbeAnswer { seq: f[0] },
        k => return Err(Error::Protocol(format!("failover link: message kind {k}"))),
    })
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl Wire {
    /// Wraps a connected stream (made non-blocking) for payloads of up to `max_payload`.
    pub fn new(stream: TcpStream, max_payload: usize) -> Result<Self> {
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::io("failover link: set_nonblocking", e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("failover link: TCP_NODELAY", e))?;
        Ok(Wire {
            stream,
            queue: VecDeque::new(),
            head_done: 0,
            queued: 0,
            inb: vec![0; IN_BYTES].into_boxed_slice(),
            in_start: 0,
            in_end: 0,
            max_payload,
            pay_left: 0,
            pay_to: None,
            pay_epoch: 0,
            dead: false,
        })
    }

    /// The address this end of the connection is bound to.
    pub fn local_ip(&self) -> Option<std::net::IpAddr> {
        self.stream.local_addr().ok().map(|a| a.ip())
    }

    /// Whether an error or end of stream was seen: nothing more goes or comes on it.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Marks the connection dead and shuts it, so the peer sees the end at once.
    pub fn kill(&mut self) {
        if !self.dead {
            self.dead = true;
            let _ = self.stream.shutdown(Shutdown::Both);
            self.queue = VecDeque::new();
            self.head_done = 0;
            self.queued = 0;
            self.pay_left = 0;
            self.pay_to = None;
        }
    }

    /// Bytes queued here and not yet taken by the kernel.
    pub fn backlog(&self) -> usize {
        self.queued
    }

    /// Whether the kernel holds bytes of this connection that the peer's TCP has not
    /// acknowledged. Closing a socket with unread input resets the connection and drops
    /// such bytes, an ack the peer waits for among them: the link is held until they are
    /// through.
    pub fn kernel_unacked(&self) -> bool {
        use std::os::fd::AsRawFd;
        if self.dead {
            return false;
        }
        let mut n: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ on a TCP socket) writes one int through the pointer,
        // which points at `n`, alive for the call; the descriptor is owned by `stream`.
        let rc = unsafe { libc::ioctl(self.stream.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        rc == 0 && n > 0
    }

    /// Queues `msg`; a `Data` message's payload is read from the send ring when written.
    /// Dropped on a dead connection.
    pub fn push(&mut self, to: To, msg: Message) {
        if self.dead {
            return;
        }
        let (kind, epoch, f) = fields(msg);
        let hdr = header(kind, matches!(to, To::Sender) as u8, epoch, f);
        let (off, len) = match msg {
            Message::Data { offset, len, .. } => (offset, len as usize),
            _ => (0, 0),
        };
        self.queued += MSG_HDR + len;
        self.queue.push_back(Item {
            hdr,
            off,
            len,
            owned: None,
        });
    }

    /// Queues word that this side's primary now listens at, or dials from, `a`.
    pub fn push_moved(&mut self, a: SocketAddr) {
        if self.dead {
            return;
        }
        self.queued += MSG_HDR;
        self.queue.push_back(Item {
            hdr: header(KIND_MOVED, 0, 0, moved_fields(a)),
            off: 0,
            len: 0,
            owned: None,
        });
    }

    /// Copies out of `ring` the queued payloads that start before `to`, which the ring is
    /// about to let go (a connection that stopped writing keeps them queued).
    pub fn detach_before(&mut self, to: u64, ring: &SendRing) {
        for it in self.queue.iter_mut() {
            if it.len > 0 && it.owned.is_none() && it.off < to {
                let mut v = Vec::with_capacity(it.len);
                if ring.pieces(it.off, it.len, |s| v.extend_from_slice(s)) {
                    it.owned = Some(v.into_boxed_slice());
                }
            }
        }
    }

    /// Hands queued bytes to the kernel, payloads read from `ring`; returns how many went.
    pub fn flush(&mut self, ring: &SendRing) -> Result<usize> {
        let mut moved = 0;
        while !self.dead && self.queued > 0 {
            let mut g = Gather {
                iov: [IoSlice::new(&[]); WRITE_SLICES],
                k: 0,
                skip: self.head_done,
            };
            for it in self.queue.iter() {
                g.add(&it.hdr);
                let ok = match (&it.owned, it.len) {
                    (_, 0) => true,
                    (Some(o), _) => {
                        g.add(o);
                        true
                    }
                    (None, len) => ring.pieces(it.off, len, |s| g.add(s)),
                };
                if !ok {
                    return Err(Error::Protocol(
                        "failover link: queued chunk left the window".into(),
                    ));
                }
                if g.k == WRITE_SLICES {
                    break;
                }
            }
            match self.stream.write_vectored(&g.iov[..g.k]) {
                Ok(0) => {
                    return Err(Error::PeerClosed {
                        what: "failover link wire".into(),
                    })
                }
                Ok(n) => {
                    self.advance(n);
                    moved += n;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(Error::io("failover link: send", e)),
            }
        }
        Ok(moved)
    }

    fn advance(&mut self, mut n: usize) {
        self.queued -= n;
        while let Some(it) = self.queue.front() {
            let left = MSG_HDR + it.len - self.head_done;
            if n < left {
                self.head_done += n;
                return;
            }
            n -= left;
            self.head_done = 0;
            self.queue.pop_front();
        }
    }

    /// Where the payload of the `Data` message `next` just returned goes: stream offset
    /// `off` of `win` (reserved there by the caller), taken in receiving epoch `epoch`.
    pub fn land(&mut self, off: u64, epoch: u32) {
        self.pay_to = Some(off);
        self.pay_epoch = epoch;
    }

    /// The next whole message header that has arrived, if any, once the previous
    /// message's payload has been read (into `win`, or dropped). `epoch` is the receiving
    /// epoch now: the rest of a payload taken in an earlier one is dropped, as a rollback
    /// gave its place to the chunks resent since (which may be committed and read by now).
    pub fn next(&mut self, win: &mut RecvWindow, epoch: u32) -> Result<Option<Arrived>> {
        if self.dead {
            return Ok(None);
        }
        if self.pay_epoch != epoch {
            self.pay_to = None;
        }
        loop {
            if self.pay_left > 0 {
                if !self.read_payload(win)? {
                    return Ok(None);
                }
                continue;
            }
            if let Some(m) = self.parse()? {
                return Ok(Some(m));
            }
            if self.in_start > 0 {
                self.inb.copy_within(self.in_start..self.in_end, 0);
                self.in_end -= self.in_start;
                self.in_start = 0;
            }
            match self.stream.read(&mut self.inb[self.in_end..]) {
                Ok(0) => return Err(closed()),
                Ok(n) => self.in_end += n,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(Error::io("failover link: receive", e)),
            }
        }
    }

    /// Reads payload bytes: first those the header buffer holds, then straight from the
    /// socket into their place. Returns false when the socket has nothing more now.
    fn read_payload(&mut self, win: &mut RecvWindow) -> Result<bool> {
        let have = (self.in_end - self.in_start).min(self.pay_left);
        if have > 0 {
            if let Some(o) = self.pay_to {
                let src = &self.inb[self.in_start..self.in_start + have];
                win.dst(o, have).copy_from_slice(src);
                self.pay_to = Some(o + have as u64);
            }
            self.in_start += have;
            self.pay_left -= have;
            return Ok(true);
        }
        self.in_start = 0;
        self.in_end = 0;
        let got = match self.pay_to {
            Some(o) => self.stream.read(win.dst(o, self.pay_left)),
            None => {
                let n = self.pay_left.min(self.inb.len());
                self.stream.read(&mut self.inb[..n])
            }
        };
        match got {
            Ok(0) => Err(closed()),
            Ok(n) => {
                self.pay_left -= n;
                self.pay_to = self.pay_to.map(|o| o + n as u64);
                Ok(true)
            }
            Err(e) if would_block(&e) => Ok(false),
            Err(e) => Err(Error::io("failover link: receive", e)),
        }
    }

    fn parse(&mut self) -> Result<Option<Arrived>> {
        let avail = &self.inb[self.in_start..self.in_end];
        if avail.len() < MSG_HDR {
            return Ok(None);
        }
        let mut e = [0u8; 4];
        e.copy_from_slice(&avail[4..8]);
        let f = [u64_at(avail, 8), u64_at(avail, 16), u64_at(avail, 24)];
        if avail[0] == KIND_MOVED {
            self.in_start += MSG_HDR;
            return moved_addr(f).map(|a| Some(Arrived::Moved(a)));
        }
        let msg = message(avail[0], u32::from_le_bytes(e), f)?;
        let to = if avail[1] == 0 {
            To::Receiver
        } else {
            To::Sender
        };
        let len = match msg {
            Message::Data { len, .. } => len as usize,
            _ => 0,
        };
        if len > self.max_payload {
            return Err(Error::Protocol(format!(
                "failover link: chunk of {len} bytes, limit {}",
                self.max_payload
            )));
        }
        self.in_start += MSG_HDR;
        self.pay_left = len;
        self.pay_to = None;
        Ok(Some(Arrived::Message(Incoming { to, msg })))
    }
}

fn header(kind: u8, to: u8, epoch: u32, f: [u64; 3]) -> [u8; MSG_HDR] {
    let mut hdr = [0u8; MSG_HDR];
    hdr[0] = kind;
    hdr[1] = to;
    hdr[4..8].copy_from_slice(&epoch.to_le_bytes());
    for (i, x) in f.iter().enumerate() {
        hdr[8 + 8 * i..16 + 8 * i].copy_from_slice(&x.to_le_bytes());
    }
    hdr
}

/// The slices of one `writev`: the queued bytes from the first not yet written, up to
/// [`WRITE_SLICES`] slices (the stream is bytes: they may stop anywhere, even inside a
/// message).
struct Gather<'a> {
    iov: [IoSlice<'a>; WRITE_SLICES],
    k: usize,
    /// Bytes still to pass over: those the kernel took already.
    skip: usize,
}

impl<'a> Gather<'a> {
    fn add(&mut self, part: &'a [u8]) {
        if self.skip >= part.len() {
            self.skip -= part.len();
        } else if self.k < WRITE_SLICES {
            self.iov[self.k] = IoSlice::new(&part[self.skip..]);
            self.k += 1;
            self.skip = 0;
        }
    }
}

fn closed() -> Error {
    Error::PeerClosed {
        what: "failover link wire".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The moved word carries IPv4 and IPv6 addresses and their ports exactly, and an
    /// unknown family is a protocol error.
    #[test]
    fn moved_addresses_round_trip() {
        for a in ["10.1.2.3:40000", "[fd00::1:2]:65535", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(moved_addr(moved_fields(a)).unwrap(), a);
        }
        assert!(moved_addr([5 << 16, 0, 0]).is_err());
    }
}
