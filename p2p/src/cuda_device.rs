//! The protocols' [`Device`] on CUDA streams: the caller's stream, the engine's copy, receive
//! and host-path lanes, and (remote copies) the peer GPU's lanes.

use std::sync::atomic::Ordering;

use ccl_cuda::cuda::{self, Event, MemOp, Stream, WaitCond};

use crate::device::{self, BatchCopy, CopyOf, Device, Kernel, LongWait};
use crate::engine::IpcEngine;
use crate::error::{cuda_err, Error, Result};
use crate::layout::Lane;

/// The protocols' queues on CUDA streams: [`Lane::User`] is the caller's stream. Used behind
/// [`device::Batched`], which hands consecutive flag operations over as one
/// `cuStreamBatchMemOp`.
pub(crate) struct CudaDevice<'a> {
    eng: &'a IpcEngine,
    user: &'a Stream,
    /// The peer of the direct transfer whose copies are being queued ([`Device::annotate`]).
    peer: Option<usize>,
    /// The operation the copies belong to, for the monitor's records.
    coll: Option<ccl_monitor::CollId>,
    /// Captured groups' handshakes as a kernel ([`Device::handshake_kernel`]).
    handshakes: bool,
    /// Captured groups' copies of at most this many bytes each as one kernel
    /// ([`Device::copies_kernel`]; 0: copy engines).
    copy_kernel_max: usize,
}

impl<'a> CudaDevice<'a> {
    pub(crate) fn new(eng: &'a IpcEngine, user: &'a Stream) -> CudaDevice<'a> {
        CudaDevice {
            eng,
            user,
            peer: None,
            coll: None,
            handshakes: false,
            copy_kernel_max: 0,
        }
    }

    /// Has a captured group's copies of at most `max` bytes each run as one kernel between
    /// its handshake kernels (0: on copy engines).
    pub(crate) fn with_copy_kernel(mut self, max: usize) -> CudaDevice<'a> {
        self.copy_kernel_max = max;
        self
    }

    /// Most blocks of a kernel that copies a captured group's data (`CCL_GRAPH_COPY_BLOCKS`).
    fn copy_blocks(&self) -> u32 {
        self.eng.graph_copy_blocks
    }

    /// Has captured groups' handshakes run as a spinning kernel (its program loaded).
    pub(crate) fn with_handshake_kernel(mut self, on: bool) -> CudaDevice<'a> {
        self.handshakes = on;
        self
    }

    /// Names the operation the copies queued through this device belong to.
    pub(crate) fn for_op(mut self, coll: ccl_monitor::CollId) -> CudaDevice<'a> {
        self.coll = Some(coll);
        self
    }

    fn stream(&self, lane: Lane) -> Result<&Stream> {
        let s = match lane {
            Lane::User => Some(self.user),
            Lane::Tx(i) => self.eng.tx.get(i),
            Lane::Rx(i) => self.eng.rx.get(i),
            Lane::Host(i) => self.eng.host_lanes.get(i),
        };
        s.ok_or_else(|| Error::internal(format!("cuda-ipc: no stream for {lane:?}")))
    }

    fn join_event(&self, lane: Lane) -> Result<&Event> {
        let i = match lane {
            Lane::Tx(i) => Some(i),
            Lane::Rx(i) => Some(self.eng.layout.direct_tx + i),
            Lane::Host(i) => Some(self.eng.layout.direct_tx + self.eng.layout.rx_lanes + i),
            Lane::User => None,
        };
        i.and_then(|i| self.eng.joins.get(i))
            .ok_or_else(|| Error::internal(format!("cuda-ipc: no join event for {lane:?}")))
    }
}

