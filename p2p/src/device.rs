//! What the protocols queue, as a [`Device`]: flag waits and writes, copies and kernels on
//! lanes that run concurrently, each in order. CUDA streams in production (`cuda_device`), a
//! simulated GPU in the tests (`sim`), which runs every collective with arbitrary lane
//! interleavings and with all lanes merged into one hardware queue. [`Batched`] hands
//! consecutive flag operations over as one call.

use ccl_cuda::{DataType, ReduceKind};

use crate::error::Result;
use crate::layout::Lane;

/// A kernel launch, with the numerics of [`ccl_cuda::host::reduce`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kernel {
    /// `dst = a (op) b`.
    Reduce {
        dtype: DataType,
        op: ReduceKind,
        dst: u64,
        a: u64,
        b: u64,
        n: usize,
    },
    /// `dst = ((srcs[0] (op) srcs[1]) (op) srcs[2]) ...` over the first `k` sources (2..=8),
    /// in one kernel; bit for bit a chain of
    /// [`Kernel::Reduce`] in source order. The result also goes to the first `nalso` of `also`.
    ReduceN {
        dtype: DataType,
        op: ReduceKind,
        dst: u64,
        srcs: [u64; ccl_cuda::cuda::source::REDUCE_N_MAX],
        k: usize,
        n: usize,
        also: [u64; ccl_cuda::cuda::source::REDUCE_N_MAX],
        nalso: usize,
    },
    /// [`Kernel::ReduceN`] over `k` sources and `nalso` further destinations whose addresses
    /// come later: the kernel waits until the mailbox slot at `slot` holds `tag` and takes them
    /// from it ([`crate::mail::ReduceJob`]); `mirror` is the slot's copy in device memory.
    ReduceNMail {
        dtype: DataType,
        op: ReduceKind,
        k: usize,
        nalso: usize,
        n: usize,
        slot: u64,
        tag: u64,
        mirror: u64,
    },
    /// `dst = src * scalar`.
    PreMul {
        dtype: DataType,
        dst: u64,
        src: u64,
        n: usize,
        scalar: [u8; 8],
    },
    /// `dst = src * scalar + acc`, rounded once.
    PreMulAdd {
        dtype: DataType,
        dst: u64,
        src: u64,
        acc: u64,
        n: usize,
        scalar: [u8; 8],
    },
    /// `dst /= divisor`.
    DivInt {
        dtype: DataType,
        dst: u64,
        n: usize,
        divisor: u64,
    },
}

/// [`Device::wait_copy_signal`] as a stream wait, a copy and a stream write.
pub(crate) fn wait_copy_signal_in_three<D: Device + ?Sized>(
    dev: &mut D,
    lane: Lane,
    arrive: (u64, u32),
    (dst, src, bytes): (u64, u64, usize),
    done: (u64, u32),
) -> Result<()> {
    dev.wait(lane, arrive.0, arrive.1)?;
    dev.copy(lane, dst, src, bytes)?;
    dev.write(lane, done.0, done.1)
}

/// One copy of a [`Device::copy_batch`]: `bytes` from `src` to `dst`, moving `peer`'s direct
/// transfer (`None`: a copy within this GPU), which the monitor's copy timing names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchCopy {
    pub dst: u64,
    pub src: u64,
    pub bytes: usize,
    pub peer: Option<usize>,
}

/// `copies` as plain copies on `lane`, one after another, each named with its peer
/// ([`Device::annotate`]): a [`Device::copy_batch`] where the device has no batch.
pub(crate) fn copy_one_by_one<D: Device + ?Sized>(
    dev: &mut D,
    lane: Lane,
    copies: &[BatchCopy],
) -> Result<()> {
    for c in copies {
        dev.annotate(c.peer);
        dev.copy(lane, c.dst, c.src, c.bytes)?;
    }
    dev.annotate(None);
    Ok(())
}

/// What a [`Device::wait_long`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LongWait {
    /// A direct transfer's first side, for the peer's copy.
    Transfer,
    /// A direct reduction, for its peers' pushes.
    Reduction,
}

/// What a [`Device::wait_copy_signal`] copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyOf {
    /// A direct transfer's second side, between the two ranks' buffers
    /// (`CCL_IPC_COPY_KERNEL`).
    Transfer,
    /// A staged chunk out of this rank's receive slot, the slot returned after it (eager
    /// transfers with `CCL_IPC_EAGER_COPY_KERNEL=1`).
    SlotChunk,
}

