//! Whether an operation goes hierarchically: the settings, its memory and its stream, the
//! shape of its hosts; and the stage plans of those whose plan needs nothing more.

use ccl_collectives::Collective;

use super::hierarchy::Hierarchy;
use crate::params;
use crate::task::{Reduction, Task, TaskKind};
use ccl_collectives::hierarchy::placement::{hosts_consecutive, hosts_contiguous};
use ccl_collectives::hierarchy::plan::{
    broadcast_plan, gather_blocks, leader_all_reduce, split_count, split_reduction, stages,
    GatherPlan, Sub,
};

/// An all-reduce's stages (on the host, across the hosts, on the host), if it goes
/// hierarchically: it is at least `CCL_HIERARCHY_MIN_BYTES`, its buffers are GPU memory (or
/// `CCL_HIERARCHY=1`), and its stream is not capturing a CUDA graph. The largest part of the
/// count that splits evenly over a host's ranks goes as a host reduce-scatter, an all-reduce of
/// each share across the hosts and a host all-gather ([`stages`]); the last few elements (fewer
/// than a host's ranks), if any, as an all-reduce on the host and then one across the hosts,
/// beside the first two. Every part stays on the sub-communicators, so a rank that groups the
/// all-reduce with operations of the communicator itself and one that calls them one by one
/// issue the same sequence on it.
pub(super) fn all_reduce_stages(h: &Hierarchy, t: &Task) -> Option<[Vec<Task>; 3]> {
    if t.kind != TaskKind::Coll(Collective::AllReduce) || int_avg(t) {
        return None;
    }
    eligible(h, t, true, true)?;
    if !h.even {
        return Some(leader_all_reduce(t, h.places.len(), h.local.rank()));
    }
    let per = h.local.nranks();
    let hosts = h.cross.nranks();
    let (head, tail) = split_count(t, per);
    let mut out: [Vec<Task>; 3] = Default::default();
    if head.count > 0 {
        let [rs, ar, ag] = stages(&head, per, hosts, h.local.rank());
        out = [vec![rs], vec![ar], vec![ag]];
    }
    if let Some(tail) = tail {
        let (first, second) = split_reduction(t, per * hosts);
        out[0].push(Task { red: first, ..tail });
        out[1].push(Task {
            send: tail.recv,
            red: second,
            ..tail
        });
    }
    Some(out)
}

/// Whether `t` goes hierarchically at all: the settings, its memory and its stream allow it;
/// if so, whether its memory is the GPU's. `reads_send` / `writes_recv`: whether this rank's
/// send / receive buffer is used (a broadcast's other ranks ignore their send buffers, a
/// reduce's its receive buffer, so those must not sway the decision).
pub(super) fn eligible(
    h: &Hierarchy,
    t: &Task,
    reads_send: bool,
    writes_recv: bool,
) -> Option<bool> {
    let min = params::CCL_HIERARCHY_MIN_BYTES.get_i64().max(0) as usize;
    if t.fold || t.count.checked_mul(t.dtype.size())? < min {
        return None;
    }
    let dev = crate::gpu::is_device_ptr;
    let on_gpu = (!writes_recv || dev(t.recv))
        && (!reads_send || (writes_recv && t.send == t.recv) || dev(t.send));
    if !(on_gpu || h.host_memory) {
        return None;
    }
    if on_gpu && crate::graph::capturing(&h.local, std::slice::from_ref(t)).unwrap_or(true) {
        return None;
    }
    Some(on_gpu)
}

