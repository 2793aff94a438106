//! Reductions folded on the GPU ([`Fold`]): their operands go as sends and receives through
//! the staged path into a scratch buffer on the GPU, and kernels queued on the callers'
//! streams fold them.

use std::sync::Arc;

use ccl_cuda::cuda::kernels::Kernels;
use ccl_cuda::cuda::{self, Stream};

use super::device::{cuda_err, streams_of};
use super::engine::GpuEngine;
use super::fold_rule::{Fold, Wide};
use super::scratch::StreamScratch;
use super::staged::submit_staged;
use crate::core::Comm;
use crate::error::{Error, Result};
use crate::params;
use crate::task::{Reduction, Task, TaskKind};

/// Where one folded operation's operands are: this rank's own and the one it sends (two
/// ranks), or the base of the blocks it sends (wide), in the caller's send buffer or, scaled,
/// in the scratch; and where the received ones land in the scratch, one block after another
/// in rank order.
struct FoldPlace {
    own: Option<u64>,
    sent: Option<u64>,
    incoming: u64,
}

/// A group with reductions to fold on the GPU ([`Fold`]): each becomes sends and receives of
/// its operands through the staged network path (those received landing in a scratch buffer on
/// the GPU), inside the group where the call put it; after the group one kernel per operation
/// folds the received operands with this rank's own in rank order, and wide all-reduces then
/// gather the folded blocks (a group of their own, after the group). The CPUs only move bytes:
/// the ring (or the exchange folded on the CPU) reduces in host memory, which held a two-GPU
/// all-reduce over the network below the send/receive rate (two H200s, 128 MiB, 2026-11-24:
/// 5.8-6.6 GB/s against 9.0 for a send/receive of host memory).
pub(super) fn submit_folded(
    comm: &Comm,
    eng: &Arc<GpuEngine>,
    tasks: Vec<Task>,
    folds: &[Option<Fold>],
) -> Result<()> {
    let kernels = ccl_p2p::kernels_for(&eng.ctx, params::CCL_KERNEL_PRELOAD.get_bool())?;
    let rank = comm.rank();
    let nranks = comm.nranks();
    let folded: Vec<(&Task, Fold)> = tasks
        .iter()
        .zip(folds)
        .filter_map(|(t, f)| f.map(|f| (t, f)))
        .collect();
    let streams = streams_of(
        &eng.ctx,
        &folded.iter().map(|(t, _)| **t).collect::<Vec<_>>(),
    );
    let mut scratch = eng.fold.lock();
    let places = place_operands(eng, &kernels, &mut scratch, &folded, &streams)?;
    let group = with_transfers(&tasks, folds, &places, rank, nranks);
    submit_staged(comm, eng, group)?;
    // From here on the peers have this rank's operands: a failure must poison the communicator.
    let gathers = fold_received(eng, &kernels, &folded, &places, rank, nranks)
        .and_then(|g| scratch.release(&eng.ctx, &streams).map(|()| g))
        .inspect_err(|e| comm.set_async_error(e))?;
    drop(scratch);
    if gathers.is_empty() {
        return Ok(());
    }
    submit_staged(comm, eng, gathers).inspect_err(|e| comm.set_async_error(e))
}

/// The caller's stream of `t`.
fn stream_of(eng: &GpuEngine, t: &Task) -> Stream {
    // SAFETY: the caller's own live streams (NCCL's contract).
    unsafe { Stream::from_raw(&eng.ctx, t.stream as cuda::sys::CUstream) }
}

/// A folded operation's operands in the caller's send buffer (this rank's own and the one it
/// sends, each where used) and its share of the scratch, in blocks of `bytes`: the received
/// operands, then the scaled ones (two ranks: own and sent, each where used; wide: the whole
/// input). Returned as (own, sent, received, scaled).
fn scratch_blocks(t: &Task, f: &Fold) -> (Option<u64>, Option<u64>, usize, usize) {
    let own = f.own_at.map(|o| t.send as u64 + o as u64);
    let sent = f.send_at.map(|o| t.send as u64 + o as u64);
    let received = match f.wide {
        Some(w) => w.n - 1,
        None => usize::from(own.is_some()),
    };
    let scaled = match (f.prescale, f.wide) {
        (None, _) => 0,
        (Some(_), Some(w)) => w.n,
        (Some(_), None) => usize::from(own.is_some()) + usize::from(sent.is_some() && sent != own),
    };
    (own, sent, received, scaled)
}

