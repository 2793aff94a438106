//! Queueing groups on the engines' streams: each communicator's group lowered and its
//! direct transfers and reductions posted before any is queued, then every communicator's
//! work interleaved by logical time.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::cuda::helpers::plain_event;
use ccl_cuda::cuda::{KernelOp, Stream};
use ccl_cuda::DataType;

use crate::calls::CallSig;
use crate::control::CommCtx;
use crate::cuda_device::CudaDevice;
use crate::device::Batched;
use crate::direct::{plan, posting};
use crate::engine::{streams_of, IpcEngine, Phases, Queued};
use crate::error::{cuda_err, Error, Result};
use crate::ll_launch;
use crate::lower::{lower, Program};
use crate::mail::MailJob;
use crate::paths::{kernels_needed, reduction_paths, two_shot, LowLatency};
use crate::protocol::Chain;
use crate::tuning::{Tuning, DIRECT_POST_TIMEOUT};
use crate::{direct, direct_reduce, rendezvous, small_p2p};

/// Queues the groups of several communicators (one per GPU of a `-g N` process, say). A
/// group with a relayed broadcast (`relay`) goes in phases, each queued for every
/// communicator before the next, so a stream only ever waits on work already queued.
pub fn submit(groups: Vec<(CommCtx, Arc<IpcEngine>, Vec<Task>)>) -> Result<()> {
    let mut phased = Vec::with_capacity(groups.len());
    for (comm, eng, tasks) in groups {
        let (rank, n) = (eng.layout.rank, eng.layout.nranks);
        // The call as the application made it is what peers compare.
        let sig = CallSig::of(&tasks);
        let phases = if eng.direct {
            eng.relay.phases(tasks, rank, n)
        } else {
            vec![tasks]
        };
        phased.push((comm, eng, sig, phases));
    }
    let most = phased.iter().map(|g| g.3.len()).max().unwrap_or(0);
    for p in 0..most {
        let mut groups = Vec::with_capacity(phased.len());
        for (comm, eng, sig, phases) in &mut phased {
            match phases.get_mut(p).map(std::mem::take) {
                Some(tasks) if !tasks.is_empty() => {
                    groups.push((comm.clone(), eng.clone(), tasks, sig.take()))
                }
                _ => {}
            }
        }
        if !groups.is_empty() {
            submit_phase(groups)?;
        }
    }
    Ok(())
}

/// One communicator's part of a phase: its tasks and, in its first phase, the signature peers
/// compare.
type PhaseGroup = (CommCtx, Arc<IpcEngine>, Vec<Task>, Option<CallSig>);

