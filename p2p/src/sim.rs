//! A simulated GPU for the cuda-ipc protocol (tests only, labelled simulation): every rank's
//! queued operations run against a shared memory of flags, receive slots and user buffers,
//! in random orders of the lanes (each lane in order), or with all lanes of a device merged
//! into one queue in the order they were queued (what `CUDA_DEVICE_MAX_CONNECTIONS=1` does to
//! streams). A run must finish (no wait left unsatisfiable) and every result must be exact.

use std::collections::{HashMap, HashSet};

use ccl_collectives::Collective;
use ccl_cuda::host::reduce as host;
use ccl_cuda::{DataType, ReduceKind};

use std::sync::atomic::AtomicU64;

use super::direct::{self, plan, posting};
use super::direct_reduce;
use super::relay::Relay;
use crate::device::{Batched, Device, Kernel};
use crate::error::Result;
use crate::host_path::HostPath;
use crate::layout::{Lane, Layout};
use crate::lower::lower;
use crate::protocol::{Chain, Counters};
use crate::rendezvous::{self, Export, Exported, Post, Reach, Words};
use ccl_collectives::task::{Reduction, Scalar, Task, TaskKind};

#[derive(Debug, Clone, Copy)]
enum Op {
    Wait(u64, u32),
    Write(u64, u32),
    Copy(u64, u64, usize),
    Kernel(Kernel),
    Record(usize),
    WaitEvent(usize),
}

/// One rank's queues.
struct SimDevice {
    lanes: HashMap<Lane, Vec<Op>>,
    /// Every operation in the order it was queued, for the merged mode.
    order: Vec<(Lane, usize)>,
    events: usize,
    /// Where this device's fused all-reduce kernel keeps an in-place result (its registers);
    /// `None`: it has no such kernel.
    fused_registers: Option<u64>,
}

impl SimDevice {
    fn new() -> SimDevice {
        SimDevice {
            lanes: HashMap::new(),
            order: Vec::new(),
            events: 0,
            fused_registers: None,
        }
    }

    /// The captured-group kernels' handshake as operations: set every remote word, then per
    /// partner wait for the word here and reset it.
    fn handshake(&mut self, lane: Lane, words: &[(u64, u64)]) {
        for &(remote, _) in words {
            self.push(lane, Op::Write(remote, 1));
        }
        for &(_, local) in words {
            self.push(lane, Op::Wait(local, 1));
            self.push(lane, Op::Write(local, 0));
        }
    }

    fn push(&mut self, lane: Lane, op: Op) {
        let q = self.lanes.entry(lane).or_default();
        q.push(op);
        self.order.push((lane, q.len() - 1));
    }
}

impl Device for SimDevice {
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

/// Byte-addressed memory made of disjoint regions.
#[derive(Default)]
struct Mem {
    regions: Vec<(u64, Vec<u8>)>,
}

impl Mem {
    fn alloc(&mut self, base: u64, len: usize) {
        self.regions.push((base, vec![0; len]));
    }

    fn range(&mut self, addr: u64, len: usize) -> &mut [u8] {
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

    fn read(&mut self, addr: u64, len: usize) -> Vec<u8> {
        self.range(addr, len).to_vec()
    }

    fn word(&mut self, addr: u64) -> u32 {
        u32::from_le_bytes(self.read(addr, 4).try_into().unwrap())
    }

    fn kernel(&mut self, k: Kernel) {
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
            } => {
                assert!((3..=srcs.len()).contains(&k), "a reduction of {k} sources");
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

/// Runs every device's queues to the end; `Err` names the stuck heads on a deadlock.
fn run(
    devs: &[SimDevice],
    mem: &mut Mem,
    merged: bool,
    seed: u64,
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
                    _ => true,
                };
                if ok {
                    ready.push((d, lane));
                } else {
                    stuck.push(format!("rank {d} {lane:?}: {op:?}"));
                }
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
            }
            Op::Kernel(k) => mem.kernel(k),
            Op::Record(id) => {
                recorded.insert((d, id));
            }
            Op::Wait(..) | Op::WaitEvent(_) => {}
        }
    }
}

/// One collective (or p2p ring) with every rank's buffers, for [`simulate`].
#[derive(Clone, Copy, Debug)]
struct Case {
    kind: Kind,
    count: usize,
    dtype: DataType,
    red: Reduction,
    in_place: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Coll(Collective),
    /// Each rank sends to rank + 1 and receives from rank - 1, in one group.
    Ring,
}

const BUF: u64 = 0x0100_0000;

fn base(rank: usize) -> u64 {
    0x1_0000_0000 * (rank as u64 + 1)
}

/// Send and receive addresses of `case` number `k` on `rank`, and the sizes in elements.
fn buffers(case: &Case, k: usize, rank: usize, n: usize) -> (u64, u64, usize, usize) {
    let sz = case.dtype.size() as u64;
    let c = case.count;
    let (se, re) = match case.kind {
        Kind::Ring => (c, c),
        Kind::Coll(coll) => {
            ccl_collectives::task::buffer_counts(TaskKind::Coll(coll), rank, n, c).unwrap()
        }
    };
    let send = base(rank) + 0x1000_0000 + k as u64 * BUF * 2;
    let mut recv = send + BUF;
    let mut s = send;
    if case.in_place {
        match case.kind {
            Kind::Coll(Collective::AllGather) => s = recv + rank as u64 * c as u64 * sz,
            Kind::Coll(Collective::ReduceScatter) => recv = s + rank as u64 * c as u64 * sz,
            _ => recv = s,
        }
    }
    (s, recv, se, re)
}

fn tasks(case: &Case, k: usize, rank: usize, n: usize) -> Vec<Task> {
    let (send, recv, _, _) = buffers(case, k, rank, n);
    let t = |kind| Task {
        kind,
        send: send as usize,
        recv: recv as usize,
        count: case.count,
        dtype: case.dtype,
        red: case.red,
        stream: 0,
        fold: false,
    };
    match case.kind {
        Kind::Coll(c) => vec![t(TaskKind::Coll(c))],
        Kind::Ring => vec![
            t(TaskKind::Send {
                peer: (rank + 1) % n,
            }),
            t(TaskKind::Recv {
                peer: (rank + n - 1) % n,
            }),
        ],
    }
}

/// Input element `i` of `rank`: small integers, so sums in any order are exact in f32 too.
fn input(rank: usize, i: usize) -> i64 {
    ((rank * 7 + i * 3) % 23) as i64 - 5
}

fn encode(dt: DataType, v: f64) -> Vec<u8> {
    match dt {
        DataType::Int32 => (v as i32).to_le_bytes().to_vec(),
        DataType::Float32 => (v as f32).to_le_bytes().to_vec(),
        _ => unreachable!("the simulation uses int32 and float32"),
    }
}

/// What `rank`'s receive buffer must hold afterwards (`None`: not written).
fn expected(case: &Case, rank: usize, n: usize) -> Option<Vec<f64>> {
    let c = case.count;
    let red = |vals: Vec<i64>| -> f64 {
        match case.red {
            Reduction::Plain(ReduceKind::Max) => *vals.iter().max().unwrap() as f64,
            Reduction::Avg if case.dtype == DataType::Int32 => {
                (vals.iter().sum::<i64>() / n as i64) as f64
            }
            Reduction::Avg => vals.iter().sum::<i64>() as f64 / n as f64,
            // The simulation's PreMulSum scalar is 3 (int32).
            Reduction::PreMulSum(_) => vals.iter().map(|v| v * 3).sum::<i64>() as f64,
            _ => vals.iter().sum::<i64>() as f64,
        }
    };
    let all = |i: usize| (0..n).map(|q| input(q, i)).collect::<Vec<_>>();
    Some(match case.kind {
        Kind::Ring => (0..c)
            .map(|i| input((rank + n - 1) % n, i) as f64)
            .collect(),
        Kind::Coll(Collective::AllReduce) => (0..c).map(|i| red(all(i))).collect(),
        Kind::Coll(Collective::ReduceScatter) => (0..c).map(|i| red(all(rank * c + i))).collect(),
        Kind::Coll(Collective::Reduce { root }) if root == rank => {
            (0..c).map(|i| red(all(i))).collect()
        }
        Kind::Coll(Collective::Broadcast { root }) => {
            (0..c).map(|i| input(root, i) as f64).collect()
        }
        Kind::Coll(Collective::AllGather) => {
            (0..n * c).map(|j| input(j / c, j % c) as f64).collect()
        }
        Kind::Coll(Collective::AlltoAll) => (0..n * c)
            .map(|j| input(j / c, rank * c + j % c) as f64)
            .collect(),
        Kind::Coll(Collective::Gather { root }) if root == rank => {
            (0..n * c).map(|j| input(j / c, j % c) as f64).collect()
        }
        Kind::Coll(Collective::Scatter { root }) => {
            (0..c).map(|i| input(root, rank * c + i) as f64).collect()
        }
        _ => return None,
    })
}

struct Setup {
    n: usize,
    chunk: usize,
    slots: u32,
    rx_lanes: usize,
    single_max: usize,
    /// Data-only operations go as direct transfers (the rendezvous in `DirectSim`).
    direct: bool,
    /// How direct groups cut their local copies over idle lanes.
    local_split: plan::LocalSplit,
    /// Broadcasts relayed in phases, as `submit` queues them (None: not relayed).
    relay: Option<Relay>,
    /// Two ranks: a reduction's first poster leaves it to the second instead of going staged.
    takeover: bool,
    /// Two ranks: the host path, as (min bytes, permille, slot bytes, slots): rank 0's
    /// shares; rank 1 posts twice as much one way and half in exchanges (the first poster's
    /// share holds for both sides).
    host: Option<(usize, u32, usize, u32)>,
    /// Host-only's mirror of each rank's receive area ([`Layout::mirror`]).
    mirror: bool,
}

/// Where a rank's mirror of its receive area sits in the simulated memory.
fn mirror_base(rank: usize) -> u64 {
    base(rank) + 0x0400_0000
}

/// Where a rank's host-path ring sits in the simulated memory (the peer's transfers to it).
fn ring_base(rank: usize) -> u64 {
    base(rank) + 0x0E00_0000
}

/// Where a rank's bounce buffer sits in the simulated memory, and its size.
fn bounce_base(rank: usize) -> u64 {
    base(rank) + 0x0C00_0000
}
const BOUNCE: usize = 1 << 20;

