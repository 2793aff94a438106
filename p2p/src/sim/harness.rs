//! Queueing simulated groups as the engine does: every rank's layout and memory, the host
//! side of the direct paths (inboxes, posting and settling), then the staged program, and
//! the whole run with every result checked.

use std::sync::atomic::AtomicU64;

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;

use super::cases::*;
use super::device::*;
use crate::device::Batched;
use crate::direct::{self, plan, posting};
use crate::direct_reduce;
use crate::error::Result;
use crate::host_path::HostPath;
use crate::layout::Layout;
use crate::lower::lower;
use crate::protocol::{Chain, Counters};
use crate::rendezvous::{self, Export, Exported, Post, Reach, Words};
use ccl_collectives::relay::Relay;

pub(super) struct Setup {
    pub(super) n: usize,
    pub(super) chunk: usize,
    pub(super) slots: u32,
    pub(super) rx_lanes: usize,
    pub(super) single_max: usize,
    /// Data-only operations go as direct transfers (the rendezvous in `DirectSim`).
    pub(super) direct: bool,
    /// How direct groups cut their local copies over idle lanes.
    pub(super) local_split: plan::LocalSplit,
    /// Broadcasts relayed in phases, as `submit` queues them (None: not relayed).
    pub(super) relay: Option<Relay>,
    /// Two ranks: a reduction's first poster leaves it to the second instead of going staged.
    pub(super) takeover: bool,
    /// Two ranks: the host path, as (min bytes, permille, slot bytes, slots): rank 0's
    /// shares; rank 1 posts twice as much one way and half in exchanges (the first poster's
    /// share holds for both sides).
    pub(super) host: Option<(usize, u32, usize, u32)>,
    /// Host-only's mirror of each rank's receive area ([`Layout::mirror`]).
    pub(super) mirror: bool,
    /// Sends posted before their receives are mailed (`CCL_IPC_MAILED_PUSH`): the mail thread
    /// fills their slots at random points of the run.
    pub(super) mailed: bool,
    /// Sends posted before their receives go eagerly through the receivers' slots from this
    /// size on, smaller ones are pulled (`CCL_IPC_EAGER_SEND`, `CCL_IPC_EAGER_MIN_BYTES`).
    pub(super) eager: Option<usize>,
    /// Direct reductions in one kernel over all inputs (`Some(true)`, as the engine does once
    /// it has loaded that kernel), as the chain of two-input kernels, or (`None`) each in turn.
    /// Every rank's user buffers in one symmetric window (`ncclCommWindowRegister` with
    /// `NCCL_WIN_COLL_SYMMETRIC`): collectives push whoever calls first.
    pub(super) windows: bool,
    pub(super) reduce_n: Option<bool>,
    /// Direct all-reduces writing their slices into every output from the kernel
    /// (`Some(true)`), pushing them on copy engines, or (`None`) a mix over ranks and
    /// operations: each rank chooses alone.
    pub(super) write_all: Option<bool>,
    /// Direct all-reduces and reduce-scatters whose peers have not all posted are mailed
    /// (`CCL_IPC_DIRECT_REDUCE_MAILED`): the mail thread fills their kernels' slots at random
    /// points of the run; a rank whose buffers cannot be mapped bounces them.
    pub(super) mailed_reduce: bool,
}

