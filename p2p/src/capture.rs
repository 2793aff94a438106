//! Capturing a group into the CUDA graph its stream is capturing, on this communicator's
//! engine.

use std::sync::atomic::Ordering;

use ccl_collectives::task::Task;
use ccl_cuda::cuda::source::REDUCE_N_MAX;
use ccl_cuda::cuda::{DeviceBuffer, KernelOp, Stream};
use ccl_cuda::DataType;

use crate::calls::CallSig;
use crate::captured::agree::{self, Ends, Offer};
use crate::captured::group::{self, Group};
use crate::captured::host_only::{self, HostOnlyGroup};
use crate::captured::steps;
use crate::control::CommCtx;
use crate::cuda_device::CudaDevice;
use crate::engine::{streams_of, IpcEngine};
use crate::error::{cuda_err, Error, Result};
use crate::layout::groups;
use crate::ll_launch;
use crate::paths::{kernels_needed, LowLatency};

/// Captures `tasks` into the CUDA graph their stream is capturing: a small collective as its
/// low-latency kernel (`CCL_GRAPH_LL`), else on the direct paths when every rank can
/// (`captured`); `false`: every rank goes on to the staged captured path. Collective: every
/// rank of a communicator with cuda-ipc calls it for the same group.
pub fn capture(comm: &CommCtx, eng: &IpcEngine, tasks: &[Task]) -> Result<bool> {
    if eng.host_only {
        return capture_host_only(comm, eng, tasks);
    }
    if eng.cfg.graph_ll {
        if let Some(ll) = ll_launch::chosen(eng, tasks)? {
            capture_low_latency(comm, eng, tasks, &ll)?;
            return Ok(true);
        }
    }
    capture_direct(comm, eng, tasks)
}

/// Captures a small collective as the low-latency kernel(s) an eager call launches. Every
/// rank chooses alike from what it sees, so nothing is exchanged at capture; the kernels take
/// their operation's number on the GPU at each replay. The call is compared with the peers'
/// as an eager one is (a mismatch fails it here and on the peers through their async error).
fn capture_low_latency(
    comm: &CommCtx,
    eng: &IpcEngine,
    tasks: &[Task],
    ll: &LowLatency,
) -> Result<()> {
    let streams = streams_of(&eng.ctx, tasks);
    let [stream] = streams.as_slice() else {
        return Err(Error::internal("a low-latency group on several streams"));
    };
    for (dtype, op) in kernels_needed(std::iter::empty(), Some(ll)) {
        eng.kernels.prepare(dtype, op).map_err(cuda_err)?;
    }
    eng.ll_captured.store(true, Ordering::Relaxed);
    let mut q = eng.queued.lock();
    if let Some(sig) = CallSig::of(tasks) {
        let seq = q.calls.push(sig);
        eng.board.post(seq, sig);
        if let Some(e) = eng.board.check(&mut q.calls) {
            comm.set_async_error(&e);
            return Err(e);
        }
    }
    ll_launch::launch(eng, stream, ll)
}