/// Queues one phase of the groups, interleaved by logical time, so no stream runs far ahead
/// of the peers that release it and the host never blocks on a full stream queue that only a
/// later call would drain.
fn submit_phase(groups: Vec<PhaseGroup>) -> Result<()> {
    let started = std::time::Instant::now();
    // The monitor learns of copies that ended since the last group (nothing when it is off).
    for (_, eng, _, _) in &groups {
        if let Some(m) = eng.copies.get() {
            m.poll();
        }
    }
    let mut qs: Vec<Queueing> = Vec::with_capacity(groups.len());
    for (comm, eng, tasks, sig) in groups {
        qs.push(prepare(&comm, eng, &tasks, sig)?);
    }
    // From here on sequence numbers are taken: a failure leaves peers waiting on chunks that
    // will not come, so it poisons the communicator.
    let engines: Vec<Arc<IpcEngine>> = qs.iter().map(|q| q.eng.clone()).collect();
    let mut guards: Vec<_> = engines.iter().map(|e| e.queued.lock()).collect();
    let poison = |comm: &CommCtx, e: Error| {
        comm.set_async_error(&e);
        e
    };
    // Post and compare the collectives before anything is queued: a mismatch fails the group
    // with nothing queued (every communicator of it, since their counts moved on), and the
    // peers see it through their async error.
    let mut mismatch = None;
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        if let Some(sig) = q.sig {
            let seq = g.calls.push(sig);
            q.eng.board.post(seq, sig);
            mismatch = mismatch.or_else(|| q.eng.board.check(&mut g.calls));
        }
    }
    if let Some(e) = mismatch {
        for q in &qs {
            q.comm.set_async_error(&e);
        }
        return Err(e);
    }
    let locked = started.elapsed();
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        q.post_direct(g).map_err(|e| poison(&q.comm, e))?;
    }
    let now = std::time::Instant::now();
    let posted = started.elapsed();
    let t = qs.first().map_or_else(Tuning::default, |q| q.eng.tuning);
    let wait = Deadlines {
        soft: now + t.push_wait,
        hard: now + t.push_wait_busy,
        exchange: t.exchange_wait.map(|d| now + d),
    };
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        q.begin(g, wait).map_err(|e| poison(&q.comm, e))?;
    }
    let begun = started.elapsed();
    let horizon = qs.iter().map(|q| q.em.horizon()).max().unwrap_or(0);
    // Interleave in steps of a few logical times: small enough to bound each stream's queue,
    // large enough to keep the per-step overhead negligible.
    const STEP: u64 = 4;
    let mut t = 0;
    while t < horizon {
        t = (t + STEP).min(horizon);
        for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
            q.emit_until(t, g).map_err(|e| poison(&q.comm, e))?;
        }
    }
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        q.end(g).map_err(|e| poison(&q.comm, e))?;
    }
    let took = started.elapsed();
    let phases = Phases {
        prepare: locked,
        post: posted - locked,
        begin: begun - posted,
        emit: took - begun,
    };
    for g in guards.iter_mut() {
        g.queueing.add(took, phases);
    }
    // Where a group's host time goes (NCCL_DEBUG=TRACE): a host-bound loop beside a compute
    // thread showed 0.67 ms per send/receive call with little of it in push waits.
    if tracing::enabled!(tracing::Level::TRACE) {
        let us = |d: std::time::Duration| d.as_micros();
        tracing::trace!(
            "cuda-ipc group queued in {} us: prepared and locked {}, posted {}, settled and \
             begun {}, emitted and ended {}",
            us(took),
            us(locked),
            us(posted - locked),
            us(begun - posted),
            us(took - begun)
        );
    }
    match qs
        .iter_mut()
        .find_map(|q| q.direct_err.take().map(|e| (q, e)))
    {
        Some((q, e)) => Err(poison(&q.comm, e)),
        None => Ok(()),
    }
}

/// Lowers one communicator's group and prepares its emission.
fn prepare(
    comm: &CommCtx,
    eng: Arc<IpcEngine>,
    tasks: &[Task],
    sig: Option<CallSig>,
) -> Result<Queueing> {
    let tasks_all = tasks;
    let user = streams_of(&eng.ctx, tasks);
    if user.is_empty() {
        return Err(Error::internal("cuda-ipc: a group without operations"));
    }
    let l = &eng.layout;
    // Whether the whole group is a small exchange is judged before the small sends leave it.
    let takes_direct = direct::takes_direct(&eng, tasks);
    let (small, tasks): (Vec<Task>, Vec<Task>) = tasks
        .iter()
        .partition(|t| small_p2p::is_small(t, l.rank, eng.p2p_max));
    let (direct_tasks, staged): (Vec<Task>, Vec<Task>) =
        tasks.iter().partition(|t| takes_direct(t));
    let point_to_point = direct_tasks
        .iter()
        .all(|t| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. }));
    let direct = if direct_tasks.is_empty() {
        None
    } else {
        Some(lower(&direct_tasks, l.rank, l.nranks, usize::MAX, 0)?)
    };
    let targets = match &direct {
        Some(_) => eng
            .windows
            .lock()
            .targets(&direct_tasks, l.rank, l.nranks)?,
        None => None,
    };
    let tasks = &staged[..];
    let (ll, sym) = reduction_paths(
        tasks,
        l.rank,
        l.nranks,
        eng.ll_limits(),
        if eng.direct && direct.is_none() {
            eng.direct_reduce
        } else {
            0
        },
    )?;
    let ll = two_shot(ll, l.nranks, eng.ll_two_shot_min);
    let lowered: &[Task] = if ll.is_some() { &[] } else { tasks };
    let em = Chain::lower(lowered, l.rank, l.nranks, l.chunk, eng.single_stream_max)?;
    // Load every kernel now: loading a module can wait for the whole device, which must not
    // happen once this device's streams wait on a peer whose work is queued after ours (one
    // thread driving several GPUs).
    for (dt, op) in kernels_needed(em.programs(), ll.as_ref()) {
        eng.kernels.prepare(dt, op).map_err(cuda_err)?;
    }
    if let Some(t) = sym.filter(|_| eng.reduce_n.load(Ordering::Relaxed)) {
        let op = KernelOp::ReduceN(t.red.arithmetic().into(), l.nranks as u8);
        if let Err(e) = eng.kernels.prepare(t.dtype, op) {
            // Not fatal: the chain of two-input kernels computes the same bits.
            eng.reduce_n.store(false, Ordering::Relaxed);
            tracing::warn!(
                "rank {}: cuda-ipc could not load {op:?}; direct reductions use two-input kernels: {e}",
                l.rank
            );
        }
    }
    if let Some(t) = sym.filter(|t| mails(&eng, t)) {
        let op = KernelOp::ReduceNMail(t.red.arithmetic().into(), l.nranks as u8);
        eng.kernels.prepare(t.dtype, op).map_err(cuda_err)?;
    }
    if !small.is_empty() {
        eng.kernels
            .prepare(DataType::Uint8, KernelOp::LlP2p)
            .map_err(cuda_err)?;
    }
    let staged_tx = em.sent_bytes();
    Ok(Queueing {
        op: crate::copy_monitor::op_of(tasks_all),
        comm: comm.clone(),
        eng,
        user,
        em,
        ll,
        small,
        sig,
        direct,
        targets,
        point_to_point,
        staged_tx,
        posting: None,
        plan: plan::Plan::default(),
        early: None,
        direct_err: None,
        sym,
        sym_post: None,
        sym_plan: None,
        sym_bounce: None,
    })
}