impl Setup {
    /// `n` ranks, small chunks and slots, direct paths on, everything else off.
    pub(super) fn new(n: usize) -> Setup {
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
            mailed: false,
            eager: None,
            reduce_n: None,
            write_all: None,
            windows: false,
            mailed_reduce: false,
        }
    }

    /// Every rank's flags and receive area: rank r's at base(r) and base(r) + 128 MiB.
    pub(super) fn layouts(&self) -> Vec<Layout> {
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
    pub(super) fn protocol_mem(&self) -> Mem {
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
    pub(super) fn post(
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
            let targets = match dx.windows.get(l.rank) {
                Some(w) => w.targets(&direct_tasks, l.rank, self.n).map_err(e)?,
                None => None,
            };
            Some(
                posting::post_group(
                    &mut reach,
                    &p,
                    targets.as_deref(),
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
                let mirrored = dx
                    .windows
                    .get(l.rank)
                    .filter(|_| mine.is_some())
                    .and_then(|w| w.reduction_posts(&t, l.rank, self.n));
                // As the engine does: a rank that may mail cannot let the others go staged.
                let mut bounce = None;
                let mine = match mine {
                    None if self.mails(&t) => {
                        let (sb, rb) = (sb * sz, rb * sz);
                        let bytes = direct_reduce::SymBounce::bytes(sb, rb);
                        let (b, ex) = reach.bounce(bytes).map_err(e)?;
                        let b =
                            direct_reduce::SymBounce::at(b, t.send as u64, t.recv as u64, sb, rb);
                        bounce = Some(b);
                        Some((ex.post(1, b.b_in, sb), ex.post(1, b.b_out, rb)))
                    }
                    m => m,
                };
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
                let o = match mirrored {
                    Some(m) => direct_reduce::on_windows(&dx.boards[0], self.n, l.rank, seq, o, m)
                        .map_err(e)?,
                    None => o,
                };
                Some((t, seq, o, bounce))
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
    pub(super) fn emit(
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
        let rank = l.rank;
        let hand = |peer: usize, seq: u64, bytes: usize| {
            dx.mail
                .as_ref()
                .and_then(|m| m.hand(rank, peer, seq, bytes))
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
                            mail: dx.mail.is_some().then_some(&hand as &posting::MailFn<'_>),
                            eager: self.eager,
                        },
                        &|| false,
                    )
                    .map_err(e)?;
                if let Some(m) = mismatch {
                    return Err(m.to_string());
                }
                dx.left_to_pull
                    .set(dx.left_to_pull.get() + plan.waits.left_to_pull as usize);
                plan
            }
        };
        // As in production: flag operations batched, handed over before any host wait.
        let mut dev = Batched::new(dev);
        plan.begin(l, &mut dev).map_err(e)?;
        dev.flush().map_err(e)?;
        let mut staged = posted.staged;
        let mut sym_plan = None;
        if let Some((t, seq, o, bounce)) = posted.sym {
            let o = match o {
                direct_reduce::SymOutcome::Pending if self.mails(&t) => {
                    direct_reduce::sym_peek(&dx.boards[0], self.n, seq).map_err(e)?
                }
                o => o,
            };
            let p = if matches!(o, direct_reduce::SymOutcome::Pending) && self.mails(&t) {
                Some(self.mail_sym(l, &t, seq, bounce, dx)?)
            } else {
                self.settle_sym(l, (t, seq, o, bounce), wait, dx)?
            };
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
        // Even ranks copy eager chunks out as one device operation (a local setting).
        if let Some(part) = plan
            .eager_part(l, self.single_max, l.rank % 2 == 0)
            .map_err(e)?
        {
            em.push(part);
        }
        let early = plan.start_copies_early(l, &mut dev).map_err(e)?;
        em.begin(l, &mut dev).map_err(e)?;
        dev.flush().map_err(e)?;
        // In steps, as `submit` interleaves communicators (parts end and begin in between).
        let mut t = 0;
        while t < em.horizon() {
            t += 3;
            em.emit_until(t, l, c, &mut dev).map_err(e)?;
            dev.flush().map_err(e)?;
        }
        plan.end_with(&mut em, early, l, &mut dev, c).map_err(e)?;
        if let Some(p) = sym_plan {
            p.end(l, &mut dev).map_err(e)?;
        }
        dev.flush().map_err(e)
    }

    /// Whether direct reduction `t` is mailed when its peers have not all posted.
    fn mails(&self, t: &Task) -> bool {
        self.mailed_reduce
            && matches!(
                t.kind,
                TaskKind::Coll(Collective::AllReduce | Collective::ReduceScatter)
            )
    }

    /// A direct reduction whose peers have not all posted: its slot and job handed to the
    /// simulated mail thread, its plan.
    fn mail_sym(
        &self,
        l: &Layout,
        t: &Task,
        seq: u64,
        bounce: Option<direct_reduce::SymBounce>,
        dx: &DirectSim,
    ) -> std::result::Result<direct_reduce::SymPlan, String> {
        let e = |e: crate::error::Error| e.to_string();
        let mail = dx
            .mail
            .as_ref()
            .ok_or("mailed reductions without a mail thread")?;
        let blank = direct_reduce::Mailed {
            slot: 0,
            tag: 0,
            mirror: 0,
        };
        let piece = if seq % 3 == 2 { usize::MAX } else { 1024 };
        let mut p =
            direct_reduce::SymPlan::mailed(t, l.rank, self.n, seq, piece, blank).map_err(e)?;
        if let Some(b) = bounce {
            p.through(l.rank, b);
        }
        let (dst, srcs, also) = p.mail_parts(l.rank, self.n);
        let (slot, tag, mirror) = mail
            .hand_reduce(|slot, tag| crate::mail::ReduceJob {
                slot,
                tag,
                seq,
                n: self.n,
                dst,
                srcs,
                also,
                abort: Default::default(),
            })
            .ok_or("no mailbox slot free")?;
        p.mailed = Some(direct_reduce::Mailed { slot, tag, mirror });
        Ok(p)
    }

    /// A direct reduction's rendezvous settled without waiting, and the plan it calls for
    /// (None: staged).
    fn settle_sym(
        &self,
        l: &Layout,
        (t, seq, o, bounce): Sym,
        wait: rendezvous::PushWait<'_>,
        dx: &DirectSim,
    ) -> std::result::Result<Option<direct_reduce::SymPlan>, String> {
        let e = |e: crate::error::Error| e.to_string();
        let o = match o {
            direct_reduce::SymOutcome::Pending => {
                direct_reduce::sym_settle(&dx.boards[0], self.n, seq, wait, self.takeover, &|| {
                    false
                })
                .map_err(e)?
            }
            o => o,
        };
        if matches!(o, direct_reduce::SymOutcome::Active(_)) {
            dx.sym_alone.set(dx.sym_alone.get() + 1);
        }
        // Small pieces, so the simulation pipelines several per slice; every third reduction
        // in one piece (pushed as a batch where the device batches).
        let piece_bytes = if seq % 3 == 2 { usize::MAX } else { 1024 };
        let p = direct_reduce::SymPlan::from_outcome(
            o,
            &t,
            l.rank,
            self.n,
            seq,
            &mut |_, p| Ok(p.addr),
            piece_bytes,
        )
        .map_err(e)?;
        // Every other reduction in one kernel over all inputs, the rest as the chain of
        // two-input kernels: both must give the reference's bits, in any mix of ranks.
        Ok(p.map(|mut p| {
            p.multi = self.reduce_n.unwrap_or((seq + l.rank as u64) % 2 == 1);
            p.write_all = self.write_all.unwrap_or((seq + l.rank as u64) % 3 == 0);
            if let Some(b) = bounce {
                p.through(l.rank, b);
            }
            p
        }))
    }

    /// `post` then `emit` for one rank alone (peers that call later find it settled).
    pub(super) fn queue(
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

/// Where a rank's mirror of its receive area sits in the simulated memory.
pub(super) fn mirror_base(rank: usize) -> u64 {
    base(rank) + 0x0400_0000
}

/// Where a rank's host-path ring sits in the simulated memory (the peer's transfers to it).
pub(super) fn ring_base(rank: usize) -> u64 {
    base(rank) + 0x0E00_0000
}

/// Where a rank's bounce buffer sits in the simulated memory, and its size.
pub(super) fn bounce_base(rank: usize) -> u64 {
    base(rank) + 0x0C00_0000
}

pub(super) const BOUNCE: usize = 1 << 20;

/// The local-copy limit of batches with seeds 3 mod 5 (as two ranks' `auto` has one): the
/// cases' own blocks fall on both sides of it.
pub(super) const SIM_BATCH_LOCAL_MAX: usize = 8 << 10;

/// The host side of direct transfers in the simulation: every rank's rendezvous inbox, and
/// address ranges a peer may not map (they go through the bounce buffer).
pub(super) struct DirectSim {
    pub(super) boards: Vec<Vec<AtomicU64>>,
    pub(super) unmappable: Vec<(u64, u64)>,
    /// Reductions that ran directly (every rank posted in time, or one did it alone).
    pub(super) sym_direct: std::cell::Cell<usize>,
    /// Of those, two-rank reductions one rank did alone (counted on the active rank).
    pub(super) sym_alone: std::cell::Cell<usize>,
    /// Mailed sends, when the setup mails them.
    pub(super) mail: Option<super::mail::SimMail>,
    /// Each rank's symmetric windows, when the setup registers them (else none).
    pub(super) windows: Vec<crate::windows::Windows>,
    /// Sends whose receivers copied them (pulled): the sender posted first and did not push.
    pub(super) left_to_pull: std::cell::Cell<usize>,
}

impl DirectSim {
    pub(super) fn new(n: usize) -> DirectSim {
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
            mail: None,
            windows: Vec::new(),
            left_to_pull: std::cell::Cell::new(0),
        }
    }
}

/// One rank's view of buffers: one address space for all, so a post's address is the peer's.
pub(super) struct SimReach<'a> {
    pub(super) rank: usize,
    pub(super) unmappable: &'a [(u64, u64)],
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

/// One rank's group between posting and queueing.
/// A direct reduction as posted: its task, number, rendezvous outcome, and this rank's
/// bounce buffer standing in for its own.
pub(super) type Sym = (
    Task,
    u64,
    direct_reduce::SymOutcome,
    Option<direct_reduce::SymBounce>,
);

pub(super) struct Posted {
    pub(super) posting: Option<posting::Posting>,
    pub(super) sym: Option<Sym>,
    pub(super) staged: Vec<Task>,
}

pub(super) type Tamper<'a> = &'a dyn Fn(&mut SimDevice, usize);

/// Queues `cases` one after another on every rank, runs them, checks every output. Returns
/// how many reductions ran directly (per rank).
pub(super) fn simulate(
    s: &Setup,
    cases: &[Case],
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<usize, String> {
    simulate_counts(s, cases, merged, seed, tamper).map(|(direct, ..)| direct)
}

/// [`simulate`], also returning how many two-rank reductions one rank did alone and how many
/// sends were mailed.
pub(super) fn simulate_counts(
    s: &Setup,
    cases: &[Case],
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(usize, usize, usize), String> {
    simulate_full(s, cases, merged, seed, tamper).map(|(d, a, m, ..)| (d, a, m))
}

/// [`simulate`] of `cases`, every stream on its own queue, returning the bytes the run moved
/// between GPUs.
pub(super) fn simulate_traffic(
    s: &Setup,
    cases: &[Case],
    seed: u64,
) -> std::result::Result<Traffic, String> {
    simulate_full(s, cases, false, seed, None).map(|(.., t)| t)
}

/// [`simulate`], returning how many sends their receivers copied (pulled) rather than their
/// senders pushed.
pub(super) fn simulate_pulls(
    s: &Setup,
    cases: &[Case],
    merged: bool,
    seed: u64,
) -> std::result::Result<usize, String> {
    simulate_full(s, cases, merged, seed, None).map(|(.., pulled, _)| pulled)
}

/// Each rank's window over its user buffers (every case's, [`buffers`]), as every rank sees
/// them: the same offsets on every rank.
fn sim_windows(n: usize) -> Vec<crate::windows::Windows> {
    let at = |r: usize| base(r) + 0x1000_0000;
    let size = 0x4000_0000;
    (0..n)
        .map(|r| {
            let peers = (0..n)
                .map(|q| {
                    (q != r).then(|| Post {
                        pid: 1,
                        addr: at(q),
                        bytes: size,
                        buffer_id: q as u64 + 1,
                        offset: 0,
                        handle: [0; 64],
                        host_permille: 0,
                    })
                })
                .collect();
            let mut w = crate::windows::Windows::default();
            w.add(crate::windows::Window {
                base: at(r),
                size,
                peers,
            });
            w
        })
        .collect()
}

/// [`simulate_counts`] with the sends left to pull and the run's traffic.
fn simulate_full(
    s: &Setup,
    cases: &[Case],
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(usize, usize, usize, usize, Traffic), String> {
    let n = s.n;
    let mut dx = DirectSim::new(n);
    if s.mailed || s.mailed_reduce {
        dx.mail = Some(super::mail::SimMail::new());
    }
    if s.windows {
        dx.windows = sim_windows(n);
    }
    // With direct transfers, every third seed makes one rank's buffers unmappable per case
    // (they go through its bounce buffer); memory in a window is mappable by every rank.
    if s.direct && !s.windows && seed % 3 == 2 {
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
    // Batched copies: with seeds 2, 3 mod 5 on every rank (3: local copies of at most
    // SIM_BATCH_LOCAL_MAX), 4 mod 5 on odd ranks (a batching rank and a
    // per-lane one pair up through the same words).
    for (r, d) in devs.iter_mut().enumerate() {
        d.batch_copies = match seed % 5 {
            2 => Some(usize::MAX),
            3 => Some(SIM_BATCH_LOCAL_MAX),
            4 if r % 2 == 1 => Some(usize::MAX),
            _ => None,
        };
    }
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
    for (g, (k, _phase, group)) in groups.iter().enumerate() {
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
        if groups.get(g + 1).is_none_or(|next| next.0 != k) {
            devs.iter_mut().for_each(|d| d.mark_done([k]));
        }
    }
    if let Some(t) = tamper {
        for (r, d) in devs.iter_mut().enumerate() {
            t(d, r);
        }
    }
    let check = |k: usize, r: usize, mem: &mut Mem| -> std::result::Result<(), String> {
        let case = &cases[k];
        let Some(want) = expected(case, r, n) else {
            return Ok(());
        };
        let (_, recv, _, _) = buffers(case, k, r, n);
        let want: Vec<u8> = want.iter().flat_map(|&v| encode(case.dtype, v)).collect();
        match mem.read(recv, want.len()) == want {
            true => Ok(()),
            false => Err(format!("case {k} {case:?}: rank {r} wrong result")),
        }
    };
    let early = |r: usize, k: usize, mem: &mut Mem| {
        check(k, r, mem).map_err(|e| format!("{e} once its stream had run past it"))
    };
    run_with_mail(&devs, &mut mem, merged, seed, &dx, Some(&early))?;
    for k in 0..cases.len() {
        for r in 0..n {
            check(k, r, &mut mem)?;
        }
    }
    let mailed = dx.mail.as_ref().map_or(0, |m| m.handed.get());
    let pulled = dx.left_to_pull.get();
    Ok((
        dx.sym_direct.get(),
        dx.sym_alone.get(),
        mailed,
        pulled,
        mem.traffic,
    ))
}

/// Rank `rank` of two posts a group that sends `count` floats to the other rank and
/// receives as many from it (a pipeline exchange).
pub(super) fn post_exchange(
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
        None,
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

/// Settles `posting` of `rank` with mailed sends (`mail` hands out slots) and push waits of
/// a minute: a send that waited for its receiver would hold the test that long.
pub(super) fn settle_mailed(
    boards: &[Vec<AtomicU64>],
    posting: posting::Posting,
    rank: usize,
    mail: &posting::MailFn<'_>,
) -> plan::Plan {
    settle_patiently(boards, posting, rank, Some(mail), None).0
}

/// Settles `posting` of `rank` with eager sends from any size, and push and exchange windows
/// of a minute (which an eager send must not wait out).
pub(super) fn settle_eager(
    boards: &[Vec<AtomicU64>],
    posting: posting::Posting,
    rank: usize,
) -> (plan::Plan, Option<crate::error::Error>) {
    settle_patiently(boards, posting, rank, None, Some(0))
}

/// Settles `posting` of `rank` with push and exchange windows of a minute, mailed or eager
/// sends as given.
fn settle_patiently(
    boards: &[Vec<AtomicU64>],
    posting: posting::Posting,
    rank: usize,
    mail: Option<&posting::MailFn<'_>>,
    eager: Option<usize>,
) -> (plan::Plan, Option<crate::error::Error>) {
    let far = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut reach = SimReach {
        rank,
        unmappable: &[],
    };
    let boards = |r: usize| boards.get(r).map(|b| b as &dyn Words);
    let how = posting::SettleHow {
        wait: rendezvous::PushWait {
            soft: far,
            hard: far,
            busy: &|| true,
            futile: &|| false,
        },
        single_max: 0,
        late: None,
        local_split: plan::LocalSplit::default(),
        wait_min_bytes: 0,
        exchange_until: Some(far),
        remote_min: None,
        host: None,
        mail,
        eager,
    };
    posting
        .settle(&mut reach, rank, &boards, how, &|| false)
        .unwrap()
}

/// Settles `posting` of `rank` as the device path does, with the given waits.
pub(super) fn settle(
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
                mail: None,
                eager: None,
            },
            &|| false,
        )
        .unwrap()
        .0
}

/// Runs the devices' queues with `dx`'s mail thread, if it mails (and `done`, as
/// [`super::device::run_mailed`]).
pub(super) fn run_with_mail(
    devs: &[SimDevice],
    mem: &mut Mem,
    merged: bool,
    seed: u64,
    dx: &DirectSim,
    done: Option<super::device::DoneCheck<'_>>,
) -> std::result::Result<(), String> {
    let mail = dx
        .mail
        .as_ref()
        .map(|m| (m as &dyn super::device::MailThread, &dx.boards[..]));
    super::device::run_mailed(devs, mem, merged, seed, mail, done)
}
