//! Zero-copy transfers between user buffers on copy engines (ICCL's SM-free P2P), with no
//! host thread and nothing queued after the call returns.
//!
//! Every transfer (a send/receive pair, or one block of an all-gather, all-to-all, broadcast,
//! gather or scatter) is a rendezvous of its two ranks in host shared memory: each side posts
//! how to reach its buffer, and an atomic compare-and-swap on the entry decides the order. The
//! side that posts *first* knows nothing of the other's buffer, so it only queues "my stream
//! is here" (a flag written into the peer's memory) and "wait until the copy is done". The
//! side that posts *second* knows both buffers, so it queues the whole copy: wait for the
//! first side's flag, one `cuMemcpyAsync` straight from the source to the destination user
//! buffer (pushing or pulling over NVLink), then the first side's done flag. Both sides queue
//! everything during their own call, so a stream never waits on work someone queues later
//! (which would deadlock when `CUDA_DEVICE_MAX_CONNECTIONS=1` merges streams into one queue).
//!
//! Deadlock freedom: in a group every "here" flag is written before any wait, copies wait only
//! for those flags, and "done" waits come last; ranks process groups in the same order.
//! Flags of one (peer, direction) are written in transfer order: all copies of one direction
//! to one peer go on one lane, and a wait passes on any value at or beyond its own
//! (wrap-safe), so a later transfer's flag implies the earlier's.
//!
//! A buffer the peer cannot map (not device memory of a `cuMemAlloc` allocation, or a
//! receive that overlaps a send of the same group) goes through this rank's bounce buffer,
//! which the peer can map: copied in before the "here" flag, copied out after the transfer.
//! This module is CUDA-free: posting a group and settling it into this rank's part
//! ([`posting`]), and what that part queues ([`plan`]). The engine resolves buffers
//! (`buffers`) and runs the plan on its streams (`queue`).

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;

pub(crate) mod plan;
pub(crate) mod posting;
#[cfg(test)]
mod tests;

/// Which tasks of the group `tasks` go on the direct paths of `eng`: those [`goes_direct`]
/// classifies so, unless direct transfers are off or the whole group is a small exchange (which
/// the low-latency kernels take). The eager queue and graph capture both ask this, so a call
/// takes the same path captured or not.
pub(crate) fn takes_direct(
    eng: &crate::engine::IpcEngine,
    tasks: &[Task],
) -> impl Fn(&Task) -> bool + use<> {
    let on =
        eng.direct && !crate::paths::small_exchange(tasks, eng.layout.nranks, eng.ll_exchange_max);
    move |t: &Task| on && goes_direct(t.kind)
}

/// Moves data without arithmetic: goes straight between user buffers when direct transfers
/// are on (every rank classifies alike).
pub(crate) fn goes_direct(kind: TaskKind) -> bool {
    matches!(
        kind,
        TaskKind::Send { .. }
            | TaskKind::Recv { .. }
            | TaskKind::Coll(
                Collective::AllGather
                    | Collective::AlltoAll
                    | Collective::Broadcast { .. }
                    | Collective::Gather { .. }
                    | Collective::Scatter { .. }
            )
    )
}