/// Whether direct reduction `t` is mailed when its peers have not all posted
/// (`CCL_IPC_DIRECT_REDUCE_MAILED`): all-reduces and reduce-scatters (a reduce's ranks but
/// the root have no output to post, so it still meets).
fn mails(eng: &IpcEngine, t: &Task) -> bool {
    eng.mailed_reduce
        && eng.mail.is_some()
        && matches!(
            t.kind,
            TaskKind::Coll(Collective::AllReduce | Collective::ReduceScatter)
        )
}

/// A group being queued on one communicator's streams.
struct Queueing {
    /// What the monitor's records of its copies name ([`crate::copy_monitor::op_of`]).
    op: ccl_monitor::Op,
    comm: CommCtx,
    eng: Arc<IpcEngine>,
    user: Vec<Stream>,
    em: Chain,
    ll: Option<LowLatency>,
    /// Small sends and receives for the point-to-point kernel, in call order.
    small: Vec<Task>,
    sig: Option<CallSig>,
    /// The group's direct transfers, lowered, and once posted, this rank's plan for them.
    direct: Option<Program>,
    /// Where its sends land, per peer, when symmetric windows say ([`crate::windows`]).
    targets: Option<Vec<Vec<crate::rendezvous::Post>>>,
    /// The direct transfers are all sends and receives (no collective's blocks): only then
    /// does a send to a peer the group also receives from wait `CCL_IPC_EXCHANGE_WAIT_US`
    /// (a 2-rank all-gather or all-to-all also sends to and receives from its peer, but in a
    /// host-bound tensor-parallel loop a 20 ms host wait per call would cost more than the
    /// serial copies it saves).
    point_to_point: bool,
    /// Bytes the staged program sends through receive slots.
    staged_tx: usize,
    posting: Option<posting::Posting>,
    plan: plan::Plan,
    /// The lanes of the plan's copies queued early ([`plan::Plan::start_copies_early`]).
    early: Option<Vec<crate::layout::Lane>>,
    /// A peer disagreed on a transfer's size (reported once everything is queued).
    direct_err: Option<Error>,
    /// An all-reduce or reduce-scatter that may run directly, its rendezvous, and the plan
    /// if every rank posted in time (then the staged emission is dropped).
    sym: Option<Task>,
    sym_post: Option<(u64, direct_reduce::SymOutcome)>,
    sym_plan: Option<direct_reduce::SymPlan>,
    /// This rank's buffers of the direct reduction go through its bounce buffer.
    sym_bounce: Option<direct_reduce::SymBounce>,
}