/// Captures `tasks` on the direct paths into the graph their stream is capturing, if every
/// rank can; `false`: no rank did, and every rank takes the staged captured path.
fn capture_direct(comm: &CommCtx, eng: &IpcEngine, tasks: &[Task]) -> Result<bool> {
    let l = &eng.layout;
    let (rank, n) = (l.rank, l.nranks);
    let streams = streams_of(&eng.ctx, tasks);
    let index = eng.captured.fetch_add(1, Ordering::Relaxed);
    let able = eng.direct && eng.cfg.graph_direct;
    let one_shot_bytes = eng.cfg.graph_one_shot_bytes.max(0) as usize;
    // Groups the spread kernel takes read their partners' buffers; larger ones push, as a copy
    // engine writes over NVLink faster than it reads.
    let push_above = eng.cfg.graph_fused_copy_bytes.max(0) as usize;
    let mine = {
        let mut q = eng.queued.lock();
        let limits = (able, one_shot_bytes, push_above);
        agree::offer(index, tasks, (rank, n), limits, &mut q.bufs)
    };
    let offers = exchange(comm, &mine.encode())?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Offer::decode(b)
                .ok_or_else(|| Error::remote(format!("rank {r} sent a malformed graph offer")))
        })
        .collect::<Result<Vec<Offer>>>()?;
    if index == groups(n) {
        tracing::warn!(
            "rank {rank}: this communicator captured {index} groups into CUDA graphs; later \
             ones go through host memory (slow)"
        );
    }
    if offers.iter().any(|o| !o.able || o.index != mine.index) {
        tracing::debug!("rank {rank}: group {index} captured on the staged path");
        return Ok(false);
    }
    let one_shot_max = offers.iter().map(|o| o.one_shot).min().unwrap_or(0) as usize;
    let rows = agree::matching(&offers, rank).map_err(|e| {
        Error::invalid_usage(format!("operations captured into a CUDA graph differ: {e}"))
    })?;
    let reduce_n = eng.reduce_n_uses().0;
    // Loading a module or mapping a buffer may fail here and not on a peer: a second round
    // says whether every rank is ready, so that they still fall back together.
    let ready = (|| -> Result<(Vec<Vec<Ends>>, Option<DeviceBuffer>)> {
        for (dtype, op) in steps::kernels_needed(tasks, n, reduce_n) {
            eng.kernels.prepare(dtype, op).map_err(cuda_err)?;
        }
        let scratch = match steps::parked(tasks, rank, n, one_shot_max).1 {
            0 => None,
            bytes => Some(DeviceBuffer::new(&eng.ctx, bytes).map_err(cuda_err)?),
        };
        let mut q = eng.queued.lock();
        Ok((
            agree::ends_of(&offers, rank, tasks, &rows, &mut q.bufs)?,
            scratch,
        ))
    })();
    if let Err(e) = &ready {
        tracing::warn!("rank {rank}: a captured group goes staged: {e}");
    }
    let verdicts = exchange(comm, &[ready.is_ok() as u8])?;
    if verdicts.iter().any(|v| v.as_slice() != [1]) {
        return Ok(false);
    }
    let (ends, scratch) = ready?;
    // A local choice: the kernel and the parts wait and write the same words in the same order.
    // Not while a rank of another process shares this GPU in time slices: the kernel would
    // spin through its whole slice (two processes on one H100, measured 2026-11-23: 4.5 ms per
    // operation); under MPS they run side by side.
    let shared = !eng.ctx.mps_enabled() && eng.gpu_sharing.other_processes();
    let copies_only = !tasks.iter().any(|t| steps::reduces(t.kind) && t.count > 0);
    // The zero-SM setting (`CCL_IPC_LL_EXCHANGE_BYTES=0`) keeps a group that only copies off
    // the SMs captured too: copies on copy engines, handshakes as stream waits and writes.
    let zero_sm = copies_only && eng.ll_exchange_max == 0;
    let kernel = match tasks {
        [t] if group::fusable_reduction(t, one_shot_max) => Some((
            t.dtype,
            KernelOp::GraphAllReduce(t.red.arithmetic().into(), n as u8),
        )),
        _ if copies_only => Some((DataType::Uint8, KernelOp::GraphCopies)),
        _ => None,
    };
    let fused = eng.cfg.graph_fused
        && !zero_sm
        && !shared
        && n <= REDUCE_N_MAX
        && kernel.is_some_and(|(dtype, op)| prepared(eng, rank, dtype, op));
    let group = Group {
        index,
        tasks,
        ends,
        reduce_n,
        scratch: scratch.as_ref().map_or(0, DeviceBuffer::ptr),
        one_shot: one_shot_max,
        fused,
        push: agree::agreed_push(&offers),
        fused_copy_max: push_above,
    };
    // The handshakes of a group that is not one kernel spin in a kernel of their own where
    // spinning is as safe as for the fused kernels: a batch of stream waits is re-polled by
    // the GPU's front end, which cost a captured 4-rank group of copies 40 us (one H200
    // under MPS, 2026-11-29, `tests/gpu/graph_nodes.c`).
    let handshakes = eng.cfg.graph_handshake_kernel
        && !zero_sm
        && !shared
        && n <= REDUCE_N_MAX
        && prepared(eng, rank, DataType::Uint8, KernelOp::GraphHandshake);
    ccl_cuda::cuda::helpers::on_first_stream::<Error>(&eng.ctx, &streams, |stream: &Stream| {
        // Copies no larger than the eager low-latency exchange's (0 in the zero-SM setting)
        // in one kernel, as eager calls of those sizes run on SMs too.
        let mut dev = CudaDevice::new(eng, stream)
            .with_handshake_kernel(handshakes)
            .with_copy_kernel(eng.ll_exchange_max);
        group::emit(&mut dev, l, &group)
    })?;
    // The graph keeps using it at every replay, for as long as the process lives.
    std::mem::forget(scratch);
    if index == 0 {
        tracing::info!("rank {rank}: groups captured into CUDA graphs take the direct paths");
    }
    tracing::debug!(
        "rank {rank}: captured group {index} ({} operations) on the direct paths",
        tasks.len()
    );
    Ok(true)
}

