//! Zero-copy transfers between user buffers on copy engines (ICCL's SM-free P2P), with no
//! host thread and nothing queued after the call returns.
//!
//! Every transfer (a send/receive pair, or one block of an all-gather, all-to-all, broadcast,
//! gather or scatter) is a rendezvous of its two ranks in host shared memory: each side posts
//! how to reach its buffer, and an atomic compare-and-swap on the entry decides the order. The
//! side that posts *first* knows nothing of the other's buffer, so it only queues "my stream
//! is here" (a flag written into the peer's memory) and "wait until the copy is done". The
//! side that posts *second* knows both buffers, so it queues the whole copy: wait for the
//! first side's flag, one `cuMemcpyAsync` straight from the source to the destination user
//! buffer (pushing or pulling over NVLink), then the first side's done flag. Both sides queue
//! everything during their own call, so a stream never waits on work someone queues later
//! (which would deadlock when `CUDA_DEVICE_MAX_CONNECTIONS=1` merges streams into one queue).
//!
//! Deadlock freedom: in a group every "here" flag is written before any wait, copies wait only
//! for those flags, and "done" waits come last; ranks process groups in the same order.
//! Flags of one (peer, direction) are written in transfer order: all copies of one direction
//! to one peer go on one lane, and a wait passes on any value at or beyond its own
//! (wrap-safe), so a later transfer's flag implies the earlier's.
//!
//! A buffer the peer cannot map (not device memory of a `cuMemAlloc` allocation, or a
//! receive that overlaps a send of the same group) goes through this rank's bounce buffer,
//! which the peer can map: copied in before the "here" flag, copied out after the transfer.
//! This module is CUDA-free (posts and plans); `mod.rs` resolves buffers and runs the plan.

use std::time::Instant;

use super::protocol::{overlap, Act, Counters, Program};
use crate::device::{Device, LongWait};
use crate::host_path::{HostPath, HostShare};
use crate::layout::{DirectWord, HostWord, Lane, Layout};
use crate::rendezvous::{
    is_vmm_id, peer_sends_first, post, resolve, Outcome, PushWait, Reach, Words,
};
use ccl_collectives::Collective;

use crate::error::{Error, Result};
use ccl_collectives::task::TaskKind;

/// Moves data without arithmetic: goes straight between user buffers when direct transfers
/// are on (every rank classifies alike).
pub(crate) fn goes_direct(kind: TaskKind) -> bool {
    matches!(
        kind,
        TaskKind::Send { .. }
            | TaskKind::Recv { .. }
            | TaskKind::Coll(
                Collective::AllGather
                    | Collective::AlltoAll
                    | Collective::Broadcast { .. }
                    | Collective::Gather { .. }
                    | Collective::Scatter { .. }
            )
    )
}

/// What this rank does in one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Posted first: flag "here", wait "done".
    First,
    /// Posted second: copy, from or to the peer's buffer at this address.
    Second { peer_addr: u64 },
}

/// One transfer as this rank takes part in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transfer {
    pub peer: usize,
    /// This rank is the source.
    pub outgoing: bool,
    /// This rank's buffer (the bounce copy of it, where it goes through the bounce buffer).
    pub mine: u64,
    pub bytes: usize,
    pub seq: u64,
    pub role: Role,
    /// For a transfer this rank pulls: the peer's buffer as this process's context on the
    /// peer's GPU maps it, when that GPU's engine can run the copy instead (remote copies on,
    /// neither buffer VMM memory, which is mapped only where its owner or importer granted
    /// access). Copying through our own context's mapping from there would cross the link
    /// twice (half speed, measured 2026-11-23).
    pub there: Option<u64>,
    /// The share that goes through host memory ([`HostPath`]); the copy over NVLink stops at
    /// its start.
    pub host: Option<HostShare>,
}

impl Transfer {
    /// Bytes the copy over NVLink moves.
    fn nvlink_bytes(&self) -> usize {
        self.host.map_or(self.bytes, |h| h.nvl.min(self.bytes))
    }
}

/// The direct part of one group on one rank, ready to queue.
#[derive(Debug, Default, Clone)]
pub(crate) struct Plan {
    pub transfers: Vec<Transfer>,
    /// Copies within this rank (dst, src, bytes) before the transfers: into the bounce
    /// buffer, or a self-transfer reading what a transfer overwrites.
    pub before: Vec<(u64, u64, usize)>,
    /// Self-transfers independent of the transfers: beside them, on a lane of their own.
    pub beside: Vec<(u64, u64, usize)>,
    /// Copies out of the bounce buffer once every transfer is done.
    pub after: Vec<(u64, u64, usize)>,
    /// Everything on the caller's stream (small groups: no lane fork).
    pub single: bool,
    /// Local copies of at least two parts are cut over this many lanes (the beside lane,
    /// then lanes no transfer of this plan uses), parts of at least `min_part` bytes.
    pub local_split: LocalSplit,
    /// Bytes of our sends and receives that go through the bounce buffer.
    pub bounced: usize,
    /// Sends posted before their receives, and what waiting for those receives cost the host.
    pub waits: PushWaits,
}