/// A small captured all-reduce in one kernel ([`Device::fused_all_reduce`]).
#[derive(Debug, Clone)]
pub(crate) struct FusedAllReduce {
    pub dtype: DataType,
    pub op: ReduceKind,
    pub dst: u64,
    /// Every rank's input, in rank order, as this rank reaches it.
    pub srcs: Vec<u64>,
    pub n: usize,
    /// Per partner: (this rank's word there, the partner's word here), before and after.
    pub inputs: Vec<(u64, u64)>,
    pub done: Vec<(u64, u64)>,
    /// `dst` overlaps this rank's input.
    pub inplace: bool,
}

/// A captured group that only copies, in one kernel ([`Device::fused_copies`]).
#[derive(Debug, Clone)]
pub(crate) struct FusedCopies {
    /// (dst, src, bytes), as this rank reaches them: the first phase's, and (with `halfway`)
    /// the second's.
    pub copies: Vec<(u64, u64, usize)>,
    pub second: Vec<(u64, u64, usize)>,
    /// As [`FusedAllReduce`]'s; `halfway` empty: no middle handshake.
    pub inputs: Vec<(u64, u64)>,
    pub halfway: Vec<(u64, u64)>,
    pub done: Vec<(u64, u64)>,
    /// Spread over blocks (no `halfway`): two words of this rank, 0 between launches, that
    /// the blocks meet on (block 0 lets the others go, the last one does the "done"
    /// handshake); `None`: one block.
    pub spread: Option<(u64, u64)>,
}

