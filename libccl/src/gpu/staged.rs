//! The staged path of a group with nothing to fold on the GPU: a lone collective or a group
//! of sends and receives streamed in pieces ([`super::streamed`]), else the group in jobs, or
//! in one job on piece gates ([`crate::pieces::split`]), staged in a pinned chunk.

use std::sync::Arc;

use super::device::{is_device_ptr, streams_of};
use super::engine::GpuEngine;
use super::handover::{hand_over, take_slots, Staged};
use super::proxy::{Job, Slots};
use super::staging::stage_pieces;
use super::streamed::{submit_streamed, submit_streamed_p2p};
use crate::core::Comm;
use crate::error::Result;
use crate::exec::{Flag, PieceGates};
use crate::host::{plan_specs, PlanSpec};
use crate::params;
use crate::task::{Task, TaskKind};

/// `CCL_GPU_STREAM_PIECE_BYTES` for this communicator: `auto` streams collectives
/// ([`crate::pieces::streamed`]) over the network in pieces of 2 MiB or a sixteenth of the
/// operation, whichever is longer (one H100, 128 MiB all-reduce: 8 MiB pieces 3.5-4.3 GB/s against 2 MiB pieces'
/// 3.1-3.6, three alternations, where 2 MiB paid from 4 to 16 MiB), and leaves those over
/// shared memory alone whole.
fn stream_cut(comm: &Comm) -> crate::pieces::StreamCut {
    use crate::pieces::StreamCut;
    let p = &params::CCL_GPU_STREAM_PIECE_BYTES;
    if p.get_str().trim().eq_ignore_ascii_case("auto") {
        if comm.0.issue.lock().shared_memory_only {
            StreamCut::OFF
        } else {
            StreamCut {
                min: 2 << 20,
                most: 16,
            }
        }
    } else {
        StreamCut::fixed(p.get_i64().max(0) as usize)
    }
}

/// [`submit`](super::submit) of a group with nothing to fold on the GPU.
pub(super) fn submit_staged(comm: &Comm, eng: &Arc<GpuEngine>, tasks: Vec<Task>) -> Result<()> {
    let streams = streams_of(&eng.ctx, &tasks);
    let (rank, n) = (comm.rank(), comm.nranks());
    let piece_bytes = params::CCL_GPU_PIECE_BYTES.get_i64().max(0) as usize;
    let stream = stream_cut(comm);
    if let (Some(per), [t]) = (crate::pieces::streamed(&tasks, n, stream), &tasks[..]) {
        return submit_streamed(comm, eng, &streams, *t, per);
    }
    let p2p = if params::CCL_GPU_STREAM_P2P.get_bool() {
        stream
    } else {
        crate::pieces::StreamCut::OFF
    };
    if let Some(per) = crate::pieces::streamed_p2p(&tasks, p2p) {
        return submit_streamed_p2p(comm, eng, &streams, &tasks, per);
    }
    let whole_p2p = p2p.min > 0;
    let (jobs, gated) = crate::pieces::split(
        &tasks,
        rank,
        n,
        piece_bytes,
        stream,
        whole_p2p,
        &is_device_ptr,
    )
    .into_jobs(tasks);
    let gates = gated.as_ref().map_or(jobs.len(), |g| g.gates);
    let (first, count) = take_slots(eng, comm, gates, "a group")?;
    let seq = |k: usize| first.wrapping_add(k as u32);
    let mut specs = Vec::with_capacity(jobs.len());
    {
        let mut issue = comm.0.issue.lock();
        for (k, p) in jobs.iter().enumerate() {
            match plan_specs(comm, &mut issue, p) {
                Ok(s) => specs.push(s),
                // Before any job took sequence numbers nothing is lost; after, the peers wait
                // for pieces this rank will never send.
                Err(e) if k == 0 => return Err(e),
                Err(e) => {
                    comm.set_async_error(&e);
                    return Err(e);
                }
            }
        }
    }
    // From here on this rank has taken sequence numbers its peers will match: a failure must
    // poison the communicator, and the proxy must still run (and release) the operations.
    let staged = (|| {
        let (st, ios) = stage_pieces(&jobs, gated.as_ref(), rank, n, &is_device_ptr)?;
        let (chunk, base) = eng.chunk(st.bytes, &comm.0.abort)?;
        for s in specs.iter_mut() {
            st.rebase(s, base);
        }
        if let Some(g) = &gated {
            attach_gates(eng, &mut specs, &jobs, &g.input, g.gates, first);
        }
        Ok((ios, chunk, base))
    })();
    let (ios, chunk, base) = staged.inspect_err(|e| comm.set_async_error(e))?;
    let per_job = if gated.is_some() { count } else { 1 };
    let jobs = specs.into_iter().enumerate().map(|(k, s)| Job {
        first: seq(k),
        last: seq(k).wrapping_add(per_job - 1),
        specs: s,
        graph: None,
    });
    let local = gated.as_ref().map_or(&[][..], |g| &g.local[..]);
    let staged = Staged {
        ios: &ios,
        local,
        chunk,
        base,
    };
    hand_over(comm, eng, &streams, first, count, jobs, staged)
}

/// Gates of a gated group's point-to-point plan: its sends of piece k wait for start slot
/// `first + k`, its receives of piece k report on done slot `first + k` (the last piece's is
/// the job's end).
fn attach_gates(
    eng: &GpuEngine,
    specs: &mut [Vec<PlanSpec>],
    jobs: &[Vec<Task>],
    input: &[usize],
    gates: usize,
    first: u32,
) {
    let seq = |k: usize| first.wrapping_add(k as u32);
    // The point-to-point tasks' gates, in the order plan_specs keeps them.
    let of_task: Vec<usize> = jobs
        .iter()
        .flatten()
        .zip(input)
        .filter(|(t, _)| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. }))
        .map(|(_, &g)| g)
        .collect();
    // SAFETY: the slots are pinned memory of the engine, which outlives every job; they are
    // accessed only atomically.
    let flag = |slots: &Slots, k: usize| unsafe { Flag::new(slots.atomic(seq(k)), seq(k)) };
    for spec in specs.iter_mut().flatten() {
        if let PlanSpec::P2p { gates: g, .. } = spec {
            *g = Some(PieceGates {
                of_task: of_task.clone(),
                start: (0..gates).map(|k| flag(&eng.start, k)).collect(),
                landed: (0..gates - 1).map(|k| flag(&eng.done, k)).collect(),
            });
        }
    }
}