/// Claims the scratch for the folded operations of a group (on `streams`) and places each
/// one's operands ([`FoldPlace`]), queuing the scaling of those a reduction scales first.
fn place_operands(
    eng: &GpuEngine,
    kernels: &Kernels,
    scratch: &mut StreamScratch,
    folded: &[(&Task, Fold)],
    streams: &[Stream],
) -> Result<Vec<FoldPlace>> {
    let total: usize = folded
        .iter()
        .map(|(t, f)| {
            let (_, _, received, scaled) = scratch_blocks(t, f);
            (received + scaled) * f.bytes
        })
        .sum();
    let mut next = scratch.claim(&eng.ctx, total, streams)?;
    let mut places = Vec::with_capacity(folded.len());
    for (t, f) in folded {
        let (own, sent, received, _) = scratch_blocks(t, f);
        let incoming = next;
        next += (received * f.bytes) as u64;
        let stream = stream_of(eng, t);
        let size = t.dtype.size();
        let mut scale = |src: u64, blocks: usize| -> Result<u64> {
            let Some(s) = f.prescale else { return Ok(src) };
            let dst = next;
            next += (blocks * f.bytes) as u64;
            let n = blocks * f.bytes / size;
            // SAFETY: `src` holds `n` elements of the caller's send buffer (checked device
            // memory, aligned); `dst` is a part of the scratch claimed above for the group's
            // streams.
            unsafe { kernels.premul(&stream, t.dtype, dst, src, n, s) }.map_err(cuda_err)?;
            Ok(dst)
        };
        let place = match f.wide {
            Some(w) => {
                let base = scale(t.send as u64, w.n)?;
                FoldPlace {
                    own: f.own_at.map(|o| base + o as u64),
                    sent: Some(base),
                    incoming,
                }
            }
            None => {
                let own_op = own.map(|o| scale(o, 1)).transpose()?;
                let sent_op = if sent.is_some() && sent == own {
                    own_op
                } else {
                    sent.map(|o| scale(o, 1)).transpose()?
                };
                FoldPlace {
                    own: own_op,
                    sent: sent_op,
                    incoming,
                }
            }
        };
        places.push(place);
    }
    Ok(places)
}

/// The group as it goes to the staged path: each folded operation, where the call put it,
/// replaced by the sends and receives of its operands.
fn with_transfers(
    tasks: &[Task],
    folds: &[Option<Fold>],
    places: &[FoldPlace],
    rank: usize,
    nranks: usize,
) -> Vec<Task> {
    let mut group = Vec::with_capacity(tasks.len() + places.len() * 2);
    let mut place = places.iter();
    for (t, f) in tasks.iter().zip(folds) {
        let (Some(f), Some(p)) = (f, f.and_then(|_| place.next())) else {
            group.push(*t);
            continue;
        };
        group.extend(fold_transfers(t, f, p, rank, nranks));
    }
    group
}