/// How a large local copy may be cut over idle lanes (`CCL_IPC_LOCAL_COPY_LANES`). A copy
/// within one GPU is a driver kernel, not copy-engine work (measured 2026-11-23 with
/// `tests/gpu/ce_or_sm.cu`): beside a GEMM it waited for the GEMM's kernels, which is why
/// all-gather and all-to-all kept 22-24% of their bandwidth there and send/receive 60%, and
/// why cutting it over four lanes changed nothing (2026-11-22). Our lanes' priority
/// (`CCL_IPC_LANE_PRIORITY`) is what gets it SMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalSplit {
    pub lanes: usize,
    pub min_part: usize,
}

impl Default for LocalSplit {
    fn default() -> LocalSplit {
        LocalSplit {
            lanes: 1,
            min_part: 1 << 20,
        }
    }
}

impl LocalSplit {
    /// `bytes` cut into near-equal 4 KiB-aligned parts, one per lane at most: (offset, len).
    pub fn parts(&self, bytes: usize) -> Vec<(usize, usize)> {
        let k = self.lanes.min(bytes / self.min_part.max(1)).max(1);
        let per = bytes.div_ceil(k).next_multiple_of(4096).max(1);
        (0..bytes)
            .step_by(per)
            .map(|off| (off, per.min(bytes - off)))
            .collect()
    }
}

/// What the push wait did for sends posted before their receives: a pipeline whose receiver
/// calls late pays the wait on the sender's host thread, so it is counted (and logged when
/// the communicator goes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PushWaits {
    /// The receive came within the wait: this rank pushed.
    pub pushed: u64,
    /// The wait ran out, or the sends crossed: the receiver pulls.
    pub left_to_pull: u64,
    /// Host time spent waiting, in total and the longest once.
    pub waited: std::time::Duration,
    pub longest: std::time::Duration,
}

/// Per peer, whether its receives have been coming late: a sender whose push wait ran out
/// stops waiting for that peer's next sends (2, 4, 8 ... up to 64 of them, probing again in
/// between), so a pipeline whose receiver calls late does not block the sender's host thread
/// -- and with it the compute it launches -- on every send. A push resets it. Keyed by
/// `2 * peer`, and `2 * peer + 1` for exchanges ([`SettleHow::exchange_until`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct Lateness {
    streak: Vec<u8>,
    skip: Vec<u32>,
}

impl Lateness {
    const MAX_STREAK: u8 = 6;

    fn ensure(&mut self, peer: usize) {
        if self.streak.len() <= peer {
            self.streak.resize(peer + 1, 0);
            self.skip.resize(peer + 1, 0);
        }
    }

    /// Whether to give up on this send's push at once (and count it against the skip).
    fn skip_wait(&mut self, peer: usize) -> bool {
        self.ensure(peer);
        match &mut self.skip[peer] {
            0 => false,
            s => {
                *s -= 1;
                true
            }
        }
    }

    /// A wait for `peer` ended: `pushed`, or ran out without the sends crossing.
    fn waited(&mut self, peer: usize, pushed: bool) {
        self.ensure(peer);
        if pushed {
            self.streak[peer] = 0;
        } else {
            let s = (self.streak[peer] + 1).min(Self::MAX_STREAK);
            self.streak[peer] = s;
            self.skip[peer] = 1 << s;
        }
    }
}

impl PushWaits {
    pub(crate) fn add(&mut self, o: &PushWaits) {
        self.pushed += o.pushed;
        self.left_to_pull += o.left_to_pull;
        self.waited += o.waited;
        self.longest = self.longest.max(o.longest);
    }
}

impl Plan {
    fn lane(&self, l: &Layout, t: &Transfer) -> Lane {
        match (self.single, t.outgoing) {
            (true, _) => Lane::User,
            (false, true) => l.push_lane(t.peer),
            (false, false) => Lane::Rx(t.peer % l.rx_lanes.max(1)),
        }
    }

    /// The copy lane this rank's pushes do not use ([`Layout::beside_lane`]).
    fn beside_lane(&self, l: &Layout) -> Lane {
        if self.single {
            Lane::User
        } else {
            l.beside_lane()
        }
    }

    /// The lanes local copies are cut over: the beside lane, then (up to the split's count)
    /// copy and receive lanes that none of this plan's own copies uses.
    fn local_lanes(&self, l: &Layout) -> Vec<Lane> {
        let first = self.beside_lane(l);
        let mut v = vec![first];
        if self.single {
            return v;
        }
        let busy: Vec<Lane> = self
            .transfers
            .iter()
            .filter(|t| matches!(t.role, Role::Second { .. }))
            .map(|t| self.lane(l, t))
            .collect();
        let idle = (0..l.direct_tx)
            .map(Lane::Tx)
            .chain((0..l.rx_lanes).map(Lane::Rx))
            .filter(|c| *c != first && !busy.contains(c));
        v.extend(idle.take(self.local_split.lanes.saturating_sub(1)));
        v
    }

