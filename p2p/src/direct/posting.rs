//! A group's direct transfers between posting and queueing: every transfer posted on its
//! rendezvous entry while nothing waits ([`post_group`]), then settled into this rank's
//! [`Plan`] ([`Posting::settle`]), where a send posted first may wait a while to push.

use std::time::Instant;

use super::plan::{Eager, LocalSplit, Plan, PushWaits, Role, Transfer};
use crate::error::{Error, Result};
use crate::host_path::{HostPath, HostShare};
use crate::lower::{overlap, Act, Program};
use crate::protocol::Counters;
use crate::rendezvous::{
    go_eager, is_vmm_id, peer_sends_first, post, post_pushed, resolve, Outcome, Post, PushWait,
    Reach, Words,
};

/// Posts every transfer of one lowered group (sends and receives per peer, in order).
/// `boards(r)` is rank `r`'s inbox. Nothing here waits for a peer's call. `host_paused()` is
/// asked only about a transfer the host path would take; true: it posts no host share.
/// `targets`: where each send lands, per peer in send order, when symmetric windows say
/// ([`crate::windows::Windows::targets`]): those sends push whenever their receivers call.
#[allow(clippy::too_many_arguments)]
pub(crate) fn post_group<'b>(
    bufs: &mut dyn Reach,
    p: &Program,
    targets: Option<&[Vec<Post>]>,
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
        bounce_used: need,
        next_in: Vec::new(),
        locals: p.locals.clone(),
        sends,
        bytes: p.bytes(),
    };
    let mut sent = vec![0usize; n];
    for (&(peer, outgoing, ptr, bytes, forced), (ex, off)) in wants.iter().zip(exports) {
        let target = match (outgoing, targets) {
            (true, Some(t)) => {
                sent[peer] += 1;
                t.get(peer).and_then(|v| v.get(sent[peer] - 1))
            }
            _ => None,
        };
        let ptr_legacy = ex.is_some_and(|e| !is_vmm_id(e.buffer_id));
        let exchange = wants
            .iter()
            .any(|&(q, out, ..)| q == peer && out != outgoing);
        let wanted = host.map_or(0, |h| h.permille(bytes, exchange));
        let host_permille = if target.is_some() || (wanted > 0 && host_paused()) {
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
        let outcome = match target {
            Some(t) => post_pushed(board, src, seq, &mine, t, ring_deadline, stop)?,
            None => post(board, src, seq, outgoing, &mine, ring_deadline, stop)?,
        };
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
    /// Bytes of the bounce buffer this group's posts took (from its start).
    bounce_used: usize,
    /// The next transfer number from each peer (past this group's receives).
    next_in: Vec<u64>,
    locals: Vec<(u64, u64, usize)>,
    sends: Vec<(u64, usize)>,
    bytes: usize,
}

/// Hands a mailed send to the mail thread: (peer, transfer number, bytes) in, the mailbox
/// slot's device address and tag out (None: no slot free).
pub(crate) type MailFn<'a> = dyn Fn(usize, u64, usize) -> Option<(u64, u64)> + 'a;

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
    /// [`crate::device::Device::wait_pull_signal`]): a send does not wait for its receiver at
    /// all (left to the receiver, it still moves at push speed, and neither host waits for the
    /// other's call), and a receive this rank pulls is offered to the peer GPU's engine. None:
    /// off.
    pub remote_min: Option<usize>,
    /// The host path and this rank's chunk counts to and from each peer (None: off).
    pub host: Option<(&'a HostPath, &'a mut Vec<u64>, &'a mut Vec<u64>)>,
    /// Mailed sends (`CCL_IPC_MAILED_PUSH`, [`crate::mail`]): a send posted before its
    /// receive is handed to the mail thread, given (peer, transfer number, bytes), instead
    /// of waiting; it returns the mailbox slot and tag (None: no slot free, then it waits
    /// as without). None: off.
    pub mail: Option<&'a MailFn<'a>>,
    /// A send posted before its receive (and neither mailed nor remote) waits for nothing: from
    /// this many bytes on it goes eagerly through the receiver's slots ([`go_eager`],
    /// `CCL_IPC_EAGER_SEND`, `CCL_IPC_EAGER_MIN_BYTES`); a smaller one is left to the receiver
    /// to pull (one copy, where the slots cost two). None: off, such sends wait (`wait`).
    pub eager: Option<usize>,
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
        mut how: SettleHow<'_>,
        stop: &dyn Fn() -> bool,
    ) -> Result<(Plan, Option<Error>)> {
        let mut plan = Plan {
            single: self.bytes <= how.single_max,
            local_split: how.local_split,
            ..Plan::default()
        };
        let mut mismatch = None;
        let started = Instant::now();
        for w in &self.posted {
            // Remote copies apply from this size: a send need not wait for its receiver, a
            // receive may be pulled on the peer GPU's engine.
            let remote = how.remote_min.is_some_and(|m| w.bytes >= m);
            let mailed = match (w.outcome, how.mail) {
                (Outcome::Pending, Some(mail)) if !remote => mail(w.peer, w.seq, w.bytes),
                _ => None,
            };
            plan.waits.mailed += u64::from(mailed.is_some());
            let outcome = match w.outcome {
                _ if mailed.is_some() => Outcome::Pending,
                Outcome::Pending if how.eager.is_some() && !remote => {
                    let min = how.eager.unwrap_or(0);
                    self.send_eagerly(w, rank, boards, w.bytes >= min, &mut plan.waits)?
                }
                Outcome::Pending => self.wait_for_receiver(
                    w,
                    rank,
                    boards,
                    &mut how,
                    remote,
                    &mut plan.waits,
                    stop,
                )?,
                o => o,
            };
            if let Outcome::Eager(theirs) = outcome {
                let m = self.eager(w, theirs, bufs, &mut plan, rank)?;
                mismatch = mismatch.or(m);
                continue;
            }
            // The first poster's size and share cut the transfer for the host path on both
            // sides.
            let (role, bytes, first, there) = match (outcome, mailed) {
                (_, Some((slot, tag))) => (
                    Role::Mailed { slot, tag },
                    w.bytes,
                    (w.bytes, w.host_permille),
                    None,
                ),
                (Outcome::Pushed(t), None) => {
                    let here = w.bounce.unwrap_or(w.ptr);
                    if (t.addr != here || t.bytes != w.bytes as u64) && mismatch.is_none() {
                        mismatch = Some(w.not_symmetric(&t, here, rank));
                    }
                    let first = (t.bytes as usize, t.host_permille);
                    (Role::First, w.bytes.min(t.bytes as usize), first, None)
                }
                (Outcome::Second(t), None) => {
                    if t.bytes != w.bytes as u64 && mismatch.is_none() {
                        mismatch = Some(w.size_mismatch(&t, rank));
                    }
                    let (role, there) = w.second(&t, bufs, how.host.is_some(), remote)?;
                    let first = (t.bytes as usize, t.host_permille);
                    (role, w.bytes.min(t.bytes as usize), first, there)
                }
                _ => (Role::First, w.bytes, (w.bytes, w.host_permille), None),
            };
            let (mine, mine_legacy) = w.own_buffer(role, bytes, &mut plan);
            let host = host_share(&mut how.host, w, first);
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
        trace_roles(&plan, rank, started);
        self.place_locals(&mut plan);
        Ok((plan, mismatch))
    }

    /// Settles a send posted before its receive: waits (`how.wait`, and longer for an
    /// exchange) until the receiver posts, then this rank pushes (`Second`), or gives up and
    /// leaves the copy to the receiver (`First`). Counts what the wait did in `waits`.
    #[allow(clippy::too_many_arguments)]
    fn wait_for_receiver<'b>(
        &self,
        w: &Posted,
        rank: usize,
        boards: &dyn Fn(usize) -> Option<&'b dyn Words>,
        how: &mut SettleHow<'_>,
        remote: bool,
        waits: &mut PushWaits,
        stop: &dyn Fn() -> bool,
    ) -> Result<Outcome> {
        let (src, dst) = w.ends(rank);
        let board = boards(dst)
            .ok_or_else(|| Error::internal(format!("cuda-ipc: no inbox of rank {dst}")))?;
        // Both sending first: both give up and both pull (a process that pushes and pulls at
        // once halves its bandwidth; two that pull do not).
        let next = self.next_in.get(w.peer).copied().unwrap_or(0);
        let crossed = || boards(rank).is_some_and(|b| peer_sends_first(b, w.peer, next));
        // Small sends, and sends the receiver has pushed by our GPU: no wait.
        let no_wait =
            w.bytes < how.wait_min_bytes || (remote && (w.ptr_legacy || w.bounce.is_some()));
        let receives_from = |peer: usize| self.posted.iter().any(|r| !r.outgoing && r.peer == peer);
        let exchange = how
            .exchange_until
            .filter(|_| w.outgoing && receives_from(w.peer));
        // Exchanges keep their own lateness: a pipeline's one-way warm-up sends running out
        // their short window say nothing of its exchanges.
        let key = 2 * w.peer + usize::from(exchange.is_some());
        let skip = !no_wait && how.late.as_mut().is_some_and(|l| l.skip_wait(key));
        let give_up = || no_wait || skip || crossed();
        let wait = match exchange {
            Some(until) => PushWait {
                soft: how.wait.soft.max(until),
                hard: how.wait.hard.max(until),
                futile: &give_up,
                ..how.wait
            },
            None => PushWait {
                futile: &give_up,
                ..how.wait
            },
        };
        let t0 = Instant::now();
        let o = resolve(board, src, w.seq, wait, stop)?;
        let took = t0.elapsed();
        if let Some(l) = how.late.as_mut().filter(|_| !skip && !no_wait) {
            match o {
                Outcome::Second(_) => l.waited(key, true),
                _ if !crossed() => l.waited(key, false),
                _ => {}
            }
        }
        match o {
            Outcome::Second(_) => waits.pushed += 1,
            _ => waits.left_to_pull += 1,
        }
        waits.waited += took;
        waits.longest = waits.longest.max(took);
        Ok(o)
    }

    /// Settles a send posted before its receive without waiting: this rank pushes if the
    /// receiver has posted by now, else sends eagerly through the receiver's slots (`slots`)
    /// or leaves the copy to the receiver.
    fn send_eagerly<'b>(
        &self,
        w: &Posted,
        rank: usize,
        boards: &dyn Fn(usize) -> Option<&'b dyn Words>,
        slots: bool,
        waits: &mut PushWaits,
    ) -> Result<Outcome> {
        let (src, dst) = w.ends(rank);
        let board = boards(dst)
            .ok_or_else(|| Error::internal(format!("cuda-ipc: no inbox of rank {dst}")))?;
        let o = if slots {
            go_eager(board, src, w.seq)?
        } else {
            let now = Instant::now();
            let at_once = PushWait {
                soft: now,
                hard: now,
                busy: &|| false,
                futile: &|| true,
            };
            resolve(board, src, w.seq, at_once, &|| false)?
        };
        match o {
            Outcome::Second(_) => waits.pushed += 1,
            Outcome::Eager(_) => waits.eager += 1,
            _ => waits.left_to_pull += 1,
        }
        Ok(o)
    }

    /// Adds an eagerly sent transfer to `plan`: a send as it is; a receive cut from the
    /// sender's size (`theirs`), into the bounce buffer where it overlaps a send of the group
    /// (copied out after every transfer), and where the sender sends more than this rank
    /// receives, wholly into spare bounce space (nothing of it reaches the user's buffer;
    /// the size disagreement is returned).
    fn eager(
        &self,
        w: &Posted,
        theirs: Option<Post>,
        bufs: &mut dyn Reach,
        plan: &mut Plan,
        rank: usize,
    ) -> Result<Option<Error>> {
        let mut e = Eager {
            peer: w.peer,
            outgoing: w.outgoing,
            buf: w.ptr,
            bytes: w.bytes,
        };
        let Some(t) = theirs.filter(|_| !w.outgoing) else {
            plan.eager.push(e);
            return Ok(None);
        };
        e.bytes = t.bytes as usize;
        let mismatch = (e.bytes != w.bytes).then(|| w.size_mismatch(&t, rank));
        if e.bytes > w.bytes {
            let spare = self.bounce_used.next_multiple_of(256);
            let (b, _) = bufs.bounce(spare + e.bytes)?;
            e.buf = b + spare as u64;
        } else if let (true, Some(b)) = (w.forced, w.bounce) {
            e.buf = b;
            plan.bounced += e.bytes;
            plan.after.push((w.ptr, b, e.bytes));
        }
        plan.eager.push(e);
        Ok(mismatch)
    }

    /// Copies within this rank run beside the transfers, unless they overwrite what a send
    /// still reads (after) or read what a receive overwrites (before).
    fn place_locals(&self, plan: &mut Plan) {
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
    }
}