/// Send or receive `t` as one on this rank's host communicator, if its peer is on this
/// rank's host and it goes hierarchically: between GPUs of one host it then goes over cuda-ipc
/// instead of being staged through host memory. Every such transfer to that peer goes there,
/// so the pair's order holds; both sides decide alike (the peer's host and the count are the
/// same on both; a transfer of nothing stays, its buffers may be NULL on one side only).
pub(super) fn local_p2p(h: &Hierarchy, t: &Task, rank: usize) -> Option<Task> {
    let (peer, send) = match t.kind {
        TaskKind::Send { peer } => (peer, true),
        TaskKind::Recv { peer } => (peer, false),
        _ => return None,
    };
    let (host, _) = *h.places.get(rank)?;
    let (peer_host, peer_local) = *h.places.get(peer)?;
    if peer_host != host || t.count == 0 {
        return None;
    }
    eligible(h, t, send, !send)?;
    let kind = match send {
        true => TaskKind::Send { peer: peer_local },
        false => TaskKind::Recv { peer: peer_local },
    };
    Some(Task { kind, ..*t })
}

/// Integer average: truncating per host and again across hosts is not truncating the whole
/// sum once, so such reductions stay flat.
pub(super) fn int_avg(t: &Task) -> bool {
    t.red == Reduction::Avg && !t.dtype.is_float()
}

/// Whether reduce-scatter `t` goes hierarchically (and then whether on GPU memory): the ranks
/// of every host must be consecutive in rank order, so that each host's blocks of the input
/// are one range a host reduce-scatter takes whole.
pub(super) fn scatter_eligible(h: &Hierarchy, t: &Task) -> Option<bool> {
    if t.kind != TaskKind::Coll(Collective::ReduceScatter) || int_avg(t) {
        return None;
    }
    hosts_consecutive(&h.places).then_some(())?;
    eligible(h, t, true, true)
}

/// Whether all-to-all `t` goes hierarchically (and then whether on GPU memory):
/// `CCL_HIERARCHY_ALLTOALL=1` and every host's ranks consecutive in rank order, as
/// [`alltoall_blocks`](ccl_collectives::hierarchy::plan::alltoall_blocks) lays the blocks out.
pub(super) fn alltoall_eligible(h: &Hierarchy, t: &Task) -> Option<bool> {
    if t.kind != TaskKind::Coll(Collective::AlltoAll) || !params::CCL_HIERARCHY_ALLTOALL.get_bool()
    {
        return None;
    }
    hosts_consecutive(&h.places).then_some(())?;
    eligible(h, t, true, true)
}

/// Whether reduce `t` goes hierarchically on `rank` (and then whether on GPU memory).
pub(super) fn reduce_eligible(h: &Hierarchy, t: &Task, rank: usize) -> Option<bool> {
    let TaskKind::Coll(Collective::Reduce { root }) = t.kind else {
        return None;
    };
    if int_avg(t) {
        return None;
    }
    eligible(h, t, true, rank == root)
}

/// Whether gather or scatter `t` goes hierarchically on `rank` (and then whether on GPU
/// memory): every host's ranks must be consecutive in rank order, so that each host's blocks
/// are one range of the root's buffer.
pub(super) fn rooted_eligible(h: &Hierarchy, t: &Task, rank: usize) -> Option<bool> {
    let (root, gather) = match t.kind {
        TaskKind::Coll(Collective::Gather { root }) => (root, true),
        TaskKind::Coll(Collective::Scatter { root }) => (root, false),
        _ => return None,
    };
    hosts_contiguous(&h.places).then_some(())?;
    eligible(h, t, gather || rank == root, !gather || rank == root)
}

/// A broadcast's stages on `rank` ([`broadcast_plan`]), if it goes hierarchically.
pub(super) fn broadcast_stages(h: &Hierarchy, t: &Task, rank: usize) -> Option<Vec<(Sub, Task)>> {
    let TaskKind::Coll(Collective::Broadcast { root }) = t.kind else {
        return None;
    };
    eligible(h, t, rank == root, true)?;
    broadcast_plan(&h.places, h.fewest, t, rank)
}

/// An all-gather's plan ([`gather_blocks`]), if it goes hierarchically ([`eligible`]).
pub(super) fn gather_plan(h: &Hierarchy, t: &Task, rank: usize) -> Option<GatherPlan> {
    if t.kind != TaskKind::Coll(Collective::AllGather) {
        return None;
    }
    eligible(h, t, true, true)?;
    gather_blocks(&h.places, rank, t.send, t.recv, t.count * t.dtype.size())
}