/// What the protocols queue. Each call appends to one lane; lanes run concurrently, in order
/// within a lane.
pub(crate) trait Device {
    /// Later work on `lane` waits until the word at `addr` reaches `value` (cyclic `>=`).
    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()>;
    /// [`Device::wait`] for a wait that lasts as long as a peer takes, with nothing of this
    /// operation queued behind it on `lane`: a device may run it so that other streams'
    /// work is not held up meanwhile. `of`: what it waits for (devices may treat the two
    /// kinds differently).
    fn wait_long(&mut self, lane: Lane, addr: u64, value: u32, of: LongWait) -> Result<()> {
        let _ = of;
        self.wait(lane, addr, value)
    }
    /// Wait until the word at `arrive.0` reaches `arrive.1`, copy `bytes` from `src` to
    /// `dst`, then write `done.1` to the word at `done.0` (the copy visible first): a direct
    /// transfer's second side, or a staged chunk out of its slot (`of`). A device may run all
    /// three as one kernel, so that no command of ours waits queued behind the wait (a
    /// kernel's spin holds no hardware queue, as a stream wait does).
    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        copy: (u64, u64, usize),
        done: (u64, u32),
        of: CopyOf,
    ) -> Result<()> {
        let _ = of;
        wait_copy_signal_in_three(self, lane, arrive, copy, done)
    }
    /// [`Device::wait_copy_signal`] for a copy from a peer's buffer into ours whose two
    /// buffers the peer's GPU can reach as well: a device may have that GPU's copy engine run
    /// the copy ([`Device::pull`]), so that ours stays free for this rank's own pushes.
    /// `there`: the source as this process's context on the peer's GPU maps it.
    fn wait_pull_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        (dst, src, bytes): (u64, u64, usize),
        there: u64,
        done: (u64, u32),
    ) -> Result<()> {
        if self.copy_signal_is_kernel(CopyOf::Transfer) {
            return self.wait_copy_signal(lane, arrive, (dst, src, bytes), done, CopyOf::Transfer);
        }
        self.wait(lane, arrive.0, arrive.1)?;
        self.pull(lane, dst, (src, there), bytes)?;
        self.write(lane, done.0, done.1)
    }
    /// The copy of [`Device::wait_pull_signal`] (the source as our context and as the peer
    /// GPU's map it): ordered on `lane` like [`Device::copy`], whichever GPU's engine runs it.
    fn pull(
        &mut self,
        lane: Lane,
        dst: u64,
        (src, _there): (u64, u64),
        bytes: usize,
    ) -> Result<()> {
        self.copy(lane, dst, src, bytes)
    }
    /// A mailed send's copy ([`crate::mail`]): once the word at `arrive.0` reaches
    /// `arrive.1` and the mailbox slot at `mail.0` holds the tag `mail.1`, copy from `src`
    /// to the destination the slot names, at most `bytes` (then the caller writes "done").
    fn mail_copy(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        mail: (u64, u64),
        src: u64,
        bytes: usize,
    ) -> Result<()> {
        let _ = (lane, arrive, mail, src, bytes);
        Err(crate::error::Error::internal(
            "cuda-ipc: this device cannot copy mailed sends",
        ))
    }
    /// A captured group that is one small all-reduce, as one kernel that does the group's two
    /// handshakes itself ([`super::captured`]); `false`: this device has no such kernel, and
    /// the caller queues the handshakes and the reduction as parts.
    fn fused_all_reduce(&mut self, lane: Lane, f: &FusedAllReduce) -> Result<bool> {
        let _ = (lane, f);
        Ok(false)
    }
    /// [`Device::fused_all_reduce`] for a captured group that only copies.
    fn fused_copies(&mut self, lane: Lane, f: &FusedCopies) -> Result<bool> {
        let _ = (lane, f);
        Ok(false)
    }
    /// A captured group's copies (dst, src, bytes) on `lane` as one kernel, in any order among
    /// themselves, with no handshake (the caller queues those); `false`: this device does not
    /// take them so (none loaded, too many, too large), and the caller queues the copies.
    fn copies_kernel(&mut self, lane: Lane, copies: &[(u64, u64, usize)]) -> Result<bool> {
        let _ = (lane, copies);
        Ok(false)
    }
    /// Writes `value` to the word at `addr` after earlier work on `lane`, whose writes are
    /// visible first.
    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()>;
    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()>;
    /// `copies` on `lane` as one batch: after earlier work on the lane, before later work,
    /// in any order among themselves and on as many copy engines as the device likes. No
    /// copy may read or write what another writes.
    fn copy_batch(&mut self, lane: Lane, copies: &[BatchCopy]) -> Result<()> {
        copy_one_by_one(self, lane, copies)
    }
    /// Whether [`Device::copy_batch`] on `lane` is a real batch worth taking for copies of
    /// which `local_bytes` stay within this GPU: the driver takes them in one call, but a
    /// large local copy ran slower in a batch than alone (where the driver copies within a
    /// GPU with a kernel) and no longer overlapped the transfers as on a lane of its own.
    fn batches_copies(&self, lane: Lane, local_bytes: usize) -> bool {
        let _ = (lane, local_bytes);
        false
    }
    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()>;
    /// Later work on each of `lanes` waits for what [`Lane::User`] has queued so far.
    fn fork(&mut self, lanes: &[Lane]) -> Result<()>;
    /// Later work on [`Lane::User`] waits for what each of `lanes` has queued so far.
    fn join(&mut self, lanes: &[Lane]) -> Result<()>;
    /// Queues `ops` in order on `lane`; a device may do it with one call
    /// ([`Batched`] gathers them).
    fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
        for op in ops {
            match *op {
                FlagOp::Wait(addr, value) => self.wait(lane, addr, value)?,
                FlagOp::Write(addr, value) => self.write(lane, addr, value)?,
            }
        }
        Ok(())
    }
    /// The copies queued from here on move a direct transfer's data to or from `peer` (`None`:
    /// they do not), so the monitor may time them ([`crate::copy_monitor`]).
    fn annotate(&mut self, _peer: Option<usize>) {}

    /// Whether [`Device::handshake_kernel`] is there: a captured group's handshakes as a kernel
    /// that spins on the words, instead of flag waits and writes.
    fn handshake_is_kernel(&self) -> bool {
        false
    }
    /// One handshake of a captured group on `lane`: per partner, set this rank's word there
    /// (`words[j].0`) to 1, then per partner wait until its word here (`words[j].1`) is 1 and
    /// reset it -- the waits and writes [`crate::captured`] queues otherwise, in that order.
    fn handshake_kernel(&mut self, lane: Lane, words: &[(u64, u64)]) -> Result<()> {
        let _ = (lane, words);
        Err(crate::error::Error::internal(
            "cuda-ipc: this device has no handshake kernel",
        ))
    }

    /// Whether [`Device::wait_long`] of this kind is something other than a flag wait (a
    /// kernel), which [`Batched`] must not hold back.
    fn long_wait_is_kernel(&self, of: LongWait) -> bool {
        let _ = of;
        false
    }
    /// Whether [`Device::wait_copy_signal`] of `of` is something other than a wait, a copy
    /// and a write.
    fn copy_signal_is_kernel(&self, of: CopyOf) -> bool {
        let _ = of;
        false
    }
}

/// A flag wait ([`Device::wait`]) or write ([`Device::write`]): (address, value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagOp {
    Wait(u64, u32),
    Write(u64, u32),
}

/// Most flag operations [`Batched`] hands over at once (`cuStreamBatchMemOp` takes fewer than
/// 256; a group of many sends queues one "here" flag per send).
pub(crate) const MAX_FLAG_BATCH: usize = 128;

