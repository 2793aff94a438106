//! The staged protocol, without CUDA: a lowered group ([`Program`]) cut into chunk transfers
//! through the receive slots, ordered by logical time, and queued as flag waits, flag writes,
//! copies and kernels on a [`Device`].
//!
//! Flags (one 32-bit word per 64-byte line in each rank's device memory): per sender and per
//! receive slot a `ready` word (the sender writes the chunk's sequence number after its copy
//! into the slot) and a `credit` word in the sender's memory (the receiver writes it once the
//! slot is consumed); per receive lane a `local` word (a reduction finished, for sends of
//! reduced data). Every word only grows: a slot is reused only after its credit, so its
//! `ready` and `credit` values come in order whatever lanes carry them.

use std::collections::HashMap;

use ccl_collectives::task::{Task, TaskKind};
use ccl_cuda::ReduceKind;

use crate::device::{CopyOf, Device, Kernel};
use crate::error::{Error, Result};
use crate::layout::{Lane, Layout};
use crate::lower::{lower, piece_chunk, Act, Program};

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
    /// Received chunks copied out of their slots as one [`Device::wait_copy_signal`] (eager
    /// transfers with `CCL_IPC_EAGER_COPY_KERNEL=1`), not as a wait, a copy and a write.
    pub copy_out_kernel: bool,
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
            copy_out_kernel: false,
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
                if let (Act::Copy { dst }, true) = (act, self.copy_out_kernel) {
                    let copy = (dst + off, incoming, bytes);
                    let (ready, credit) = (l.ready(me, p, slot), l.credit(p, me, slot));
                    let (arrive, done) = ((ready, seq), (credit, seq));
                    return dev.wait_copy_signal(lane, arrive, copy, done, CopyOf::SlotChunk);
                }
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
        // A group that runs entirely on other paths (a low-latency kernel, say) would lower to
        // an empty program that queues nothing: skip its allocations, paid on every small call.
        if tasks.is_empty() {
            return Ok(Chain::new(Vec::new()));
        }
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

    /// Appends a part that starts once every earlier part's items are queued.
    pub fn push(&mut self, part: Emission) {
        self.starts.push(self.horizon());
        self.parts.push(part);
    }

    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        self.parts.iter().map(|p| &p.program)
    }

    /// Bytes sent through receive slots.
    pub fn sent_bytes(&self) -> usize {
        self.programs().map(Program::sent_bytes).sum()
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