impl Posted {
    /// (source, destination) of this transfer, posted by `rank`.
    fn ends(&self, rank: usize) -> (usize, usize) {
        if self.outgoing {
            (rank, self.peer)
        } else {
            (self.peer, rank)
        }
    }

    /// The error of a receive that its sender pushed, through a symmetric window, somewhere
    /// else than this rank's buffer (`here`): the buffers were not at one offset of every
    /// rank's window, or this rank received into its bounce buffer.
    fn not_symmetric(&self, theirs: &Post, here: u64, rank: usize) -> Error {
        Error::invalid_usage(format!(
            "rank {} pushed {} bytes to {:#x} of rank {rank}'s window, where rank {rank} \
             receives {} bytes at {here:#x} (transfer {}): a collective on symmetric windows \
             (NCCL_WIN_COLL_SYMMETRIC) needs its buffers at the same offset of every rank's \
             window",
            self.peer, theirs.bytes, theirs.addr, self.bytes, self.seq
        ))
    }

    /// The error of a transfer whose other side posted `theirs` of another size.
    fn size_mismatch(&self, theirs: &Post, rank: usize) -> Error {
        let (src, dst) = self.ends(rank);
        let (sb, rb) = if self.outgoing {
            (self.bytes as u64, theirs.bytes)
        } else {
            (theirs.bytes, self.bytes as u64)
        };
        Error::invalid_usage(format!(
            "rank {src} sends {sb} bytes to rank {dst}, which receives {rb} bytes (transfer {} \
             between them)",
            self.seq
        ))
    }

