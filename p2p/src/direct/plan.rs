//! What this rank queues for a group's direct transfers, once settled: the local copies and
//! "here" flags first, then the copies it does, the host path's chunks, the waits for the
//! peers' copies and the bounce copies out.

use ccl_collectives::task::{Reduction, Task, TaskKind};
use ccl_cuda::{DataType, ReduceKind};

use crate::device::{BatchCopy, CopyOf, Device, LongWait};
use crate::error::Result;
use crate::host_path::{HostPath, HostShare};
use crate::layout::{DirectWord, HostWord, Lane, Layout};
use crate::lower::lower;
use crate::protocol::{Chain, Counters, Emission};

/// What this rank does in one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Posted first: flag "here", wait "done".
    First,
    /// Posted second: copy, from or to the peer's buffer at this address.
    Second { peer_addr: u64 },
    /// A send posted first, pushed without waiting for its receiver ([`crate::mail`]): the
    /// copy kernel waits on the mailbox slot at this device address for this tag.
    Mailed { slot: u64, tag: u64 },
}

impl Role {
    /// This rank copies (it was second, or its send is mailed).
    pub(crate) fn copies(&self) -> bool {
        !matches!(self, Role::First)
    }
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

/// A transfer whose source posted first and sent eagerly
/// ([`crate::rendezvous::go_eager`]): it goes through the destination's receive slots as the
/// staged protocol's chunks, queued by both sides after the group's own staged program
/// ([`Plan::eager_part`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Eager {
    pub peer: usize,
    pub outgoing: bool,
    /// This rank's buffer: the data it sends, or where its copy out of the slots goes.
    pub buf: u64,
    /// The source's size, which cuts the chunks on both sides.
    pub bytes: usize,
}

impl Eager {
    /// The transfer as a byte-wise send or receive for the staged protocol's lowering.
    fn task(&self) -> Task {
        let kind = match self.outgoing {
            true => TaskKind::Send { peer: self.peer },
            false => TaskKind::Recv { peer: self.peer },
        };
        Task {
            kind,
            send: self.buf as usize,
            recv: self.buf as usize,
            count: self.bytes,
            dtype: DataType::Uint8,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        }
    }
}

/// The direct part of one group on one rank, ready to queue.
#[derive(Debug, Default, Clone)]
pub(crate) struct Plan {
    pub transfers: Vec<Transfer>,
    /// Transfers sent eagerly, in posting order (each peer's transfer order, on both sides).
    pub eager: Vec<Eager>,
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

impl Plan {
    /// The eager transfers as one more part of the staged program, to queue after the group's
    /// own: both sides lower the same sends and receives per peer in the same order (each
    /// cut from the source's size), so their chunk counts agree, and as in any staged program
    /// a chunk waits only for chunks of earlier logical times.
    /// `copy_out_kernel`: the chunks received copied out by one [`Device::wait_copy_signal`]
    /// (`CCL_IPC_EAGER_COPY_KERNEL`).
    pub fn eager_part(
        &self,
        l: &Layout,
        single_max: usize,
        copy_out_kernel: bool,
    ) -> Result<Option<Emission>> {
        if self.eager.is_empty() {
            return Ok(None);
        }
        let tasks: Vec<Task> = self.eager.iter().map(Eager::task).collect();
        let p = lower(&tasks, l.rank, l.nranks, l.chunk, single_max)?;
        let single = p.bytes() <= single_max || p.aliases();
        let mut em = Emission::new(p, l.chunk, single);
        em.copy_out_kernel = copy_out_kernel;
        Ok(Some(em))
    }

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
            .filter(|t| t.role.copies())
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

