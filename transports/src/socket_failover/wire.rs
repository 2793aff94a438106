//! One TCP connection of a failover link: breakpoint-protocol messages framed on a
//! non-blocking stream.
//!
//! Every message is a 32-byte header -- kind (u8), destination (u8: 0 the peer's receiving
//! end, 1 its sending end), two zero bytes, epoch (u32), then three u64 fields, all little
//! endian -- and a `Data` message is followed by its payload. One connection carries both
//! directions' machines, so the destination byte says which of the peer's two gets it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::ops::Range;

use ccl_faulttol::Message;

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

/// A message read off the wire, with the place of its payload in the wire's buffer.
pub struct Incoming {
    pub to: To,
    pub msg: Message,
    pub payload: Range<usize>,
}

/// One TCP connection: a send buffer drained as the kernel takes it, a receive buffer
/// large enough for a whole largest message.
pub struct Wire {
    stream: TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    inb: Vec<u8>,
    in_start: usize,
    in_end: usize,
    max_payload: usize,
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
            out: Vec::new(),
            out_pos: 0,
            inb: vec![0; 2 * (max_payload + MSG_HDR)],
            in_start: 0,
            in_end: 0,
            max_payload,
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
            self.out = Vec::new();
            self.out_pos = 0;
        }
    }

    /// Bytes queued here and not yet taken by the kernel.
    pub fn backlog(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Queues `msg` (and for `Data`, `payload`); dropped on a dead connection.
    pub fn push(&mut self, to: To, msg: Message, payload: &[u8]) {
        if self.dead {
            return;
        }
        let (kind, epoch, f) = fields(msg);
        let mut hdr = [0u8; MSG_HDR];
        hdr[0] = kind;
        hdr[1] = matches!(to, To::Sender) as u8;
        hdr[4..8].copy_from_slice(&epoch.to_le_bytes());
        for (i, x) in f.iter().enumerate() {
            hdr[8 + 8 * i..16 + 8 * i].copy_from_slice(&x.to_le_bytes());
        }
        self.out.extend_from_slice(&hdr);
        self.out.extend_from_slice(payload);
    }

    /// Hands queued bytes to the kernel; returns how many went.
    pub fn flush(&mut self) -> Result<usize> {
        let mut moved = 0;
        while !self.dead && self.backlog() > 0 {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => {
                    return Err(Error::PeerClosed {
                        what: "failover link wire".into(),
                    })
                }
                Ok(n) => {
                    self.out_pos += n;
                    moved += n;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(Error::io("failover link: send", e)),
            }
        }
        if self.backlog() == 0 {
            self.out.clear();
            self.out_pos = 0;
        }
        Ok(moved)
    }

    /// The next whole message that has arrived, if any. Its payload stays in place until
    /// the next call.
    pub fn next(&mut self) -> Result<Option<Incoming>> {
        if self.dead {
            return Ok(None);
        }
        loop {
            if let Some(m) = self.parse()? {
                return Ok(Some(m));
            }
            if self.in_end == self.inb.len() {
                self.inb.copy_within(self.in_start..self.in_end, 0);
                self.in_end -= self.in_start;
                self.in_start = 0;
            }
            match self.stream.read(&mut self.inb[self.in_end..]) {
                Ok(0) => {
                    return Err(Error::PeerClosed {
                        what: "failover link wire".into(),
                    })
                }
                Ok(n) => self.in_end += n,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(Error::io("failover link: receive", e)),
            }
        }
    }

    fn parse(&mut self) -> Result<Option<Incoming>> {
        let avail = &self.inb[self.in_start..self.in_end];
        if avail.len() < MSG_HDR {
            return Ok(None);
        }
        let mut e = [0u8; 4];
        e.copy_from_slice(&avail[4..8]);
        let f = [u64_at(avail, 8), u64_at(avail, 16), u64_at(avail, 24)];
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
        if avail.len() < MSG_HDR + len {
            return Ok(None);
        }
        let start = self.in_start + MSG_HDR;
        self.in_start = start + len;
        Ok(Some(Incoming {
            to,
            msg,
            payload: start..start + len,
        }))
    }

    /// The bytes of a payload `next` returned.
    pub fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.inb[r]
    }
}
