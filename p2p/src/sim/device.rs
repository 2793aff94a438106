//! A simulated GPU: per lane, the operations a rank queued; memory of disjoint regions; and
//! the run of every rank's queues, lane by lane in a random order or merged into one queue.

use std::collections::{HashMap, HashSet};

use ccl_cuda::host::reduce as host;

use crate::device::{BatchCopy, Device, Kernel};
use crate::error::Result;
use crate::layout::Lane;

#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    Wait(u64, u32),
    Write(u64, u32),
    Copy(u64, u64, usize),
    Kernel(Kernel),
    Record(usize),
    WaitEvent(usize),
    /// A mailed send's copy: (slot index, tag, source, bytes at most).
    Mail(u64, u64, u64, usize),
}

/// One rank's queues.
pub(super) struct SimDevice {
    pub(super) lanes: HashMap<Lane, Vec<Op>>,
    /// Every operation in the order it was queued, for the merged mode.
    pub(super) order: Vec<(Lane, usize)>,
    pub(super) events: usize,
    /// Where this device's fused all-reduce kernel keeps an in-place result (its registers);
    /// `None`: it has no such kernel.
    pub(super) fused_registers: Option<u64>,
    /// Captured groups' handshakes in the handshake kernel's order
    /// ([`Device::handshake_kernel`]) rather than as flag waits and writes.
    pub(super) handshake_kernel: bool,
    /// [`Device::copy_batch`] is a batch (its copies queued last first: a batch has no
    /// order) for local copies of at most this many bytes, and how many
    /// batches were queued.
    pub(super) batch_copies: Option<usize>,
    pub(super) batches: usize,
    /// Where in `order` the copies queued inside those batches stand (each an operation
    /// here, not a driver call).
    pub(super) batched: HashSet<usize>,
    /// [`Device::copies_kernel`] takes a captured group's copies (queued last first: the
    /// kernel's copies run in no order), and how many such kernels were queued.
    pub(super) copy_kernel: bool,
    pub(super) copy_kernels: usize,
    /// One-kernel groups of copies spread over blocks ([`crate::device::FusedCopies::spread`]).
    pub(super) spread_kernels: usize,
    /// (length of the caller's stream once case k was queued, k): once the stream has run
    /// that far, case k must be complete on this rank ([`run_mailed`]'s `done`).
    pub(super) done_at: Vec<(usize, usize)>,
}

impl SimDevice {
    pub(super) fn new() -> SimDevice {
        SimDevice {
            lanes: HashMap::new(),
            order: Vec::new(),
            events: 0,
            fused_registers: None,
            handshake_kernel: false,
            batch_copies: None,
            batches: 0,
            batched: HashSet::new(),
            copy_kernel: false,
            copy_kernels: 0,
            spread_kernels: 0,
            done_at: Vec::new(),
        }
    }

    /// The captured-group kernels' handshake as operations: set every remote word, then per
    /// partner wait for the word here and reset it.
    pub(super) fn handshake(&mut self, lane: Lane, words: &[(u64, u64)]) {
        for &(remote, _) in words {
            self.push(lane, Op::Write(remote, 1));
        }
        for &(_, local) in words {
            self.push(lane, Op::Wait(local, 1));
            self.push(lane, Op::Write(local, 0));
        }
    }

    /// The driver calls this rank's queues would take on CUDA: one per operation, one per
    /// batch of copies, and one per run of flag waits and writes on one lane with nothing
    /// between (one `cuStreamBatchMemOp`, as [`crate::device::Batched`] hands them over).
    pub(super) fn driver_calls(&self) -> usize {
        let mut calls = self.batches;
        let mut run: Option<Lane> = None;
        for (i, &(lane, k)) in self.order.iter().enumerate() {
            if self.batched.contains(&i) {
                run = None;
                continue;
            }
            let flag = matches!(self.lanes[&lane][k], Op::Wait(..) | Op::Write(..));
            if !(flag && run == Some(lane)) {
                calls += 1;
            }
            run = flag.then_some(lane);
        }
        calls
    }

    /// Marks cases `ks` complete at the caller's stream's current length ([`Self::done_at`]),
    /// unless nothing was queued on the stream since the last mark (a check there would run
    /// before any of these cases' work).
    pub(super) fn mark_done(&mut self, ks: impl IntoIterator<Item = usize>) {
        let at = self.lanes.get(&Lane::User).map_or(0, Vec::len);
        if at > self.done_at.last().map_or(0, |&(a, _)| a) {
            self.done_at.extend(ks.into_iter().map(|k| (at, k)));
        }
    }

