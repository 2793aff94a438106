//! The staged protocol, without CUDA: lowering a group into chunk transfers through the
//! receive slots, ordering them by logical time, and queueing the flag waits, flag writes,
//! copies and kernels on a [`Device`].
//!
//! Flags (one 32-bit word per 64-byte line in each rank's device memory): per sender and per
//! receive slot a `ready` word (the sender writes the chunk's sequence number after its copy
//! into the slot) and a `credit` word in the sender's memory (the receiver writes it once the
//! slot is consumed); per receive lane a `local` word (a reduction finished, for sends of
//! reduced data). Every word only grows: a slot is reused only after its credit, so its
//! `ready` and `credit` values come in order whatever lanes carry them.

use std::collections::HashMap;

use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use crate::device::{Device, Kernel};
use crate::error::{Error, Result};
use crate::layout::{Lane, Layout};
use ccl_collectives::task::{buffer_counts, Reduction, Task, TaskKind};

/// Smallest chunk a piece is cut into, unless the piece itself is smaller.
pub(crate) const MIN_CHUNK: usize = 1 << 20;

/// Chunk size for a piece of `bytes`: about a quarter of the piece (so even a mid-sized piece
/// pipelines), between [`MIN_CHUNK`] and the slot size. Both sides compute it from the piece
/// alone, which they agree on.
pub(crate) fn piece_chunk(bytes: usize, slot: usize) -> usize {
    (bytes / 4)
        .clamp(MIN_CHUNK.min(slot), slot)
        .next_multiple_of(4096)
        .min(slot)
}

/// Sequence numbers one rank has queued (every rank counts alike).
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    /// Chunks sent to / received from each peer (wrapping, as the flags).
    pub sent: Vec<u32>,
    pub recvd: Vec<u32>,
    /// Chunks sent to each peer, never wrapping: the first `slots` need no credit.
    pub sent_total: Vec<u64>,
    /// Reductions finished, per receive lane.
    pub local: Vec<u32>,
    /// Direct transfers to / from each peer.
    pub direct_out: Vec<u64>,
    pub direct_in: Vec<u64>,
    /// Collectives offered to run directly (every rank counts alike).
    pub sym: u64,
    /// Host-path chunks to / from each peer ([`crate::host_path::HostPath`]).
    pub host_out: Vec<u64>,
    pub host_in: Vec<u64>,
}

impl Counters {
    pub fn new(nranks: usize, rx_lanes: usize) -> Counters {
        Counters {
            sent: vec![0; nranks],
            recvd: vec![0; nranks],
            sent_total: vec![0; nranks],
            local: vec![0; rx_lanes],
            direct_out: vec![0; nranks],
            direct_in: vec![0; nranks],
            sym: 0,
            host_out: vec![0; nranks],
            host_in: vec![0; nranks],
        }
    }
}