impl Queueing {
    /// Posts this rank's buffers for a direct reduction: its input and output as peers map
    /// them, or nothing (then everyone goes staged) if they cannot, or overlap partly.
    fn post_sym(&mut self, q: &mut Queued) -> Result<()> {
        let Some(t) = self.sym else {
            return Ok(());
        };
        let eng = &*self.eng;
        let l = &eng.layout;
        let Some(board) = eng.inbox.of(0) else {
            return Err(Error::internal("cuda-ipc: no inbox of rank 0"));
        };
        let (sb, rb) = ccl_collectives::task::buffer_counts(t.kind, l.rank, l.nranks, t.count)
            .map(|(s, r)| (s * t.dtype.size(), r * t.dtype.size()))
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let (s, r) = (t.send as u64, t.recv as u64);
        let disjoint = s + sb as u64 <= r || r + rb as u64 <= s;
        let in_place = match t.kind {
            TaskKind::Coll(Collective::ReduceScatter) => r == s + (l.rank * rb) as u64,
            _ => s == r,
        };
        let posts_output = direct_reduce::output_posted(&t, l.rank);
        let mine = if disjoint || in_place || !posts_output {
            let pid = rendezvous::Reach::pid(&q.bufs);
            let si = rendezvous::Reach::export(&mut q.bufs, s)?;
            let ro = if posts_output {
                rendezvous::Reach::export(&mut q.bufs, r)?.map(|ri| ri.post(pid, r, rb))
            } else {
                Some(direct_reduce::NO_POST)
            };
            si.zip(ro).map(|(si, ro)| (si.post(pid, s, sb), ro))
        } else {
            None
        };
        // Buffers in symmetric windows name the peers' too: no wait for their posts.
        let mirrored = mine
            .as_ref()
            .and_then(|_| eng.windows.lock().reduction_posts(&t, l.rank, l.nranks));
        // A rank that may mail its reduction cannot let the others go staged: buffers its
        // peers cannot map go through its bounce buffer instead.
        let mine = match mine {
            None if mails(eng, &t) => {
                let bytes = direct_reduce::SymBounce::bytes(sb, rb);
                let (base, ex) = rendezvous::Reach::bounce(&mut q.bufs, bytes)?;
                let b = direct_reduce::SymBounce::at(base, s, r, sb, rb);
                let pid = rendezvous::Reach::pid(&q.bufs);
                q.sent_bounced += sb as u64;
                self.sym_bounce = Some(b);
                Some((ex.post(pid, b.b_in, sb), ex.post(pid, b.b_out, rb)))
            }
            m => m,
        };
        let seq = q.counters.sym;
        q.counters.sym += 1;
        let abort = self.comm.abort.clone();
        let o = direct_reduce::sym_post(
            board,
            l.nranks,
            l.rank,
            seq,
            mine,
            Some(std::time::Instant::now() + DIRECT_POST_TIMEOUT),
            &|| abort.load(std::sync::atomic::Ordering::Relaxed),
        )?;
        let o = match mirrored {
            Some(m) => {
                q.sym_windowed += 1;
                direct_reduce::on_windows(board, l.nranks, l.rank, seq, o, m)?
            }
            None => o,
        };
        self.sym_post = Some((seq, o));
        Ok(())
    }

    /// Posts the group's direct transfers (host only: no stream work, no wait for a peer's
    /// call, so every communicator of a `-g N` group posts before any settles).
    fn post_direct(&mut self, q: &mut Queued) -> Result<()> {
        self.post_sym(q)?;
        let Some(p) = self.direct.take() else {
            return Ok(());
        };
        let eng = &*self.eng;
        let timeout = eng.tuning.post_timeout;
        let abort = self.comm.abort.clone();
        self.posting = Some(posting::post_group(
            &mut q.bufs,
            &p,
            self.targets.as_deref(),
            eng.layout.rank,
            &mut q.counters,
            &|r| eng.inbox.of(r).map(|b| b as &dyn rendezvous::Words),
            Some(std::time::Instant::now() + timeout),
            &|| abort.load(std::sync::atomic::Ordering::Relaxed),
            eng.layout.host.as_ref(),
            &|| self.host_paused(),
        )?);
        Ok(())
    }

    /// Whether a transfer the host path would take goes without it: while the GPU is held at
    /// its power or thermal limit (see [`IpcEngine::host_limits`]).
    fn host_paused(&self) -> bool {
        let eng = &*self.eng;
        let Some((clocks, watch)) = &eng.host_limits else {
            return false;
        };
        let paused = watch.limited(std::time::Instant::now(), || {
            clocks.power_or_thermal_limited()
        });
        if paused {
            eng.host_skipped.fetch_add(1, Ordering::Relaxed);
        }
        paused
    }

