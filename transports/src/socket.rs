//! TCP links between ranks on different hosts.
//!
//! Frames are a little-endian u64 length followed by the payload. Sending writes straight from
//! the caller's frame when the kernel takes it (one `writev` of header and payload) and keeps
//! only the remainder in a bounded buffer; receiving reads into a buffer large enough for two
//! frames so a whole frame can be looked at in place.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;

use ccl_monitor::Engine;

use crate::frame_mon::{FrameMon, SINGLE_PATH};
use crate::{Error, Link, LinkMonitor, Result};

const HDR: usize = 8;

/// Default largest frame on a socket link.
pub const DEFAULT_FRAME_BYTES: usize = 512 * 1024;

/// A framed link over one non-blocking TCP connection.
pub struct SocketLink {
    stream: TcpStream,
    max_frame: usize,
    out: Vec<u8>,
    out_pos: usize,
    inb: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// Length of the frame `peek` returned, consumed by `pop`.
    peeked: Option<usize>,
    peer: String,
    /// Stream bytes (headers included) handed to the kernel so far, for the monitor.
    sent: u64,
    mon: FrameMon,
}

impl SocketLink {
    /// Wraps a connected stream; switches it to non-blocking mode.
    pub fn new(stream: TcpStream, max_frame: usize) -> Result<Self> {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::io(format!("set_nonblocking on link to {peer}"), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io(format!("TCP_NODELAY on link to {peer}"), e))?;
        Ok(SocketLink {
            stream,
            max_frame,
            out: Vec::with_capacity(2 * (max_frame + HDR)),
            out_pos: 0,
            inb: vec![0; 2 * (max_frame + HDR)],
            in_start: 0,
            in_end: 0,
            peeked: None,
            peer,
            sent: 0,
            mon: FrameMon::off(Engine::Socket, SINGLE_PATH, 0),
        })
    }

    /// Tells the monitor about a frame of `len` bytes accepted now, `written` bytes of it
    /// (header included) already in the kernel: done now if all are, else once flushed.
    #[cold]
    fn record_send(&mut self, len: usize, written: usize) {
        let t = self.mon.now_ns();
        self.mon.posted(t, len as u64);
        // Bytes of the stream before this frame, still in `out`.
        let before = self.sent + self.pending_out() as u64;
        self.sent += written as u64;
        if written == HDR + len {
            self.mon.completed(t, len as u64);
        } else {
            self.mon.owe(before + (HDR + len) as u64, len as u64);
        }
    }

    fn pending_out(&self) -> usize {
        self.out.len() - self.out_pos
    }