/// A [`Device`] that holds back consecutive flag waits and writes on one lane and hands them
/// over with one [`Device::flag_ops`]: a zero-SM 8-byte operation is host-bound, and on the
/// GPU machine a write and a wait cost 1.13 us of host time as one `cuStreamBatchMemOp`
/// against 2.0 as two calls (`tests/gpu/host_costs.cu`). Anything else, on any lane, first
/// hands over what is held, so everything reaches the inner device in the order it was
/// queued (which the single hardware queue of `CUDA_DEVICE_MAX_CONNECTIONS=1` needs).
/// [`Batched::flush`] before a host wait on a peer (a held "here" flag would hold the peer
/// up) and when done; dropping it flushes too.
pub(crate) struct Batched<'d> {
    inner: &'d mut dyn Device,
    /// The held operations (one buffer for the wrapper's life) and their lane.
    held: Vec<FlagOp>,
    lane: Lane,
}

impl<'d> Batched<'d> {
    pub fn new(inner: &'d mut dyn Device) -> Batched<'d> {
        Batched {
            inner,
            held: Vec::new(),
            lane: Lane::User,
        }
    }

    /// Hands the held flag operations to the inner device.
    pub fn flush(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let r = self.inner.flag_ops(self.lane, &self.held);
        self.held.clear();
        r
    }

    fn hold(&mut self, lane: Lane, op: FlagOp) -> Result<()> {
        if !self.held.is_empty() && (self.lane != lane || self.held.len() >= MAX_FLAG_BATCH) {
            self.flush()?;
        }
        self.lane = lane;
        self.held.push(op);
        Ok(())
    }
}

impl Drop for Batched<'_> {
    fn drop(&mut self) {
        // An error path may leave flag operations held: they are queued all the same, as
        // without batching (a peer may be waiting on a "here" or "done" among them).
        if let Err(e) = self.flush() {
            tracing::warn!("cuda-ipc: queueing held-back flag operations failed: {e}");
        }
    }
}

impl Device for Batched<'_> {
    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        self.hold(lane, FlagOp::Wait(addr, value))
    }
    fn wait_long(&mut self, lane: Lane, addr: u64, value: u32, of: LongWait) -> Result<()> {
        if self.inner.long_wait_is_kernel(of) {
            self.flush()?;
            return self.inner.wait_long(lane, addr, value, of);
        }
        self.wait(lane, addr, value)
    }
    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        copy: (u64, u64, usize),
        done: (u64, u32),
        of: CopyOf,
    ) -> Result<()> {
        if self.inner.copy_signal_is_kernel(of) {
            self.flush()?;
            return self.inner.wait_copy_signal(lane, arrive, copy, done, of);
        }
        wait_copy_signal_in_three(self, lane, arrive, copy, done)
    }
    // wait_pull_signal: the trait's, through the methods here (the kernel form goes through
    // wait_copy_signal above, which hands over what is held first).
    fn pull(&mut self, lane: Lane, dst: u64, src: (u64, u64), bytes: usize) -> Result<()> {
        self.flush()?;
        self.inner.pull(lane, dst, src, bytes)
    }
    fn mail_copy(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        mail: (u64, u64),
        src: u64,
        bytes: usize,
    ) -> Result<()> {
        self.flush()?;
        self.inner.mail_copy(lane, arrive, mail, src, bytes)
    }
    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        self.hold(lane, FlagOp::Write(addr, value))
    }
    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.flush()?;
        self.inner.copy(lane, dst, src, bytes)
    }
    fn copy_batch(&mut self, lane: Lane, copies: &[BatchCopy]) -> Result<()> {
        self.flush()?;
        self.inner.copy_batch(lane, copies)
    }
    fn copies_kernel(&mut self, lane: Lane, copies: &[(u64, u64, usize)]) -> Result<bool> {
        self.flush()?;
        self.inner.copies_kernel(lane, copies)
    }
    fn batches_copies(&self, lane: Lane, local_bytes: usize) -> bool {
        self.inner.batches_copies(lane, local_bytes)
    }
    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()> {
        self.flush()?;
        self.inner.kernel(lane, k)
    }
    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.flush()?;
        self.inner.fork(lanes)
    }
    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        self.flush()?;
        self.inner.join(lanes)
    }
    fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
        for op in ops {
            self.hold(lane, *op)?;
        }
        Ok(())
    }
    fn annotate(&mut self, peer: Option<usize>) {
        self.inner.annotate(peer);
    }
    fn handshake_is_kernel(&self) -> bool {
        self.inner.handshake_is_kernel()
    }
    fn handshake_kernel(&mut self, lane: Lane, words: &[(u64, u64)]) -> Result<()> {
        self.flush()?;
        self.inner.handshake_kernel(lane, words)
    }
    fn long_wait_is_kernel(&self, of: LongWait) -> bool {
        self.inner.long_wait_is_kernel(of)
    }
    fn copy_signal_is_kernel(&self, of: CopyOf) -> bool {
        self.inner.copy_signal_is_kernel(of)
    }
}

#[cfg(test)]
mod tests;
