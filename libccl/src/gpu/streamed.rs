//! Streamed submissions: a lone collective, or a group of sends and receives, that runs as
//! one plan on piece gates, so the stream's copies to and from pinned memory overlap the
//! proxy's transfers.

use std::sync::Arc;

use ccl_cuda::cuda::Stream;

use super::device::is_device_ptr;
use super::engine::GpuEngine;
use super::handover::{hand_over, take_slots, Staged};
use super::proxy::{Job, Slots};
use super::schedule::{own_block_on_device, piece_orders, without_copy, OwnBlock};
use super::staging::{device_ranges, PieceIo, Staging};
use crate::core::Comm;
use crate::error::{Error, Result};
use crate::exec::{CollGates, Flag};
use crate::host::{plan_specs, PlanSpec};
use crate::task::{buffer_counts, Task, TaskKind};

/// [`submit`](super::submit) of a lone collective that runs as one plan on piece gates
/// ([`crate::pieces::streamed`], pieces of `per` bytes): gate g's start slot opens when the g-th
/// input piece the schedule needs is in host memory, and its done slot when the g-th output piece
/// to be finished is, so the stream copies down first what is read first and copies up each piece
/// of the result as soon as the schedule wrote its last byte there.
pub(super) fn submit_streamed(
    comm: &Comm,
    eng: &Arc<GpuEngine>,
    streams: &[Stream],
    task: Task,
    per: usize,
) -> Result<()> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let sz = task.dtype.size();
    // Bytes of the input and the output (a reduce-scatter's output is a block of its input).
    let (in_bytes, out_bytes) = buffer_counts(task.kind, rank, n, task.count)
        .and_then(|(s, r)| Some((s.checked_mul(sz)?, r.checked_mul(sz)?)))
        .ok_or_else(|| Error::invalid_argument("count overflows"))?;
    let (k_in, k_out) = (in_bytes.div_ceil(per), out_bytes.div_ceil(per));
    // Gate g opens once the g-th input piece is down and lands once the g-th output piece
    // is final; a gate beyond either buffer's pieces copies nothing that way (its done slot
    // is set when the job ends).
    let k = k_in.max(k_out);
    let (first, count) = take_slots(eng, comm, k, "a streamed collective")?;
    let mut specs = plan_specs(comm, &mut comm.0.issue.lock(), std::slice::from_ref(&task))?;
    // A buffer in host memory (the caller's) needs no copies and no gates.
    let (dev_in, dev_out) = (is_device_ptr(task.send), is_device_ptr(task.recv));
    let own = own_block_on_device(&task, rank, n, dev_in && dev_out);
    // An all-to-all in place stages its input and output apart in host memory and runs the
    // schedule for buffers apart: its receives land in place at once, where in one buffer they
    // go to scratch and are copied into place on the CPU after every send (a receive's target
    // may still hold a block to send). On the device every copy down is queued before any copy
    // up, so the copies up cannot overwrite input the copies down still read.
    let apart_in_host = task.kind == TaskKind::Coll(ccl_collectives::Collective::AlltoAll)
        && task.send == task.recv
        && dev_in
        && dev_out;
    tracing::trace!(
        "rank {rank}: {} streamed on {k} gates, {per}-byte pieces: {in_bytes} bytes in, \
         {out_bytes} out{}{}",
        task.kind.name(),
        if own.is_some() {
            ", own block on the GPU"
        } else {
            ""
        },
        if apart_in_host { ", staged apart" } else { "" }
    );
    let streaming = Streaming {
        task,
        rank,
        n,
        per,
        in_bytes,
        out_bytes,
        k_in,
        k_out,
        dev_in,
        dev_out,
        own,
        apart_in_host,
    };
    let mut local = Vec::new();
    // From here on this rank has taken a sequence number its peers will match.
    let staged = streaming.stage(comm, eng, first, &mut specs, &mut local);
    hand_over_streamed(comm, eng, streams, (first, count), specs, staged, &local)
}