    fn flag(t: &Transfer) -> u32 {
        (t.seq as u32).wrapping_add(1)
    }

    /// This plan's transfers that have a host-path share, out of this rank or into it.
    fn host_shares(&self, outgoing: bool) -> impl Iterator<Item = (&Transfer, HostShare)> {
        self.transfers
            .iter()
            .filter(move |t| t.outgoing == outgoing)
            .filter_map(|t| t.host.map(|share| (t, share)))
    }

    /// The host path's chunks, in rounds of a ring's worth of chunk numbers: round r's outgoing
    /// chunks before its incoming ones. An outgoing chunk waits only for the credit of the chunk
    /// a ring before it (given by the peer's incoming chunk of the round before), an incoming
    /// one only for the peer's outgoing chunk of its own round, so with every stream of both
    /// ranks merged into one queue each wait depends only on what the peer queued ahead of its
    /// own matching wait: no copy into host memory waits behind a wait for the peer's, however
    /// many chunks the plan moves (transfers of a whole share are longer than the ring, and so
    /// may be several capped shares to one peer in one group).
    fn queue_host_path(&self, l: &Layout, h: &HostPath, dev: &mut dyn Device) -> Result<()> {
        let slots = u64::from(h.slots);
        let slot_at = |c: u64| (c % slots) * h.slot_bytes as u64;
        let chunks = |outgoing: bool| -> Vec<(&Transfer, u64, usize, usize)> {
            self.host_shares(outgoing)
                .flat_map(|(t, share)| share.chunks().map(move |(c, off, len)| (t, c, off, len)))
                .collect()
        };
        let (outs, ins) = (chunks(true), chunks(false));
        let (mut i, mut j) = (0, 0);
        while i < outs.len() || j < ins.len() {
            let round = [outs.get(i), ins.get(j)]
                .into_iter()
                .flatten()
                .map(|&(_, c, _, _)| c / slots)
                .min()
                .unwrap_or(0);
            while let Some(&(t, c, off, len)) = outs.get(i).filter(|x| x.1 / slots <= round) {
                i += 1;
                if c >= slots {
                    let credit = l.host_word(l.rank, t.peer, HostWord::Credit);
                    dev.wait(Lane::Host(0), credit, (c + 1 - slots) as u32)?;
                }
                // A peer with a longer transfer: only what we hold is sent.
                let n = len.min(t.bytes.saturating_sub(off));
                if n > 0 {
                    dev.copy(
                        Lane::Host(0),
                        h.out_ring + slot_at(c),
                        t.mine + off as u64,
                        n,
                    )?;
                }
                let ready = l.host_word(t.peer, l.rank, HostWord::Ready);
                dev.write(Lane::Host(0), ready, (c + 1) as u32)?;
            }
            while let Some(&(t, c, off, len)) = ins.get(j).filter(|x| x.1 / slots <= round) {
                j += 1;
                let ready = l.host_word(l.rank, t.peer, HostWord::Ready);
                dev.wait(Lane::Host(1), ready, (c + 1) as u32)?;
                let n = len.min(t.bytes.saturating_sub(off));
                if n > 0 {
                    dev.copy(
                        Lane::Host(1),
                        t.mine + off as u64,
                        h.in_ring + slot_at(c),
                        n,
                    )?;
                }
                let credit = l.host_word(t.peer, l.rank, HostWord::Credit);
                dev.write(Lane::Host(1), credit, (c + 1) as u32)?;
            }
        }
        Ok(())
    }

    /// Local copies in, then every "here" flag: nothing here waits.
    pub fn begin(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        for &(dst, src, bytes) in &self.before {
            dev.copy(Lane::User, dst, src, bytes)?;
        }
        for t in self.transfers.iter().filter(|t| t.role == Role::First) {
            let at = l.direct_word(t.peer, l.rank, !t.outgoing, DirectWord::Arrive);
            dev.write(Lane::User, at, Self::flag(t))?;
        }
        Ok(())
    }