    /// Orders the user's streams; then settles the direct transfers and queues their local
    /// copies and flags, settles the direct reduction and queues its start, launches the
    /// low-latency and point-to-point kernels; then forks the lanes of the staged program
    /// and queues its local copies.
    fn begin(&mut self, q: &mut Queued, wait: Deadlines) -> Result<()> {
        self.order_streams(q)?;
        if let Some(posting) = self.posting.take() {
            self.settle_direct(posting, q, wait)?;
        }
        if let Some((seq, o)) = self.sym_post.take() {
            self.settle_sym(seq, o, q, wait)?;
        }
        let eng = &*self.eng;
        if let Some(part) = self.plan.eager_part(
            &eng.layout,
            eng.single_stream_max,
            eng.cfg.eager_copy_kernel,
        )? {
            self.staged_tx += part.program.sent_bytes();
            self.em.push(part);
        }
        self.launch_low_latency()?;
        self.launch_small(q)?;
        if !self.plan.eager.is_empty() {
            let mut cuda = device(&self.eng, &self.user[0], self.op, q.ops);
            let mut dev = Batched::new(&mut cuda);
            self.early = self.plan.start_copies_early(&self.eng.layout, &mut dev)?;
            dev.flush()?;
        }
        let mut cuda = CudaDevice::new(&self.eng, &self.user[0]);
        let mut dev = Batched::new(&mut cuda);
        self.em.begin(&self.eng.layout, &mut dev)?;
        dev.flush()
    }

    /// The group's first stream waits for the communicator's last operation (when that ran
    /// on another stream) and for the work already queued on the group's other streams.
    fn order_streams(&self, q: &Queued) -> Result<()> {
        let eng = &*self.eng;
        let first = &self.user[0];
        let raw = first.raw() as usize;
        if q.last_stream.is_some_and(|s| s != raw) {
            first.wait_event(&eng.last_done).map_err(cuda_err)?;
        }
        for s in &self.user[1..] {
            let ev = plain_event(&eng.ctx)?;
            ev.record(s).map_err(cuda_err)?;
            first.wait_event(&ev).map_err(cuda_err)?;
        }
        Ok(())
    }

    /// Settles the posted direct transfers into this rank's plan (a send posted first may wait
    /// for its receiver to push), counts what they send, and queues the plan's start.
    fn settle_direct(
        &mut self,
        posting: posting::Posting,
        q: &mut Queued,
        wait: Deadlines,
    ) -> Result<()> {
        let eng = &*self.eng;
        let busy = || !eng.last_done.query().unwrap_or(true);
        let abort = &self.comm.abort;
        let stop = || abort.load(Ordering::Relaxed);
        let rank = eng.layout.rank;
        // The mail thread may be there for mailed reductions only.
        let mail = eng.mail.as_ref().filter(|_| eng.cfg.mailed_push).map(|m| {
            move |peer: usize, seq: u64, bytes: usize| {
                m.send(|slot, tag| MailJob {
                    slot,
                    tag,
                    src: rank,
                    dst: peer,
                    seq,
                    bytes: bytes as u64,
                    abort: abort.clone(),
                })
            }
        });
        let (plan, err) = posting.settle(
            &mut q.bufs,
            eng.layout.rank,
            &|r| eng.inbox.of(r).map(|b| b as &dyn rendezvous::Words),
            posting::SettleHow {
                wait: wait.push_wait(&busy),
                // Lanes only pay off when copies can overlap; a local setting (each rank
                // orders its own streams).
                single_max: eng.tuning.single_max,
                late: eng.tuning.push_wait_adapt.then_some(&mut q.push_late),
                wait_min_bytes: eng.tuning.wait_min_bytes,
                local_split: plan::LocalSplit {
                    lanes: eng.tuning.local_copy_lanes,
                    ..plan::LocalSplit::default()
                },
                exchange_until: wait.exchange.filter(|_| self.point_to_point),
                // Sends and receives only: beside an all-to-all's or all-gather's own
                // block (a kernel of this process on its GPU) the peer process's copy on
                // that GPU slowed both (2026-11-23: 256 MiB all-to-all 370 -> 510 us).
                remote_min: eng
                    .remote
                    .as_ref()
                    .filter(|_| self.point_to_point)
                    .map(|r| r.min_bytes),
                host: eng.layout.host.as_ref().map(|h| {
                    let c = &mut q.counters;
                    (h, &mut c.host_out, &mut c.host_in)
                }),
                mail: mail.as_ref().map(|m| m as _),
                eager: eng.tuning.eager,
            },
            &stop,
        )?;
        let outgoing = || plan.transfers.iter().filter(|t| t.outgoing);
        q.sent_direct += outgoing().map(|t| t.bytes as u64).sum::<u64>();
        q.sent_bounced += plan.bounced as u64;
        q.sent_host += outgoing()
            .filter_map(|t| t.host.map(|h| t.bytes.saturating_sub(h.nvl) as u64))
            .sum::<u64>();
        q.push_waits.add(&plan.waits);
        self.plan = plan;
        // The mail thread's errors (a receive of another size than its mailed send) surface
        // at the next group, as a peer's size disagreement does here.
        self.direct_err = err.or_else(|| eng.mail.as_ref().and_then(|m| m.take_error()));
        let mut cuda = CudaDevice::new(eng, &self.user[0]);
        let mut dev = Batched::new(&mut cuda);
        self.plan.begin(&eng.layout, &mut dev)?;
        dev.flush()
    }