    /// This rank copies, from or to `theirs` as this device (and, for a remote pull, the
    /// peer's GPU) reaches it.
    fn second(
        &self,
        theirs: &Post,
        bufs: &mut dyn Reach,
        host_path: bool,
        remote: bool,
    ) -> Result<(Role, Option<u64>)> {
        // A transfer wholly through the host path touches no peer memory (host-only mode has
        // none to touch), nor does an empty one: its peer buffer is not opened.
        let whole = host_path && theirs.host_permille >= HostPath::WHOLE;
        let empty = self.bytes.min(theirs.bytes as usize) == 0;
        let peer_addr = if whole || empty {
            0
        } else {
            bufs.resolve(theirs)?
        };
        let there = if remote && !self.outgoing && !is_vmm_id(theirs.buffer_id) {
            bufs.resolve_there(theirs)?
        } else {
            None
        };
        Ok((Role::Second { peer_addr }, there))
    }

    /// Our own buffer, and whether every GPU with peer access reaches it: the bounce copy
    /// where the peer reads or writes it, or where a receive must wait for our sends; as the
    /// copier we use unmappable memory directly.
    fn own_buffer(&self, role: Role, bytes: usize, plan: &mut Plan) -> (u64, bool) {
        match (self.bounce, role, self.forced) {
            (Some(b), Role::First, _) | (Some(b), _, true) => {
                plan.bounced += bytes;
                if self.outgoing {
                    plan.before.push((b, self.ptr, bytes));
                } else {
                    plan.after.push((self.ptr, b, bytes));
                }
                (b, true)
            }
            _ => (self.ptr, self.ptr_legacy),
        }
    }
}