/// Rank `rank` of two posts a group that sends `count` floats to the other rank and
/// receives as many from it (a pipeline exchange).
fn post_exchange(
    boards: &[Vec<AtomicU64>],
    rank: usize,
    count: usize,
    c: &mut Counters,
) -> posting::Posting {
    let peer = 1 - rank;
    let mut send = ccl_collectives::task::float_sum(TaskKind::Send { peer }, 0, 0, count);
    send.send = base(rank) as usize;
    let mut recv = ccl_collectives::task::float_sum(TaskKind::Recv { peer }, 0, 0, count);
    recv.recv = base(rank) as usize + 1024 * 1024;
    let group = lower(&[send, recv], rank, 2, usize::MAX, 0).unwrap();
    let mut reach = SimReach {
        rank,
        unmappable: &[],
    };
    let boards = |r: usize| boards.get(r).map(|b| b as &dyn Words);
    posting::post_group(
        &mut reach,
        &group,
        rank,
        c,
        &boards,
        None,
        &|| false,
        None,
        &|| false,
    )
    .unwrap()
}

/// Settles `posting` of `rank` as the device path does, with the given waits.
fn settle(
    boards: &[Vec<AtomicU64>],
    posting: posting::Posting,
    rank: usize,
    wait: rendezvous::PushWait<'_>,
    wait_min_bytes: usize,
    exchange_until: Option<std::time::Instant>,
    remote_min: Option<usize>,
) -> plan::Plan {
    let mut reach = SimReach {
        rank,
        unmappable: &[],
    };
    let boards = |r: usize| boards.get(r).map(|b| b as &dyn Words);
    posting
        .settle(
            &mut reach,
            rank,
            &boards,
            posting::SettleHow {
                wait,
                single_max: 0,
                late: None,
                local_split: plan::LocalSplit::default(),
                wait_min_bytes,
                exchange_until,
                remote_min,
                host: None,
            },
            &|| false,
        )
        .unwrap()
        .0
}

/// The host side of direct transfers in the simulation: every rank's rendezvous inbox, and
/// address ranges a peer may not map (they go through the bounce buffer).
struct DirectSim {
    boards: Vec<Vec<AtomicU64>>,
    unmappable: Vec<(u64, u64)>,
    /// Reductions that ran directly (every rank posted in time, or one did it alone).
    sym_direct: std::cell::Cell<usize>,
    /// Of those, two-rank reductions one rank did alone (counted on the active rank).
    sym_alone: std::cell::Cell<usize>,
}

impl DirectSim {
    fn new(n: usize) -> DirectSim {
        DirectSim {
            boards: (0..n)
                .map(|_| {
                    (0..crate::layout::inbox_words(n))
                        .map(|_| AtomicU64::new(0))
                        .collect()
                })
                .collect(),
            unmappable: Vec::new(),
            sym_direct: std::cell::Cell::new(0),
            sym_alone: std::cell::Cell::new(0),
        }
    }
}

/// One rank's view of buffers: one address space for all, so a post's address is the peer's.
struct SimReach<'a> {
    rank: usize,
    unmappable: &'a [(u64, u64)],
}

impl Reach for SimReach<'_> {
    fn pid(&self) -> u64 {
        1
    }
    fn export(&mut self, ptr: u64) -> Result<Export> {
        let blocked = self.unmappable.iter().any(|&(a, b)| ptr >= a && ptr < b);
        Ok((!blocked).then_some(Exported {
            base: ptr,
            buffer_id: ptr,
            handle: [0; 64],
        }))
    }
    fn bounce(&mut self, bytes: usize) -> Result<(u64, Exported)> {
        assert!(
            bytes <= BOUNCE,
            "simulated bounce buffer too small for {bytes} bytes"
        );
        let b = bounce_base(self.rank);
        Ok((
            b,
            Exported {
                base: b,
                buffer_id: b,
                handle: [0; 64],
            },
        ))
    }
    fn resolve(&mut self, p: &Post) -> Result<u64> {
        Ok(p.addr)
    }
}

impl Setup {
    /// `n` ranks, small chunks and slots, direct paths on, everything else off.
    fn new(n: usize) -> Setup {
        Setup {
            n,
            chunk: 4096,
            slots: 2,
            rx_lanes: 1,
            single_max: 0,
            direct: true,
            local_split: plan::LocalSplit::default(),
            relay: None,
            takeover: false,
            host: None,
            mirror: false,
        }
    }

    /// Every rank's flags and receive area: rank r's at base(r) and base(r) + 128 MiB.
    fn layouts(&self) -> Vec<Layout> {
        let n = self.n;
        (0..n)
            .map(|r| Layout {
                rank: r,
                nranks: n,
                chunk: self.chunk,
                slots: self.slots,
                tx_lanes: 2,
                direct_tx: crate::layout::direct_tx_lanes(self.n, 2),
                rx_lanes: self.rx_lanes,
                flags: (0..n).map(base).collect(),
                scratch: (0..n).map(|q| base(q) + 0x0800_0000).collect(),
                mirror: self.mirror.then(|| mirror_base(r)),
                host: self.host.filter(|_| n == 2).map(
                    |(min_bytes, permille, slot_bytes, slots)| HostPath {
                        out_ring: ring_base(1 - r),
                        in_ring: ring_base(r),
                        slot_bytes,
                        slots,
                        one_way: (min_bytes, if r == 0 { permille } else { permille * 2 }),
                        exchange: (min_bytes, if r == 0 { permille } else { permille / 2 }),
                    },
                ),
            })
            .collect()
    }

    /// Memory holding every rank's (zeroed) flags and receive area.
    fn protocol_mem(&self) -> Mem {
        let mut mem = Mem::default();
        for r in 0..self.n {
            mem.alloc(
                base(r),
                Layout::flag_bytes(self.n, self.slots, self.rx_lanes),
            );
            mem.alloc(
                base(r) + 0x0800_0000,
                Layout::scratch_bytes(self.n, self.slots, self.chunk).unwrap(),
            );
            mem.alloc(bounce_base(r), BOUNCE);
            if self.mirror {
                mem.alloc(
                    mirror_base(r),
                    Layout::scratch_bytes(self.n, self.slots, self.chunk).unwrap(),
                );
            }
            if let Some((_, _, slot_bytes, slots)) = self.host {
                mem.alloc(ring_base(r), slot_bytes * slots as usize);
            }
        }
        mem
    }

    /// Posts `tasks`' direct transfers and direct reduction for `l`'s rank (host only), as
    /// `submit` does for every communicator before queuing any.
    fn post(
        &self,
        l: &Layout,
        c: &mut Counters,
        tasks: &[Task],
        dx: &DirectSim,
    ) -> std::result::Result<Posted, String> {
        let e = |e: crate::error::Error| e.to_string();
        let (direct_tasks, staged): (Vec<Task>, Vec<Task>) = tasks
            .iter()
            .partition(|t| self.direct && direct::goes_direct(t.kind));
        let mut reach = SimReach {
            rank: l.rank,
            unmappable: &dx.unmappable,
        };
        let boards = |r: usize| dx.boards.get(r).map(|b| b as &dyn Words);
        let posting = if direct_tasks.is_empty() {
            None
        } else {
            let p = lower(&direct_tasks, l.rank, self.n, usize::MAX, 0).map_err(e)?;
            Some(
                posting::post_group(
                    &mut reach,
                    &p,
                    l.rank,
                    c,
                    &boards,
                    None,
                    &|| false,
                    l.host.as_ref(),
                    &|| false,
                )
                .map_err(e)?,
            )
        };
        let sym = if self.direct && direct_tasks.is_empty() {
            direct_reduce::candidate(&staged, self.n, 1, 1)
        } else {
            None
        };
        let sym = match sym {
            Some(t) => {
                let sz = t.dtype.size();
                let (sb, rb) =
                    ccl_collectives::task::buffer_counts(t.kind, l.rank, self.n, t.count).unwrap();
                let es = reach.export(t.send as u64).map_err(e)?;
                let ro = if direct_reduce::output_posted(&t, l.rank) {
                    reach
                        .export(t.recv as u64)
                        .map_err(e)?
                        .map(|b| b.post(1, t.recv as u64, rb * sz))
                } else {
                    Some(direct_reduce::NO_POST)
                };
                let mine = es
                    .zip(ro)
                    .map(|(a, ro)| (a.post(1, t.send as u64, sb * sz), ro));
                let seq = c.sym;
                c.sym += 1;
                let o = direct_reduce::sym_post(
                    &dx.boards[0],
                    self.n,
                    l.rank,
                    seq,
                    mine,
                    None,
                    &|| false,
                )
                .map_err(e)?;
                Some((t, seq, o))
            }
            None => None,
        };
        Ok(Posted {
            posting,
            sym,
            staged,
        })
    }

    /// Settles what `post` posted (nobody waits: every rank that will post has, or never
    /// will) and queues it on `dev`: direct flags, the staged program or the direct
    /// reduction, then the direct copies.
    fn emit(
        &self,
        l: &Layout,
        c: &mut Counters,
        dev: &mut SimDevice,
        posted: Posted,
        dx: &DirectSim,
    ) -> std::result::Result<(), String> {
        let e = |e: crate::error::Error| e.to_string();
        let mut reach = SimReach {
            rank: l.rank,
            unmappable: &dx.unmappable,
        };
        let boards = |r: usize| dx.boards.get(r).map(|b| b as &dyn Words);
        let now = std::time::Instant::now();
        let wait = rendezvous::PushWait {
            soft: now,
            hard: now,
            busy: &|| false,
            futile: &|| false,
        };
        let plan = match posted.posting {
            None => plan::Plan::default(),
            Some(posting) => {
                let (plan, mismatch) = posting
                    .settle(
                        &mut reach,
                        l.rank,
                        &boards,
                        posting::SettleHow {
                            wait,
                            single_max: self.single_max,
                            late: None,
                            local_split: self.local_split,
                            wait_min_bytes: 0,
                            exchange_until: None,
                            remote_min: None,
                            host: l
                                .host
                                .as_ref()
                                .map(|h| (h, &mut c.host_out, &mut c.host_in)),
                        },
                        &|| false,
                    )
                    .map_err(e)?;
                if let Some(m) = mismatch {
                    return Err(m.to_string());
                }
                plan
            }
        };
        // As in production: flag operations batched, handed over before any host wait.
        let mut dev = Batched::new(dev);
        plan.begin(l, &mut dev).map_err(e)?;
        dev.flush().map_err(e)?;
        let mut staged = posted.staged;
        let mut sym_plan = None;
        if let Some((t, seq, o)) = posted.sym {
            let o = match o {
                direct_reduce::SymOutcome::Pending => direct_reduce::sym_settle(
                    &dx.boards[0],
                    self.n,
                    seq,
                    wait,
                    self.takeover,
                    &|| false,
                )
                .map_err(e)?,
                o => o,
            };
            if matches!(o, direct_reduce::SymOutcome::Active(_)) {
                dx.sym_alone.set(dx.sym_alone.get() + 1);
            }
            // Small pieces, so the simulation pipelines several per slice.
            let p = direct_reduce::SymPlan::from_outcome(
                o,
                &t,
                l.rank,
                self.n,
                seq,
                &mut |_, p| Ok(p.addr),
                1024,
            )
            .map_err(e)?
            // Every other reduction in one kernel over all inputs, the rest as the chain of
            // two-input kernels: both must give the reference's bits, in any mix of ranks.
            .map(|mut p| {
                p.multi = (seq + l.rank as u64) % 2 == 1;
                p
            });
            if let Some(p) = p {
                p.begin(l, &mut dev).map_err(e)?;
                dev.flush().map_err(e)?;
                dx.sym_direct.set(dx.sym_direct.get() + 1);
                sym_plan = Some(p);
                staged.clear();
            }
        }
        let mut em =
            Chain::lower(&staged, l.rank, self.n, self.chunk, self.single_max).map_err(e)?;
        em.begin(l, &mut dev).map_err(e)?;
        dev.flush().map_err(e)?;
        // In steps, as `submit` interleaves communicators (parts end and begin in between).
        let mut t = 0;
        while t < em.horizon() {
            t += 3;
            em.emit_until(t, l, c, &mut dev).map_err(e)?;
            dev.flush().map_err(e)?;
        }
        em.end(l, &mut dev, c).map_err(e)?;
        plan.end(l, &mut dev).map_err(e)?;
        if let Some(p) = sym_plan {
            p.end(l, &mut dev).map_err(e)?;
        }
        dev.flush().map_err(e)
    }