    /// Settles the direct reduction's rendezvous `seq` (waiting, within limits, for the other
    /// ranks' posts) and counts how it went; if it runs directly, drops the staged program
    /// and queues the reduction's start.
    fn settle_sym(
        &mut self,
        seq: u64,
        o: direct_reduce::SymOutcome,
        q: &mut Queued,
        wait: Deadlines,
    ) -> Result<()> {
        let eng = &*self.eng;
        let l = &eng.layout;
        let busy = || !eng.last_done.query().unwrap_or(true);
        let abort = &self.comm.abort;
        let stop = || abort.load(Ordering::Relaxed);
        let now = std::time::Instant::now();
        let o = match (o, self.sym) {
            (direct_reduce::SymOutcome::Pending, Some(t)) if mails(eng, &t) => {
                let board = eng
                    .inbox
                    .of(0)
                    .ok_or_else(|| Error::internal("cuda-ipc: no inbox"))?;
                match direct_reduce::sym_peek(board, l.nranks, seq)? {
                    direct_reduce::SymOutcome::Pending => return self.mail_sym(seq, t, q),
                    o => o,
                }
            }
            (o, _) => o,
        };
        let o = match o {
            direct_reduce::SymOutcome::Pending => direct_reduce::sym_settle(
                eng.inbox
                    .of(0)
                    .ok_or_else(|| Error::internal("cuda-ipc: no inbox"))?,
                l.nranks,
                seq,
                self.sym_wait(wait.push_wait(&busy), now),
                eng.takeover.is_some(),
                &stop,
            )?,
            o => o,
        };
        q.sym_waited += now.elapsed();
        q.sym_outcomes[match &o {
            direct_reduce::SymOutcome::Direct(_) => 0,
            direct_reduce::SymOutcome::Active(_) => 1,
            direct_reduce::SymOutcome::Passive => 2,
            _ => 3,
        }] += 1;
        // Pieces of the slice: each is reduced, then pushed while the next reduces (a
        // local setting: pushes and kernels are this rank's own).
        let piece = eng.tuning.reduce_piece;
        let bufs = &mut q.bufs;
        let mut addr = |_: usize, p: &rendezvous::Post| rendezvous::Reach::resolve(bufs, p);
        let plan = match self.sym {
            Some(t) => direct_reduce::SymPlan::from_outcome(
                o, &t, l.rank, l.nranks, seq, &mut addr, piece,
            )?,
            None => None,
        }
        .map(|mut p| {
            (p.multi, p.write_all) = eng.reduce_n_uses();
            if let Some(b) = self.sym_bounce {
                p.through(l.rank, b);
            }
            p
        });
        let (Some(plan), Some(t)) = (plan, self.sym) else {
            return Ok(());
        };
        self.start_sym(plan, t, q)
    }