    /// The copies this rank does, then the waits for the peer's copies, then bounce copies out.
    pub fn end(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        let mut lanes: Vec<Lane> = Vec::new();
        for t in &self.transfers {
            let lane = self.lane(l, t);
            if matches!(t.role, Role::Second { .. }) && lane != Lane::User && !lanes.contains(&lane)
            {
                lanes.push(lane);
            }
        }
        let local = self.local_lanes(l);
        // As many parts as there are lanes for them (every part must land on one).
        let split = LocalSplit {
            lanes: local.len(),
            ..self.local_split
        };
        let cuts: Vec<_> = self
            .beside
            .iter()
            .map(|&(dst, src, bytes)| (dst, src, split.parts(bytes)))
            .collect();
        // Only the lanes the local copies' parts land on join in.
        let most_parts = cuts.iter().map(|(_, _, p)| p.len()).max().unwrap_or(0);
        for &lane in local.iter().take(most_parts) {
            if lane != Lane::User && !lanes.contains(&lane) {
                lanes.push(lane);
            }
        }
        for (lane, out) in [(Lane::Host(0), true), (Lane::Host(1), false)] {
            if self.host_shares(out).next().is_some() && !lanes.contains(&lane) {
                lanes.push(lane);
            }
        }
        if !lanes.is_empty() {
            dev.fork(&lanes)?;
        }
        for t in &self.transfers {
            let Role::Second { peer_addr } = t.role else {
                continue;
            };
            let lane = self.lane(l, t);
            let v = Self::flag(t);
            let (dst, src) = if t.outgoing {
                (peer_addr, t.mine)
            } else {
                (t.mine, peer_addr)
            };
            let arrive = (
                l.direct_word(l.rank, t.peer, t.outgoing, DirectWord::Arrive),
                v,
            );
            let done = (
                l.direct_word(t.peer, l.rank, !t.outgoing, DirectWord::Done),
                v,
            );
            let bytes = t.nvlink_bytes();
            if let (false, Some(there)) = (t.outgoing, t.there) {
                dev.wait_pull_signal(lane, arrive, (dst, src, bytes), there, done)?;
            } else {
                dev.wait_copy_signal(lane, arrive, (dst, src, bytes), done)?;
            }
        }
        if let Some(h) = &l.host {
            self.queue_host_path(l, h, dev)?;
        }
        // Local copies after this rank's transfers: on one stream (a small group) they then
        // run while the peers finish theirs, instead of before this rank's copies start (an
        // 8-byte all-gather's own block cost a whole copy's latency up front).
        for (dst, src, parts) in cuts {
            for ((off, len), &lane) in parts.into_iter().zip(&local) {
                dev.copy(lane, dst + off as u64, src + off as u64, len)?;
            }
        }
        if !lanes.is_empty() {
            dev.join(&lanes)?;
        }
        for t in self.transfers.iter().filter(|t| t.role == Role::First) {
            let at = l.direct_word(l.rank, t.peer, t.outgoing, DirectWord::Done);
            dev.wait_long(Lane::User, at, Self::flag(t), LongWait::Transfer)?;
        }
        for &(dst, src, bytes) in &self.after {
            dev.copy(Lane::User, dst, src, bytes)?;
        }
        Ok(())
    }
}

/// One transfer of a group between posting and settling.
#[derive(Debug, Clone, Copy)]
struct Posted {
    peer: usize,
    outgoing: bool,
    ptr: u64,
    bytes: usize,
    seq: u64,
    /// Where our side sits in the bounce buffer, if the peer cannot map `ptr` or (a receive
    /// over one of our sends) `forced` to wait for our sends.
    bounce: Option<u64>,
    forced: bool,
    outcome: Outcome,
    /// `ptr` is memory every GPU with peer access reaches (not VMM, exportable).
    ptr_legacy: bool,
    /// The host path's share this side posted.
    host_permille: u32,
}

/// A group's transfers, posted; [`Posting::settle`] turns them into the plan.
#[derive(Debug, Default)]
pub(crate) struct Posting {
    posted: Vec<Posted>,
    /// The next transfer number from each peer (past this group's receives).
    next_in: Vec<u64>,
    locals: Vec<(u64, u64, usize)>,
    sends: Vec<(u64, usize)>,
    bytes: usize,
}