    /// `post` then `emit` for one rank alone (peers that call later find it settled).
    fn queue(
        &self,
        l: &Layout,
        c: &mut Counters,
        dev: &mut SimDevice,
        tasks: &[Task],
        dx: &DirectSim,
    ) -> std::result::Result<(), String> {
        let posted = self.post(l, c, tasks, dx)?;
        self.emit(l, c, dev, posted, dx)
    }
}

/// One rank's group between posting and queueing.
struct Posted {
    posting: Option<posting::Posting>,
    sym: Option<(Task, u64, direct_reduce::SymOutcome)>,
    staged: Vec<Task>,
}

type Tamper<'a> = &'a dyn Fn(&mut SimDevice, usize);

/// Every rank's buffers of every case in `mem`, and its inputs in them (an in-place receive
/// buffer starts as the input where they overlap).
fn place_inputs(mem: &mut Mem, cases: &[Case], n: usize) {
    for (k, case) in cases.iter().enumerate() {
        for r in 0..n {
            let (send, _, se, re) = buffers(case, k, r, n);
            let base_send = base(r) + 0x1000_0000 + k as u64 * BUF * 2;
            // As much as the buffers need (in place, one lies inside the other's region).
            let need = (se.max(re) * case.dtype.size()).max(1);
            mem.alloc(base_send, need);
            mem.alloc(base_send + BUF, need);
            let bytes: Vec<u8> = (0..se)
                .flat_map(|i| encode(case.dtype, input(r, i) as f64))
                .collect();
            mem.range(send, bytes.len()).copy_from_slice(&bytes);
        }
    }
}