    pub(super) fn push(&mut self, lane: Lane, op: Op) {
        let q = self.lanes.entry(lane).or_default();
        q.push(op);
        self.order.push((lane, q.len() - 1));
    }
}

impl Device for SimDevice {
    fn batches_copies(&self, _lane: Lane, local_bytes: usize) -> bool {
        self.batch_copies.is_some_and(|max| local_bytes <= max)
    }
    fn copy_batch(&mut self, lane: Lane, copies: &[BatchCopy]) -> Result<()> {
        self.batches += 1;
        let from = self.order.len();
        self.batched.extend(from..from + copies.len());
        for c in copies.iter().rev() {
            self.copy(lane, c.dst, c.src, c.bytes)?;
        }
        Ok(())
    }
    fn handshake_is_kernel(&self) -> bool {
        self.handshake_kernel
    }
    fn copies_kernel(&mut self, lane: Lane, copies: &[(u64, u64, usize)]) -> Result<bool> {
        if !self.copy_kernel {
            return Ok(false);
        }
        self.copy_kernels += 1;
        for &(dst, src, bytes) in copies.iter().rev() {
            self.push(lane, Op::Copy(dst, src, bytes));
        }
        Ok(true)
    }
    /// The kernel's steps: set every remote word, then per partner wait and reset.
    fn handshake_kernel(&mut self, lane: Lane, words: &[(u64, u64)]) -> Result<()> {
        self.handshake(lane, words);
        Ok(())
    }
    /// The kernel's steps as the simulation's operations, in the kernel's order: set every
    /// remote word, then per partner wait and reset; reduce (in place into the "registers");
    /// the second handshake; the held result stored.
    fn fused_all_reduce(&mut self, lane: Lane, f: &crate::device::FusedAllReduce) -> Result<bool> {
        let Some(registers) = self.fused_registers else {
            return Ok(false);
        };
        self.handshake(lane, &f.inputs);
        // Each element is folded from every source before it is stored (the output may be a
        // source): the sums gather in the "registers", stored before the second handshake, or
        // after it in place.
        let mut acc = f.srcs[0];
        for &src in f.srcs[1..].iter().filter(|_| f.n > 0) {
            let k = Kernel::Reduce {
                dtype: f.dtype,
                op: f.op,
                dst: registers,
                a: acc,
                b: src,
                n: f.n,
            };
            self.push(lane, Op::Kernel(k));
            acc = registers;
        }
        let store = Op::Copy(f.dst, registers, f.n * f.dtype.size());
        if !f.inplace && f.n > 0 {
            self.push(lane, store);
        }
        self.handshake(lane, &f.done);
        if f.inplace && f.n > 0 {
            self.push(lane, store);
        }
        Ok(true)
    }

    /// As the fused all-reduce: the handshake, the copies in order, the handshake.
    fn fused_copies(&mut self, lane: Lane, f: &crate::device::FusedCopies) -> Result<bool> {
        if self.fused_registers.is_none() {
            return Ok(false);
        }
        // Spread or not, the kernel waits and writes the same words in the same order; its
        // blocks' own two words never leave it.
        self.spread_kernels += usize::from(f.spread.is_some());
        self.handshake(lane, &f.inputs);
        for &(dst, src, bytes) in &f.copies {
            self.push(lane, Op::Copy(dst, src, bytes));
        }
        if !f.halfway.is_empty() {
            self.handshake(lane, &f.halfway);
        }
        for &(dst, src, bytes) in &f.second {
            self.push(lane, Op::Copy(dst, src, bytes));
        }
        self.handshake(lane, &f.done);
        Ok(true)
    }

    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        self.push(lane, Op::Wait(addr, value));
        Ok(())
    }
    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        self.push(lane, Op::Write(addr, value));
        Ok(())
    }
    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.push(lane, Op::Copy(dst, src, bytes));
        Ok(())
    }
    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()> {
        self.push(lane, Op::Kernel(k));
        Ok(())
    }
    /// The receiver's "here", then the copy once the simulated mail thread filled the slot
    /// (`slot` is an index into [`super::mail::SimMail`]'s words).
    fn mail_copy(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        (slot, tag): (u64, u64),
        src: u64,
        bytes: usize,
    ) -> Result<()> {
        self.push(lane, Op::Wait(arrive.0, arrive.1));
        self.push(lane, Op::Mail(slot, tag, src, bytes));
        Ok(())
    }
    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.events += 1;
        let id = self.events;
        self.push(Lane::User, Op::Record(id));
        for &l in lanes {
            self.push(l, Op::WaitEvent(id));
        }
        Ok(())
    }
    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        for &l in lanes {
            self.events += 1;
            let id = self.events;
            self.push(l, Op::Record(id));
            self.push(Lane::User, Op::WaitEvent(id));
        }
        Ok(())
    }
}