    /// A direct reduction whose peers have not all posted, queued without waiting for them: a
    /// mailbox slot for its kernel (waiting, if every slot is taken, for this GPU to finish
    /// older ones), the job for the mail thread, the plan's start.
    fn mail_sym(&mut self, seq: u64, t: Task, q: &mut Queued) -> Result<()> {
        let eng = &*self.eng;
        let (l, abort) = (&eng.layout, &self.comm.abort);
        let mail = eng
            .mail
            .as_ref()
            .ok_or_else(|| Error::internal("cuda-ipc: a mailed reduction without mailboxes"))?;
        let placeholder = direct_reduce::Mailed {
            slot: 0,
            tag: 0,
            mirror: 0,
        };
        let piece = eng.tuning.reduce_piece;
        let mut plan =
            direct_reduce::SymPlan::mailed(&t, l.rank, l.nranks, seq, piece, placeholder)?;
        if let Some(b) = self.sym_bounce {
            plan.through(l.rank, b);
        }
        let (dst, srcs, also) = plan.mail_parts(l.rank, l.nranks);
        let mut spins = 0u32;
        let (slot, tag, mirror) = loop {
            let job = |slot, tag| crate::mail::ReduceJob {
                slot,
                tag,
                seq,
                n: l.nranks,
                dst,
                srcs: srcs.clone(),
                also: also.clone(),
                abort: abort.clone(),
            };
            if let Some(m) = mail.reduce(job) {
                break m;
            }
            if abort.load(Ordering::Relaxed) {
                return Err(Error::system("communicator aborted"));
            }
            // Slots free as this GPU runs older mailed kernels.
            spins += 1;
            if spins < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        };
        plan.mailed = Some(direct_reduce::Mailed { slot, tag, mirror });
        q.sym_mailed += 1;
        self.start_sym(plan, t, q)
    }

    /// Counts what a direct reduction sends, drops the staged program and queues the
    /// reduction's start.
    fn start_sym(&mut self, plan: direct_reduce::SymPlan, t: Task, q: &mut Queued) -> Result<()> {
        let eng = &*self.eng;
        let l = &eng.layout;
        q.sent_direct += match plan.role {
            direct_reduce::SymRole::Shared => plan.count * (l.nranks - 1),
            direct_reduce::SymRole::Active { .. } => plan.total,
            direct_reduce::SymRole::Passive { .. } => 0,
        } as u64
            * t.dtype.size() as u64;
        // Nothing goes through the slots: drop the staged program.
        self.em = Chain::new(Vec::new());
        self.staged_tx = 0;
        let mut cuda = CudaDevice::new(eng, &self.user[0]);
        let mut dev = Batched::new(&mut cuda);
        plan.begin(l, &mut dev)?;
        dev.flush()?;
        self.sym_plan = Some(plan);
        Ok(())
    }