/// Captures `tasks` host-only ([`HostOnlyGroup`]) into the graph their stream is capturing, if
/// every rank can; `false`: no rank did, and every rank takes the staged captured path.
fn capture_host_only(comm: &CommCtx, eng: &IpcEngine, tasks: &[Task]) -> Result<bool> {
    let l = &eng.layout;
    let (rank, n) = (l.rank, l.nranks);
    let streams = streams_of(&eng.ctx, tasks);
    let index = eng.captured.fetch_add(1, Ordering::Relaxed);
    let region = l.slots as usize * l.chunk;
    let able = eng.cfg.graph_direct && index < groups(n);
    // Ability, group index, and per operation its signature and outbox offset: every rank able
    // and the groups matching, or none captures it here.
    let all = exchange(
        comm,
        &host_only::host_only_offer_of(index, tasks, rank, n, region, able),
    )?;
    if !all.iter().all(|o| o.first() == Some(&1)) {
        tracing::debug!("rank {rank}: group {index} captured on the staged path (host-only)");
        return Ok(false);
    }
    let rounds = host_only::host_only_plan(tasks, rank, n, region, &all).map_err(|e| {
        Error::invalid_usage(format!(
            "operations captured into a CUDA graph differ (group {index}): {e}"
        ))
    })?;
    let reduce_n = eng.reduce_n_uses().0;
    let ready = steps::kernels_needed(tasks, n, reduce_n)
        .into_iter()
        .try_for_each(|(dtype, op)| eng.kernels.prepare(dtype, op))
        .map_err(cuda_err);
    if let Err(e) = &ready {
        tracing::warn!("rank {rank}: a captured group goes staged: {e}");
    }
    let verdicts = exchange(comm, &[ready.is_ok() as u8])?;
    if verdicts.iter().any(|v| v.as_slice() != [1]) {
        return Ok(false);
    }
    ccl_cuda::cuda::helpers::on_first_stream::<Error>(&eng.ctx, &streams, |stream: &Stream| {
        let mut dev = CudaDevice::new(eng, stream);
        for (round, offsets, sources) in rounds {
            let group = HostOnlyGroup {
                index,
                tasks: &round,
                inputs: eng.device_slots.ptr(),
                reduce_n,
                offsets,
                sources,
            };
            host_only::emit_host_only(&mut dev, l, &group)?;
        }
        Ok(())
    })?;
    if index == 0 {
        tracing::info!(
            "rank {rank}: collectives, sends and receives captured into CUDA graphs go \
             host-only (copy engines through shared host memory)"
        );
    }
    Ok(true)
}

/// Every rank's `mine`, over the bootstrap network.
fn exchange(comm: &CommCtx, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    // Operations queued on the other engines first: their progress threads need the control
    // plane this exchange holds, and a peer's may be waiting for ours (as for a split).
    comm.control.settle_others()?;
    comm.control.allgather(mine)
}

/// Whether the captured group's kernel `op` is loaded (a warning and `false` if it cannot be).
fn prepared(eng: &IpcEngine, rank: usize, dtype: DataType, op: KernelOp) -> bool {
    match eng.kernels.prepare(dtype, op) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("rank {rank}: the captured group's kernel {op:?}: {e}");
            false
        }
    }
}