/// Byte-addressed memory made of disjoint regions, and the bytes a run moved between GPUs.
#[derive(Default)]
pub(super) struct Mem {
    pub(super) regions: Vec<(u64, Vec<u8>)>,
    pub(super) traffic: Traffic,
}

/// Bytes that crossed from one GPU's memory to another's in a run (NVLink's load, where the
/// speed of a large collective on several GPUs is decided): per (from, to) pair, and per GPU
/// whose copy engines or kernels moved them. Rank `r` owns the addresses from `(r + 1) << 32`
/// to the next rank's (its base in the cases).
#[derive(Default, Debug, Clone, PartialEq)]
pub(super) struct Traffic {
    pub(super) link: HashMap<(usize, usize), u64>,
    pub(super) moved_by: HashMap<usize, u64>,
}

impl Traffic {
    /// The GPU that owns `addr` (every simulated address lies above rank 0's base).
    fn owner(addr: u64) -> usize {
        ((addr >> 32) as usize).saturating_sub(1)
    }

    /// `bytes` from `src` to `dst`, moved by GPU `by`.
    fn add(&mut self, by: usize, src: u64, dst: u64, bytes: usize) {
        self.add_between(by, Self::owner(src), Self::owner(dst), bytes);
    }

    /// `bytes` from GPU `from`'s memory to GPU `to`'s, moved by GPU `by`.
    fn add_between(&mut self, by: usize, from: usize, to: usize, bytes: usize) {
        if from != to && bytes > 0 {
            *self.link.entry((from, to)).or_default() += bytes as u64;
            *self.moved_by.entry(by).or_default() += bytes as u64;
        }
    }

    /// What a kernel on GPU `by` reads and writes: reads of other GPUs' memory cross to `by`,
    /// writes to other GPUs' memory cross from it.
    fn kernel(&mut self, by: usize, k: &Kernel) {
        let (reads, dst, bytes): (Vec<u64>, u64, usize) = match *k {
            Kernel::Reduce {
                dtype,
                dst,
                a,
                b,
                n,
                ..
            } => (vec![a, b], dst, n * dtype.size()),
            Kernel::ReduceN {
                dtype,
                dst,
                ref srcs,
                k,
                n,
                ref also,
                nalso,
                ..
            } => {
                for &d in &also[..nalso] {
                    self.add_between(by, by, Self::owner(d), n * dtype.size());
                }
                (srcs[..k].to_vec(), dst, n * dtype.size())
            }
            Kernel::ReduceNMail { .. } => {
                unreachable!("a mailed kernel runs as the kernel its slot names")
            }
            Kernel::PreMul {
                dtype, dst, src, n, ..
            } => (vec![src], dst, n * dtype.size()),
            Kernel::PreMulAdd {
                dtype,
                dst,
                src,
                acc,
                n,
                ..
            } => (vec![src, acc], dst, n * dtype.size()),
            Kernel::DivInt { .. } => return,
        };
        for src in reads {
            self.add_between(by, Self::owner(src), by, bytes);
        }
        self.add_between(by, by, Self::owner(dst), bytes);
    }

    /// Bytes leaving GPU `r` for the others.
    pub(super) fn egress(&self, r: usize) -> u64 {
        self.links_where(|from, _| from == r)
    }

    /// Bytes reaching GPU `r` from the others.
    pub(super) fn ingress(&self, r: usize) -> u64 {
        self.links_where(|_, to| to == r)
    }

    /// Bytes over the (from, to) links `pick` takes.
    fn links_where(&self, pick: impl Fn(usize, usize) -> bool) -> u64 {
        self.link
            .iter()
            .filter(|((from, to), _)| pick(*from, *to))
            .map(|(_, b)| b)
            .sum()
    }
}

impl Mem {
    pub(super) fn alloc(&mut self, base: u64, len: usize) {
        self.regions.push((base, vec![0; len]));
    }