/// A lone collective [`submit_streamed`] runs on piece gates: its buffers cut in pieces of
/// `per` bytes, what of them goes through host memory and how.
struct Streaming {
    task: Task,
    rank: usize,
    n: usize,
    per: usize,
    /// Bytes of the input and the output.
    in_bytes: usize,
    out_bytes: usize,
    /// Pieces of the input and of the output.
    k_in: usize,
    k_out: usize,
    /// Which buffers are GPU memory (the others need no copies and no gates).
    dev_in: bool,
    dev_out: bool,
    /// The own block that stays on the device.
    own: Option<OwnBlock>,
    /// An all-to-all in place, staged with its input and output apart in host memory.
    apart_in_host: bool,
}

impl Streaming {
    /// Piece `i` of the buffer at `dev` that holds `bytes`: (start, end).
    fn piece(&self, dev: usize, i: usize, bytes: usize) -> (usize, usize) {
        (dev + i * self.per, dev + ((i + 1) * self.per).min(bytes))
    }

    /// Lays the collective out in a pinned chunk and gates its one plan (`specs`), the copies
    /// of own blocks on the device going to `local`. Returns each gate's copies, the chunk and
    /// its address.
    fn stage(
        &self,
        comm: &Comm,
        eng: &GpuEngine,
        first: u32,
        specs: &mut [PlanSpec],
        local: &mut Vec<crate::pieces::LocalCopy>,
    ) -> Result<(Vec<PieceIo>, usize, usize)> {
        let task = &self.task;
        let (down, up) = self.schedule(specs, local)?;
        let st = Staging::plan(&device_ranges([task], self.rank, self.n, &is_device_ptr)?);
        // Where the input and the output start in the pinned chunk when staged apart.
        let out_at = self.in_bytes.div_ceil(64) * 64;
        let chunk_bytes = if self.apart_in_host {
            out_at + self.out_bytes.div_ceil(64) * 64
        } else {
            st.bytes
        };
        // The host offset of device address `x` of the input or the output.
        let host_off = |x: usize, input: bool| -> Result<usize> {
            match (self.apart_in_host, input) {
                (true, true) => Ok(x - task.send),
                (true, false) => Ok(out_at + (x - task.recv)),
                _ => st
                    .offset(x)
                    .ok_or_else(|| Error::internal("staging range lost")),
            }
        };
        let sz = task.dtype.size();
        // The parts of a piece that go through host memory: all of it but an own block that
        // stays on the device.
        let staged_parts = |dev: usize, i: usize, input: bool| {
            let bytes = if input { self.in_bytes } else { self.out_bytes };
            let (a, b) = self.piece(dev, i, bytes);
            let stays = self.own.as_ref().and_then(|o| o.stays(sz, input));
            let (o0, o1) = stays.map_or((b, b), |(lo, hi)| (dev + lo, dev + hi));
            [(a, b.min(o0)), (a.max(o1), b)]
                .into_iter()
                .filter(|(x, y)| x < y)
                .map(|(x, y)| Ok((x, host_off(x, input)?, y - x)))
                .collect::<Result<Vec<_>>>()
        };
        let k = self.k_in.max(self.k_out);
        let mut ios: Vec<PieceIo> = Vec::with_capacity(k);
        for g in 0..k {
            let mut io = PieceIo::default();
            if let (true, Some(&p)) = (self.dev_in, down.get(g)) {
                io.inputs = staged_parts(task.send, p, true)?;
            }
            if let (true, Some(&p)) = (self.dev_out, up.get(g)) {
                io.outputs = staged_parts(task.recv, p, false)?;
            }
            ios.push(io);
        }
        let (chunk, base) = eng.chunk(chunk_bytes, &comm.0.abort)?;
        // A buffer in host memory keeps its address.
        let host = |dev: usize, input: bool| host_off(dev, input).map_or(dev, |o| base + o);
        let (hs, hr) = (host(task.send, true), host(task.recv, false));
        if self.apart_in_host {
            if let [PlanSpec::Coll { task: t, .. }] = &mut specs[..] {
                (t.send, t.recv) = (hs, hr);
            }
        } else {
            st.rebase(specs, base);
        }
        let gates = self.gates(eng, first, (hs, hr), (&down, &up));
        if let [PlanSpec::Coll { gates: g, .. }] = &mut specs[..] {
            *g = Some(gates);
        }
        Ok((ios, chunk, base))
    }

