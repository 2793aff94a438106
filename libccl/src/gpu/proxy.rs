//! The proxy thread of a communicator's GPU engine, and what it shares with the streams: the
//! flag slots in pinned memory (a start and a done slot per operation) and the jobs it is
//! handed. It polls start slots, runs plans on staged host memory and writes done slots; it
//! makes no CUDA call (see the module doc of [`super`]).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda::{Context, PinnedBuffer};
use crossbeam::channel::Receiver;

use super::device::cuda_err;
use crate::core::Comm;
use crate::error::{Error, Result};
use crate::host::{run_plans, PlanSpec};

/// Operations that may be outstanding on one communicator's streams.
pub(super) const SLOTS: u32 = 1024;

const SLOT_STRIDE: usize = 64;

/// Per-operation flags in pinned, device-mapped host memory.
pub(super) struct Slots {
    buf: PinnedBuffer,
}

impl Slots {
    pub(super) fn new(ctx: &Arc<Context>) -> Result<Slots> {
        let buf = PinnedBuffer::new(ctx, SLOTS as usize * SLOT_STRIDE).map_err(cuda_err)?;
        // SAFETY: freshly allocated, not yet visible to any stream.
        unsafe { std::ptr::write_bytes(buf.as_ptr(), 0, SLOTS as usize * SLOT_STRIDE) };
        Ok(Slots { buf })
    }

    fn offset(seq: u32) -> usize {
        (seq % SLOTS) as usize * SLOT_STRIDE
    }

    pub(super) fn atomic(&self, seq: u32) -> &AtomicU32 {
        // SAFETY: the slot is inside the buffer, 64-byte aligned, and only accessed
        // atomically by the host or by aligned 32-bit stream memory operations.
        unsafe { AtomicU32::from_ptr(self.buf.as_ptr().add(Self::offset(seq)).cast()) }
    }

    pub(super) fn device(&self, seq: u32) -> u64 {
        self.buf.device_ptr() + Self::offset(seq) as u64
    }
}

/// One proxy job: its plans, and the flag slots it owns (several for a gated group), or the
/// flags of the captured group it replays.
pub(super) struct Job {
    pub(super) first: u32,
    pub(super) last: u32,
    pub(super) specs: Vec<PlanSpec>,
    pub(super) graph: Option<&'static dyn Replayed>,
}

/// A group captured into a CUDA graph, as the proxy runs its replays: the graph's start flag
/// says its inputs are in host memory, and the proxy lets the graph go on when the group ran
/// (or failed).
pub(super) trait Replayed: Sync {
    /// Whether the replay's inputs are in host memory.
    fn started(&self) -> bool;
    /// Lets the replay's graph go on.
    fn finish(&self);
}

/// Which of the proxy's queued jobs runs next, if any is ready (its inputs in host memory):
/// the first; else the first replayed graph job, ahead of the operations queued before it
/// (see `Proxy::run`). Replayed jobs keep their order among themselves, and so do the others.
fn next_job<T>(
    queue: &std::collections::VecDeque<T>,
    ready: impl Fn(&T) -> bool,
    replayed: impl Fn(&T) -> bool,
) -> Option<usize> {
    if queue.front().is_some_and(&ready) {
        return Some(0);
    }
    queue
        .iter()
        .position(replayed)
        .filter(|&k| queue.get(k).is_some_and(&ready))
}

/// The proxy: polls start slots, runs plans on staged host memory, writes done slots. It
/// makes no CUDA call (see the module doc).
pub(super) struct Proxy {
    pub(super) comm: Comm,
    pub(super) start: Arc<Slots>,
    pub(super) done: Arc<Slots>,
    pub(super) completed: Arc<AtomicU32>,
}

// SAFETY: moved once into the proxy thread; the slots are pinned host memory accessed with
// atomics.
unsafe impl Send for Proxy {}