/// How a received chunk is used.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act {
    Copy {
        dst: u64,
    },
    /// `dst = local (op) incoming` for the first contribution, `dst (op)= incoming` after.
    Reduce {
        target: usize,
        dst: u64,
        local: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct TxPiece {
    pub task: usize,
    pub src: u64,
    pub bytes: usize,
    pub base_t: u64,
    /// Sends reduced data of this target: each chunk waits for its reduction.
    pub after: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RxPiece {
    pub task: usize,
    pub bytes: usize,
    pub base_t: u64,
    pub act: Act,
}

/// A buffer that receives a reduction from several peers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub dtype: DataType,
    pub arith: ReduceKind,
    /// Float Avg (1/n) or PreMulSum: every contribution is scaled, the local one fused.
    pub scalar: Option<[u8; 8]>,
    /// Integer Avg: divide by this once complete.
    pub postdiv: Option<u64>,
    pub contributions: usize,
    /// Some send waits for its chunks (all-reduce's second half).
    pub signals: bool,
}

/// One group lowered to per-peer transfers.
pub(crate) struct Program {
    pub tx: Vec<Vec<TxPiece>>,
    pub rx: Vec<Vec<RxPiece>>,
    /// Copies within this rank: (dst, src, bytes).
    pub locals: Vec<(u64, u64, usize)>,
    /// Kernels within this rank, after the copies (a one-rank PreMulSum).
    pub local_kernels: Vec<Kernel>,
    pub targets: Vec<Target>,
    pub all_reduce: Vec<bool>,
    /// Per task: the logical times its pieces take, from its start (the same on every rank:
    /// computed from the task alone), and whether it is a send or receive.
    pub spans: Vec<(u64, bool)>,
}

/// How many chunks a piece of `bytes` is cut into.
fn chunks_of(bytes: usize, chunk: usize) -> u64 {
    bytes.div_ceil(piece_chunk(bytes, chunk)) as u64
}

fn slice(count: usize, n: usize, i: usize) -> (usize, usize) {
    let lo = (count as u128 * i as u128 / n as u128) as usize;
    let hi = (count as u128 * (i as u128 + 1) / n as u128) as usize;
    (lo, hi - lo)
}

fn addr(base: usize, off_elems: usize, size: usize) -> u64 {
    (base as u64).wrapping_add((off_elems as u64).wrapping_mul(size as u64))
}

/// Lowers a group for `rank` of `n`. All-reduces of two ranks moving at most `one_shot_max`
/// bytes in all go one-shot (the caller runs those on one stream: their send and receive
/// ranges alias in place).
pub(crate) fn lower(
    tasks: &[Task],
    rank: usize,
    n: usize,
    chunk: usize,
    one_shot_max: usize,
) -> Result<Program> {
    let mut p = Program {
        tx: vec![Vec::new(); n],
        rx: vec![Vec::new(); n],
        locals: Vec::new(),
        local_kernels: Vec::new(),
        targets: Vec::new(),
        all_reduce: vec![false; tasks.len()],
        spans: Vec::with_capacity(tasks.len()),
    };
    let mut self_sends: Vec<(u64, usize)> = Vec::new();
    let mut self_recvs: Vec<(u64, usize)> = Vec::new();
    for (ti, t) in tasks.iter().enumerate() {
        buffer_counts(t.kind, rank, n, t.count)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let sz = t.dtype.size();
        let b = t
            .count
            .checked_mul(sz)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let (send, recv) = (t.send, t.recv);
        // Every piece of a collective but an all-reduce's second half is one of `b` bytes from
        // its start; the all-reduce says its own below.
        let p2p = matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. });
        p.spans.push((chunks_of(b, chunk), p2p));
        let mut target = |contributions: usize, signals: bool| {
            let scalar = ccl_cuda::host::reduce::premul_scalar(t, n);
            let postdiv =
                (matches!(t.red, Reduction::Avg) && !t.dtype.is_float()).then_some(n as u64);
            p.targets.push(Target {
                dtype: t.dtype,
                arith: t.red.arithmetic(),
                scalar,
                postdiv,
                contributions,
                signals,
            });
            p.targets.len() - 1
        };
        let tx = |p: &mut Program, peer: usize, src: u64, bytes: usize, base_t: u64, after| {
            if bytes > 0 {
                p.tx[peer].push(TxPiece {
                    task: ti,
                    src,
                    bytes,
                    base_t,
                    after,
                });
            }
        };
        let rx = |p: &mut Program, peer: usize, bytes: usize, base_t: u64, act: Act| {
            if bytes > 0 {
                p.rx[peer].push(RxPiece {
                    task: ti,
                    bytes,
                    base_t,
                    act,
                });
            }
        };
        let local = |p: &mut Program, dst: u64, src: u64, bytes: usize| {
            if bytes > 0 && dst != src {
                p.locals.push((dst, src, bytes));
            }
        };
        let peers = (0..n).filter(|&q| q != rank);
        let reduces = matches!(
            t.kind,
            TaskKind::Coll(
                Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
            )
        );
        if n == 1 && reduces {
            // One rank: the result is the input, scaled for PreMulSum (and float Avg by 1/1,
            // which the kernel keeps exact); integer Avg divides by one.
            let g = target(0, false);
            match p.targets[g].scalar {
                Some(scalar) if b > 0 => p.local_kernels.push(Kernel::PreMul {
                    dtype: t.dtype,
                    dst: recv as u64,
                    src: send as u64,
                    n: t.count,
                    scalar,
                }),
                _ => local(&mut p, recv as u64, send as u64, b),
            }
            continue;
        }
        match t.kind {
            TaskKind::Coll(Collective::AllReduce)
                if n == 2 && b <= one_shot_max / 2 && matches!(t.red, Reduction::Plain(_)) =>
            {
                // Small, two ranks: each sends everything and reduces everything (one copy
                // and one kernel each instead of two of each). `a (op) b` is symmetric, so
                // both ranks compute the same bits; Avg and PreMulSum are not (the local
                // input is fused, the peer's rounded first), so they keep one owner per
                // element.
                p.all_reduce[ti] = true;
                let g = target(1, false);
                for q in peers {
                    tx(&mut p, q, send as u64, b, 0, None);
                    let act = Act::Reduce {
                        target: g,
                        dst: recv as u64,
                        local: send as u64,
                    };
                    rx(&mut p, q, b, 0, act);
                }
            }
            TaskKind::Coll(Collective::AllReduce) => {
                p.all_reduce[ti] = true;
                let (lo_r, len_r) = slice(t.count, n, rank);
                let max_chunks = (0..n)
                    .map(|i| chunks_of(slice(t.count, n, i).1 * sz, chunk))
                    .max()
                    .unwrap_or(0);
                p.spans[ti].0 = 2 * max_chunks;
                let g = target(n - 1, true);
                for q in peers.clone() {
                    let (lo_q, len_q) = slice(t.count, n, q);
                    tx(&mut p, q, addr(send, lo_q, sz), len_q * sz, 0, None);
                    let act = Act::Reduce {
                        target: g,
                        dst: addr(recv, lo_r, sz),
                        local: addr(send, lo_r, sz),
                    };
                    rx(&mut p, q, len_r * sz, 0, act);
                }
                for q in peers {
                    let (lo_q, len_q) = slice(t.count, n, q);
                    tx(
                        &mut p,
                        q,
                        addr(recv, lo_r, sz),
                        len_r * sz,
                        max_chunks,
                        Some(g),
                    );
                    let dst = addr(recv, lo_q, sz);
                    rx(&mut p, q, len_q * sz, max_chunks, Act::Copy { dst });
                }
            }
            TaskKind::Coll(Collective::ReduceScatter) => {
                let g = target(n - 1, false);
                for q in peers {
                    tx(&mut p, q, addr(send, q * t.count, sz), b, 0, None);
                    let act = Act::Reduce {
                        target: g,
                        dst: recv as u64,
                        local: addr(send, rank * t.count, sz),
                    };
                    rx(&mut p, q, b, 0, act);
                }
            }
            TaskKind::Coll(Collective::Reduce { root }) => {
                if rank == root {
                    let g = target(n - 1, false);
                    for q in peers {
                        let act = Act::Reduce {
                            target: g,
                            dst: recv as u64,
                            local: send as u64,
                        };
                        rx(&mut p, q, b, 0, act);
                    }
                } else {
                    tx(&mut p, root, send as u64, b, 0, None);
                }
            }
            TaskKind::Coll(Collective::Broadcast { root }) => {
                if rank == root {
                    for q in peers {
                        tx(&mut p, q, send as u64, b, 0, None);
                    }
                    local(&mut p, recv as u64, send as u64, b);
                } else {
                    rx(&mut p, root, b, 0, Act::Copy { dst: recv as u64 });
                }
            }
            TaskKind::Coll(Collective::AllGather) => {
                for q in peers {
                    tx(&mut p, q, send as u64, b, 0, None);
                    let dst = addr(recv, q * t.count, sz);
                    rx(&mut p, q, b, 0, Act::Copy { dst });
                }
                local(&mut p, addr(recv, rank * t.count, sz), send as u64, b);
            }
            TaskKind::Coll(Collective::AlltoAll) => {
                for q in peers {
                    tx(&mut p, q, addr(send, q * t.count, sz), b, 0, None);
                    let dst = addr(recv, q * t.count, sz);
                    rx(&mut p, q, b, 0, Act::Copy { dst });
                }
                let at = rank * t.count;
                local(&mut p, addr(recv, at, sz), addr(send, at, sz), b);
            }
            TaskKind::Coll(Collective::Gather { root }) => {
                if rank == root {
                    for q in peers {
                        let dst = addr(recv, q * t.count, sz);
                        rx(&mut p, q, b, 0, Act::Copy { dst });
                    }
                    local(&mut p, addr(recv, rank * t.count, sz), send as u64, b);
                } else {
                    tx(&mut p, root, send as u64, b, 0, None);
                }
            }
            TaskKind::Coll(Collective::Scatter { root }) => {
                if rank == root {
                    for q in peers {
                        tx(&mut p, q, addr(send, q * t.count, sz), b, 0, None);
                    }
                    local(&mut p, recv as u64, addr(send, rank * t.count, sz), b);
                } else {
                    rx(&mut p, root, b, 0, Act::Copy { dst: recv as u64 });
                }
            }
            TaskKind::Send { peer } if peer == rank => self_sends.push((send as u64, b)),
            TaskKind::Recv { peer } if peer == rank => self_recvs.push((recv as u64, b)),
            TaskKind::Send { peer } => tx(&mut p, peer, send as u64, b, 0, None),
            TaskKind::Recv { peer } => rx(&mut p, peer, b, 0, Act::Copy { dst: recv as u64 }),
        }
    }
    if self_sends.len() != self_recvs.len() {
        return Err(Error::invalid_usage(format!(
            "{} sends to self but {} receives from self in one group",
            self_sends.len(),
            self_recvs.len()
        )));
    }
    for ((src, sb), (dst, rb)) in self_sends.into_iter().zip(self_recvs) {
        if sb != rb {
            return Err(Error::invalid_usage(format!(
                "a send to self of {sb} bytes meets a receive from self of {rb} bytes"
            )));
        }
        if dst != src && sb > 0 {
            p.locals.push((dst, src, sb));
        }
    }
    Ok(p)
}