    pub(super) fn range(&mut self, addr: u64, len: usize) -> &mut [u8] {
        // An empty copy touches nothing, wherever it points (a transfer wholly through the
        // host path leaves its NVLink part empty, its peer address unresolved).
        if len == 0 {
            return &mut [];
        }
        for (base, v) in self.regions.iter_mut() {
            if addr >= *base && addr + len as u64 <= *base + v.len() as u64 {
                let o = (addr - *base) as usize;
                return &mut v[o..o + len];
            }
        }
        panic!("simulated access outside memory: {addr:#x}+{len}");
    }

    pub(super) fn read(&mut self, addr: u64, len: usize) -> Vec<u8> {
        self.range(addr, len).to_vec()
    }

    pub(super) fn word(&mut self, addr: u64) -> u32 {
        u32::from_le_bytes(self.read(addr, 4).try_into().unwrap())
    }

    pub(super) fn kernel(&mut self, k: Kernel) {
        match k {
            Kernel::Reduce {
                dtype,
                op,
                dst,
                a,
                b,
                n,
            } => {
                let (x, y) = (
                    self.read(a, n * dtype.size()),
                    self.read(b, n * dtype.size()),
                );
                let out = self.range(dst, n * dtype.size());
                // SAFETY: three buffers of n elements each.
                unsafe { host::reduce(dtype, op, out.as_mut_ptr(), x.as_ptr(), y.as_ptr(), n) };
            }
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
                assert!((2..=srcs.len()).contains(&k), "a reduction of {k} sources");
                let bytes = n * dtype.size();
                let mut acc = self.read(srcs[0], bytes);
                for &s in &srcs[1..k] {
                    let y = self.read(s, bytes);
                    let prev = acc.clone();
                    // SAFETY: three buffers of n elements each.
                    unsafe {
                        host::reduce(dtype, op, acc.as_mut_ptr(), prev.as_ptr(), y.as_ptr(), n)
                    };
                }
                self.range(dst, bytes).copy_from_slice(&acc);
                for &d in &also[..nalso] {
                    self.range(d, bytes).copy_from_slice(&acc);
                }
            }
            Kernel::ReduceNMail { .. } => {
                unreachable!("a mailed kernel runs as the kernel its slot names")
            }
            Kernel::PreMul {
                dtype,
                dst,
                src,
                n,
                scalar,
            } => {
                let x = self.read(src, n * dtype.size());
                let out = self.range(dst, n * dtype.size());
                // SAFETY: as above.
                unsafe { host::premul(dtype, out.as_mut_ptr(), x.as_ptr(), n, scalar.as_ptr()) };
            }
            Kernel::PreMulAdd {
                dtype,
                dst,
                src,
                acc,
                n,
                scalar,
            } => {
                let (x, y) = (
                    self.read(src, n * dtype.size()),
                    self.read(acc, n * dtype.size()),
                );
                let out = self.range(dst, n * dtype.size());
                // SAFETY: as above.
                unsafe {
                    host::premul_add(
                        dtype,
                        out.as_mut_ptr(),
                        x.as_ptr(),
                        y.as_ptr(),
                        n,
                        scalar.as_ptr(),
                    )
                };
            }
            Kernel::DivInt {
                dtype,
                dst,
                n,
                divisor,
            } => {
                let out = self.range(dst, n * dtype.size());
                // SAFETY: n elements.
                unsafe { host::div_int(dtype, out.as_mut_ptr(), n, divisor) };
            }
        }
    }
}

/// The mail thread of mailed sends, as a run drives it ([`super::mail::SimMail`]).
pub(super) trait MailThread {
    /// Whether the slot holds the tag (the copy may run).
    fn filled(&self, slot: u64, tag: u64) -> bool;
    /// Whether some slot is still to be filled.
    fn pending(&self) -> bool;
    /// One look at a pending send (picked by `pick`), against the ranks' inboxes.
    fn step_one(
        &self,
        pick: u64,
        boards: &[Vec<std::sync::atomic::AtomicU64>],
    ) -> std::result::Result<(), String>;
    /// The copy kernel: what the slot names, at most `max` bytes from `src`.
    fn copy(&self, mem: &mut Mem, slot: u64, tag: u64, src: u64, max: usize);
    /// A mailed reduction kernel ([`Kernel::ReduceNMail`]) as the kernel its filled slot names
    /// (None: it names nothing); the slot is marked seen.
    fn resolve(&self, k: &Kernel) -> Option<Kernel>;
}

/// Runs every device's queues to the end; `Err` names the stuck heads on a deadlock.
pub(super) fn run(
    devs: &[SimDevice],
    mem: &mut Mem,
    merged: bool,
    seed: u64,
) -> std::result::Result<(), String> {
    run_mailed(devs, mem, merged, seed, None, None)
}