/// Queues `cases` one after another on every rank, runs them, checks every output. Returns
/// how many reductions ran directly (per rank).
fn simulate(
    s: &Setup,
    cases: &[Case],
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<usize, String> {
    simulate_counts(s, cases, merged, seed, tamper).map(|(direct, _)| direct)
}

/// [`simulate`], also returning how many two-rank reductions one rank did alone.
fn simulate_counts(
    s: &Setup,
    cases: &[Case],
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(usize, usize), String> {
    let n = s.n;
    let mut dx = DirectSim::new(n);
    // With direct transfers, every third seed makes one rank's buffers unmappable per case
    // (they go through its bounce buffer).
    if s.direct && seed % 3 == 2 {
        for (k, _) in cases.iter().enumerate() {
            let r = k % n;
            let b = base(r) + 0x1000_0000 + k as u64 * BUF * 2;
            dx.unmappable.push((b, b + 2 * BUF));
        }
    }
    let mut order_rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    let mut counters: Vec<Counters> = (0..n).map(|_| Counters::new(n, s.rx_lanes)).collect();
    // Each case's groups per rank: one, or a relayed broadcast's phases (queued by every rank
    // before the next phase, as `submit` does).
    let groups: Vec<(usize, usize, Vec<Vec<Task>>)> = cases
        .iter()
        .enumerate()
        .flat_map(|(k, case)| {
            let per_rank: Vec<Vec<Vec<Task>>> = (0..n)
                .map(|r| {
                    let t = tasks(case, k, r, n);
                    match &s.relay {
                        Some(relay) => relay.phases(t, r, n),
                        None => vec![t],
                    }
                })
                .collect();
            let phases = per_rank[0].len();
            assert!(per_rank.iter().all(|p| p.len() == phases));
            (0..phases)
                .map(|p| (k, p, per_rank.iter().map(|v| v[p].clone()).collect()))
                .collect::<Vec<_>>()
        })
        .collect();
    for (k, _phase, group) in &groups {
        let (k, case) = (*k, &cases[*k]);
        // Ranks call in a random order: it decides which side of each transfer copies.
        let mut order: Vec<usize> = (0..n).filter(|&r| !group[r].is_empty()).collect();
        for i in (1..order.len()).rev() {
            order_rng ^= order_rng << 13;
            order_rng ^= order_rng >> 7;
            order_rng ^= order_rng << 17;
            order.swap(i, (order_rng % (i as u64 + 1)) as usize);
        }
        if seed % 2 == 0 {
            // Every rank posts before any queues (as one thread driving all GPUs does): the
            // direct paths find their peers.
            let mut posted = Vec::new();
            for &r in &order {
                let p = s
                    .post(&layouts[r], &mut counters[r], &group[r], &dx)
                    .map_err(|e| format!("case {k} {case:?} rank {r}: {e}"))?;
                posted.push((r, p));
            }
            for (r, p) in posted {
                s.emit(&layouts[r], &mut counters[r], &mut devs[r], p, &dx)
                    .map_err(|e| format!("case {k} {case:?} rank {r}: {e}"))?;
            }
        } else {
            for r in order {
                s.queue(&layouts[r], &mut counters[r], &mut devs[r], &group[r], &dx)
                    .map_err(|e| format!("case {k} {case:?} rank {r}: {e}"))?;
            }
        }
    }
    if let Some(t) = tamper {
        for (r, d) in devs.iter_mut().enumerate() {
            t(d, r);
        }
    }
    run(&devs, &mut mem, merged, seed)?;
    for (k, case) in cases.iter().enumerate() {
        for r in 0..n {
            let Some(want) = expected(case, r, n) else {
                continue;
            };
            let (_, recv, _, _) = buffers(case, k, r, n);
            let want: Vec<u8> = want.iter().flat_map(|&v| encode(case.dtype, v)).collect();
            let got = mem.read(recv, want.len());
            if got != want {
                return Err(format!("case {k} {case:?}: rank {r} wrong result"));
            }
        }
    }
    Ok((dx.sym_direct.get(), dx.sym_alone.get()))
}

fn every_case(n: usize, count: usize) -> Vec<Case> {
    let plain = |kind, in_place| Case {
        kind,
        count,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place,
    };
    let mut v = vec![
        plain(Kind::Coll(Collective::AllReduce), false),
        plain(Kind::Coll(Collective::AllReduce), true),
        plain(Kind::Coll(Collective::ReduceScatter), false),
        plain(Kind::Coll(Collective::ReduceScatter), true),
        plain(Kind::Coll(Collective::AllGather), false),
        plain(Kind::Coll(Collective::AllGather), true),
        plain(Kind::Coll(Collective::AlltoAll), false),
        plain(Kind::Coll(Collective::AlltoAll), true),
        plain(Kind::Coll(Collective::Broadcast { root: 1 % n }), false),
        plain(Kind::Coll(Collective::Reduce { root: n - 1 }), false),
        plain(Kind::Coll(Collective::Gather { root: 0 }), false),
        plain(Kind::Coll(Collective::Scatter { root: n - 1 }), false),
        plain(Kind::Ring, false),
        plain(Kind::Ring, true),
    ];
    v.push(Case {
        red: Reduction::Plain(ReduceKind::Max),
        ..plain(Kind::Coll(Collective::AllReduce), false)
    });
    v.push(Case {
        red: Reduction::Avg,
        ..plain(Kind::Coll(Collective::AllReduce), true)
    });
    let mut three = [0u8; 8];
    three[..4].copy_from_slice(&3i32.to_le_bytes());
    for kind in [
        Kind::Coll(Collective::AllReduce),
        Kind::Coll(Collective::ReduceScatter),
        Kind::Coll(Collective::Reduce { root: 0 }),
    ] {
        v.push(Case {
            red: Reduction::PreMulSum(ccl_collectives::task::Scalar::Immediate(three)),
            ..plain(kind, false)
        });
    }
    if n.is_power_of_two() {
        // Float Avg scales by 1/n: exact for powers of two with these inputs.
        v.push(Case {
            dtype: DataType::Float32,
            red: Reduction::Avg,
            ..plain(Kind::Coll(Collective::AllReduce), false)
        });
        v.push(Case {
            dtype: DataType::Float32,
            red: Reduction::Avg,
            ..plain(Kind::Coll(Collective::ReduceScatter), false)
        });
    }
    v
}

/// Every collective, in and out of place, several chunks per piece and few slots (credits
/// cycle), one and two receive lanes, random lane orders and the merged single queue: all
/// finish, all exact.
#[test]
fn every_collective_finishes_exact_under_any_stream_order() {
    for n in [1usize, 2, 3, 4] {
        for (count, chunk, slots) in [(3000usize, 4096usize, 2u32), (1000, 4096, 4), (5, 4096, 2)] {
            for rx_lanes in [1usize, 2] {
                for (single_max, direct, lanes) in [
                    (0usize, false, 1usize),
                    (1 << 20, false, 1),
                    (0, true, 1),
                    (0, true, 4),
                    (1 << 20, true, 1),
                ] {
                    // Local copies cut into parts of at least 1 KiB over up to 4 lanes.
                    let s = Setup {
                        n,
                        chunk,
                        slots,
                        rx_lanes,
                        single_max,
                        direct,
                        local_split: plan::LocalSplit {
                            lanes,
                            min_part: 1024,
                        },
                        relay: None,
                        takeover: false,
                        host: None,
                        mirror: false,
                    };
                    let cases = every_case(n, count);
                    for (merged, seeds) in [(true, 0..2u64), (false, 0..3u64)] {
                        for seed in seeds {
                            if let Err(e) = simulate(&s, &cases, merged, seed * 7919 + 1, None) {
                                panic!(
                                    "n {n} count {count} chunk {chunk} slots {slots} rx lanes {rx_lanes} \
                                     single {single_max} direct {direct} local lanes {lanes} merged {merged} seed {seed}: {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Host-only with more than two ranks (or direct transfers off): every collective through the
/// receive slots, each chunk to be reduced copied into the receiver's mirror first. Few slots
/// (a mirror slot is refilled as soon as its credit allows), one and two receive lanes (the
/// copy into a mirror slot and the kernel still reading it may sit on different lanes), random
/// lane orders and the merged queue: all exact.
#[test]
fn reductions_through_mirrored_slots_are_exact_under_any_stream_order() {
    for n in [2usize, 3, 4] {
        for (count, slots) in [(3000usize, 2u32), (1000, 4)] {
            for rx_lanes in [1usize, 2] {
                let s = Setup {
                    chunk: 4096,
                    slots,
                    rx_lanes,
                    direct: false,
                    mirror: true,
                    ..Setup::new(n)
                };
                let cases = every_case(n, count);
                for (merged, seeds) in [(true, 0..2u64), (false, 0..3u64)] {
                    for seed in seeds {
                        if let Err(e) = simulate(&s, &cases, merged, seed * 7919 + 1, None) {
                            panic!(
                                "n {n} count {count} slots {slots} rx lanes {rx_lanes} merged \
                                 {merged} seed {seed}: {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The checker itself must catch a broken protocol: with the senders' credit waits removed,
/// a sender overwrites slots the receiver has not read yet, and some stream order shows it.
#[test]
fn the_simulation_catches_a_missing_credit_wait() {
    let s = Setup {
        direct: false,
        ..Setup::new(2)
    };
    let case = Case {
        kind: Kind::Ring,
        count: 8192,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    };
    for seed in 0..5 {
        simulate(&s, &[case], false, seed, None).unwrap();
    }
    // Credit words of sender r (from receiver q, slot k) sit at index q*2*slots + slots + k.
    let drop_credit_waits = |d: &mut SimDevice, r: usize| {
        let lo = base(r) + (2 * 2 * 2) as u64 * 64;
        for q in d.lanes.values_mut() {
            for op in q.iter_mut() {
                if let Op::Wait(a, _) = *op {
                    let slot_index = (a - base(r)) / 64;
                    if a >= base(r) && a < lo && slot_index % 4 >= 2 {
                        *op = Op::Record(usize::MAX);
                    }
                }
            }
        }
    };
    let failures = (0..40)
        .filter(|&seed| simulate(&s, &[case], false, seed, Some(&drop_credit_waits)).is_err())
        .count();
    assert!(
        failures > 0,
        "40 random orders never exposed the missing credit waits"
    );
}

/// Random point-to-point groups: each rank's group holds its sends and receives in its own
/// random order, several to the same peer (matched in order, as NCCL matches them), some to
/// itself, sizes from a few bytes to several chunks. Every byte arrives where it should,
/// under random lane orders and with merged queues.
#[test]
fn random_point_to_point_groups_deliver_every_byte() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    for round in 0..40 {
        let n = 2 + next(4) as usize;
        let s = Setup {
            slots: 2 + next(3) as u32,
            rx_lanes: 1 + next(2) as usize,
            single_max: if next(2) == 0 { 0 } else { 1 << 20 },
            direct: next(2) == 0,
            ..Setup::new(n)
        };
        // (from, to, count) in the order the sender issues them.
        let transfers: Vec<(usize, usize, usize)> = (0..3 * n)
            .map(|_| {
                let a = next(n as u64) as usize;
                let b = next(n as u64) as usize;
                (a, b, [1usize, 7, 1000, 2500][next(4) as usize])
            })
            .collect();
        let layouts = s.layouts();
        // Transfer i: send buffer at base(from)+0x1000_0000+i*BUF, receive buffer at
        // base(to)+0x2000_0000+i*BUF, int32 elements; fresh memory for every run.
        let fresh_mem = || {
            let mut mem = s.protocol_mem();
            for (i, &(a, b, count)) in transfers.iter().enumerate() {
                let send = base(a) + 0x1000_0000 + i as u64 * BUF;
                mem.alloc(send, count * 4);
                mem.alloc(base(b) + 0x2000_0000 + i as u64 * BUF, count * 4);
                let data: Vec<u8> = (0..count)
                    .flat_map(|e| ((i * 100_000 + e) as i32).to_le_bytes())
                    .collect();
                mem.range(send, count * 4).copy_from_slice(&data);
            }
            mem
        };
        let mut groups: Vec<Vec<Task>> = vec![Vec::new(); n];
        for (i, &(a, b, count)) in transfers.iter().enumerate() {
            let send = base(a) + 0x1000_0000 + i as u64 * BUF;
            let recv = base(b) + 0x2000_0000 + i as u64 * BUF;
            let t = |kind, send: u64, recv: u64| Task {
                kind,
                send: send as usize,
                recv: recv as usize,
                count,
                dtype: DataType::Int32,
                red: Reduction::Plain(ReduceKind::Sum),
                stream: 0,
                fold: false,
            };
            groups[a].push(t(TaskKind::Send { peer: b }, send, 0));
            groups[b].push(t(TaskKind::Recv { peer: a }, 0, recv));
        }
        // Interleave each rank's group at random, keeping the issue order per (direction,
        // peer): repeatedly take the front of a random non-empty queue.
        for g in groups.iter_mut() {
            let key = |t: &Task| match t.kind {
                TaskKind::Send { peer } => (0, peer),
                TaskKind::Recv { peer } => (1, peer),
                _ => (2, 0),
            };
            let mut queues: Vec<((usize, usize), std::collections::VecDeque<Task>)> = Vec::new();
            for t in g.drain(..) {
                match queues.iter_mut().find(|(k, _)| *k == key(&t)) {
                    Some((_, q)) => q.push_back(t),
                    None => queues.push((key(&t), std::collections::VecDeque::from([t]))),
                }
            }
            while queues.iter().any(|(_, q)| !q.is_empty()) {
                let live: Vec<usize> = (0..queues.len())
                    .filter(|&i| !queues[i].1.is_empty())
                    .collect();
                let pick = live[next(live.len() as u64) as usize];
                if let Some(t) = queues[pick].1.pop_front() {
                    g.push(t);
                }
            }
        }
        // Odd rounds add an all-reduce to every rank's group (NCCL allows collectives and
        // point-to-point in one group): staged beside the direct transfers.
        let ar_count = 700usize;
        let ar = |r: usize| (base(r) + 0x3000_0000, base(r) + 0x3000_0000 + BUF);
        if round % 2 == 1 {
            for (r, g) in groups.iter_mut().enumerate() {
                let (send, recv) = ar(r);
                g.push(Task {
                    kind: TaskKind::Coll(Collective::AllReduce),
                    send: send as usize,
                    recv: recv as usize,
                    count: ar_count,
                    dtype: DataType::Int32,
                    red: Reduction::Plain(ReduceKind::Sum),
                    stream: 0,
                    fold: false,
                });
            }
        }
        for merged in [false, true] {
            let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
            let dx = DirectSim::new(n);
            // Ranks call in a random order (which side of a direct transfer copies).
            let first = next(n as u64) as usize;
            for r in (0..n).map(|i| (first + i) % n) {
                let mut c = Counters::new(n, s.rx_lanes);
                s.queue(&layouts[r], &mut c, &mut devs[r], &groups[r], &dx)
                    .unwrap();
            }
            let mut mem = fresh_mem();
            for r in 0..n {
                let (send, recv) = ar(r);
                mem.alloc(send, ar_count * 4);
                mem.alloc(recv, ar_count * 4);
                let data: Vec<u8> = (0..ar_count)
                    .flat_map(|i| (input(r, i) as i32).to_le_bytes())
                    .collect();
                mem.range(send, ar_count * 4).copy_from_slice(&data);
            }
            if let Err(e) = run(&devs, &mut mem, merged, round * 31 + 7) {
                panic!(
                    "round {round} n {n} direct {} merged {merged}: {e}; transfers {transfers:?}",
                    s.direct
                );
            }
            for (i, &(a, b, count)) in transfers.iter().enumerate() {
                let got = mem.read(base(b) + 0x2000_0000 + i as u64 * BUF, count * 4);
                let want = mem.read(base(a) + 0x1000_0000 + i as u64 * BUF, count * 4);
                assert!(got == want, "round {round} transfer {i} {a}->{b} ({count} elements) merged {merged}: wrong bytes");
            }
            if round % 2 == 1 {
                let want: Vec<u8> = (0..ar_count)
                    .flat_map(|i| ((0..n).map(|q| input(q, i)).sum::<i64>() as i32).to_le_bytes())
                    .collect();
                for r in 0..n {
                    let got = mem.read(ar(r).1, ar_count * 4);
                    assert!(
                        got == want,
                        "round {round} rank {r} n {n} direct {} single {} merged {merged}: all-reduce \
                         in the group wrong; got {:?} want {:?}",
                        s.direct,
                        s.single_max,
                        got.chunks(4).zip(want.chunks(4)).position(|(a, b)| a != b),
                        (got.len(), transfers.clone())
                    );
                }
            }
        }
    }
}

/// All-reduces, reduce-scatters and reduces (in and out of place, 2-8 ranks, several roots)
/// read their peers directly
/// when every rank posts before any queues, fall back to the staged protocol alike on every
/// rank when one rank's buffers cannot be mapped or ranks come one by one, and are exact
/// either way under any stream order.
#[test]
fn direct_reductions_run_when_every_rank_posts_and_fall_back_together() {
    for n in [2usize, 3, 4, 8] {
        let s = Setup::new(n);
        let plain = |kind, in_place| Case {
            kind,
            count: 3001,
            dtype: DataType::Int32,
            red: Reduction::Plain(ReduceKind::Sum),
            in_place,
        };
        let cases = [
            plain(Kind::Coll(Collective::AllReduce), false),
            plain(Kind::Coll(Collective::AllReduce), true),
            plain(Kind::Coll(Collective::ReduceScatter), false),
            plain(Kind::Coll(Collective::ReduceScatter), true),
            plain(Kind::Coll(Collective::Reduce { root: 0 }), false),
            plain(Kind::Coll(Collective::Reduce { root: n - 1 }), true),
            plain(Kind::Coll(Collective::Reduce { root: n / 2 }), false),
        ];
        for (merged, seed) in [(false, 0u64), (true, 4), (false, 1), (false, 2), (true, 6)] {
            let direct = simulate(&s, &cases, merged, seed, None)
                .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged}: {e}"));
            // Even seeds post all ranks first, odd ones queue rank by rank; seeds 2 mod 3
            // make one rank's buffers unmappable per case (staged for everyone).
            let want = if seed % 3 == 2 || seed % 2 == 1 {
                0
            } else {
                cases.len() * n
            };
            assert_eq!(direct, want, "n {n} seed {seed}: direct reductions");
        }
    }
}

/// Several collectives in one group (PyTorch's coalescing manager, `all_reduce_coalesced`):
/// all-reduces of different sizes, a reduce-scatter and an all-gather together, 2-4 ranks,
/// staged and direct, one stream and lanes, random and merged stream orders: every result
/// exact.
#[test]
fn coalesced_collectives_in_one_group_are_exact() {
    // Plain sums, and PreMulSum by 3 (a hierarchy's first stage scales so: a host
    // reduce-scatter grouped with an all-reduce of an uneven count's last element). The
    // all-reduce of one element last: its ranks but one have an empty share, which misordered
    // its sends and receives behind the others' (an internal error, or on one stream the
    // unreduced element sent) until the group's collectives shared one logical clock.
    let three = Scalar::Immediate([3, 0, 0, 0, 0, 0, 0, 0]);
    for (red, factor) in [
        (Reduction::Plain(ReduceKind::Sum), 1i64),
        (Reduction::PreMulSum(three), 3),
    ] {
        for n in [2usize, 3, 4, 8] {
            for (single_max, direct) in [
                (0usize, false),
                (1 << 20, false),
                (0, true),
                (1 << 20, true),
            ] {
                let s = Setup {
                    rx_lanes: 2,
                    single_max,
                    direct,
                    ..Setup::new(n)
                };
                let layouts = s.layouts();
                // (collective, count, input base, output base) for rank r.
                let ops = |r: usize| {
                    let b = base(r) + 0x1000_0000;
                    vec![
                        (Collective::AllReduce, 3001usize, b, b + BUF),
                        (Collective::AllReduce, 17, b + 2 * BUF, b + 3 * BUF),
                        (Collective::ReduceScatter, 900, b + 4 * BUF, b + 5 * BUF),
                        (Collective::AllGather, 1200, b + 6 * BUF, b + 7 * BUF),
                        (Collective::AllReduce, 1, b + 8 * BUF, b + 9 * BUF),
                    ]
                };
                for (merged, seed) in [(false, 1u64), (false, 2), (true, 3)] {
                    let mut mem = s.protocol_mem();
                    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
                    let dx = DirectSim::new(n);
                    for r in 0..n {
                        for (k, &(coll, count, inp, out)) in ops(r).iter().enumerate() {
                            let (ie, oe) = ccl_collectives::task::buffer_counts(
                                TaskKind::Coll(coll),
                                r,
                                n,
                                count,
                            )
                            .unwrap();
                            mem.alloc(inp, ie.max(1) * 4);
                            mem.alloc(out, oe.max(1) * 4);
                            let data: Vec<u8> = (0..ie)
                                .flat_map(|i| (input(r, i + k) as i32).to_le_bytes())
                                .collect();
                            mem.range(inp, ie * 4).copy_from_slice(&data);
                        }
                    }
                    let group = |r: usize| -> Vec<Task> {
                        ops(r)
                            .into_iter()
                            .map(|(coll, count, inp, out)| Task {
                                kind: TaskKind::Coll(coll),
                                send: inp as usize,
                                recv: out as usize,
                                count,
                                dtype: DataType::Int32,
                                red: match coll {
                                    Collective::AllGather => Reduction::Plain(ReduceKind::Sum),
                                    _ => red,
                                },
                                stream: 0,
                                fold: false,
                            })
                            .collect()
                    };
                    let mut counters: Vec<Counters> =
                        (0..n).map(|_| Counters::new(n, s.rx_lanes)).collect();
                    let first = seed as usize % n;
                    for r in (0..n).map(|i| (first + i) % n) {
                        s.queue(&layouts[r], &mut counters[r], &mut devs[r], &group(r), &dx)
                            .unwrap_or_else(|e| {
                                panic!("{red:?} n {n} single {single_max} direct {direct}: {e}")
                            });
                    }
                    if let Err(e) = run(&devs, &mut mem, merged, seed) {
                        panic!("n {n} single {single_max} direct {direct} merged {merged}: {e}");
                    }
                    for r in 0..n {
                        for (k, &(coll, count, _, out)) in ops(r).iter().enumerate() {
                            let sum =
                                |i: usize| factor * (0..n).map(|q| input(q, i + k)).sum::<i64>();
                            let want: Vec<i64> = match coll {
                                Collective::AllReduce => (0..count).map(sum).collect(),
                                Collective::ReduceScatter => {
                                    (0..count).map(|i| sum(r * count + i)).collect()
                                }
                                _ => (0..n * count)
                                    .map(|j| input(j / count, j % count + k))
                                    .collect(),
                            };
                            let want: Vec<u8> = want
                                .iter()
                                .flat_map(|&v| (v as i32).to_le_bytes())
                                .collect();
                            let got = mem.read(out, want.len());
                            assert!(
                            got == want,
                            "{red:?} n {n} single {single_max} direct {direct} merged {merged}: \
                             rank {r} {coll:?} #{k} wrong"
                        );
                        }
                    }
                }
            }
        }
    }
}

/// Eight ranks (an 8-GPU NVSwitch machine) and five (not a power of two): every collective,
/// staged and direct, under a random lane order and the merged queue, exact.
#[test]
fn every_collective_is_exact_with_five_and_eight_ranks() {
    for n in [5usize, 8] {
        for direct in [false, true] {
            let s = Setup {
                direct,
                ..Setup::new(n)
            };
            let cases = every_case(n, 3000);
            for merged in [true, false] {
                if let Err(e) = simulate(&s, &cases, merged, 17, None) {
                    panic!("n {n} direct {direct} merged {merged}: {e}");
                }
            }
        }
    }
}

/// With `CCL_IPC_LOCAL_COPY_LANES` above 1 an all-gather's own block is copied in parts on
/// several lanes that its transfers leave idle (so several copy engines move it), and the
/// result stays exact under any lane order.
#[test]
fn local_copies_split_over_idle_lanes_stay_exact() {
    let s = Setup {
        rx_lanes: 4,
        local_split: plan::LocalSplit {
            lanes: 4,
            min_part: 1024,
        },
        ..Setup::new(2)
    };
    let case = Case {
        kind: Kind::Coll(Collective::AllGather),
        count: 3000,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    };
    // Lanes holding a copy of exactly one part of the 12000-byte own block (4096 or 3808).
    let lanes_used = std::cell::RefCell::new(Vec::new());
    let look = |d: &mut SimDevice, r: usize| {
        let mut v: Vec<Lane> = d
            .lanes
            .iter()
            .filter(|(_, ops)| {
                ops.iter()
                    .any(|op| matches!(op, Op::Copy(_, _, b) if *b == 4096 || *b == 3808))
            })
            .map(|(l, _)| *l)
            .collect();
        v.sort_by_key(|l| format!("{l:?}"));
        lanes_used.borrow_mut().push((r, v));
    };
    for seed in 0..6 {
        // Seeds 2 and 5 make a rank's buffers unmappable (bounce path): exact all the same.
        simulate(&s, &[case], seed % 2 == 0, seed * 31 + 3, Some(&look)).unwrap();
    }
    let used = lanes_used.into_inner();
    assert!(
        used.iter().any(|(_, v)| v.len() >= 2),
        "no rank cut its local copy over several lanes: {used:?}"
    );
}

/// `CCL_IPC_PUSH_WAIT_MIN_BYTES`: a send below it gives up its push wait at once even with a
/// minute of wait allowed and the GPU busy, so the receiver, posting later, does both copies
/// (pulls ours, pushes its own); a send at the threshold still waits its window out.
#[test]
fn sends_below_the_wait_threshold_never_hold_the_host() {
    use std::time::{Duration, Instant};
    for (min, want_first) in [(1025usize, true), (1024, false)] {
        let dx = DirectSim::new(2);
        let mut counters: Vec<Counters> = (0..2).map(|_| Counters::new(2, 1)).collect();
        let (c0, c1) = counters.split_at_mut(1);
        let posting0 = post_exchange(&dx.boards, 0, 256, &mut c0[0]);
        // Rank 1 posts only after rank 0 settled (or would wait forever: it is the test).
        let far = Instant::now() + Duration::from_secs(60);
        let wait = rendezvous::PushWait {
            soft: far,
            hard: if want_first {
                far
            } else {
                Instant::now() + Duration::from_millis(50)
            },
            busy: &|| true,
            futile: &|| false,
        };
        let t = Instant::now();
        let plan0 = settle(&dx.boards, posting0, 0, wait, min, None, None);
        let took = t.elapsed();
        let send0 = plan0.transfers.iter().find(|t| t.outgoing).unwrap();
        if want_first {
            assert!(
                took < Duration::from_secs(5),
                "waited {took:?} below the threshold"
            );
            assert_eq!(send0.role, plan::Role::First);
            assert_eq!((plan0.waits.pushed, plan0.waits.left_to_pull), (0, 1));
        } else {
            // Nobody posted within the wait: it ran its 50 ms out, then left the pull.
            assert!(
                took >= Duration::from_millis(50),
                "did not wait at the threshold"
            );
            assert_eq!(send0.role, plan::Role::First);
        }
        let plan1 = settle(
            &dx.boards,
            post_exchange(&dx.boards, 1, 256, &mut c1[0]),
            1,
            wait,
            min,
            None,
            None,
        );
        // Rank 1 came second to both transfers: it copies both.
        assert!(plan1
            .transfers
            .iter()
            .all(|t| matches!(t.role, plan::Role::Second { .. })));
    }
}

/// `CCL_IPC_REMOTE_COPY`: a send of at least the remote-copy size gives up waiting for its
/// receiver at once, however long the exchange and push windows (the receiver will have this
/// GPU's engine push it); one byte under that size it waits its window out. The receiver,
/// posting later, copies both directions and marks the transfer it pulls as reachable from
/// either GPU (no VMM memory on either side), which is what lets its device queue that copy on
/// the peer GPU.
#[test]
fn a_send_the_receiver_copies_remotely_never_waits_for_it() {
    use std::time::{Duration, Instant};
    // Send and receive of 256 floats each: 1024 bytes.
    for (remote_min, gives_up) in [(1024usize, true), (1025, false)] {
        let dx = DirectSim::new(2);
        let mut counters: Vec<Counters> = (0..2).map(|_| Counters::new(2, 1)).collect();
        let (c0, c1) = counters.split_at_mut(1);
        let posting0 = post_exchange(&dx.boards, 0, 256, &mut c0[0]);
        let far = Instant::now() + Duration::from_secs(60);
        let wait = rendezvous::PushWait {
            soft: far,
            hard: Instant::now() + Duration::from_millis(50),
            busy: &|| true,
            futile: &|| false,
        };
        let t = Instant::now();
        // The exchange window is what a waiting send would sit out: 50 ms.
        let exchange = Some(t + Duration::from_millis(50));
        let plan0 = settle(&dx.boards, posting0, 0, wait, 0, exchange, Some(remote_min));
        let took = t.elapsed();
        let send0 = plan0.transfers.iter().find(|t| t.outgoing).unwrap();
        assert_eq!(send0.role, plan::Role::First);
        if gives_up {
            assert!(took < Duration::from_secs(5), "waited {took:?}");
        } else {
            assert!(
                took >= Duration::from_millis(50),
                "did not wait under the size"
            );
        }
        let plan1 = settle(
            &dx.boards,
            post_exchange(&dx.boards, 1, 256, &mut c1[0]),
            1,
            wait,
            0,
            None,
            Some(remote_min),
        );
        let pull = plan1.transfers.iter().find(|t| !t.outgoing).unwrap();
        assert!(matches!(pull.role, plan::Role::Second { .. }));
        assert_eq!(
            pull.there, None,
            "no context on the peer's GPU in the simulation"
        );
    }
}

/// `CCL_IPC_EXCHANGE_WAIT_US`: a group that sends to and receives from one peer (a pipeline
/// exchange) waits past its push window for the peer's receive, so each side pushes its own
/// data; the peer, posting 100 ms later, copies only its own send. With an exchange wait
/// shorter than the peer's delay (just too short) the sender gives up and the peer copies
/// both directions, as without one.
#[test]
fn an_exchange_waits_for_its_peer_so_that_each_side_pushes_its_own() {
    use std::time::{Duration, Instant};
    let delay = Duration::from_millis(100);
    for (exchange, each_pushes) in [
        (Duration::from_secs(30), true),
        (Duration::from_millis(20), false),
    ] {
        let dx = DirectSim::new(2);
        let boards = &dx.boards;
        let post = |rank: usize| post_exchange(boards, rank, 4096, &mut Counters::new(2, 1));
        let settle = |posting: posting::Posting, rank: usize, exchange_until: Option<Instant>| {
            // The push window itself is over before it starts.
            let now = Instant::now();
            let wait = rendezvous::PushWait {
                soft: now,
                hard: now,
                busy: &|| true,
                futile: &|| false,
            };
            settle(boards, posting, rank, wait, 0, exchange_until, None)
        };
        let posting0 = post(0);
        let t = Instant::now();
        let (plan0, plan1) = std::thread::scope(|sc| {
            let h = sc.spawn(|| {
                let p = settle(posting0, 0, Some(t + exchange));
                (p, t.elapsed())
            });
            std::thread::sleep(delay);
            let plan1 = settle(post(1), 1, Some(Instant::now() + exchange));
            let (plan0, took0) = h.join().unwrap();
            if each_pushes {
                assert!(took0 >= delay, "rank 0 returned after {took0:?}");
            } else {
                assert!(
                    took0 < delay,
                    "rank 0 waited {took0:?} past its exchange window"
                );
            }
            (plan0, plan1)
        });
        let role = |plan: &plan::Plan, outgoing: bool| {
            plan.transfers
                .iter()
                .find(|t| t.outgoing == outgoing)
                .map(|t| matches!(t.role, plan::Role::Second { .. }))
                .unwrap()
        };
        // Rank 0 posted its receive first: rank 1 always pushes its send.
        assert!(role(&plan1, true));
        assert!(!role(&plan0, false));
        // Rank 0's send: pushed by rank 0 after waiting, or pulled by rank 1.
        assert_eq!(role(&plan0, true), each_pushes);
        assert_eq!(role(&plan1, false), !each_pushes);
        assert_eq!(
            (plan0.waits.pushed, plan0.waits.left_to_pull),
            if each_pushes { (1, 0) } else { (0, 1) }
        );
    }
}

/// Broadcasts over more than two ranks relayed as a pipelined scatter and all-gather of
/// direct transfers (one group per phase): exact under any lane order, merged queues, rank
/// call orders and unmappable buffers, in place or not, whatever the root.
#[test]
fn relayed_broadcasts_are_exact_under_any_stream_order() {
    for n in [3usize, 4, 5] {
        let s = Setup {
            // Four-byte elements: 3001 of them make four chunks of up to 1000.
            relay: Some(Relay {
                min_bytes: 1,
                chunk_bytes: 4000,
            }),
            ..Setup::new(n)
        };
        let mut cases = Vec::new();
        for root in [0, 1, n - 1] {
            for in_place in [false, true] {
                cases.push(Case {
                    kind: Kind::Coll(Collective::Broadcast { root }),
                    count: 3001,
                    dtype: DataType::Int32,
                    red: Reduction::Plain(ReduceKind::Sum),
                    in_place,
                });
            }
        }
        for seed in 0..6 {
            for merged in [true, false] {
                if let Err(e) = simulate(&s, &cases, merged, seed, None) {
                    panic!("n {n} seed {seed} merged {merged}: {e}");
                }
            }
        }
    }
}

/// Two ranks with takeover: a reduction whose first poster gives up waiting is done entirely
/// by the second (both slices of a reduce-scatter, the whole all-reduce and the copy into the
/// peer's output, a whole reduce into the root's output, whichever rank is root), with no host wait on either side. Exact under every stream order and call
/// order, in place or not, and with the passive rank's partner unable to export its own
/// buffers (the active rank needs only the passive one's).
#[test]
fn two_rank_reductions_done_by_one_rank_are_exact() {
    let s = Setup {
        takeover: true,
        ..Setup::new(2)
    };
    let mut cases = Vec::new();
    for kind in [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::Reduce { root: 0 },
        Collective::Reduce { root: 1 },
    ] {
        for in_place in [false, true] {
            for red in [ReduceKind::Sum, ReduceKind::Max] {
                cases.push(Case {
                    kind: Kind::Coll(kind),
                    count: 3001,
                    dtype: DataType::Int32,
                    red: Reduction::Plain(red),
                    in_place,
                });
            }
        }
    }
    let mut alone_total = 0;
    for seed in 0..12u64 {
        for merged in [false, true] {
            let (direct, alone) = simulate_counts(&s, &cases, merged, seed, None)
                .unwrap_or_else(|e| panic!("seed {seed} merged {merged}: {e}"));
            if seed % 2 == 1 && seed % 3 != 2 {
                // Rank by rank: the first poster never waits, so every case goes alone.
                assert_eq!(alone, cases.len(), "seed {seed}");
                assert_eq!(direct, 2 * cases.len(), "seed {seed}");
            }
            alone_total += alone;
        }
    }
    assert!(alone_total > 0);
}

/// Copies queued on `lane` of `d`.
fn copies_on(d: &SimDevice, lane: Lane) -> usize {
    d.lanes.get(&lane).map_or(0, |q| {
        q.iter().filter(|o| matches!(o, Op::Copy(..))).count()
    })
}

/// The host path's test cases (two ranks): every case at 80 KB, some below the threshold
/// between them, and broadcasts of sizes that differ, so a slot overwritten too early holds
/// other bytes.
fn host_path_cases() -> Vec<Case> {
    let mut cases = every_case(2, 20_000);
    cases.extend(every_case(2, 3000).into_iter().step_by(4));
    cases.extend((0..4).map(|k| Case {
        kind: Kind::Coll(Collective::Broadcast { root: k % 2 }),
        count: 20_000 + 777 * k,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    }));
    cases
}

/// The host path (two ranks): a share of every large direct transfer goes through a ring in
/// host memory beside the copy over NVLink. Every data collective and exchange, below and
/// above the threshold, in and out of place, through bounce buffers (every third seed),
/// rings that cycle over many transfers, a share the ring caps (500 permille of 80 KB in 4
/// slots of 8 KiB), random and merged stream orders: all finish, all exact, and the host
/// lanes carry copies on both ranks.
#[test]
fn host_path_transfers_are_exact_under_any_stream_order() {
    for (slots, permille) in [(2u32, 300u32), (3, 120), (4, 500)] {
        let s = Setup {
            host: Some((16 << 10, permille, 8192, slots)),
            ..Setup::new(2)
        };
        let cases = host_path_cases();
        let used = std::cell::Cell::new([0usize; 2]);
        let look = |d: &mut SimDevice, r: usize| {
            let mut u = used.get();
            u[r] += copies_on(d, Lane::Host(0)) + copies_on(d, Lane::Host(1));
            used.set(u);
        };
        for (merged, seeds) in [(true, 0..2u64), (false, 0..3u64)] {
            for seed in seeds {
                if let Err(e) = simulate(&s, &cases, merged, seed * 31 + 5, Some(&look)) {
                    panic!("slots {slots} permille {permille} merged {merged} seed {seed}: {e}");
                }
            }
        }
        assert!(used.get().iter().all(|&u| u > 0), "{:?}", used.get());
    }
}

/// Whole transfers through the host path ([`HostPath::WHOLE`]): every byte of every
/// direct transfer through rings far shorter than the transfers (2 and 3 slots of 8 KiB
/// against 80 KB, so each moves in rounds), every data collective and exchange, in and out of
/// place, below the threshold too, random stream orders and both ranks' streams each merged
/// into one queue (the rounds must not deadlock there): all finish, all exact.
#[test]
fn whole_transfers_through_the_host_path_are_exact_and_never_deadlock() {
    for slots in [2u32, 3] {
        let s = Setup {
            host: Some((16 << 10, HostPath::WHOLE, 8192, slots)),
            ..Setup::new(2)
        };
        let cases = host_path_cases();
        for (merged, seeds) in [(true, 0..3u64), (false, 0..3u64)] {
            for seed in seeds {
                if let Err(e) = simulate(&s, &cases, merged, seed * 37 + 11, None) {
                    panic!("slots {slots} merged {merged} seed {seed}: {e}");
                }
            }
        }
    }
}

/// The checker must catch a broken host path: with the sources' credit waits gone, a source
/// overwrites ring slots its peer has not copied out yet, and some stream order shows it.
#[test]
fn the_simulation_catches_a_missing_host_path_credit_wait() {
    let s = Setup {
        host: Some((16 << 10, 500, 4096, 2)),
        ..Setup::new(2)
    };
    // One direction only, many times: nothing the source waits for implies that its peer
    // has copied the last transfer's chunks out of the ring. Sizes differ (the inputs depend
    // on the index only), so an overwritten slot holds other bytes.
    let cases: Vec<Case> = (0..8)
        .map(|k| Case {
            kind: Kind::Coll(Collective::Broadcast { root: 0 }),
            count: 20_000 + 777 * k,
            dtype: DataType::Int32,
            red: Reduction::Plain(ReduceKind::Sum),
            in_place: false,
        })
        .collect();
    let strip = |d: &mut SimDevice, _: usize| {
        if let Some(q) = d.lanes.get_mut(&Lane::Host(0)) {
            for op in q.iter_mut() {
                if let Op::Wait(a, _) = *op {
                    *op = Op::Wait(a, 0);
                }
            }
        }
    };
    assert!(simulate(&s, &cases, false, 1, None).is_ok());
    let caught =
        (0..32u64).any(|seed| simulate(&s, &cases, false, seed * 31 + 1, Some(&strip)).is_err());
    assert!(caught, "no stream order exposed the missing credit waits");
}

/// A send and its receive that disagree on the size, with the host path: the mismatch is
/// reported (once, by the second poster), and both ranks' queues still run to the end, in
/// any stream order, whichever side posts first and whichever is longer; nothing is read
/// or written outside either buffer (the simulated memory would refuse it).
#[test]
fn a_size_mismatch_on_the_host_path_still_finishes() {
    for (sb, rb) in [(40_000usize, 48_000usize), (48_000, 40_000)] {
        for sender_first in [true, false] {
            for (merged, seed) in [(true, 1u64), (false, 2), (false, 3)] {
                let s = Setup {
                    host: Some((16 << 10, 300, 8192, 2)),
                    ..Setup::new(2)
                };
                let layouts = s.layouts();
                let mut mem = s.protocol_mem();
                let dx = DirectSim::new(2);
                let (src, dst) = (base(0) + 0x1000_0000, base(1) + 0x1000_0000);
                mem.alloc(src, sb);
                mem.alloc(dst, rb);
                let mut send =
                    ccl_collectives::task::float_sum(TaskKind::Send { peer: 1 }, 0, 0, sb / 4);
                send.send = src as usize;
                let mut recv =
                    ccl_collectives::task::float_sum(TaskKind::Recv { peer: 0 }, 0, 0, rb / 4);
                recv.recv = dst as usize;
                let mut counters = [Counters::new(2, 1), Counters::new(2, 1)];
                let mut devs = vec![SimDevice::new(), SimDevice::new()];
                let mut mismatches = 0;
                let order = if sender_first { [0, 1] } else { [1, 0] };
                for r in order {
                    let t = if r == 0 { send } else { recv };
                    let p = lower(&[t], r, 2, usize::MAX, 0).unwrap();
                    let mut reach = SimReach {
                        rank: r,
                        unmappable: &[],
                    };
                    let boards = |q: usize| dx.boards.get(q).map(|b| b as &dyn Words);
                    let c = &mut counters[r];
                    let posting = posting::post_group(
                        &mut reach,
                        &p,
                        r,
                        c,
                        &boards,
                        None,
                        &|| false,
                        layouts[r].host.as_ref(),
                        &|| false,
                    )
                    .unwrap();
                    let now = std::time::Instant::now();
                    let how = posting::SettleHow {
                        wait: rendezvous::PushWait {
                            soft: now,
                            hard: now,
                            busy: &|| false,
                            futile: &|| false,
                        },
                        single_max: 0,
                        late: None,
                        local_split: plan::LocalSplit::default(),
                        wait_min_bytes: 0,
                        exchange_until: None,
                        remote_min: None,
                        host: layouts[r]
                            .host
                            .as_ref()
                            .map(|h| (h, &mut c.host_out, &mut c.host_in)),
                    };
                    let (plan, err) = posting
                        .settle(&mut reach, r, &boards, how, &|| false)
                        .unwrap();
                    mismatches += usize::from(err.is_some());
                    assert!(plan.transfers.iter().all(|t| t.host.is_some()));
                    let mut dev = Batched::new(&mut devs[r]);
                    plan.begin(&layouts[r], &mut dev).unwrap();
                    plan.end(&layouts[r], &mut dev).unwrap();
                    dev.flush().unwrap();
                }
                assert_eq!(mismatches, 1);
                if let Err(e) = run(&devs, &mut mem, merged, seed) {
                    panic!(
                        "send {sb} receive {rb} sender first {sender_first} merged {merged}: {e}"
                    );
                }
            }
        }
    }
}

/// Groups captured into CUDA graphs on the direct paths ([`super::captured`]): every rank's
/// offer, the agreement and the mappings as at capture, then each rank's program queued
/// `replays` times in a row (a graph replayed back to back, so a fast rank starts its next
/// replay while a slow one is still in the last). Checks every result and that every
/// captured word is back to 0.
fn simulate_captured(
    n: usize,
    cases: &[Case],
    one_group: bool,
    replays: usize,
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(), String> {
    use crate::captured::agree::{self, Offer};
    use crate::captured::group::{self, Group};
    // Every third seed: all-reduces of up to 2 KiB go one-shot (the cases' small counts).
    let one_shot = if seed % 3 == 1 { 2048 } else { 0 };
    let s = Setup::new(n);
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let groups = captured_groups(cases, n, one_group);
    let mut programs: Vec<Vec<Group>> = (0..n).map(|_| Vec::new()).collect();
    for (g, group) in groups.iter().enumerate() {
        let mut offers = Vec::new();
        for (r, t) in group.iter().enumerate() {
            let mut reach = SimReach {
                rank: r,
                unmappable: &[],
            };
            let o = agree::offer(g, t, (r, n), (true, one_shot), &mut reach);
            if !o.able {
                return Err(format!("group {g}: rank {r} cannot capture it directly"));
            }
            offers.push(Offer::decode(&o.encode()).ok_or("an offer did not round-trip")?);
        }
        for (r, t) in group.iter().enumerate() {
            let rows = agree::matching(&offers, r)?;
            let mut reach = SimReach {
                rank: r,
                unmappable: &[],
            };
            let ends =
                agree::ends_of(&offers, r, t, &rows, &mut reach).map_err(|e| e.to_string())?;
            // Scratch memory for receives onto send buffers, one region per group.
            let scratch = base(r) + 0x8000_0000 + g as u64 * BUF;
            let bytes = group::parked(t, r, n, one_shot).1;
            if bytes > 0 {
                mem.alloc(scratch, bytes);
            }
            programs[r].push(Group {
                index: g,
                tasks: t,
                ends,
                reduce_n: seed % 2 == 0,
                scratch,
                one_shot,
                fused: seed % 2 == 1,
            });
        }
    }
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    // Odd seeds: even ranks run small all-reduce groups as the fused kernel, odd ranks as
    // parts (the two forms must meet).
    for (r, d) in devs
        .iter_mut()
        .enumerate()
        .filter(|(r, _)| seed % 2 == 1 && r % 2 == 0)
    {
        let registers = base(r) + 0xa000_0000;
        mem.alloc(registers, 1 << 20);
        d.fused_registers = Some(registers);
    }
    for _ in 0..replays {
        for r in 0..n {
            for g in &programs[r] {
                group::emit(&mut devs[r], &layouts[r], g).map_err(|e| e.to_string())?;
            }
        }
    }
    if let Some(t) = tamper {
        for (r, d) in devs.iter_mut().enumerate() {
            t(d, r);
        }
    }
    run(&devs, &mut mem, merged, seed)?;
    check_captured(&mut mem, cases, &layouts, groups.len(), replays)
}

/// The groups a simulation captures, as group -> rank -> tasks: every case in one group, or
/// each case a group of its own.
fn captured_groups(cases: &[Case], n: usize, one_group: bool) -> Vec<Vec<Vec<Task>>> {
    if one_group {
        vec![(0..n)
            .map(|r| {
                cases
                    .iter()
                    .enumerate()
                    .flat_map(|(k, c)| tasks(c, k, r, n))
                    .collect()
            })
            .collect()]
    } else {
        cases
            .iter()
            .enumerate()
            .map(|(k, c)| (0..n).map(|r| tasks(c, k, r, n)).collect())
            .collect()
    }
}

/// Every captured case's result after `replays` replays, and every captured word of `groups`
/// groups back to 0.
fn check_captured(
    mem: &mut Mem,
    cases: &[Case],
    layouts: &[Layout],
    groups: usize,
    replays: usize,
) -> std::result::Result<(), String> {
    let n = layouts.len();
    for (k, case) in cases.iter().enumerate() {
        // An in-place sum reduces its last result again at every replay.
        let again = case.in_place
            && case.kind == Kind::Coll(Collective::AllReduce)
            && case.red == Reduction::Plain(ReduceKind::Sum);
        let factor = if again { n.pow(replays as u32 - 1) } else { 1 } as f64;
        for r in 0..n {
            let Some(mut want) = expected(case, r, n) else {
                continue;
            };
            if case.kind == Kind::Ring && case.in_place {
                // Every replay passes the buffers one rank further round the ring.
                let from = (r + n * replays - replays) % n;
                want = (0..case.count).map(|i| input(from, i) as f64).collect();
            }
            let (_, recv, _, _) = buffers(case, k, r, n);
            let want: Vec<u8> = want
                .iter()
                .flat_map(|&v| encode(case.dtype, v * factor))
                .collect();
            if mem.read(recv, want.len()) != want {
                return Err(format!("case {k} {case:?}: rank {r} wrong result"));
            }
        }
    }
    for g in 0..groups {
        for l in layouts {
            for kind in 0..3 {
                for from in 0..n {
                    let w = mem.word(l.captured_word(l.rank, g, kind, from));
                    if w != 0 {
                        return Err(format!(
                            "group {g}: rank {}'s word {kind} from {from} left at {w}",
                            l.rank
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// [`simulate_captured`] for host-only mode ([`crate::captured::host_only::HostOnlyGroup`]): the cases through
/// every rank's outbox (its receive slots) into the partners' GPU receive areas.
fn simulate_captured_host_only(
    n: usize,
    cases: &[Case],
    one_group: bool,
    replays: usize,
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(), String> {
    simulate_host_only_slots(1 << 18, n, cases, one_group, replays, merged, seed, tamper)
}

/// [`simulate_captured_host_only`] with slots of `chunk` bytes (two per peer): groups larger
/// than a slot region go in rounds.
#[allow(clippy::too_many_arguments)]
fn simulate_host_only_slots(
    chunk: usize,
    n: usize,
    cases: &[Case],
    one_group: bool,
    replays: usize,
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(), String> {
    use crate::captured::host_only::{self, HostOnlyGroup};
    let s = Setup {
        chunk,
        mirror: true,
        ..Setup::new(n)
    };
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let groups = captured_groups(cases, n, one_group);
    let region = s.slots as usize * s.chunk;
    // Rank -> its captured rounds (of every group, with the group's index), after the offers'
    // exchange.
    let mut plans: Vec<Vec<(usize, host_only::HostOnlyRound)>> =
        (0..n).map(|_| Vec::new()).collect();
    for (g, group) in groups.iter().enumerate() {
        let offers: Vec<Vec<u8>> = (0..n)
            .map(|r| host_only::host_only_offer_of(g, &group[r], r, n, region, true))
            .collect();
        if offers.iter().any(|o| o.first() != Some(&1)) {
            return Err(format!("group {g} is not taken host-only"));
        }
        for (r, plan) in plans.iter_mut().enumerate() {
            for round in host_only::host_only_plan(&group[r], r, n, region, &offers)? {
                plan.push((g, round));
            }
        }
    }
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    for _ in 0..replays {
        for (r, dev) in devs.iter_mut().enumerate() {
            for (g, (round, offsets, sources)) in &plans[r] {
                let hg = HostOnlyGroup {
                    index: *g,
                    tasks: round,
                    inputs: mirror_base(r),
                    reduce_n: seed % 2 == 0,
                    offsets: offsets.clone(),
                    sources: sources.clone(),
                };
                host_only::emit_host_only(dev, &layouts[r], &hg).map_err(|e| e.to_string())?;
            }
        }
    }
    if let Some(t) = tamper {
        for (r, d) in devs.iter_mut().enumerate() {
            t(d, r);
        }
    }
    run(&devs, &mut mem, merged, seed)?;
    check_captured(&mut mem, cases, &layouts, groups.len(), replays)
}

/// Host-only captured collectives (every kind, type, reduction and root the cases hold, in and
/// out of place) and sends and receives round a ring, alone or all in one group, replayed back to back, under random stream orders and
/// the merged single queue: exact, every word reset; without the `DONE` waits some order
/// overwrites an outbox a partner is still reading.
#[test]
fn host_only_captured_groups_replay_exact_and_reset_their_words() {
    let collectives = |n: usize, count: usize, replays: usize| -> Vec<Case> {
        captured_cases(n, count, replays)
            .into_iter()
            .filter(|c| matches!(c.kind, Kind::Coll(_) | Kind::Ring))
            .collect()
    };
    replay_every_setting(
        &[(2, &[1, 5, 1000]), (3, &[5, 1000]), (4, &[1000])],
        &collectives,
        4,
        simulate_captured_host_only,
    );
    let n = 3;
    let no_done_wait = without_done_waits(n);
    let cases = collectives(n, 1000, 3);
    let caught = (0..16u64).any(|seed| {
        simulate_captured_host_only(n, &cases, true, 3, false, seed, Some(&no_done_wait)).is_err()
    });
    assert!(caught, "no stream order showed the missing wait");
}

/// Host-only with eager groups around a captured one: the eager groups go chunk by chunk
/// through the ranks' receive slots, which the captured group uses as outboxes. Cases in turn
/// eager before, captured (all in one group), eager after; every result checked.
fn simulate_eager_around_captured_host_only(
    n: usize,
    cases: &[Case],
    merged: bool,
    seed: u64,
) -> std::result::Result<(), String> {
    use crate::captured::host_only::{self, HostOnlyGroup};
    let s = Setup {
        chunk: 1 << 16,
        direct: false,
        mirror: true,
        ..Setup::new(n)
    };
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let dx = DirectSim::new(n);
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    let mut counters: Vec<Counters> = (0..n).map(|_| Counters::new(n, s.rx_lanes)).collect();
    let capturable = |c: &Case| {
        matches!(c.kind, Kind::Coll(_) | Kind::Ring)
            && tasks(c, 0, 0, n)
                .iter()
                .all(crate::captured::steps::supported)
    };
    let phase = |k: usize, c: &Case| if capturable(c) { k % 3 } else { 0 };
    let eager = |devs: &mut Vec<SimDevice>, counters: &mut Vec<Counters>, which: usize| {
        for (k, c) in cases
            .iter()
            .enumerate()
            .filter(|&(k, c)| phase(k, c) == which)
        {
            for r in 0..n {
                s.queue(
                    &layouts[r],
                    &mut counters[r],
                    &mut devs[r],
                    &tasks(c, k, r, n),
                    &dx,
                )
                .map_err(|e| format!("eager case {k} {c:?} rank {r}: {e}"))?;
            }
        }
        Ok::<(), String>(())
    };
    eager(&mut devs, &mut counters, 0)?;
    let group: Vec<Vec<Task>> = (0..n)
        .map(|r| {
            cases
                .iter()
                .enumerate()
                .filter(|&(k, c)| phase(k, c) == 1)
                .flat_map(|(k, c)| tasks(c, k, r, n))
                .collect()
        })
        .collect();
    let region = s.slots as usize * s.chunk;
    let offsets: Vec<Vec<usize>> = (0..n)
        .map(|r| host_only::host_only_offsets(&group[r], r, n, region).ok_or("no fit"))
        .collect::<std::result::Result<_, _>>()?;
    let offers: Vec<Vec<u8>> = (0..n)
        .map(|r| host_only::host_only_offer(0, &group[r], Some(&offsets[r])))
        .collect();
    for r in 0..n {
        let hg = HostOnlyGroup {
            index: 0,
            tasks: &group[r],
            inputs: mirror_base(r),
            reduce_n: seed % 2 == 0,
            offsets: offsets[r].clone(),
            sources: host_only::host_only_sources(r, &offers)?,
        };
        host_only::emit_host_only(&mut devs[r], &layouts[r], &hg).map_err(|e| e.to_string())?;
    }
    eager(&mut devs, &mut counters, 2)?;
    run(&devs, &mut mem, merged, seed)?;
    for (k, case) in cases.iter().enumerate() {
        for r in 0..n {
            let Some(want) = expected(case, r, n) else {
                continue;
            };
            let (_, recv, _, _) = buffers(case, k, r, n);
            let want: Vec<u8> = want.iter().flat_map(|&v| encode(case.dtype, v)).collect();
            if mem.read(recv, want.len()) != want {
                return Err(format!(
                    "case {k} {case:?} (phase {}): rank {r} wrong result",
                    phase(k, case)
                ));
            }
        }
    }
    Ok(())
}

/// Eager groups through the slots before and after a captured group that uses them as
/// outboxes (host-only), 2-4 ranks, random and merged orders: every result exact. (Unlike the
/// replay test, these orders do not show a missing `DONE` wait: that test is the one that
/// guards it.)
#[test]
fn eager_groups_around_a_host_only_captured_group_stay_exact() {
    for n in [2usize, 3, 4] {
        let cases = every_case(n, 3000);
        for (merged, seeds) in [(true, 0..3u64), (false, 0..6u64)] {
            for seed in seeds {
                if let Err(e) = simulate_eager_around_captured_host_only(n, &cases, merged, seed) {
                    panic!("n {n} merged {merged} seed {seed}: {e}");
                }
            }
        }
    }
}

/// Host-only captured all-reduces, broadcasts and reduces larger than a slot region (8 KiB
/// here, 12 KB operations) go in rounds of pieces: exact after replays, every word reset.
#[test]
fn large_host_only_captured_reductions_go_in_rounds() {
    for n in [2usize, 3, 4] {
        let cases: Vec<Case> = captured_cases(n, 3000, 3)
            .into_iter()
            .filter(|c| {
                matches!(
                    c.kind,
                    Kind::Coll(
                        Collective::AllReduce
                            | Collective::Broadcast { .. }
                            | Collective::Reduce { .. }
                    )
                )
            })
            .collect();
        assert!(cases.len() >= 4, "{} cases", cases.len());
        for one_group in [false, true] {
            for (merged, seeds) in [(true, 0..2u64), (false, 0..4u64)] {
                for seed in seeds {
                    if let Err(e) =
                        simulate_host_only_slots(4096, n, &cases, one_group, 3, merged, seed, None)
                    {
                        panic!("n {n} one group {one_group} merged {merged} seed {seed}: {e}");
                    }
                }
            }
        }
    }
}

/// A simulation of captured groups: (ranks, cases, all in one group, replays, merged queue,
/// seed, tamper).
type CapturedSim = fn(
    usize,
    &[Case],
    bool,
    usize,
    bool,
    u64,
    Option<Tamper<'_>>,
) -> std::result::Result<(), String>;

/// Runs `sim` for every (ranks, count) of `sizes` over `cases_of(ranks, count, replays)` (at
/// least `min_cases` of them): one and three replays, each case alone or all in one group,
/// random and merged orders.
fn replay_every_setting(
    sizes: &[(usize, &[usize])],
    cases_of: &dyn Fn(usize, usize, usize) -> Vec<Case>,
    min_cases: usize,
    sim: CapturedSim,
) {
    for &(n, counts) in sizes {
        for &count in counts {
            for replays in [1usize, 3] {
                let cases = cases_of(n, count, replays);
                assert!(cases.len() >= min_cases, "{} cases", cases.len());
                for one_group in [false, true] {
                    for (merged, seeds) in [(true, 0..2u64), (false, 0..4u64)] {
                        for seed in seeds {
                            if let Err(e) =
                                sim(n, &cases, one_group, replays, merged, seed * 31 + 7, None)
                            {
                                panic!(
                                    "n {n} count {count} replays {replays} one group {one_group} \
                                     merged {merged} seed {seed}: {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A tamper that turns every wait for a partner's `DONE` word of group 0 (`n` ranks) into a
/// wait for nothing.
fn without_done_waits(n: usize) -> impl Fn(&mut SimDevice, usize) {
    let done_words: Vec<u64> = Setup::new(n)
        .layouts()
        .iter()
        .flat_map(|l| (0..n).map(move |from| l.captured_word(l.rank, 0, 2, from)))
        .collect();
    move |d: &mut SimDevice, _r: usize| {
        for q in d.lanes.values_mut() {
            for op in q.iter_mut() {
                if let Op::Wait(a, _) = *op {
                    if done_words.contains(&a) {
                        *op = Op::Wait(a, 0);
                    }
                }
            }
        }
    }
}

/// The cases the captured direct paths take; with several replays, only those whose result a
/// replay reproduces (or, an in-place sum, multiplies by the rank count).
fn captured_cases(n: usize, count: usize, replays: usize) -> Vec<Case> {
    every_case(n, count)
        .into_iter()
        .filter(|c| {
            let t = tasks(c, 0, 0, n);
            t.iter().all(crate::captured::steps::supported)
                && (replays == 1
                    || !c.in_place
                    || matches!(
                        c.kind,
                        // Three all-to-alls in place transpose the blocks as one does.
                        Kind::Coll(
                            Collective::AllReduce | Collective::AllGather | Collective::AlltoAll
                        )
                    )
                    || c.kind == Kind::Ring)
        })
        .collect()
}

/// Every collective the captured direct paths take, alone or all in one group, replayed back to
/// back, under random stream orders and the merged single queue: exact, every word reset.
#[test]
fn captured_groups_replay_exact_and_reset_their_words() {
    replay_every_setting(
        &[
            (2, &[1, 5, 1000]),
            (3, &[5, 1000]),
            (4, &[1, 1000]),
            (9, &[5]),
        ],
        &captured_cases,
        8,
        simulate_captured,
    );
}

/// The checker catches a broken captured program: with the waits for the partners' `DONE`
/// gone, a rank's next replay overwrites what a partner is still reading (or resets a word
/// the partner set for it), and some stream order shows it.
#[test]
fn the_simulation_catches_a_captured_group_that_does_not_wait_for_done() {
    let n = 3;
    let no_done_wait = without_done_waits(n);
    let cases = captured_cases(n, 1000, 3);
    let caught = (0..8u64).any(|seed| {
        simulate_captured(n, &cases, true, 3, false, seed, Some(&no_done_wait)).is_err()
    });
    assert!(caught, "no stream order showed the missing wait");
    for seed in 0..4u64 {
        simulate_captured(n, &cases, true, 3, false, seed, None).unwrap();
    }
}
