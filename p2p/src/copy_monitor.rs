//! Copy-engine transfers for the throughput monitor (`CCL_MONITOR=1`). The GPU runs a copy, so
//! only the GPU knows when it ran: a copy of a direct transfer this rank makes is bracketed by
//! two timing events on its lane, and once the second has passed, the events' own interval
//! becomes a post and a completion record (engine `copy_engine`, unit `copy`, the peer, the
//! lane as the path). Copies are sampled: at most one per lane per `CCL_MONITOR_SAMPLE_US` is
//! timed, because the two event records and the later query cost the calling thread a few
//! microseconds, a fifth of a 1 MiB send (one H200 under MPS, 2026-11-29,
//! `tests/gpu/device_monitor.sh`: sendrecv 1 MiB at 0.81 of its busbw with every copy timed).
//! A record therefore gives a copy's true rate, and the byte counts are the sampled copies'. The host sees an event pass only when it looks (at the communicator's
//! next group, and at its end), so the completion is stamped then and the post that interval
//! before it: windows see each copy's real rate, placed late by at most the gap between two
//! groups. A batch of copies (`CCL_IPC_BATCH_COPIES`) is timed as one,
//! each peer's copy recorded with its own bytes over the batch's interval: the copies run side
//! by side, so the records add up to the batch's rate. Local copies, copies inside kernels
//! (`CCL_IPC_COPY_KERNEL`, mailed sends) and copies the peer's GPU makes for this rank are not
//! timed here.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::cuda::{Context, Event, Stream};
use ccl_monitor::{CollId, Engine, Op, Publisher, Unit, Work};
use parking_lot::Mutex;

use crate::layout::Lane;

/// Timed copies in flight past which new ones go untimed (a GPU far behind its host, or an
/// event that never passes, must not grow the queue without end).
const MOST_PENDING: usize = 4096;

/// One communicator's timed copies.
pub(crate) struct CopyMonitor {
    publisher: Publisher,
    ctx: Arc<Context>,
    /// The communicator's hash, as its links' records carry it.
    pub(crate) comm: u64,
    /// The least time between two timed copies of one lane.
    every_ns: u64,
    inner: Mutex<Inner>,
}

/// Two events and the records of what ran between them.
type Timed = (Event, Event, Vec<Work>);

#[derive(Default)]
struct Inner {
    /// Oldest first: copies on different lanes may end out of order, but one not yet passed
    /// holds the later ones back only until the next look. Each pair of events brackets one
    /// copy, or one batch of copies with a record per peer.
    pending: VecDeque<Timed>,
    /// Event pairs and record lists to reuse (creating events costs driver calls, and the
    /// lists are the data path's only allocation here).
    free: Vec<Timed>,
    /// When each path last had a copy timed, by [`path_of`].
    last_ns: Vec<(u16, u64)>,
}

impl Inner {
    /// Whether a copy on `path` at `now` is timed (and if so, notes it).
    fn due(&mut self, path: u16, now: u64, every_ns: u64) -> bool {
        match self.last_ns.iter_mut().find(|(p, _)| *p == path) {
            Some((_, t)) if now.saturating_sub(*t) < every_ns => false,
            Some((_, t)) => {
                *t = now;
                true
            }
            None => {
                self.last_ns.push((path, now));
                true
            }
        }
    }
}

/// A copy whose start event is recorded: what [`CopyMonitor::finish`] completes.
pub(crate) struct Started(Event, Event, Vec<Work>);