impl Proxy {
    pub(super) fn run(self, rx: Receiver<Job>) {
        let abort: Arc<AtomicBool> = self.comm.0.abort.clone();
        // Jobs received, in order. A replayed graph's job may run before earlier ones whose
        // inputs have not reached host memory yet: those may be queued on a stream behind
        // the graph, which waits for its job (the same on every rank, so the order on the
        // wire agrees).
        let mut queue: std::collections::VecDeque<Job> = std::collections::VecDeque::new();
        let mut open = true;
        loop {
            if queue.is_empty() {
                if !open {
                    break;
                }
                match rx.recv() {
                    Ok(job) => queue.push_back(job),
                    Err(_) => break,
                }
            }
            let mut rounds = 0u32;
            let at = loop {
                if abort.load(Ordering::Relaxed) {
                    break 0;
                }
                let ready = |j: &Job| match j.graph {
                    Some(g) => g.started(),
                    None => self.start.atomic(j.first).load(Ordering::Acquire) == j.first,
                };
                if let Some(k) = next_job(&queue, ready, |j| j.graph.is_some()) {
                    break k;
                }
                while open {
                    match rx.try_recv() {
                        Ok(job) => queue.push_back(job),
                        Err(crossbeam::channel::TryRecvError::Empty) => break,
                        Err(crossbeam::channel::TryRecvError::Disconnected) => open = false,
                    }
                }
                rounds = rounds.saturating_add(1);
                if rounds < 256 {
                    std::hint::spin_loop();
                } else if rounds < 4096 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
            };
            let Some(job) = queue.remove(at) else {
                continue;
            };
            let r = if abort.load(Ordering::Relaxed) {
                Err(Error::system("communicator aborted"))
            } else {
                // A panic must not kill the proxy: the streams would wait on its done slot
                // forever.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(job.specs)))
                    .unwrap_or_else(|_| Err(Error::internal("panic in the GPU proxy")))
            };
            if let Err(e) = r {
                // The streams still move on (their data is not valid); the error is the
                // communicator's async error, as NCCL reports kernel-side failures.
                tracing::warn!("rank {}: GPU operation failed: {e}", self.comm.rank());
                self.comm.set_async_error(&e);
            }
            if let Some(g) = job.graph {
                g.finish();
                continue;
            }
            // Every slot of the job, pieces that landed early included (idempotent), so no
            // stream wait is left behind after an error.
            let mut s = job.first;
            loop {
                self.done.atomic(s).store(s, Ordering::Release);
                if s == job.last {
                    break;
                }
                s = s.wrapping_add(1);
            }
            self.completed.store(job.last, Ordering::Release);
        }
    }

    fn execute(&self, specs: Vec<PlanSpec>) -> Result<()> {
        let (rank, n) = (self.comm.rank(), self.comm.nranks());
        let mut guard = self.comm.0.state.lock();
        let state = guard
            .as_mut()
            .ok_or_else(|| Error::invalid_usage("communicator was destroyed or aborted"))?;
        let plans = specs
            .iter()
            .map(|s| s.build(rank, n))
            .collect::<Result<Vec<_>>>()?;
        run_plans(&self.comm, state, plans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replayed graph's job overtakes operations queued before it that wait for their
    /// inputs (they may sit on a stream behind the graph); nothing else changes order.
    #[test]
    fn replayed_jobs_overtake_waiting_operations_only() {
        use std::collections::VecDeque;
        // (replayed, ready)
        let q = |v: &[(bool, bool)]| v.iter().copied().collect::<VecDeque<_>>();
        let next = |v: &[(bool, bool)]| next_job(&q(v), |j| j.1, |j| j.0);
        assert_eq!(next(&[]), None);
        assert_eq!(next(&[(false, true), (true, true)]), Some(0));
        assert_eq!(next(&[(false, false), (true, true)]), Some(1));
        assert_eq!(
            next(&[(false, false), (false, true), (true, true)]),
            Some(2)
        );
        assert_eq!(next(&[(false, false), (true, false), (true, true)]), None);
        assert_eq!(next(&[(true, false), (false, true)]), None);
        assert_eq!(next(&[(false, false), (false, true)]), None);
    }
}