/// Queues, behind the group on each folded operation's stream, the kernels that fold the
/// received operands with this rank's own in rank order (an integer average then divided).
/// Returns the transfers of the wide all-reduces' gathers.
fn fold_received(
    eng: &GpuEngine,
    kernels: &Kernels,
    folded: &[(&Task, Fold)],
    places: &[FoldPlace],
    rank: usize,
    nranks: usize,
) -> Result<Vec<Task>> {
    let mut gathers = Vec::new();
    for ((t, f), p) in folded.iter().zip(places) {
        let Some(own) = p.own else { continue };
        let (dt, op) = (t.dtype, t.red.arithmetic());
        let n = f.bytes / dt.size();
        let stream = stream_of(eng, t);
        let (out, srcs) = match f.wide {
            Some(w) => {
                let out = t.recv as u64
                    + if w.gather {
                        f.own_at.unwrap_or(0) as u64
                    } else {
                        0
                    };
                let srcs: Vec<u64> = (0..w.n)
                    .map(|j| match j == rank {
                        true => own,
                        false => received_from(p, f, j, rank),
                    })
                    .collect();
                (out, srcs)
            }
            None if rank == 0 => (t.recv as u64, vec![own, p.incoming]),
            None => (t.recv as u64, vec![p.incoming, own]),
        };
        // SAFETY: the sources are the scratch (claimed for these streams until the events
        // the caller records after this) and the caller's send buffer; `out` is in the
        // caller's receive buffer, `n` elements (checked device memory, aligned), equal to or
        // disjoint from each source (NCCL's in-place rule); every one stays valid until the
        // stream has run the kernels.
        unsafe { fold_kernels(kernels, &stream, (dt, op), out, &srcs, n) }?;
        if f.divide {
            // SAFETY: as above.
            unsafe { kernels.div_int(&stream, dt, out, n, nranks as u64) }.map_err(cuda_err)?;
        }
        if let Some(Wide { gather: true, .. }) = f.wide {
            gathers.extend(gather_transfers(t, f, rank, nranks));
        }
    }
    Ok(gathers)
}

/// Where rank `j`'s operand lands in the scratch of a wide fold on `rank`: the other ranks'
/// blocks one after another in rank order.
fn received_from(p: &FoldPlace, f: &Fold, j: usize, rank: usize) -> u64 {
    let slot = if j < rank { j } else { j - 1 };
    p.incoming + (slot * f.bytes) as u64
}

/// A send or receive of one of `t`'s folded blocks, marked as a fold's (`Task::fold`).
fn fold_transfer(t: &Task, f: &Fold, kind: TaskKind, send: u64, recv: u64) -> Task {
    Task {
        kind,
        send: send as usize,
        recv: recv as usize,
        count: f.bytes / t.dtype.size(),
        red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
        fold: true,
        ..*t
    }
}

/// The sends and receives that carry one folded operation's operands: to the peer (two
/// ranks), or block `j` to rank `j` and every other rank's block of this rank into the scratch
/// in rank order (wide).
fn fold_transfers(t: &Task, f: &Fold, p: &FoldPlace, rank: usize, nranks: usize) -> Vec<Task> {
    let transfer = |kind, send, recv| fold_transfer(t, f, kind, send, recv);
    let mut out = Vec::new();
    match f.wide {
        Some(w) => {
            let base = p.sent.unwrap_or(t.send as u64);
            for j in (0..w.n).filter(|&j| j != rank) {
                let block = (j * f.bytes) as u64;
                out.push(transfer(TaskKind::Send { peer: j }, base + block, 0));
                let into = received_from(p, f, j, rank);
                out.push(transfer(TaskKind::Recv { peer: j }, 0, into));
            }
        }
        None => {
            let peer = 1 - rank.min(1);
            debug_assert_eq!(nranks, 2);
            if let Some(src) = p.sent {
                out.push(transfer(TaskKind::Send { peer }, src, 0));
            }
            if p.own.is_some() {
                out.push(transfer(TaskKind::Recv { peer }, 0, p.incoming));
            }
        }
    }
    out
}

/// A wide all-reduce's second half: this rank's folded block to every rank, theirs into their
/// places in the receive buffer.
fn gather_transfers(t: &Task, f: &Fold, rank: usize, nranks: usize) -> Vec<Task> {
    let block = |j: usize| (t.recv + j * f.bytes) as u64;
    let transfer = |kind, send, recv| fold_transfer(t, f, kind, send, recv);
    (0..nranks)
        .filter(|&j| j != rank)
        .flat_map(|j| {
            [
                transfer(TaskKind::Send { peer: j }, block(rank), 0),
                transfer(TaskKind::Recv { peer: j }, 0, block(j)),
            ]
        })
        .collect()
}