/// Checks case `k` of rank `r` (its outputs final) the moment that rank's stream has run past
/// the case's last operation ([`SimDevice::done_at`]).
pub(super) type DoneCheck<'a> =
    &'a dyn Fn(usize, usize, &mut Mem) -> std::result::Result<(), String>;

/// [`run`] with the mail thread of mailed sends (its slots and the ranks' inboxes): it fills a
/// slot at random points, and whenever nothing else can go on; and with `done`, each case
/// checked on each rank as soon as that rank's stream is past it, as a caller would use it.
pub(super) fn run_mailed(
    devs: &[SimDevice],
    mem: &mut Mem,
    merged: bool,
    seed: u64,
    mail: Option<(&dyn MailThread, &[Vec<std::sync::atomic::AtomicU64>])>,
    done: Option<DoneCheck<'_>>,
) -> std::result::Result<(), String> {
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Cursor per (device, lane), or per device in merged mode (into `order`).
    let mut lane_pos: Vec<HashMap<Lane, usize>> = devs.iter().map(|_| HashMap::new()).collect();
    let mut merged_pos = vec![0usize; devs.len()];
    let mut recorded: HashSet<(usize, usize)> = HashSet::new();
    loop {
        let mut ready: Vec<(usize, Lane)> = Vec::new();
        let mut stuck: Vec<String> = Vec::new();
        for (d, dev) in devs.iter().enumerate() {
            let heads: Vec<(Lane, usize)> = if merged {
                dev.order.get(merged_pos[d]).copied().into_iter().collect()
            } else {
                dev.lanes
                    .iter()
                    .filter_map(|(l, q)| {
                        let p = lane_pos[d].get(l).copied().unwrap_or(0);
                        (p < q.len()).then_some((*l, p))
                    })
                    .collect()
            };
            for (lane, i) in heads {
                let op = dev.lanes[&lane][i];
                let ok = match op {
                    Op::Wait(a, v) => (mem.word(a).wrapping_sub(v) as i32) >= 0,
                    Op::WaitEvent(id) => recorded.contains(&(d, id)),
                    Op::Mail(slot, tag, ..) | Op::Kernel(Kernel::ReduceNMail { slot, tag, .. }) => {
                        mail.is_some_and(|(m, _)| m.filled(slot, tag))
                    }
                    _ => true,
                };
                if ok {
                    ready.push((d, lane));
                } else {
                    stuck.push(format!("rank {d} {lane:?}: {op:?}"));
                }
            }
        }
        if let Some((m, boards)) = mail {
            if m.pending() && (ready.is_empty() || next() % 3 == 0) {
                m.step_one(next(), boards)?;
                continue;
            }
        }
        if ready.is_empty() {
            return if stuck.is_empty() {
                Ok(())
            } else {
                Err(format!("deadlock: {}", stuck.join("; ")))
            };
        }
        let (d, lane) = ready[(next() % ready.len() as u64) as usize];
        let i = if merged {
            merged_pos[d] += 1;
            devs[d].order[merged_pos[d] - 1].1
        } else {
            let p = lane_pos[d].entry(lane).or_insert(0);
            *p += 1;
            *p - 1
        };
        match devs[d].lanes[&lane][i] {
            Op::Write(a, v) => mem.range(a, 4).copy_from_slice(&v.to_le_bytes()),
            Op::Copy(dst, src, n) => {
                let b = mem.read(src, n);
                mem.range(dst, n).copy_from_slice(&b);
                mem.traffic.add(d, src, dst, n);
            }
            Op::Kernel(k) => {
                let k = match k {
                    Kernel::ReduceNMail { .. } => mail.and_then(|(m, _)| m.resolve(&k)),
                    k => Some(k),
                };
                if let Some(k) = k {
                    mem.traffic.kernel(d, &k);
                    mem.kernel(k);
                }
            }
            Op::Record(id) => {
                recorded.insert((d, id));
            }
            Op::Mail(slot, tag, src, bytes) => {
                if let Some((m, _)) = mail {
                    m.copy(mem, slot, tag, src, bytes);
                }
            }
            Op::Wait(..) | Op::WaitEvent(_) => {}
        }
        if let (Some(check), Lane::User) = (done, lane) {
            for &(_, k) in devs[d].done_at.iter().filter(|&&(at, _)| at == i + 1) {
                check(d, k, mem)?;
            }
        }
    }
}