    /// A mailed send: the copy kernel (after the receiver's "here"), then "done".
    fn queue_mailed(
        &self,
        l: &Layout,
        t: &Transfer,
        mail: (u64, u64),
        dev: &mut dyn Device,
    ) -> Result<()> {
        let lane = self.lane(l, t);
        let v = Self::flag(t);
        let arrive = l.direct_word(l.rank, t.peer, t.outgoing, DirectWord::Arrive);
        dev.mail_copy(lane, (arrive, v), mail, t.mine, t.nvlink_bytes())?;
        let done = l.direct_word(t.peer, l.rank, !t.outgoing, DirectWord::Done);
        dev.write(lane, done, v)
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

    /// Ends a group: the rest of its staged program `em`, this plan's copies (or, queued
    /// early, the join of their `early` lanes, [`Plan::start_copies_early`]), and
    /// [`Plan::finish`].
    pub fn end_with(
        &self,
        em: &mut Chain,
        early: Option<Vec<Lane>>,
        l: &Layout,
        dev: &mut dyn Device,
        c: &mut Counters,
    ) -> Result<()> {
        em.end(l, dev, c)?;
        match early {
            Some(lanes) if !lanes.is_empty() => dev.join(&lanes)?,
            Some(_) => {}
            None => self.copies(l, dev)?,
        }
        self.finish(l, dev)
    }

    /// The copies this rank does, then the waits for the peer's copies, then bounce copies out.
    #[cfg(test)]
    pub fn end(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        self.copies(l, dev)?;
        self.finish(l, dev)
    }

    /// The copies this rank does, their lanes joined back into the caller's stream (then
    /// [`Plan::finish`]); a group with eager transfers queues them earlier instead
    /// ([`Plan::start_copies_early`]).
    pub fn copies(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        if self.batchable(dev) {
            return self.copies_batched(l, dev);
        }
        let lanes = self.fork_copies(l, dev)?;
        if !lanes.is_empty() {
            dev.join(&lanes)?;
        }
        Ok(())
    }

    /// With eager transfers, queues this rank's copies now (after [`Plan::begin`], before
    /// the staged program forks its lanes) and returns the lanes they hold until
    /// [`Plan::end_with`] joins them; None without (they go at the end, as always). The copies
    /// go first because they wait for nothing later: queued behind the eager chunks' flag
    /// waits, in one hardware queue (`CUDA_DEVICE_MAX_CONNECTIONS=1`, or two streams sharing
    /// one), a receiver's own push would start only once the eager transfer the other way had
    /// arrived. No cycle: the copies wait only for the peers' "here" flags, queued in their
    /// [`Plan::begin`].
    pub fn start_copies_early(
        &self,
        l: &Layout,
        dev: &mut dyn Device,
    ) -> Result<Option<Vec<Lane>>> {
        if self.eager.is_empty() {
            return Ok(None);
        }
        self.fork_copies(l, dev).map(Some)
    }

    /// Forks the lanes of this rank's copies and queues them (one lane per peer and
    /// direction, local copies and host-path chunks beside); returns the lanes to join.
    fn fork_copies(&self, l: &Layout, dev: &mut dyn Device) -> Result<Vec<Lane>> {
        let mut lanes: Vec<Lane> = Vec::new();
        for t in &self.transfers {
            let lane = self.lane(l, t);
            if t.role.copies() && lane != Lane::User && !lanes.contains(&lane) {
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
            let peer_addr = match t.role {
                Role::First => continue,
                Role::Second { peer_addr } => peer_addr,
                Role::Mailed { slot, tag } => {
                    self.queue_mailed(l, t, (slot, tag), dev)?;
                    continue;
                }
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
                dev.annotate(Some(t.peer));
                let copy = (dst, src, bytes);
                let r = dev.wait_copy_signal(lane, arrive, copy, done, CopyOf::Transfer);
                dev.annotate(None);
                r?;
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
        Ok(lanes)
    }

    /// Whether this rank's copies can go as one batch on the caller's stream: the device
    /// batches there, and every copy is a plain one of ours (no host-path share either way,
    /// no mailed send, no pull run on the peer's GPU, no wait-copy-signal kernel). A plan
    /// whose only copy is the rank's own block (a gather's root whose peers push) batches
    /// too: one call instead of a fork, the copy and a join; local copies only as far as the
    /// device takes them ([`Device::batches_copies`]).
    fn batchable(&self, dev: &dyn Device) -> bool {
        let plain = |t: &Transfer| match t.role {
            Role::First => t.host.is_none(),
            Role::Second { .. } => t.host.is_none() && (t.outgoing || t.there.is_none()),
            Role::Mailed { .. } => false,
        };
        let local = self.beside.iter().map(|&(_, _, bytes)| bytes).sum();
        (self.transfers.iter().any(|t| t.role.copies()) || !self.beside.is_empty())
            && self.transfers.iter().all(plain)
            && !dev.copy_signal_is_kernel(CopyOf::Transfer)
            && dev.batches_copies(Lane::User, local)
    }

    /// [`Plan::copies`] as one batch on the caller's stream: a wait for every peer whose buffer
    /// this rank copies to or from, every such copy and every local copy in one batch, then
    /// every "done". A copy may so start only once the last of those peers arrived, but the
    /// driver runs the batch on several copy engines at once, where one stream per peer did
    /// not (see [`ccl_cuda::cuda::stream::Stream::memcpy_batch`]), with three calls instead of
    /// three per transfer and no lane fork. No cycle: a peer's arrival is queued in its
    /// [`Plan::begin`], ahead of anything it waits for in this group.
    fn copies_batched(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        let mut copies = Vec::with_capacity(self.transfers.len() + self.beside.len());
        for t in &self.transfers {
            let Role::Second { peer_addr } = t.role else {
                continue;
            };
            let arrive = l.direct_word(l.rank, t.peer, t.outgoing, DirectWord::Arrive);
            dev.wait(Lane::User, arrive, Self::flag(t))?;
            let (dst, src) = match t.outgoing {
                true => (peer_addr, t.mine),
                false => (t.mine, peer_addr),
            };
            let peer = Some(t.peer);
            copies.push(BatchCopy {
                dst,
                src,
                bytes: t.bytes,
                peer,
            });
        }
        copies.extend(self.beside.iter().map(|&(dst, src, bytes)| BatchCopy {
            dst,
            src,
            bytes,
            peer: None,
        }));
        dev.copy_batch(Lane::User, &copies)?;
        for t in self.transfers.iter().filter(|t| t.role.copies()) {
            let done = l.direct_word(t.peer, l.rank, !t.outgoing, DirectWord::Done);
            dev.write(Lane::User, done, Self::flag(t))?;
        }
        Ok(())
    }

    /// The waits for the copies the peers do, then the bounce copies out.
    pub fn finish(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
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
    /// Not waited for: mailed ([`crate::mail`]), this rank pushes once the receiver posts.
    pub mailed: u64,
    /// Not waited for: sent eagerly through the receiver's slots ([`Eager`]).
    pub eager: u64,
    /// Host time spent waiting, in total and the longest once.
    pub waited: std::time::Duration,
    pub longest: std::time::Duration,
}

impl PushWaits {
    pub(crate) fn add(&mut self, o: &PushWaits) {
        self.pushed += o.pushed;
        self.left_to_pull += o.left_to_pull;
        self.mailed += o.mailed;
        self.eager += o.eager;
        self.waited += o.waited;
        self.longest = self.longest.max(o.longest);
    }
}