    /// How long this rank waits for the other ranks' posts of its direct reduction, from
    /// `now`: as the direct transfers do (`push_wait`), not at all below
    /// `CCL_IPC_PUSH_WAIT_MIN_BYTES` (all go staged unless every rank had already posted), or,
    /// with two ranks, only as long as `CCL_IPC_DIRECT_REDUCE_TAKEOVER_US` before leaving the
    /// reduction to whoever posts second.
    fn sym_wait<'a>(
        &self,
        push_wait: rendezvous::PushWait<'a>,
        now: std::time::Instant,
    ) -> rendezvous::PushWait<'a> {
        let eng = &*self.eng;
        let bytes = self
            .sym
            .map_or(0, |t| t.count.saturating_mul(t.dtype.size()));
        // From CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES on the first poster waits as long as
        // any reduction would and only then leaves it to the peer, rather than going staged
        // (a pipeline's tied-embedding all-reduce of 131 MB: the stages reach it milliseconds
        // apart, and staged it took 786 us of host time on the late one).
        let quick = eng
            .takeover
            .filter(|_| bytes < eng.tuning.takeover_max_bytes);
        if let Some(d) = quick {
            rendezvous::PushWait {
                soft: now + d,
                hard: now + d,
                ..push_wait
            }
        } else if bytes < eng.tuning.wait_min_bytes {
            rendezvous::PushWait {
                soft: now,
                hard: now,
                ..push_wait
            }
        } else {
            push_wait
        }
    }

    /// The group's small collective as one low-latency kernel (two for an all-reduce in two
    /// shots), if it is one.
    fn launch_low_latency(&self) -> Result<()> {
        match &self.ll {
            Some(ll) => ll_launch::launch(&self.eng, &self.user[0], ll),
            None => Ok(()),
        }
    }

    /// The group's small sends and receives as point-to-point kernels.
    fn launch_small(&self, q: &mut Queued) -> Result<()> {
        if self.small.is_empty() {
            return Ok(());
        }
        let eng = &*self.eng;
        let l = &eng.layout;
        let mut group = small_p2p::plan(&self.small, &mut q.small);
        if !group.snapshots.is_empty() {
            let base = q.snapshot_area(&eng.ctx, group.snapshot_bytes())?;
            for (dst, src, bytes) in group.place_snapshots(base) {
                // SAFETY: `src` is a send of this group (validated at enqueue), read here
                // before any of the group's receives can write it; `dst` lies in the snapshot
                // area, which no earlier group reads any more once this stream gets here
                // (groups of this communicator run in call order).
                unsafe { self.user[0].memcpy(dst, src, bytes) }.map_err(cuda_err)?;
            }
        }
        for launch in group.launches {
            let x = &launch.x;
            q.sent_small += x.sbytes[..x.nsend as usize].iter().sum::<u64>();
            // SAFETY: the buffers hold what the tasks say (validated at enqueue), each at
            // most a slot; the areas' point-to-point words and slots were zeroed at setup;
            // each pair's numbers and the ticket go on in this communicator's call order
            // (under the queue lock), as the peers' do for the matching receives and sends.
            unsafe {
                eng.kernels.ll_p2p(
                    &self.user[0],
                    x,
                    eng.ll_areas.ptr(),
                    l.rank as u32,
                    l.nranks as u32,
                    launch.ticket_base,
                    eng.small_mismatch.device_ptr(),
                )
            }
            .map_err(cuda_err)?;
        }
        Ok(())
    }

    fn emit_until(&mut self, until: u64, q: &mut Queued) -> Result<()> {
        let eng = &*self.eng;
        let mut cuda = CudaDevice::new(eng, &self.user[0]);
        let mut dev = Batched::new(&mut cuda);
        self.em
            .emit_until(until, &eng.layout, &mut q.counters, &mut dev)?;
        dev.flush()
    }

    /// Joins the lanes and the user's other streams back.
    fn end(&mut self, q: &mut Queued) -> Result<()> {
        let eng = &*self.eng;
        let first = &self.user[0];
        let mut cuda = device(eng, first, self.op, q.ops);
        let mut dev = Batched::new(&mut cuda);
        let early = self.early.take();
        self.plan
            .end_with(&mut self.em, early, &eng.layout, &mut dev, &mut q.counters)?;
        if let Some(p) = &self.sym_plan {
            p.end(&eng.layout, &mut dev)?;
        }
        dev.flush()?;
        q.last_stream = Some(first.raw() as usize);
        q.ops += 1;
        q.sent_staged += self.staged_tx as u64;
        eng.last_done.record(first).map_err(cuda_err)?;
        if self.user.len() > 1 {
            let ev = plain_event(&eng.ctx)?;
            ev.record(first).map_err(cuda_err)?;
            for s in &self.user[1..] {
                s.wait_event(&ev).map_err(cuda_err)?;
            }
        }
        Ok(())
    }
}

/// The device view of a group's streams (`user` its first); with the monitor on, its copies
/// recorded as operation `op`, the communicator's number `seq`.
fn device<'a>(
    eng: &'a IpcEngine,
    user: &'a Stream,
    op: ccl_monitor::Op,
    seq: u64,
) -> CudaDevice<'a> {
    let cuda = CudaDevice::new(eng, user);
    match eng.copies.get() {
        Some(m) => cuda.for_op(ccl_monitor::CollId {
            comm: m.comm,
            op,
            seq,
        }),
        None => cuda,
    }
}

/// How long one call's direct transfers wait for their peers' posts.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    /// `CCL_IPC_PUSH_WAIT_US` from the call...
    soft: std::time::Instant,
    /// ...and `CCL_IPC_PUSH_WAIT_BUSY_US` while this GPU is busy.
    hard: std::time::Instant,
    /// `CCL_IPC_EXCHANGE_WAIT_US`: sends to a peer the group also receives from.
    exchange: Option<std::time::Instant>,
}

impl Deadlines {
    /// How long the direct paths wait for peers' posts: longer while this GPU is `busy`.
    fn push_wait<'a>(&self, busy: &'a dyn Fn() -> bool) -> rendezvous::PushWait<'a> {
        rendezvous::PushWait {
            soft: self.soft,
            hard: self.hard,
            busy,
            futile: &never,
        }
    }
}

/// A `PushWait::futile` that never gives up early.
fn never() -> bool {
    false
}