impl CopyMonitor {
    /// Times at most one copy per lane per `every`.
    pub(crate) fn new(
        ctx: Arc<Context>,
        publisher: Publisher,
        comm: u64,
        every: Duration,
    ) -> CopyMonitor {
        CopyMonitor {
            publisher,
            ctx,
            comm,
            every_ns: u64::try_from(every.as_nanos()).unwrap_or(u64::MAX),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Records the start on `s` of a copy on `lane`; `None` (the copy goes untimed) when its
    /// lane had one timed lately, too many are in flight, or the events cannot be made or
    /// recorded.
    pub(crate) fn start(&self, s: &Stream, lane: Lane) -> Option<Started> {
        let now = self.publisher.now_ns();
        let reused = {
            let mut g = self.inner.lock();
            if g.pending.len() >= MOST_PENDING || !g.due(path_of(lane), now, self.every_ns) {
                return None;
            }
            g.free.pop()
        };
        let (a, b, works) = match reused {
            Some(t) => t,
            None => (
                Event::timing(&self.ctx).ok()?,
                Event::timing(&self.ctx).ok()?,
                Vec::new(),
            ),
        };
        a.record(s).ok()?;
        Some(Started(a, b, works))
    }

    /// Records the copy's end on `s` and queues it for [`CopyMonitor::poll`].
    pub(crate) fn finish(
        &self,
        s: &Stream,
        st: Started,
        peer: usize,
        lane: Lane,
        bytes: usize,
        coll: CollId,
    ) {
        self.finish_batch(s, st, lane, std::iter::once((peer, bytes)), coll);
    }

    /// Records the end on `s` of a batch of copies (`parts`: peer and bytes of each copy
    /// that moves a direct transfer) and queues it. The batch's copies run side by side, so
    /// each is recorded over the whole batch's interval with its own bytes: a peer's rate is
    /// then at most its copy's own, and their sum is the batch's.
    pub(crate) fn finish_batch(
        &self,
        s: &Stream,
        st: Started,
        lane: Lane,
        parts: impl Iterator<Item = (usize, usize)>,
        coll: CollId,
    ) {
        let Started(a, b, mut works) = st;
        if b.record(s).is_err() {
            return;
        }
        works.clear();
        works.extend(parts.map(|(peer, bytes)| Work {
            ts_ns: 0,
            bytes: bytes as u64,
            peer: peer as u32,
            path: path_of(lane),
            nic: 0,
            engine: Engine::CopyEngine,
            unit: Unit::Copy,
            coll,
        }));
        self.inner.lock().pending.push_back((a, b, works));
    }

    /// Publishes every timed copy, oldest first, whose end event has passed.
    pub(crate) fn poll(&self) {
        let mut g = self.inner.lock();
        if g.pending.is_empty() {
            return;
        }
        while let Some((a, b, works)) = g.pending.front() {
            if !b.query().unwrap_or(true) {
                return;
            }
            let took_ns = Event::elapsed_ms(a, b).map_or(0, |ms| (f64::from(ms) * 1e6) as u64);
            let now = self.publisher.now_ns();
            for &w in works {
                let mut w = w;
                w.ts_ns = now.saturating_sub(took_ns);
                self.publisher.post(&w);
                w.ts_ns = now;
                self.publisher.complete(&w);
            }
            if let Some(t) = g.pending.pop_front() {
                g.free.push(t);
            }
        }
    }
}

/// The operation a group's records name: its first task's (a group of several collectives is
/// named by its first, as NCCL's profiler names a group's parts one by one).
pub(crate) fn op_of(tasks: &[Task]) -> Op {
    match tasks.first().map(|t| t.kind) {
        Some(TaskKind::Coll(c)) => match c {
            Collective::AllReduce => Op::AllReduce,
            Collective::AllGather => Op::AllGather,
            Collective::ReduceScatter => Op::ReduceScatter,
            Collective::Broadcast { .. } => Op::Broadcast,
            Collective::Reduce { .. } => Op::Reduce,
            Collective::AlltoAll => Op::AllToAll,
            Collective::Gather { .. } | Collective::Scatter { .. } => Op::Other,
        },
        Some(TaskKind::Send { .. }) => Op::Send,
        Some(TaskKind::Recv { .. }) => Op::Recv,
        None => Op::Other,
    }
}

/// A lane as a record's path: copy lanes from 0, receive lanes from 16, host-path lanes from
/// 32, the caller's stream 255.
pub(crate) fn path_of(lane: Lane) -> u16 {
    match lane {
        Lane::Tx(i) => i as u16,
        Lane::Rx(i) => 16 + i as u16,
        Lane::Host(i) => 32 + i as u16,
        Lane::User => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_is_a_path_of_its_own() {
        let lanes = [
            Lane::Tx(0),
            Lane::Tx(7),
            Lane::Rx(0),
            Lane::Rx(3),
            Lane::Host(0),
            Lane::Host(1),
            Lane::User,
        ];
        let paths: Vec<u16> = lanes.iter().map(|&l| path_of(l)).collect();
        assert_eq!(paths, [0, 7, 16, 19, 32, 33, 255]);
    }

    #[test]
    fn each_lane_times_one_copy_per_interval() {
        let mut g = Inner::default();
        let every = 1_000_000;
        let seen: Vec<bool> = [
            (0, 0),
            (0, 999_999),
            (16, 500_000),
            (0, 1_000_000),
            (16, 1_400_000),
            (16, 1_500_000),
        ]
        .iter()
        .map(|&(path, now)| g.due(path, now, every))
        .collect();
        assert_eq!(seen, [true, false, true, true, false, true]);
    }
}