impl Program {
    pub fn bytes(&self) -> usize {
        let tx: usize = self.tx.iter().flatten().map(|x| x.bytes).sum();
        let rx: usize = self.rx.iter().flatten().map(|x| x.bytes).sum();
        tx + rx
    }

    /// Whether a receive may overwrite memory a send still has to read. All-reduce's halves
    /// are causally ordered (the peer's second-half chunk exists only after it received ours),
    /// so only other combinations count.
    pub fn aliases(&self) -> bool {
        let writes: Vec<(usize, u64, usize)> = self
            .rx
            .iter()
            .flatten()
            .map(|r| {
                let dst = match r.act {
                    Act::Copy { dst } | Act::Reduce { dst, .. } => dst,
                };
                (r.task, dst, r.bytes)
            })
            .chain(self.locals.iter().map(|&(d, _, b)| (usize::MAX, d, b)))
            .collect();
        self.tx.iter().flatten().any(|s| {
            writes.iter().any(|&(task, dst, bytes)| {
                !(task == s.task && self.all_reduce.get(task).copied().unwrap_or(false))
                    && overlap(s.src, s.bytes, dst, bytes)
            })
        })
    }
}

/// Does `[a, a+al)` overlap `[b, b+bl)`?
pub(crate) fn overlap(a: u64, al: usize, b: u64, bl: usize) -> bool {
    a < b.saturating_add(bl as u64) && b < a.saturating_add(al as u64)
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ItemKind {
    Tx {
        src: u64,
        bytes: usize,
        after: Option<(usize, usize)>,
    },
    Rx {
        bytes: usize,
        act: Act,
        chunk: usize,
        off: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub t: u64,
    pub peer: usize,
    pub kind: ItemKind,
}

/// Cuts one peer's pieces, given as (bytes, base time), into chunks: (piece index, chunk index,
/// logical time, offset, bytes).
fn chunk_times(
    pieces: impl Iterator<Item = (usize, u64)>,
    chunk: usize,
) -> Vec<(usize, usize, u64, usize, usize)> {
    let mut out = Vec::new();
    let mut last: Option<u64> = None;
    for (i, (bytes, base_t)) in pieces.enumerate() {
        let pc = piece_chunk(bytes, chunk);
        for k in 0..bytes.div_ceil(pc) {
            let t = (base_t + k as u64).max(last.map_or(0, |l| l + 1));
            last = Some(t);
            let off = k * pc;
            out.push((i, k, t, off, (bytes - off).min(pc)));
        }
    }
    out
}

/// One peer's pieces in one direction as chunks at their logical times: (piece, chunk index,
/// time, offset, bytes). `what` gives a piece's (task, bytes, base time); collectives' pieces
/// go first, then the transfers', each in group order, from their tasks' `starts`.
fn timed<'a, P>(
    pieces: &'a [P],
    what: impl Fn(&P) -> (usize, usize, u64),
    p: &Program,
    starts: &[u64],
    chunk: usize,
) -> Vec<(&'a P, usize, u64, usize, usize)> {
    let p2p_of = |task: usize| p.spans.get(task).is_some_and(|s| s.1);
    let mut ordered: Vec<&P> = pieces.iter().collect();
    // Stable: group order within each kind.
    ordered.sort_by_key(|&x| p2p_of(what(x).0));
    let spans = ordered.iter().map(|&x| {
        let (task, bytes, base_t) = what(x);
        (bytes, starts.get(task).copied().unwrap_or(0) + base_t)
    });
    chunk_times(spans, chunk)
        .into_iter()
        .map(|(i, k, t, off, bytes)| (ordered[i], k, t, off, bytes))
        .collect()
}

/// Chunks the program and orders it by logical time: per peer and direction, chunk k of a
/// piece gets `max(start + base_t + k, previous + 1)`, computed alike by the sender and the
/// receiver. A collective's `start` is the sum of the spans of the group's collectives before
/// it, the same on every rank, so each one's pieces begin at one time in both directions with
/// every peer, whatever came before (an all-reduce's second half then follows the receives that
/// reduce it: by a clock per peer and direction, a receive from a peer that sent this rank
/// more before could come later than the send of its result). Sends and receives come after
/// every collective of the group, in their order.
pub(crate) fn schedule(p: &Program, chunk: usize) -> Vec<Item> {
    let mut starts = vec![0u64; p.spans.len()];
    let mut clock = 0u64;
    for (start, &(span, p2p)) in starts.iter_mut().zip(&p.spans) {
        if !p2p {
            *start = clock;
            clock += span;
        }
    }
    for (start, &(_, p2p)) in starts.iter_mut().zip(&p.spans) {
        if p2p {
            *start = clock;
        }
    }
    let mut items = Vec::new();
    for (peer, pieces) in p.tx.iter().enumerate() {
        for (s, k, t, off, bytes) in
            timed(pieces, |s| (s.task, s.bytes, s.base_t), p, &starts, chunk)
        {
            let kind = ItemKind::Tx {
                src: s.src + off as u64,
                bytes,
                after: s.after.map(|g| (g, k)),
            };
            items.push(Item { t, peer, kind });
        }
    }
    for (peer, pieces) in p.rx.iter().enumerate() {
        for (r, k, t, off, bytes) in
            timed(pieces, |r| (r.task, r.bytes, r.base_t), p, &starts, chunk)
        {
            let kind = ItemKind::Rx {
                bytes,
                act: r.act,
                chunk: k,
                off: off as u64,
            };
            items.push(Item { t, peer, kind });
        }
    }
    items.sort_by_key(|i| (i.t, matches!(i.kind, ItemKind::Rx { .. }), i.peer));
    items
}

/// One lowered group being queued.
pub(crate) struct Emission {
    pub items: Vec<Item>,
    next: usize,
    pub program: Program,
    /// Everything on the caller's stream (small groups, aliasing buffers).
    pub single: bool,
    contributions: HashMap<(usize, usize), usize>,
    /// (receive lane, value of its `local` word) once a chunk of a target is reduced.
    reduced: HashMap<(usize, usize), (usize, u32)>,
}

impl Emission {
    pub fn new(program: Program, chunk: usize, single: bool) -> Emission {
        let items = schedule(&program, chunk);
        Emission {
            items,
            next: 0,
            program,
            single,
            contributions: HashMap::new(),
            reduced: HashMap::new(),
        }
    }

    /// The last logical time plus one (0 when there is nothing to move).
    pub fn horizon(&self) -> u64 {
        self.items.last().map_or(0, |i| i.t + 1)
    }

    fn lanes(&self, l: &Layout) -> Vec<Lane> {
        (0..l.tx_lanes)
            .map(Lane::Tx)
            .chain((0..l.rx_lanes).map(Lane::Rx))
            .collect()
    }

    fn tx_lane(&self, l: &Layout, seq: u32) -> Lane {
        if self.single {
            Lane::User
        } else {
            Lane::Tx(seq as usize % l.tx_lanes)
        }
    }

    /// Receives of one reduction chunk stay on one lane (they accumulate into the same
    /// output); copies spread by sequence number.
    fn rx_lane(&self, l: &Layout, seq: u32, act: Act, chunk: usize) -> (Lane, usize) {
        let i = match act {
            Act::Reduce { target, .. } => (target + chunk) % l.rx_lanes,
            Act::Copy { .. } => seq as usize % l.rx_lanes,
        };
        if self.single {
            (Lane::User, i)
        } else {
            (Lane::Rx(i), i)
        }
    }

    /// Forks the lanes off the caller's stream and queues the local copies.
    pub fn begin(&mut self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        if !self.single {
            dev.fork(&self.lanes(l))?;
        }
        let lane = if self.single { Lane::User } else { Lane::Rx(0) };
        for &(dst, src, bytes) in &self.program.locals {
            dev.copy(lane, dst, src, bytes)?;
        }
        for &k in &self.program.local_kernels {
            dev.kernel(lane, k)?;
        }
        Ok(())
    }

    /// Joins the lanes back into the caller's stream.
    pub fn end(&mut self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        if !self.single {
            dev.join(&self.lanes(l))?;
        }
        Ok(())
    }

    /// Queues every item with logical time below `until`.
    pub fn emit_until(
        &mut self,
        until: u64,
        l: &Layout,
        c: &mut Counters,
        dev: &mut dyn Device,
    ) -> Result<()> {
        while let Some(&it) = self.items.get(self.next) {
            if it.t >= until {
                break;
            }
            self.emit(it, l, c, dev)?;
            self.next += 1;
        }
        Ok(())
    }

    fn emit(&mut self, it: Item, l: &Layout, c: &mut Counters, dev: &mut dyn Device) -> Result<()> {
        let (me, p) = (l.rank, it.peer);
        match it.kind {
            ItemKind::Tx { src, bytes, after } => {
                c.sent[p] = c.sent[p].wrapping_add(1);
                c.sent_total[p] += 1;
                let seq = c.sent[p];
                let slot = seq % l.slots;
                let lane = self.tx_lane(l, seq);
                if c.sent_total[p] > l.slots as u64 {
                    dev.wait(lane, l.credit(me, p, slot), seq.wrapping_sub(l.slots))?;
                }
                // On one stream the reduction is already ahead of this send.
                if let Some(key) = after.filter(|_| !self.single) {
                    let (rx, v) = *self.reduced.get(&key).ok_or_else(|| {
                        Error::internal("cuda-ipc: a send is ordered before its reduction")
                    })?;
                    dev.wait(lane, l.local(rx), v)?;
                }
                dev.copy(lane, l.slot_addr(p, me, slot), src, bytes)?;
                dev.write(lane, l.ready(p, me, slot), seq)?;
            }
            ItemKind::Rx {
                bytes,
                act,
                chunk,
                off,
            } => {
                c.recvd[p] = c.recvd[p].wrapping_add(1);
                let seq = c.recvd[p];
                let slot = seq % l.slots;
                let incoming = l.slot_addr(me, p, slot);
                let (lane, idx) = self.rx_lane(l, seq, act, chunk);
                dev.wait(lane, l.ready(me, p, slot), seq)?;
                match act {
                    Act::Copy { dst } => dev.copy(lane, dst + off, incoming, bytes)?,
                    Act::Reduce { target, dst, local } => {
                        let incoming = match l.mirror_slot(p, slot) {
                            Some(m) => {
                                dev.copy(lane, m, incoming, bytes)?;
                                m
                            }
                            None => incoming,
                        };
                        self.reduce_chunk(
                            l,
                            c,
                            dev,
                            (lane, idx),
                            (target, chunk),
                            (dst + off, local + off, incoming),
                            bytes,
                        )?
                    }
                }
                dev.write(lane, l.credit(p, me, slot), seq)?;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_chunk(
        &mut self,
        l: &Layout,
        c: &mut Counters,
        dev: &mut dyn Device,
        (lane, idx): (Lane, usize),
        (target, chunk): (usize, usize),
        (dst, local, incoming): (u64, u64, u64),
        bytes: usize,
    ) -> Result<()> {
        let tg = *self
            .program
            .targets
            .get(target)
            .ok_or_else(|| Error::internal("cuda-ipc: unknown reduction target"))?;
        let (dtype, n) = (tg.dtype, bytes / tg.dtype.size());
        let done = self.contributions.entry((target, chunk)).or_insert(0);
        let first = *done == 0;
        *done += 1;
        let complete = *done == tg.contributions;
        match tg.scalar {
            Some(scalar) => {
                let (dst_in, src) = (incoming, incoming);
                dev.kernel(
                    lane,
                    Kernel::PreMul {
                        dtype,
                        dst: dst_in,
                        src,
                        n,
                        scalar,
                    },
                )?;
                if first {
                    let k = Kernel::PreMulAdd {
                        dtype,
                        dst,
                        src: local,
                        acc: incoming,
                        n,
                        scalar,
                    };
                    dev.kernel(lane, k)?;
                } else {
                    let k = Kernel::Reduce {
                        dtype,
                        op: ReduceKind::Sum,
                        dst,
                        a: incoming,
                        b: dst,
                        n,
                    };
                    dev.kernel(lane, k)?;
                }
            }
            None => {
                let b = if first { local } else { dst };
                dev.kernel(
                    lane,
                    Kernel::Reduce {
                        dtype,
                        op: tg.arith,
                        dst,
                        a: incoming,
                        b,
                        n,
                    },
                )?;
            }
        }
        if complete {
            if let Some(divisor) = tg.postdiv {
                dev.kernel(
                    lane,
                    Kernel::DivInt {
                        dtype,
                        dst,
                        n,
                        divisor,
                    },
                )?;
            }
            if tg.signals {
                c.local[idx] = c.local[idx].wrapping_add(1);
                dev.write(lane, l.local(idx), c.local[idx])?;
                self.reduced.insert((target, chunk), (idx, c.local[idx]));
            }
        }
        Ok(())
    }
}

/// A group's staged work as emissions one after another in logical time: its collectives,
/// then its point-to-point transfers. Each schedule alone is the same on every rank that takes
/// part; mixed into one, a rank's own point-to-point pieces would shift its reduction chunks
/// behind the sends of their results (which on one stream means sending unreduced data).
pub(crate) struct Chain {
    parts: Vec<Emission>,
    /// Logical time at which each part starts.
    starts: Vec<u64>,
    cur: usize,
}

impl Chain {
    /// Lowers `tasks` for `rank` of `n`, collectives and point-to-point apart.
    pub fn lower(
        tasks: &[Task],
        rank: usize,
        n: usize,
        chunk: usize,
        single_max: usize,
    ) -> Result<Chain> {
        let (p2p, colls): (Vec<Task>, Vec<Task>) = tasks
            .iter()
            .partition(|t| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. }));
        let groups: Vec<&[Task]> = if p2p.is_empty() || colls.is_empty() {
            vec![tasks]
        } else {
            vec![&colls, &p2p]
        };
        let mut parts = Vec::with_capacity(groups.len());
        for g in groups {
            let p = lower(g, rank, n, chunk, single_max)?;
            let single = p.bytes() <= single_max || p.aliases();
            parts.push(Emission::new(p, chunk, single));
        }
        Ok(Chain::new(parts))
    }

    pub fn new(parts: Vec<Emission>) -> Chain {
        let mut starts = Vec::with_capacity(parts.len());
        let mut t = 0;
        for p in &parts {
            starts.push(t);
            t += p.horizon();
        }
        Chain {
            parts,
            starts,
            cur: 0,
        }
    }

    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        self.parts.iter().map(|p| &p.program)
    }

    /// Bytes sent through receive slots.
    pub fn sent_bytes(&self) -> usize {
        self.programs()
            .flat_map(|p| p.tx.iter().flatten())
            .map(|x| x.bytes)
            .sum()
    }

    pub fn horizon(&self) -> u64 {
        match (self.starts.last(), self.parts.last()) {
            (Some(s), Some(p)) => s + p.horizon(),
            _ => 0,
        }
    }

    pub fn begin(&mut self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        match self.parts.first_mut() {
            Some(p) => p.begin(l, dev),
            None => Ok(()),
        }
    }

    /// Queues every item with logical time below `until`, ending a part and beginning the
    /// next when the time passes between them.
    pub fn emit_until(
        &mut self,
        until: u64,
        l: &Layout,
        c: &mut Counters,
        dev: &mut dyn Device,
    ) -> Result<()> {
        while let Some(p) = self.parts.get_mut(self.cur) {
            let start = self.starts.get(self.cur).copied().unwrap_or(0);
            p.emit_until(until.saturating_sub(start), l, c, dev)?;
            let next = self.starts.get(self.cur + 1).copied();
            match next {
                Some(s) if until >= s => {
                    p.end(l, dev)?;
                    self.cur += 1;
                    if let Some(q) = self.parts.get_mut(self.cur) {
                        q.begin(l, dev)?;
                    }
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// Queues what is left and joins the lanes back.
    pub fn end(&mut self, l: &Layout, dev: &mut dyn Device, c: &mut Counters) -> Result<()> {
        self.emit_until(self.horizon(), l, c, dev)?;
        match self.parts.get_mut(self.cur) {
            Some(p) => p.end(l, dev),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