/// The host path's share of transfer `w`, cut from the first poster's (size, share), its
/// chunks numbered on from this rank's count for the peer and direction (None: all over
/// NVLink, or no host path).
fn host_share<'a>(
    host: &mut Option<(&HostPath, &'a mut Vec<u64>, &'a mut Vec<u64>)>,
    w: &Posted,
    (bytes, permille): (usize, u32),
) -> Option<HostShare> {
    let (path, out, inc) = host.as_mut()?;
    let (nvl, per) = path.split(bytes, permille)?;
    let count = if w.outgoing { out } else { inc };
    let c = count.get_mut(w.peer)?;
    let share = HostShare {
        nvl,
        end: bytes,
        per,
        first_chunk: *c,
    };
    *c += share.count();
    Some(share)
}

/// Who copies each of `plan`'s transfers (`NCCL_DEBUG=TRACE`).
fn trace_roles(plan: &Plan, rank: usize, started: Instant) {
    if !tracing::enabled!(tracing::Level::TRACE) {
        return;
    }
    let roles: Vec<String> = plan
        .transfers
        .iter()
        .map(|t| {
            let dir = if t.outgoing { "to" } else { "from" };
            let how = match t.role {
                Role::First => "peer copies",
                Role::Second { .. } if t.outgoing => "push",
                Role::Mailed { .. } => "push, mailed",
                Role::Second { .. } => "pull",
            };
            format!("#{} {dir} {} {} B: {how}", t.seq, t.peer, t.bytes)
        })
        .collect();
    tracing::trace!(
        "rank {rank}: direct transfers {} and {} through slots, sent eagerly (settled in {} us, \
         {} bounce copies)",
        roles.join(", "),
        plan.eager.len(),
        started.elapsed().as_micros(),
        plan.before.len() + plan.after.len()
    );
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
    pub(crate) fn skip_wait(&mut self, peer: usize) -> bool {
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
    pub(crate) fn waited(&mut self, peer: usize, pushed: bool) {
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