    fn closed(&self) -> Error {
        Error::PeerClosed {
            what: format!("socket link to {}", self.peer),
        }
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl Link for SocketLink {
    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn try_send(&mut self, frame: &[u8]) -> Result<bool> {
        if frame.len() > self.max_frame {
            return Err(Error::Protocol(format!(
                "frame of {} bytes exceeds socket frame limit {}",
                frame.len(),
                self.max_frame
            )));
        }
        if self.pending_out() > 0 {
            self.flush()?;
        }
        let hdr = (frame.len() as u64).to_le_bytes();
        let mut written = 0;
        if self.pending_out() == 0 {
            self.out.clear();
            self.out_pos = 0;
            loop {
                let bufs = [IoSlice::new(&hdr), IoSlice::new(frame)];
                match self.stream.write_vectored(&bufs) {
                    Ok(0) => return Err(self.closed()),
                    Ok(n) => {
                        written = n;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(Error::io(format!("send to {}", self.peer), e)),
                }
            }
        } else if self.pending_out() + HDR + frame.len() > self.out.capacity() {
            return Ok(false);
        }
        let total = HDR + frame.len();
        if self.mon.is_on() {
            self.record_send(frame.len(), written);
        }
        if written < total {
            if written < HDR {
                self.out.extend_from_slice(&hdr[written..]);
                self.out.extend_from_slice(frame);
            } else {
                self.out.extend_from_slice(&frame[written - HDR..]);
            }
        }
        Ok(true)
    }

    fn peek(&mut self) -> Result<Option<&[u8]>> {
        if self.pending_out() > 0 {
            // Keep our own sends moving while we wait: two ranks that both send before they
            // receive must not stall each other.
            self.flush()?;
        }
        loop {
            let avail = self.in_end - self.in_start;
            if avail >= HDR {
                let mut len_bytes = [0u8; HDR];
                len_bytes.copy_from_slice(&self.inb[self.in_start..self.in_start + HDR]);
                let len = u64::from_le_bytes(len_bytes) as usize;
                if len > self.max_frame {
                    return Err(Error::Protocol(format!(
                        "frame length {len} from {} exceeds limit {}",
                        self.peer, self.max_frame
                    )));
                }
                if avail >= HDR + len {
                    self.peeked = Some(len);
                    let s = self.in_start + HDR;
                    return Ok(Some(&self.inb[s..s + len]));
                }
            }
            if self.in_end == self.inb.len() {
                self.inb.copy_within(self.in_start..self.in_end, 0);
                self.in_end -= self.in_start;
                self.in_start = 0;
            }
            match self.stream.read(&mut self.inb[self.in_end..]) {
                Ok(0) => return Err(self.closed()),
                Ok(n) => self.in_end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(Error::io(format!("receive from {}", self.peer), e)),
            }
        }
    }

    fn pop(&mut self) {
        if let Some(len) = self.peeked.take() {
            self.in_start += HDR + len;
            if self.in_start == self.in_end {
                self.in_start = 0;
                self.in_end = 0;
            }
        }
    }

    fn flush(&mut self) -> Result<bool> {
        let mut moved = false;
        while self.pending_out() > 0 {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(self.closed()),
                Ok(n) => {
                    self.out_pos += n;
                    self.sent += n as u64;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(Error::io(format!("send to {}", self.peer), e)),
            }
        }
        if self.pending_out() == 0 {
            self.out.clear();
            self.out_pos = 0;
        }
        if moved && self.mon.owes() {
            self.mon.reached(self.sent);
        }
        Ok(moved)
    }

    fn has_pending(&self) -> bool {
        self.pending_out() > 0
    }

    fn kind(&self) -> &'static str {
        "socket"
    }

    fn attach_monitor(&mut self, m: &LinkMonitor) {
        let nic = self
            .stream
            .local_addr()
            .ok()
            .and_then(|a| interface_index(a.ip()))
            .unwrap_or(0);
        self.mon = FrameMon::off(Engine::Socket, SINGLE_PATH, nic);
        self.mon.attach(m);
    }

    fn begin_op(&mut self, op: ccl_monitor::Op, seq: u64) {
        self.mon.begin_op(op, seq);
    }
}

pub use crate::ifaddr::interface_index;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn loopback_is_an_interface() {
        assert!(interface_index(IpAddr::V4(Ipv4Addr::LOCALHOST)).is_some());
        assert_eq!(
            interface_index(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))),
            None
        );
    }

    fn pair(max: usize) -> (SocketLink, SocketLink) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (
            SocketLink::new(a, max).unwrap(),
            SocketLink::new(b, max).unwrap(),
        )
    }

    #[test]
    fn frames_cross_intact_both_ways_under_backpressure() {
        let (mut a, mut b) = pair(64 * 1024);
        let frames: Vec<Vec<u8>> = (0..400u32)
            .map(|i| {
                (0..(i as usize * 997) % (64 * 1024))
                    .map(|j| (i as usize + j) as u8)
                    .collect()
            })
            .collect();
        let (mut sent_a, mut got_b, mut sent_b, mut got_a) = (0, 0, 0, 0);
        while got_a < frames.len() || got_b < frames.len() {
            if sent_a < frames.len() && a.try_send(&frames[sent_a]).unwrap() {
                sent_a += 1;
            }
            if sent_b < frames.len() && b.try_send(&frames[sent_b]).unwrap() {
                sent_b += 1;
            }
            if let Some(f) = b.peek().unwrap() {
                assert_eq!(f, &frames[got_b][..]);
                b.pop();
                got_b += 1;
            }
            if let Some(f) = a.peek().unwrap() {
                assert_eq!(f, &frames[got_a][..]);
                a.pop();
                got_a += 1;
            }
            a.flush().unwrap();
            b.flush().unwrap();
        }
    }

    #[test]
    fn closed_peer_is_reported() {
        let (mut a, b) = pair(1024);
        drop(b);
        let mut err = None;
        for _ in 0..1000 {
            match a.peek() {
                Err(e) => {
                    err = Some(e);
                    break;
                }
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        assert!(matches!(err, Some(Error::PeerClosed { .. })));
    }

    #[test]
    fn oversized_length_header_is_a_protocol_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let mut b = SocketLink::new(b, 1024).unwrap();
        raw.write_all(&(1u64 << 40).to_le_bytes()).unwrap();
        let mut res = Ok(None);
        for _ in 0..1000 {
            res = b.peek().map(|o| o.map(|s| s.len()));
            if res.is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(matches!(res, Err(Error::Protocol(_))));
    }
}