/// `out = srcs[0] (op) srcs[1] (op) ...` in source order: one kernel over every source, or,
/// where that kernel is not to be had, a chain of two-source kernels (the same bits, unless
/// `out` is a source other than the first: that one then leads the chain, since each step
/// overwrites `out`; a wide fold's block is folded by one rank only, so all ranks still hold
/// the same bits).
///
/// # Safety
/// As [`ccl_cuda::cuda::kernels::Kernels::reduce_n`]: every source and `out` hold `n` elements
/// valid until the stream has run the kernels; `out` is equal to or disjoint from each source.
unsafe fn fold_kernels(
    kernels: &ccl_cuda::cuda::kernels::Kernels,
    stream: &Stream,
    (dt, op): (ccl_cuda::DataType, ccl_cuda::ReduceKind),
    out: u64,
    srcs: &[u64],
    n: usize,
) -> Result<()> {
    if srcs.len() > 2 {
        // SAFETY: the caller's contract.
        if unsafe { kernels.reduce_n(stream, dt, op, out, srcs, n) }.is_ok() {
            return Ok(());
        }
    }
    let mut order = srcs.to_vec();
    // One step reads both sources before writing: the order stays (two ranks each fold the
    // whole message and must get the same bits).
    if let Some(k) = order
        .iter()
        .position(|&s| s == out)
        .filter(|_| srcs.len() > 2)
    {
        let aliased = order.remove(k);
        order.insert(0, aliased);
    }
    let (first, rest) = order
        .split_first()
        .ok_or_else(|| Error::internal("a fold of no operands"))?;
    let mut acc = *first;
    for &s in rest {
        // SAFETY: the caller's contract; `out` is no source read after the first step (the
        // one it equals, if any, leads), and from then on `acc` is `out`, written by the
        // kernel before it in stream order.
        unsafe { kernels.reduce(stream, dt, op, out, acc, s, n) }.map_err(cuda_err)?;
        acc = out;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::float_sum as t;
    use ccl_collectives::fold::fold_rule;
    use ccl_collectives::Collective;

    /// A wide all-reduce of three ranks, seen from rank 1: block j of its input to rank j, the
    /// others' block 1 into the scratch in rank order; then its folded block to both and
    /// theirs into their places; every transfer marked as a fold's.
    #[test]
    fn a_wide_fold_sends_blocks_to_their_owners_and_gathers_the_folded_ones() {
        let t = t(
            TaskKind::Coll(Collective::AllReduce),
            0x10_0000,
            0x20_0000,
            3 * 1024,
        );
        let f = fold_rule(&t, (1, 3), false, (1, 1 << 30), &|_| true).unwrap();
        let p = FoldPlace {
            own: Some(0x10_1000),
            sent: Some(0x10_0000),
            incoming: 0x90_0000,
        };
        let what = |ts: Vec<Task>| -> Vec<(TaskKind, usize, usize, usize, bool)> {
            ts.iter()
                .map(|t| (t.kind, t.send, t.recv, t.count, t.fold))
                .collect()
        };
        assert_eq!(
            what(fold_transfers(&t, &f, &p, 1, 3)),
            [
                (TaskKind::Send { peer: 0 }, 0x10_0000, 0, 1024, true),
                (TaskKind::Recv { peer: 0 }, 0, 0x90_0000, 1024, true),
                (TaskKind::Send { peer: 2 }, 0x10_2000, 0, 1024, true),
                (TaskKind::Recv { peer: 2 }, 0, 0x90_1000, 1024, true),
            ]
        );
        assert_eq!(
            what(gather_transfers(&t, &f, 1, 3)),
            [
                (TaskKind::Send { peer: 0 }, 0x20_1000, 0, 1024, true),
                (TaskKind::Recv { peer: 0 }, 0, 0x20_0000, 1024, true),
                (TaskKind::Send { peer: 2 }, 0x20_1000, 0, 1024, true),
                (TaskKind::Recv { peer: 2 }, 0, 0x20_2000, 1024, true),
            ]
        );
    }
}