/// Posts every transfer of one lowered group (sends and receives per peer, in order).
/// `boards(r)` is rank `r`'s inbox. Nothing here waits for a peer's call. `host_paused()` is
/// asked only about a transfer the host path would take; true: it posts no host share.
#[allow(clippy::too_many_arguments)]
pub(crate) fn post_group<'b>(
    bufs: &mut dyn Reach,
    p: &Program,
    rank: usize,
    c: &mut Counters,
    boards: &dyn Fn(usize) -> Option<&'b dyn Words>,
    ring_deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
    host: Option<&HostPath>,
    host_paused: &dyn Fn() -> bool,
) -> Result<Posting> {
    let sends: Vec<(u64, usize)> = p.tx.iter().flatten().map(|s| (s.src, s.bytes)).collect();
    // (peer, outgoing, ptr, bytes, forced)
    let mut wants = Vec::new();
    // Peers in rotated order (rank+1, rank+2, ...): the copies each lane queues then go to a
    // different peer on every rank at each step, instead of every rank pushing into rank 0
    // first (with more than two ranks that made one rank's NVLink ingress the bottleneck).
    let n = p.tx.len().min(p.rx.len());
    for q in (1..=n).map(|k| (rank + k) % n.max(1)) {
        let (tx, rx) = (&p.tx[q], &p.rx[q]);
        for s in tx {
            wants.push((q, true, s.src, s.bytes, false));
        }
        for r in rx {
            let Act::Copy { dst } = r.act else {
                return Err(Error::internal("cuda-ipc: a direct receive that reduces"));
            };
            let forced = sends.iter().any(|&(a, al)| overlap(a, al, dst, r.bytes));
            wants.push((q, false, dst, r.bytes, forced));
        }
    }
    let mut exports = Vec::with_capacity(wants.len());
    // Bounce space for every buffer that may need it, 256-byte aligned.
    let mut need = 0usize;
    for &(_, _, ptr, bytes, forced) in &wants {
        let ex = bufs.export(ptr)?;
        let off = (forced || ex.is_none()).then_some(need);
        if off.is_some() {
            need = need
                .checked_add(bytes.next_multiple_of(256))
                .ok_or_else(|| Error::invalid_argument("transfer sizes overflow"))?;
        }
        exports.push((ex, off));
    }
    let bounce = if need > 0 {
        Some(bufs.bounce(need)?)
    } else {
        None
    };
    let mut posting = Posting {
        posted: Vec::with_capacity(wants.len()),
        next_in: Vec::new(),
        locals: p.locals.clone(),
        sends,
        bytes: p.bytes(),
    };
    for (&(peer, outgoing, ptr, bytes, forced), (ex, off)) in wants.iter().zip(exports) {
        let ptr_legacy = ex.is_some_and(|e| !is_vmm_id(e.buffer_id));
        let exchange = wants
            .iter()
            .any(|&(q, out, ..)| q == peer && out != outgoing);
        let wanted = host.map_or(0, |h| h.permille(bytes, exchange));
        let host_permille = if wanted > 0 && host_paused() {
            0
        } else {
            wanted
        };
        let (mut mine, bounce_at) = match (off, bounce, ex) {
            (None, _, Some(ex)) => (ex.post(bufs.pid(), ptr, bytes), None),
            (Some(off), Some((b, bex)), _) => {
                let at = b + off as u64;
                (bex.post(bufs.pid(), at, bytes), Some(at))
            }
            _ => return Err(Error::internal("cuda-ipc: no bounce space")),
        };
        mine.host_permille = host_permille;
        let (src, dst) = if outgoing { (rank, peer) } else { (peer, rank) };
        let counter = if outgoing {
            &mut c.direct_out[peer]
        } else {
            &mut c.direct_in[peer]
        };
        let seq = *counter;
        *counter += 1;
        let board = boards(dst)
            .ok_or_else(|| Error::internal(format!("cuda-ipc: no inbox of rank {dst}")))?;
        let outcome = post(board, src, seq, outgoing, &mine, ring_deadline, stop)?;
        posting.posted.push(Posted {
            peer,
            outgoing,
            ptr,
            bytes,
            seq,
            bounce: bounce_at,
            forced,
            outcome,
            ptr_legacy,
            host_permille,
        });
    }
    posting.next_in = c.direct_in.clone();
    Ok(posting)
}

/// How a rank settles its posted transfers.
pub(crate) struct SettleHow<'a> {
    /// How long pending sends wait for their receivers.
    pub wait: PushWait<'a>,
    /// Groups up to this many bytes stay on the caller's stream.
    pub single_max: usize,
    /// Late receivers seen so far (None: always wait).
    pub late: Option<&'a mut Lateness>,
    /// Sends smaller than this do not wait for their receivers at all (the receiver pulls):
    /// the wait holds the caller's host thread, which a host-bound training loop pays in
    /// full, against a copy at half bandwidth (one process pushing and pulling).
    pub wait_min_bytes: usize,
    /// How large local copies are cut over idle lanes.
    pub local_split: LocalSplit,
    /// A send whose group also receives from the same peer (torch's `batch_isend_irecv` of a
    /// pipeline stage's send-forward-receive-backward) waits for that peer's receive until
    /// here, beside `wait` and ignoring `late`: given up, the peer would come second to both
    /// directions and copy both on its own engines one after the other (the exchange takes
    /// twice as long), where waiting lets each side push its own. The group cannot complete
    /// before the peer calls anyway, and Megatron synchronizes right after it. None: off.
    pub exchange_until: Option<Instant>,
    /// Transfers of at least this many bytes go by remote copy (`CCL_IPC_REMOTE_COPY`,
    /// [`Device::wait_pull_signal`]): a send does not wait for its receiver at all (left to
    /// the receiver, it still moves at push speed, and neither host waits for the other's
    /// call), and a receive this rank pulls is offered to the peer GPU's engine. None: off.
    pub remote_min: Option<usize>,
    /// The host path and this rank's chunk counts to and from each peer (None: off).
    pub host: Option<(&'a HostPath, &'a mut Vec<u64>, &'a mut Vec<u64>)>,
}

