//! What the single-connection links (socket, shm, failover socket) tell the throughput
//! monitor: a post per frame a link accepts and a completion once the frame has left this
//! side (handed whole to the kernel, written into the peer's ring, acknowledged by the
//! peer), under the peer, a path and a NIC key. Off (one branch per frame) until
//! [`crate::Link::attach_monitor`]; nothing here allocates.

use ccl_monitor::{CollId, Engine, Op, Publisher, Unit, Work};

use crate::LinkMonitor;

/// The NIC key of links that use none (shared memory): far from the numbers that interface
/// indexes and the multipath links' NIC numbers take.
pub const NIC_NONE: u16 = u16::MAX;
/// The path key of a link that has a single path: beyond the multipath links' path numbers,
/// which start at 0 per connection.
pub const SINGLE_PATH: u16 = u16::MAX;
/// The path key of shared-memory links, apart from the network links' paths.
pub const SHM_PATH: u16 = u16::MAX - 1;

/// Frames whose completion is owed, remembered one by one; past this many the newest
/// absorbs the next (same completion time for both, which only blurs the window).
const OWED: usize = 32;

/// A frame (or frames merged into one entry) whose completion is owed.
#[derive(Clone, Copy, Debug, Default)]
struct Owed {
    /// The link's stream position (its own counting) at which the frame is done.
    end: u64,
    bytes: u64,
    frames: u32,
    op: u64,
    /// The route it was posted on, which its completion is reported under too.
    path: u16,
    nic: u16,
}

/// One link's monitor state.
#[derive(Debug)]
pub(crate) struct FrameMon {
    publisher: Publisher,
    peer: u32,
    comm: u64,
    /// The operation being sent ([`CollId::pack`]ed).
    op: u64,
    path: u16,
    nic: u16,
    engine: Engine,
    /// A ring of `OWED`, oldest at `head`.
    owed: [Owed; OWED],
    head: usize,
    len: usize,
}

impl FrameMon {
    /// Records nothing until attached.
    pub(crate) fn off(engine: Engine, path: u16, nic: u16) -> Self {
        FrameMon {
            publisher: Publisher::off(),
            peer: 0,
            comm: 0,
            op: CollId::pack(Op::Other, 0),
            path,
            nic,
            engine,
            owed: [Owed::default(); OWED],
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn attach(&mut self, m: &LinkMonitor) {
        self.publisher = m.publisher.clone();
        self.peer = m.peer;
        self.comm = m.comm;
    }

    pub(crate) fn begin_op(&mut self, op: Op, seq: u64) {
        self.op = CollId::pack(op, seq);
    }

    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.publisher.is_on()
    }

    /// The monitor clock (0, no clock read, when off).
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        self.publisher.now_ns()
    }

    /// Reports what follows under `path` and `nic` (a failover link that moved).
    pub(crate) fn route(&mut self, path: u16, nic: u16) {
        self.path = path;
        self.nic = nic;
    }

    fn work(&self, ts_ns: u64, bytes: u64, op: u64) -> Work {
        self.work_on(ts_ns, bytes, op, self.path, self.nic)
    }

    fn work_on(&self, ts_ns: u64, bytes: u64, op: u64, path: u16, nic: u16) -> Work {
        Work {
            ts_ns,
            bytes,
            peer: self.peer,
            path,
            nic,
            engine: self.engine,
            unit: Unit::Frame,
            coll: CollId::unpack(self.comm, op),
        }
    }

    /// A frame of `bytes` was accepted at `ts_ns`.
    #[inline]
    pub(crate) fn posted(&self, ts_ns: u64, bytes: u64) {
        if self.is_on() {
            self.publisher.post(&self.work(ts_ns, bytes, self.op));
        }
    }

    /// A frame of `bytes` (posted with the current operation) completed at `ts_ns`.
    #[inline]
    pub(crate) fn completed(&self, ts_ns: u64, bytes: u64) {
        if self.is_on() {
            self.publisher.complete(&self.work(ts_ns, bytes, self.op));
        }
    }

    /// A frame of `bytes` posted now completes once the link's stream reaches `end`.
    pub(crate) fn owe(&mut self, end: u64, bytes: u64) {
        if !self.is_on() {
            return;
        }
        if self.len == OWED {
            let last = &mut self.owed[(self.head + OWED - 1) % OWED];
            last.end = end;
            last.bytes += bytes;
            last.frames += 1;
            return;
        }
        self.owed[(self.head + self.len) % OWED] = Owed {
            end,
            bytes,
            frames: 1,
            op: self.op,
            path: self.path,
            nic: self.nic,
        };
        self.len += 1;
    }

    /// The stream reached `pos`: completes every owed frame that ends there or before.
    pub(crate) fn reached(&mut self, pos: u64) {
        if self.len == 0 || self.owed[self.head].end > pos {
            return;
        }
        let now = self.now_ns();
        while self.len > 0 && self.owed[self.head].end <= pos {
            let o = self.owed[self.head];
            self.head = (self.head + 1) % OWED;
            self.len -= 1;
            let w = self.work_on(now, o.bytes, o.op, o.path, o.nic);
            self.publisher.complete_many(&w, o.frames);
        }
    }

    /// Frames posted and not completed.
    pub(crate) fn owes(&self) -> bool {
        self.len > 0
    }

    pub(crate) fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    pub(crate) fn peer(&self) -> u32 {
        self.peer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_monitor::{Monitor, MonitorConfig};

    #[test]
    fn owed_frames_complete_in_order_and_merge_past_the_ring() {
        let m = Monitor::new(&MonitorConfig {
            enabled: true,
            ..MonitorConfig::default()
        })
        .unwrap();
        let mut f = FrameMon::off(Engine::Socket, SINGLE_PATH, 3);
        f.attach(&LinkMonitor {
            publisher: m.publisher(),
            peer: 2,
            comm: 9,
        });
        let mut end = 0;
        for i in 0..(OWED as u64 + 3) {
            end += 10 + i;
            f.posted(1, 10 + i);
            f.owe(end, 10 + i);
        }
        f.reached(10 + 11 - 1);
        assert!(f.owes());
        f.reached(end);
        assert!(!f.owes());
        m.flush().unwrap();
        let snap = m.snapshot();
        let peer = snap.key(ccl_monitor::Key::Peer(2)).unwrap();
        let total: u64 = (0..(OWED as u64 + 3)).map(|i| 10 + i).sum();
        assert_eq!((peer.bytes, peer.outstanding), (total, 0));
        assert!(snap.key(ccl_monitor::Key::Nic(3)).is_some());
    }
}