    /// The schedule of the one plan in `specs` as it runs here (for buffers apart in host
    /// memory, without the own block's copy, which goes to `local`), and the order its
    /// pieces go down and come up ([`piece_orders`]).
    fn schedule(
        &self,
        specs: &mut [PlanSpec],
        local: &mut Vec<crate::pieces::LocalCopy>,
    ) -> Result<(Vec<usize>, Vec<usize>)> {
        let (task, rank, n) = (&self.task, self.rank, self.n);
        let sz = task.dtype.size();
        let [PlanSpec::Coll { sched, .. }] = specs else {
            return Err(Error::internal("a streamed collective is not one plan"));
        };
        if self.apart_in_host {
            *sched = Arc::new(
                ccl_collectives::alltoall_out_of_place(rank, n, task.count)
                    .map_err(|e| Error::internal(format!("all-to-all schedule: {e}")))?,
            );
        }
        if let Some(o) = &self.own {
            *sched = Arc::new(without_copy(sched, o));
            let (src, dst) = (task.send + o.src * sz, task.recv + o.dst * sz);
            if src != dst {
                local.push(crate::pieces::LocalCopy {
                    src,
                    dst,
                    bytes: o.elems * sz,
                });
            }
        }
        Ok(piece_orders(sched, self.per / sz, self.k_in, self.k_out))
    }

    /// The plan's gates, for the buffers at `hs` (input) and `hr` (output) in host memory:
    /// each piece's host range with the flag of its gate, the inverse of the orders the
    /// pieces go `down` and come `up`. Done slots of gates without an output piece are set
    /// when the job ends.
    fn gates(
        &self,
        eng: &GpuEngine,
        first: u32,
        (hs, hr): (usize, usize),
        (down, up): (&[usize], &[usize]),
    ) -> CollGates {
        let seq = |g: usize| first.wrapping_add(g as u32);
        // SAFETY: the slots are pinned memory of the engine, which outlives every job; they
        // are accessed only atomically.
        let flag = |slots: &Slots, g: usize| unsafe { Flag::new(slots.atomic(seq(g)), seq(g)) };
        let pieces = |h: usize, bytes: usize, slots: &Slots, order: &[usize]| {
            let mut v = vec![(0, 0, flag(slots, 0)); order.len()];
            for (gate, &i) in order.iter().enumerate() {
                let (a, b) = self.piece(h, i, bytes);
                v[i] = (a, b, flag(slots, gate));
            }
            v
        };
        CollGates {
            input: if self.dev_in {
                pieces(hs, self.in_bytes, &eng.start, down)
            } else {
                Vec::new()
            },
            output: if self.dev_out {
                pieces(hr, self.out_bytes, &eng.done, up)
            } else {
                Vec::new()
            },
        }
    }
}

/// Hands a streamed submission -- one job over slots `first..first+count`, its pieces staged
/// (or the error that stopped that, which poisons the communicator) -- to the proxy and the
/// streams.
fn hand_over_streamed(
    comm: &Comm,
    eng: &GpuEngine,
    streams: &[Stream],
    (first, count): (u32, u32),
    specs: Vec<PlanSpec>,
    staged: Result<(Vec<PieceIo>, usize, usize)>,
    local: &[crate::pieces::LocalCopy],
) -> Result<()> {
    let (ios, chunk, base) = staged.inspect_err(|e| comm.set_async_error(e))?;
    let job = Job {
        first,
        last: first.wrapping_add(count - 1),
        specs,
        graph: None,
    };
    let staged = Staged {
        ios: &ios,
        local,
        chunk,
        base,
    };
    hand_over(
        comm,
        eng,
        streams,
        first,
        count,
        std::iter::once(job),
        staged,
    )
}

