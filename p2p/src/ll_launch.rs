//! Launching a group's low-latency kernels on a stream, eagerly or into the CUDA graph the
//! stream is capturing. The kernels take each operation's number from this rank's own area
//! and leave it there, so a captured launch takes the next number at every replay and eager
//! and captured operations share one sequence.

use ccl_collectives::task::Task;
use ccl_cuda::cuda::source::ll_seq_offset;
use ccl_cuda::cuda::{LlTransfers, Stream};

use crate::direct;
use crate::engine::IpcEngine;
use crate::error::{cuda_err, Result};
use crate::paths::{gather_parts, reduction_paths, two_shot, LowLatency};

/// The low-latency kernel(s) a group of `tasks` takes on `eng`, as the eager path chooses
/// them (from what every rank sees alike), or `None`.
pub(crate) fn chosen(eng: &IpcEngine, tasks: &[Task]) -> Result<Option<LowLatency>> {
    let l = &eng.layout;
    if tasks.iter().any(direct::takes_direct(eng, tasks)) {
        return Ok(None);
    }
    let (ll, _) = reduction_paths(tasks, l.rank, l.nranks, eng.ll_limits(), 0)?;
    Ok(two_shot(ll, l.nranks, eng.ll_two_shot_min))
}

/// Queues `ll` on `stream`: one kernel, two for an all-reduce in two shots.
pub(crate) fn launch(eng: &IpcEngine, stream: &Stream, ll: &LowLatency) -> Result<()> {
    match ll {
        LowLatency::AllReduceTwoShot(t) => launch_two_shot(eng, stream, t),
        LowLatency::Exchange(x) => exchange(eng, stream, x),
        LowLatency::Reduce(t, root) => reduce(
            eng,
            stream,
            t,
            t.recv as u64,
            t.count,
            false,
            Some(*root as u32),
        ),
        LowLatency::AllReduce(t) => reduce(eng, stream, t, t.recv as u64, t.count, false, None),
        LowLatency::ReduceScatter(t) => reduce(eng, stream, t, t.recv as u64, t.count, true, None),
    }
}

/// An all-reduce in two shots: the low-latency reduce-scatter of the input into this rank's
/// part of the output, then the exchange gathering every rank's part in place (two
/// operations of the low-latency sequence).
fn launch_two_shot(eng: &IpcEngine, stream: &Stream, t: &Task) -> Result<()> {
    let l = &eng.layout;
    let part = t.count / l.nranks;
    let part_bytes = (part * t.dtype.size()) as u64;
    let mine = t.recv as u64 + l.rank as u64 * part_bytes;
    // The reduce-scatter writes only this rank's part of the output, which the exchange then
    // sends from while writing the other parts.
    reduce(eng, stream, t, mine, part, true, None)?;
    let x = gather_parts(t.recv as u64, part_bytes, l.rank, l.nranks);
    exchange(eng, stream, &x)
}

/// This rank's operation numbers (in its own low-latency area).
fn seqs(eng: &IpcEngine) -> u64 {
    eng._ll.ptr() + ll_seq_offset(eng.layout.nranks) as u64
}

/// The next operation of the low-latency sequence: `t`'s reduction kernel into `dst` over
/// `count` elements (per part with `scatter`), to `root` only for a reduce.
fn reduce(
    eng: &IpcEngine,
    stream: &Stream,
    t: &Task,
    dst: u64,
    count: usize,
    scatter: bool,
    root: Option<u32>,
) -> Result<()> {
    let l = &eng.layout;
    // SAFETY: the buffers hold what the task says (validated at enqueue) and fit the areas
    // (checked when choosing this path, the two-shot parts equal); `seqs` lies in this rank's
    // area; every rank launches the same low-latency operations in the same order, on one
    // stream each or in graphs replayed in that order.
    unsafe {
        eng.kernels.ll_all_reduce(
            stream,
            t.dtype,
            t.red.arithmetic(),
            dst,
            t.send as u64,
            count,
            eng.ll_areas.ptr(),
            l.nranks as u32,
            l.rank as u32,
            seqs(eng),
            eng.ll_max,
            scatter,
            root,
            &eng.ll_launch,
        )
    }
    .map_err(cuda_err)
}

/// The next operation of the low-latency sequence: the exchange of `x`.
fn exchange(eng: &IpcEngine, stream: &Stream, x: &LlTransfers) -> Result<()> {
    let l = &eng.layout;
    // SAFETY: every range in `x` lies in the task's buffers (validated at enqueue) and fits
    // the areas; `seqs` lies in this rank's area; every rank launches its side of the same
    // exchange at the same place in its low-latency sequence.
    unsafe {
        eng.kernels.ll_exchange(
            stream,
            x,
            eng.ll_areas.ptr(),
            l.nranks as u32,
            l.rank as u32,
            seqs(eng),
            eng.ll_max,
            &eng.ll_launch,
        )
    }
    .map_err(cuda_err)
}