impl Posting {
    /// Waits (`how.wait`) for the destinations of our pending sends (then we push),
    /// and returns this rank's plan. A size disagreement with a peer is returned beside the
    /// plan (the transfers still pair up, so nobody waits forever).
    pub(crate) fn settle<'b>(
        self,
        bufs: &mut dyn Reach,
        rank: usize,
        boards: &dyn Fn(usize) -> Option<&'b dyn Words>,
        how: SettleHow<'_>,
        stop: &dyn Fn() -> bool,
    ) -> Result<(Plan, Option<Error>)> {
        let SettleHow {
            wait,
            single_max,
            mut late,
            local_split,
            wait_min_bytes,
            exchange_until,
            remote_min,
            mut host,
        } = how;
        let mut plan = Plan {
            single: self.bytes <= single_max,
            local_split,
            ..Plan::default()
        };
        let mut mismatch = None;
        let started = Instant::now();
        let receives_from = |peer: usize| self.posted.iter().any(|r| !r.outgoing && r.peer == peer);
        for w in &self.posted {
            let (src, dst) = if w.outgoing {
                (rank, w.peer)
            } else {
                (w.peer, rank)
            };
            // Remote copies apply from this size: a send need not wait for its receiver, a
            // receive may be pulled on the peer GPU's engine.
            let remote = remote_min.is_some_and(|m| w.bytes >= m);
            let mut there = None;
            let outcome = match w.outcome {
                Outcome::Pending => {
                    let board = boards(dst).ok_or_else(|| {
                        Error::internal(format!("cuda-ipc: no inbox of rank {dst}"))
                    })?;
                    // Both sending first: both give up and both pull (a process that pushes
                    // and pulls at once halves its bandwidth; two that pull do not).
                    let next = self.next_in.get(w.peer).copied().unwrap_or(0);
                    let crossed =
                        || boards(rank).is_some_and(|b| peer_sends_first(b, w.peer, next));
                    // Small sends, and sends the receiver has pushed by our GPU: no wait.
                    let no_wait = w.bytes < wait_min_bytes
                        || (remote && (w.ptr_legacy || w.bounce.is_some()));
                    let exchange = exchange_until.filter(|_| w.outgoing && receives_from(w.peer));
                    // Exchanges keep their own lateness: a pipeline's one-way warm-up sends
                    // running out their short window say nothing of its exchanges.
                    let key = 2 * w.peer + usize::from(exchange.is_some());
                    let skip = !no_wait && late.as_mut().is_some_and(|l| l.skip_wait(key));
                    let give_up = || no_wait || skip || crossed();
                    let wait = match exchange {
                        Some(until) => PushWait {
                            soft: wait.soft.max(until),
                            hard: wait.hard.max(until),
                            futile: &give_up,
                            ..wait
                        },
                        None => PushWait {
                            futile: &give_up,
                            ..wait
                        },
                    };
                    let t0 = Instant::now();
                    let o = resolve(board, src, w.seq, wait, stop)?;
                    let took = t0.elapsed();
                    if let Some(l) = late.as_mut().filter(|_| !skip && !no_wait) {
                        match o {
                            Outcome::Second(_) => l.waited(key, true),
                            _ if !crossed() => l.waited(key, false),
                            _ => {}
                        }
                    }
                    let ws = &mut plan.waits;
                    match o {
                        Outcome::Second(_) => ws.pushed += 1,
                        _ => ws.left_to_pull += 1,
                    }
                    ws.waited += took;
                    ws.longest = ws.longest.max(took);
                    o
                }
                o => o,
            };
            // The first poster's size and share cut the transfer for the host path on both
            // sides.
            let mut first = (w.bytes, w.host_permille);
            let (role, bytes) = match outcome {
                Outcome::Second(t) => {
                    first = (t.bytes as usize, t.host_permille);
                    if t.bytes != w.bytes as u64 && mismatch.is_none() {
                        let (sb, rb) = if w.outgoing {
                            (w.bytes as u64, t.bytes)
                        } else {
                            (t.bytes, w.bytes as u64)
                        };
                        mismatch = Some(Error::invalid_usage(format!(
                            "rank {src} sends {sb} bytes to rank {dst}, which receives {rb} \
                             bytes (transfer {} between them)",
                            w.seq
                        )));
                    }
                    // A transfer wholly through the host path touches no peer memory (host-only
                    // mode has none to touch), nor does an empty one: its peer buffer is not
                    // opened.
                    let whole = host.is_some() && first.1 >= HostPath::WHOLE;
                    let empty = w.bytes.min(t.bytes as usize) == 0;
                    let peer_addr = if whole || empty { 0 } else { bufs.resolve(&t)? };
                    if remote && !w.outgoing && !is_vmm_id(t.buffer_id) {
                        there = bufs.resolve_there(&t)?;
                    }
                    (Role::Second { peer_addr }, w.bytes.min(t.bytes as usize))
                }
                _ => (Role::First, w.bytes),
            };
            // Our own buffer: the bounce copy where the peer reads or writes it, or where a
            // receive must wait for our sends; as the copier we use unmappable memory directly.
            let (mine, mine_legacy) = match (w.bounce, role, w.forced) {
                (Some(b), Role::First, _) | (Some(b), _, true) => {
                    plan.bounced += bytes;
                    if w.outgoing {
                        plan.before.push((b, w.ptr, bytes));
                    } else {
                        plan.after.push((w.ptr, b, bytes));
                    }
                    (b, true)
                }
                _ => (w.ptr, w.ptr_legacy),
            };
            let host = host.as_mut().and_then(|(path, out, inc)| {
                let (nvl, per) = path.split(first.0, first.1)?;
                let count = if w.outgoing { out } else { inc };
                let c = count.get_mut(w.peer)?;
                let share = HostShare {
                    nvl,
                    end: first.0,
                    per,
                    first_chunk: *c,
                };
                *c += share.count();
                Some(share)
            });
            plan.transfers.push(Transfer {
                peer: w.peer,
                outgoing: w.outgoing,
                mine,
                bytes,
                seq: w.seq,
                role,
                there: there.filter(|_| mine_legacy),
                host,
            });
        }
        if tracing::enabled!(tracing::Level::TRACE) {
            let roles: Vec<String> = plan
                .transfers
                .iter()
                .map(|t| {
                    let dir = if t.outgoing { "to" } else { "from" };
                    let how = match t.role {
                        Role::First => "peer copies",
                        Role::Second { .. } if t.outgoing => "push",
                        Role::Second { .. } => "pull",
                    };
                    format!("#{} {dir} {} {} B: {how}", t.seq, t.peer, t.bytes)
                })
                .collect();
            tracing::trace!(
                "rank {rank}: direct transfers {} (settled in {} us, {} bounce copies)",
                roles.join(", "),
                started.elapsed().as_micros(),
                plan.before.len() + plan.after.len()
            );
        }
        // Copies within this rank run beside the transfers, unless they overwrite what a
        // send still reads (after) or read what a receive overwrites (before).
        let recvs: Vec<(u64, usize)> = self
            .posted
            .iter()
            .filter(|w| !w.outgoing)
            .map(|w| (w.ptr, w.bytes))
            .collect();
        for &(dst, src, bytes) in &self.locals {
            if self.sends.iter().any(|&(a, al)| overlap(a, al, dst, bytes)) {
                plan.after.push((dst, src, bytes));
            } else if recvs.iter().any(|&(a, al)| overlap(a, al, src, bytes)) {
                plan.before.push((dst, src, bytes));
            } else {
                plan.beside.push((dst, src, bytes));
            }
        }
        Ok((plan, mismatch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands a plan queues, in order, one word each.
    #[derive(Default)]
    struct Recorder(Vec<String>);

    impl Device for Recorder {
        fn wait(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
            self.0.push(format!("wait {lane:?} {addr:#x}"));
            Ok(())
        }
        fn write(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
            self.0.push(format!("write {lane:?} {addr:#x}"));
            Ok(())
        }
        fn copy(&mut self, lane: Lane, dst: u64, _: u64, _: usize) -> Result<()> {
            self.0.push(format!("copy {lane:?} {dst:#x}"));
            Ok(())
        }
        fn pull(&mut self, lane: Lane, dst: u64, (_, there): (u64, u64), _: usize) -> Result<()> {
            self.0
                .push(format!("copy {lane:?} {dst:#x} from {there:#x} (pull)"));
            Ok(())
        }
        fn kernel(&mut self, lane: Lane, _: crate::device::Kernel) -> Result<()> {
            self.0.push(format!("kernel {lane:?}"));
            Ok(())
        }
        fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
            self.0.push(format!("fork {lanes:?}"));
            Ok(())
        }
        fn join(&mut self, lanes: &[Lane]) -> Result<()> {
            self.0.push(format!("join {lanes:?}"));
            Ok(())
        }
    }

    /// Rank 0's layout in a communicator of two, one receive lane.
    fn rank0_of_two() -> Layout {
        Layout {
            rank: 0,
            nranks: 2,
            chunk: 1 << 20,
            slots: 4,
            tx_lanes: 2,
            direct_tx: 2,
            rx_lanes: 1,
            flags: vec![0x1000_0000, 0x2000_0000],
            scratch: vec![0x1800_0000, 0x2800_0000],
            host: None,
            mirror: None,
        }
    }

    /// A small (one-stream) all-gather of two ranks that pulls the peer's block: its own
    /// block's local copy is queued after the pull, so it runs while the peer finishes its
    /// copy rather than delaying ours; the wait for the peer's copy of our block comes last.
    #[test]
    fn a_one_stream_plan_queues_its_local_copy_after_its_transfers() {
        let l = rank0_of_two();
        let (own_dst, peer_dst) = (0x9000_0000u64, 0x9000_0004u64);
        let plan = Plan {
            transfers: vec![
                Transfer {
                    peer: 1,
                    outgoing: true,
                    mine: 0x8000_0000,
                    bytes: 4,
                    seq: 0,
                    role: Role::First,
                    there: None,
                    host: None,
                },
                Transfer {
                    peer: 1,
                    outgoing: false,
                    mine: peer_dst,
                    bytes: 4,
                    seq: 0,
                    role: Role::Second {
                        peer_addr: 0xa000_0000,
                    },
                    there: None,
                    host: None,
                },
            ],
            beside: vec![(own_dst, 0x8000_0000, 4)],
            single: true,
            ..Plan::default()
        };
        let mut dev = Recorder::default();
        plan.begin(&l, &mut dev).unwrap();
        plan.end(&l, &mut dev).unwrap();
        let at = |what: &str| {
            dev.0
                .iter()
                .position(|c| c.starts_with(what))
                .unwrap_or_else(|| panic!("no {what} in {:?}", dev.0))
        };
        let pull = at(&format!("copy User {peer_dst:#x}"));
        let local = at(&format!("copy User {own_dst:#x}"));
        assert!(pull < local, "{:?}", dev.0);
        assert_eq!(
            at("wait"),
            pull - 1,
            "the pull waits for the peer's flag first"
        );
        assert!(
            dev.0[local + 1..].iter().any(|c| c.starts_with("wait")),
            "{:?}",
            dev.0
        );
        assert!(!dev.0.iter().any(|c| c.starts_with("fork")), "{:?}", dev.0);
    }

    /// A transfer this rank pulls goes to the device as a pull (which it may have the peer
    /// GPU's engine run, from the source as that GPU maps it) only when settling found it can
    /// (`Transfer::there`); a push never does.
    #[test]
    fn only_pulls_of_plain_memory_are_offered_to_the_peer_gpu() {
        let l = rank0_of_two();
        for there in [Some(0xb000_0000u64), None] {
            let t = |outgoing: bool, mine: u64| Transfer {
                peer: 1,
                outgoing,
                mine,
                bytes: 64 << 20,
                seq: 3,
                role: Role::Second {
                    peer_addr: 0xa000_0000,
                },
                there,
                host: None,
            };
            let plan = Plan {
                transfers: vec![t(true, 0x8000_0000), t(false, 0x9000_0000)],
                ..Plan::default()
            };
            let mut dev = Recorder::default();
            plan.begin(&l, &mut dev).unwrap();
            plan.end(&l, &mut dev).unwrap();
            let pulls: Vec<&String> = dev.0.iter().filter(|c| c.ends_with("(pull)")).collect();
            if there.is_some() {
                assert_eq!(
                    pulls,
                    [&format!(
                        "copy Rx(0) {:#x} from {:#x} (pull)",
                        0x9000_0000u64, 0xb000_0000u64
                    )]
                );
            } else {
                assert!(pulls.is_empty(), "{:?}", dev.0);
            }
            let push = format!("copy {:?} {:#x}", l.push_lane(1), 0xa000_0000u64);
            assert!(dev.0.contains(&push), "{:?}", dev.0);
        }
    }

    /// A local copy's parts cover it exactly, in order, 4 KiB-aligned, one per lane at most,
    /// none under the minimum unless the copy itself is.
    #[test]
    fn local_copy_parts_cover_the_copy_once() {
        let split = |lanes, min_part| LocalSplit { lanes, min_part };
        assert_eq!(split(1, 1 << 20).parts(64 << 20), vec![(0, 64 << 20)]);
        assert_eq!(split(4, 1 << 20).parts(1 << 20), vec![(0, 1 << 20)]);
        assert_eq!(
            split(4, 1 << 20).parts(2 << 20),
            vec![(0, 1 << 20), (1 << 20, 1 << 20)]
        );
        for (lanes, bytes) in [
            (3usize, 10_000_000usize),
            (4, 4096 * 3 + 1),
            (8, 1 << 27),
            (2, 5),
        ] {
            let p = split(lanes, 4096).parts(bytes);
            assert!(p.len() <= lanes && !p.is_empty(), "{lanes} {bytes}: {p:?}");
            let mut at = 0;
            for &(off, len) in &p {
                assert_eq!(off, at);
                assert!(len > 0 && off % 4096 == 0);
                at += len;
            }
            assert_eq!(at, bytes);
        }
    }
    /// A late receiver: after each wait that runs out, twice as many sends skip the wait
    /// (up to 64); a push resets it; peers are counted apart.
    #[test]
    fn late_receivers_make_later_sends_skip_the_wait_for_a_while() {
        let mut l = Lateness::default();
        assert!(!l.skip_wait(1));
        let mut skipped = Vec::new();
        for _ in 0..8 {
            l.waited(1, false);
            let mut n = 0;
            while l.skip_wait(1) {
                n += 1;
            }
            skipped.push(n);
        }
        assert_eq!(skipped, [2, 4, 8, 16, 32, 64, 64, 64]);
        assert!(!l.skip_wait(0), "another peer");
        l.waited(1, false);
        l.waited(1, true);
        // A push resets the streak, not the skips already granted.
        let mut n = 0;
        while l.skip_wait(1) {
            n += 1;
        }
        assert_eq!(n, 64);
        l.waited(1, false);
        let mut n = 0;
        while l.skip_wait(1) {
            n += 1;
        }
        assert_eq!(n, 2);
    }
}