/// [`submit`](super::submit) of a group of sends and receives that runs as one plan on byte-range
/// gates ([`crate::pieces::streamed_p2p`], pieces of `per` bytes): gate g's start slot opens when
/// the g-th piece of the sends' device buffers (in call order) is in host memory, its done slot
/// when the g-th piece of the receives' device buffers has every byte, so the stream's copies
/// overlap the transfers while every message stays whole.
pub(super) fn submit_streamed_p2p(
    comm: &Comm,
    eng: &Arc<GpuEngine>,
    streams: &[Stream],
    tasks: &[Task],
    per: usize,
) -> Result<()> {
    let (rank, n) = (comm.rank(), comm.nranks());
    // (device start, device end) of every piece, inputs (sends) then outputs (receives).
    let mut pieces: [Vec<(usize, usize)>; 2] = Default::default();
    for t in tasks {
        let (addr, dir) = match t.kind {
            TaskKind::Send { .. } => (t.send, 0),
            TaskKind::Recv { .. } => (t.recv, 1),
            TaskKind::Coll(_) => return Err(Error::internal("a collective in a streamed group")),
        };
        if !is_device_ptr(addr) {
            continue;
        }
        let end = addr + t.count * t.dtype.size();
        pieces[dir].extend((addr..end).step_by(per).map(|a| (a, (a + per).min(end))));
    }
    let [inputs, outputs] = pieces;
    let k = inputs.len().max(outputs.len()).max(1);
    let (first, count) = take_slots(eng, comm, k, "a streamed group")?;
    let seq = |g: usize| first.wrapping_add(g as u32);
    let mut specs = plan_specs(comm, &mut comm.0.issue.lock(), tasks)?;
    // From here on this rank has taken sequence numbers its peers will match.
    let staged = (|| {
        let st = Staging::plan(&device_ranges(tasks, rank, n, &is_device_ptr)?);
        let mut ios: Vec<PieceIo> = (0..k).map(|_| PieceIo::default()).collect();
        for (io, &(a, b)) in ios.iter_mut().zip(&inputs) {
            io.inputs = st.io(&[(a, b, true)])?.inputs;
        }
        for (io, &(c, d)) in ios.iter_mut().zip(&outputs) {
            io.outputs = st.io(&[(c, d, false)])?.outputs;
        }
        let (chunk, base) = eng.chunk(st.bytes, &comm.0.abort)?;
        st.rebase(&mut specs, base);
        // A piece's host range from its start (its end may be the end of a staged range,
        // which maps to no byte of it).
        let host = |dev: usize| st.offset(dev).map_or(dev, |o| base + o);
        // SAFETY: the slots are pinned memory of the engine, which outlives every job; they
        // are accessed only atomically.
        let flag = |slots: &Slots, g: usize| unsafe { Flag::new(slots.atomic(seq(g)), seq(g)) };
        let gated = |list: &[(usize, usize)], slots: &Slots| {
            list.iter()
                .enumerate()
                .map(|(g, &(a, b))| (host(a), host(a) + (b - a), flag(slots, g)))
                .collect()
        };
        let gates = CollGates {
            input: gated(&inputs, &eng.start),
            output: gated(&outputs, &eng.done),
        };
        for spec in specs.iter_mut() {
            if let PlanSpec::P2p { byte_gates, .. } = spec {
                *byte_gates = Some(gates.clone());
            }
        }
        Ok((ios, chunk, base))
    })();
    hand_over_streamed(comm, eng, streams, (first, count), specs, staged, &[])
}