// SAFETY (for every method below): the addresses come from the protocol's `Layout` (flag words
// and slots inside allocations that live as long as the engine, ours or mapped) or from the
// caller's buffers of the operation being queued, valid until the stream has passed it (NCCL's
// contract); kernels get ranges of exactly `n` elements, `dst` equal to or disjoint from each
// input.
impl Device for CudaDevice<'_> {
    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.wait_value32(addr, value, WaitCond::Geq) }.map_err(cuda_err)
    }

    fn wait_long(&mut self, lane: Lane, addr: u64, value: u32, of: LongWait) -> Result<()> {
        if !self.eng.wait_kernel.covers(of) {
            return self.wait(lane, addr, value);
        }
        let s = self.stream(lane)?;
        // SAFETY: see the impl; the word is a flag of the layout, which a peer's stream (or
        // an abort) writes.
        unsafe { self.eng.kernels.wait_flag(s, addr, value) }.map_err(cuda_err)
    }

    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        (dst, src, bytes): (u64, u64, usize),
        done: (u64, u32),
        of: CopyOf,
    ) -> Result<()> {
        if !self.copy_signal_is_kernel(of) {
            return device::wait_copy_signal_in_three(self, lane, arrive, (dst, src, bytes), done);
        }
        let s = self.stream(lane)?;
        // SAFETY: see the impl: both words are flags of the layout (a peer's stream writes
        // `arrive`; `done` is a flag of ours or a peer's, mapped here), the ranges are a
        // transfer's two buffers (ours and the peer's, mapped) or a receive slot and the
        // buffer it is copied to, disjoint, valid until the stream passes. The kernel is
        // loaded at setup wherever a setting can ask for it.
        unsafe {
            self.eng.kernels.wait_copy(
                s,
                arrive.0,
                arrive.1,
                dst,
                src,
                bytes as u64,
                done.0,
                done.1,
            )
        }
        .map_err(cuda_err)
    }

    fn mail_copy(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        (slot, tag): (u64, u64),
        src: u64,
        bytes: usize,
    ) -> Result<()> {
        let mail = self
            .eng
            .mail
            .as_ref()
            .ok_or_else(|| Error::internal("cuda-ipc: a mailed send without mailboxes"))?;
        // The receiver may call late: where a stream wait would hold the hardware queue every
        // stream shares, the one-thread wait kernel waits instead (one SM slot, not the
        // copy's blocks, spinning meanwhile).
        self.wait_long(lane, arrive.0, arrive.1, LongWait::Transfer)?;
        let s = self.stream(lane)?;
        // SAFETY: see the impl: the slot is one of
        // the engine's mailboxes, claimed for this send, which its mail thread fills with the
        // receiver's buffer as mapped here (disjoint from ours) or with nothing; `src` is this
        // rank's buffer of `bytes`, valid until the stream passes.
        unsafe {
            self.eng
                .kernels
                .mail_copy(s, slot, tag, src, bytes as u64, mail.grid)
        }
        .map_err(cuda_err)
    }

    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.write_value32(addr, value) }.map_err(cuda_err)
    }

    fn fused_all_reduce(&mut self, lane: Lane, f: &device::FusedAllReduce) -> Result<bool> {
        let s = self.stream(lane)?;
        let words = cuda::GraphWords {
            inputs: f.inputs.clone(),
            done: f.done.clone(),
            halfway: Vec::new(),
        };
        // SAFETY: see the impl: the sources are every rank's input of the captured all-reduce
        // (peers' mapped at capture), `dst` this rank's output, `n` elements each; the words
        // are the group's captured words of the layout, which only the group's graphs write.
        unsafe {
            self.eng
                .kernels
                .graph_all_reduce(s, f.dtype, f.op, f.dst, &f.srcs, f.n, &words, f.inplace)
        }
        .map_err(cuda_err)?;
        Ok(true)
    }

    fn fused_copies(&mut self, lane: Lane, f: &device::FusedCopies) -> Result<bool> {
        let s = self.stream(lane)?;
        let words = cuda::GraphWords {
            inputs: f.inputs.clone(),
            done: f.done.clone(),
            halfway: f.halfway.clone(),
        };
        let blocks = self.copy_blocks();
        if let Some((go, arrived)) = f.spread {
            // SAFETY: as below; `go` and `arrived` are this rank's own words of the group in
            // its flag area (zeroed at setup, no partner writes them), which the kernel sets
            // back to 0 before it ends, and the group's launches follow one another on `s`.
            unsafe {
                self.eng
                    .kernels
                    .graph_copies_spread(s, &f.copies, &words, go, arrived, blocks)
            }
            .map_err(cuda_err)?;
            return Ok(true);
        }
        // SAFETY: see the impl: the copies are the captured group's, between user buffers
        // (peers' mapped at capture) and its scratch memory, disjoint; the words as in
        // `fused_all_reduce`.
        unsafe {
            self.eng
                .kernels
                .graph_copies(s, &f.copies, &f.second, &words)
        }
        .map_err(cuda_err)?;
        Ok(true)
    }

    fn copies_kernel(&mut self, lane: Lane, copies: &[(u64, u64, usize)]) -> Result<bool> {
        // One copy stays on a copy engine: the kernel only won where it ran several side by
        // side (one H200, four ranks under MPS, 2026-11-29: a captured broadcast or send of
        // 128-512 KiB took 5-7% longer as a kernel, all-gathers and all-to-alls 20-28% less).
        if copies.len() < 2
            || copies.len() > ccl_cuda::cuda::source::GRAPH_COPIES_MAX
            || copies.iter().any(|c| c.2 > self.copy_kernel_max)
        {
            return Ok(false);
        }
        let (s, blocks) = (self.stream(lane)?, self.copy_blocks());
        // SAFETY: see the impl: the copies are the captured group's, from partners' buffers
        // (mapped at capture) into its own, disjoint, between its handshakes.
        unsafe { self.eng.kernels.graph_copies_wide(s, copies, blocks) }.map_err(cuda_err)?;
        Ok(true)
    }

    fn flag_ops(&mut self, lane: Lane, ops: &[device::FlagOp]) -> Result<()> {
        if let [op] = ops {
            // One operation: its own call is cheaper than a batch of one.
            return match *op {
                device::FlagOp::Wait(addr, value) => self.wait(lane, addr, value),
                device::FlagOp::Write(addr, value) => self.write(lane, addr, value),
            };
        }
        let ops = ops.iter().map(|op| match *op {
            device::FlagOp::Wait(addr, value) => MemOp::Wait {
                addr,
                value,
                cond: WaitCond::Geq,
            },
            device::FlagOp::Write(addr, value) => MemOp::Write { addr, value },
        });
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.mem_ops(ops) }.map_err(cuda_err)
    }

    fn long_wait_is_kernel(&self, of: LongWait) -> bool {
        self.eng.wait_kernel.covers(of)
    }

    fn copy_signal_is_kernel(&self, of: CopyOf) -> bool {
        match of {
            CopyOf::Transfer => self.eng.copy_kernel,
            // Asked for only where CCL_IPC_EAGER_COPY_KERNEL is on (the kernel is loaded then).
            CopyOf::SlotChunk => true,
        }
    }

    fn handshake_is_kernel(&self) -> bool {
        self.handshakes
    }

    fn handshake_kernel(&mut self, lane: Lane, words: &[(u64, u64)]) -> Result<()> {
        let s = self.stream(lane)?;
        // SAFETY: see the impl; the words are the captured group's words of the layout, which
        // only the group's graphs write.
        unsafe { self.eng.kernels.graph_handshake(s, words) }.map_err(cuda_err)
    }

    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // Nothing to move (a direct transfer wholly through the host path: its NVLink part,
        // whose peer address is then not even resolved).
        if bytes == 0 {
            return Ok(());
        }
        let s = self.stream(lane)?;
        let timed = match (self.peer, self.coll, self.eng.copies.get()) {
            (Some(peer), Some(coll), Some(m)) => m.start(s, lane).map(|st| (m, st, peer, coll)),
            _ => None,
        };
        // SAFETY: see the impl.
        unsafe { s.memcpy(dst, src, bytes) }.map_err(cuda_err)?;
        if let Some((m, st, peer, coll)) = timed {
            m.finish(s, st, peer, lane, bytes, coll);
        }
        Ok(())
    }

    fn copy_batch(&mut self, lane: Lane, copies: &[BatchCopy]) -> Result<()> {
        if !self.batches_copies(lane, 0) {
            return device::copy_one_by_one(self, lane, copies);
        }
        let s = self.stream(lane)?;
        let timed = match (self.coll, self.eng.copies.get()) {
            (Some(coll), Some(m)) => m.start(s, lane).map(|st| (m, st, coll)),
            _ => None,
        };
        let plain: Vec<(u64, u64, usize)> =
            copies.iter().map(|c| (c.dst, c.src, c.bytes)).collect();
        // SAFETY: see the impl; the plans' batched copies write disjoint ranges that no other
        // copy of the batch reads (a transfer's destination, a local copy's own block, a
        // reduced slice's place in each peer's output).
        unsafe { s.memcpy_batch(&plain) }.map_err(cuda_err)?;
        if let Some((m, st, coll)) = timed {
            let parts = copies.iter().filter_map(|c| c.peer.map(|p| (p, c.bytes)));
            m.finish_batch(s, st, lane, parts, coll);
        }
        Ok(())
    }

    fn batches_copies(&self, lane: Lane, local_bytes: usize) -> bool {
        self.eng.batch_copies.is_some_and(|max| local_bytes <= max)
            && self.stream(lane).is_ok_and(|s| s.batches_copies())
    }

    fn annotate(&mut self, peer: Option<usize>) {
        self.peer = peer;
    }

    fn pull(
        &mut self,
        lane: Lane,
        dst: u64,
        (src, src_there): (u64, u64),
        bytes: usize,
    ) -> Result<()> {
        let remote = self.eng.remote.as_ref().filter(|r| bytes >= r.min_bytes);
        let (Some(r), Lane::Rx(i)) = (remote, lane) else {
            return self.copy(lane, dst, src, bytes);
        };
        let (Some(stream_there), Some(seen_here), Some(done_there)) =
            (r.streams.get(i), r.here.get(i), r.there.get(i))
        else {
            return self.copy(lane, dst, src, bytes);
        };
        let s = self.stream(lane)?;
        // Each event is waited on right after it is recorded, so one per lane serves every
        // transfer.
        seen_here.record(s).map_err(cuda_err)?;
        stream_there.wait_event(seen_here).map_err(cuda_err)?;
        // SAFETY: see the impl; `src_there` is the peer's buffer as our context on its GPU
        // maps it (`Transfer::there`: no VMM memory on either side), `dst` ours, which that
        // context reaches through the peer access enabled for it at setup.
        unsafe { stream_there.memcpy(dst, src_there, bytes) }.map_err(cuda_err)?;
        done_there.record(stream_there).map_err(cuda_err)?;
        s.wait_event(done_there).map_err(cuda_err)?;
        r.pulls.fetch_add(1, Ordering::Relaxed);
        r.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }

    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()> {
        let s = self.stream(lane)?;
        let kn = &self.eng.kernels;
        // SAFETY: see the impl.
        unsafe {
            match k {
                Kernel::Reduce {
                    dtype,
                    op,
                    dst,
                    a,
                    b,
                    n,
                } => kn.reduce(s, dtype, op, dst, a, b, n),
                Kernel::ReduceN {
                    dtype,
                    op,
                    dst,
                    srcs,
                    k,
                    n,
                    also,
                    nalso,
                } => {
                    let mut dsts = vec![dst];
                    dsts.extend_from_slice(also.get(..nalso).unwrap_or(&[]));
                    kn.reduce_n_to(s, dtype, op, &dsts, srcs.get(..k).unwrap_or(&[]), n)
                }
                // The slot is one of the engine's mailboxes, claimed for this reduction; the
                // mail thread fills it with the ranks' buffers as mapped here (or with nothing).
                Kernel::ReduceNMail {
                    dtype,
                    op,
                    k,
                    nalso,
                    n,
                    slot,
                    tag,
                    mirror,
                } => kn.reduce_n_mail(s, dtype, op, k, nalso, (slot, tag, mirror), n),
                Kernel::PreMul {
                    dtype,
                    dst,
                    src,
                    n,
                    scalar,
                } => kn.premul(s, dtype, dst, src, n, scalar),
                Kernel::PreMulAdd {
                    dtype,
                    dst,
                    src,
                    acc,
                    n,
                    scalar,
                } => kn.premul_add(s, dtype, dst, src, acc, n, scalar),
                Kernel::DivInt {
                    dtype,
                    dst,
                    n,
                    divisor,
                } => kn.div_int(s, dtype, dst, n, divisor),
            }
        }
        .map_err(cuda_err)
    }

    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.eng.fork.record(self.user).map_err(cuda_err)?;
        for &l in lanes {
            self.stream(l)?
                .wait_event(&self.eng.fork)
                .map_err(cuda_err)?;
        }
        Ok(())
    }

    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        for &l in lanes {
            let ev = self.join_event(l)?;
            ev.record(self.stream(l)?).map_err(cuda_err)?;
            self.user.wait_event(ev).map_err(cuda_err)?;
        }
        Ok(())
    }
}
