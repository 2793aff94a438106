//! The host executor's side of a group: each communicator's operations become plans (one per
//! collective, from the schedules in `ccl-collectives`, one for all its sends and receives),
//! and one loop moves every plan of every communicator forward without blocking, so a thread
//! driving several ranks (`ncclCommInitAll`, `-g N`) cannot deadlock against itself. The
//! staged GPU engine's proxy runs its plans through the same loop.

use std::time::{Duration, Instant};

use ccl_collectives::{default_algorithm, schedule_ordered, Algorithm, Pipeline};

use crate::bootstrap::Health;
use crate::core::{Comm, CommState};
use crate::error::{Error, Result};
use crate::exec::Plan;
use crate::params;
use crate::task::{Task, TaskKind};

struct CommRun<'a> {
    comm: Comm,
    state: &'a mut CommState,
    plans: Vec<Plan>,
    cur: usize,
    failed: Option<Error>,
    /// When a needed peer was seen leaving: fail if still stuck at the next check.
    left_grace: bool,
}

impl<'a> CommRun<'a> {
    fn new(comm: &Comm, state: &'a mut CommState, plans: Vec<Plan>) -> Self {
        CommRun {
            comm: comm.clone(),
            state,
            plans,
            cur: 0,
            failed: None,
            left_grace: false,
        }
    }
}

/// After `drive`: a failed communicator gets its async error and tells its peers; the first
/// error is the call's result.
fn finish(runs: &mut [CommRun<'_>]) -> Result<()> {
    let mut first = None;
    for r in runs.iter_mut() {
        if let Some(e) = r.failed.take() {
            r.comm.set_async_error(&e);
            r.state.ctrl.notify_error(&e);
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The parameters the data path consults on every operation, read once per process (as NCCL
/// reads its parameters) so no call pays for the parameter registry's lock and parsing.
#[derive(Debug, Clone, Copy)]
struct Settings {
    timeout: Option<Duration>,
    warn_after: Duration,
    tree_allowed: bool,
    ring_allowed: bool,
    /// `CCL_ONE_SHOT_BYTES`.
    one_shot_bytes: usize,
    /// `CCL_ONE_SHOT_RANKS`.
    one_shot_ranks: usize,
    /// `CCL_ALLREDUCE_EXCHANGE_BYTES` .. `CCL_ALLREDUCE_EXCHANGE_MAX_BYTES` (0 ..: off).
    exchange_bytes: (usize, usize),
    /// `CCL_RING_ONE_STEP`.
    ring_one_step: bool,
}

fn settings() -> &'static Settings {
    static SETTINGS: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();
    SETTINGS.get_or_init(|| {
        let allowed = params::list_filter(&params::NCCL_ALGO.get_str());
        let timeout = params::CCL_TIMEOUT_S.get_i64();
        Settings {
            timeout: (timeout > 0).then(|| Duration::from_secs(timeout as u64)),
            warn_after: Duration::from_secs(params::CCL_WARN_STUCK_S.get_i64().max(1) as u64),
            tree_allowed: allowed("tree"),
            ring_allowed: allowed("ring"),
            // NCCL_ALGO naming ring or tree without the other asks for that algorithm, which
            // the one-exchange schedules are not.
            one_shot_bytes: if allowed("ring") && allowed("tree") {
                params::CCL_ONE_SHOT_BYTES.get_i64().max(0) as usize
            } else {
                0
            },
            one_shot_ranks: params::CCL_ONE_SHOT_RANKS.get_i64().max(0) as usize,
            exchange_bytes: if allowed("ring") && allowed("tree") {
                (
                    params::CCL_ALLREDUCE_EXCHANGE_BYTES.get_i64().max(0) as usize,
                    params::CCL_ALLREDUCE_EXCHANGE_MAX_BYTES.get_i64().max(0) as usize,
                )
            } else {
                (0, 0)
            },
            ring_one_step: params::CCL_RING_ONE_STEP.get_bool(),
        }
    })
}

/// A plan before its buffers are final: sequence numbers are taken when the operations are
/// issued (all ranks count alike), plans are built when they run (the GPU path stages device
/// buffers through host memory first).
#[derive(Debug, Clone)]
pub(crate) enum PlanSpec {
    Coll {
        task: Task,
        sched: std::sync::Arc<ccl_collectives::Schedule>,
        seq: u64,
        /// Staged in pieces that move while it runs ([`crate::pieces::streamed`]).
        gates: Option<crate::exec::CollGates>,
    },
    P2p {
        tasks: Vec<Task>,
        seqs: Vec<(u64, u64)>,
        /// Staged in pieces on the GPU path ([`crate::pieces`]).
        gates: Option<crate::exec::PieceGates>,
        /// Staged whole but streamed on byte-range gates ([`crate::pieces::streamed_p2p`]).
        byte_gates: Option<crate::exec::CollGates>,
    },
}

impl PlanSpec {
    /// The operations' buffers, for staging.
    pub(crate) fn tasks_mut(&mut self) -> &mut [Task] {
        match self {
            PlanSpec::Coll { task, .. } => std::slice::from_mut(task),
            PlanSpec::P2p { tasks, .. } => tasks,
        }
    }

    pub(crate) fn build(&self, rank: usize, n: usize) -> Result<Plan> {
        match self {
            PlanSpec::Coll {
                task,
                sched,
                seq,
                gates,
            } => Plan::collective(task, sched, rank, n, *seq, gates.as_ref()),
            PlanSpec::P2p {
                tasks,
                seqs,
                gates,
                byte_gates,
            } => {
                let mut plan = Plan::p2p(tasks, rank, n, &mut seqs.clone(), gates.as_ref())?;
                if let Some(g) = byte_gates {
                    plan.gate_bytes(g);
                }
                Ok(plan)
            }
        }
    }
}

/// Whether an all-to-all's send and receive buffers (`n * count` elements each) do not
/// overlap: then its blocks go straight into place (see
/// [`ccl_collectives::alltoall_out_of_place`]). Ranks may differ in this: both schedules put
/// every transfer in their first step, so the messages match.
fn buffers_disjoint(t: &Task, n: usize) -> bool {
    let len = t.count.saturating_mul(n).saturating_mul(t.dtype.size());
    t.send.saturating_add(len) <= t.recv || t.recv.saturating_add(len) <= t.send
}

/// Whether a collective `coll` of `t` goes in one exchange ([`one_shot_schedule`]): an
/// all-reduce, reduce-scatter or all-gather of at most `one_shot_ranks` ranks, each sending at
/// most `one_shot_bytes` in all. Every reduction qualifies: the ranks fold the inputs in the
/// same order, so they hold the same bits. Where it measured a loss it is not used (16 CPUs,
/// 2026-11-24, ccl-perf on the host backend): an all-reduce of more than two ranks over shared memory alone (the ring's short
/// hops beat folding every rank's input on every rank from 2 KiB: 4 ranks, 8 KiB, 13.6-13.9 us
/// against 17-21) or of more than half of `one_shot_ranks` (8 ranks over TCP: 51-73 us against
/// the tree's 46-53; 6 ranks mixed). Broadcast and reduce measured no gain (their chains already take one hop per rank).
fn one_shot(
    coll: ccl_collectives::Collective,
    t: &Task,
    n: usize,
    settings: &Settings,
    shared_memory_only: bool,
) -> bool {
    use ccl_collectives::Collective as C;
    let sent = t
        .count
        .saturating_mul(t.dtype.size())
        .saturating_mul(n.saturating_sub(1));
    let kind = match coll {
        C::AllReduce => n == 2 || (!shared_memory_only && n <= settings.one_shot_ranks / 2),
        // Over the multipath transport these lost to the ring while every send waited for
        // its acknowledgement; since sends complete on leaving and small
        // messages share acknowledgements, one exchange is ahead there too (4 ranks, 16
        // CPUs: all-gather 31-40 -> 28-33 us, reduce-scatter 30-38 -> 23-36; 2026-11-24, ccl-perf).
        C::ReduceScatter | C::AllGather => true,
        _ => false,
    };
    kind && (2..=settings.one_shot_ranks).contains(&n) && sent <= settings.one_shot_bytes
}

/// Whether an all-reduce of two ranks over the network goes in one exchange of whole inputs
/// ([`ccl_collectives::allreduce_exchange`]): one step where the ring takes two, so nothing
/// waits for a half to drain, at the price of reducing the whole message on each rank. Not
/// over shared memory alone, where the reduction's memory traffic is the cost.
fn exchange(
    coll: ccl_collectives::Collective,
    t: &Task,
    n: usize,
    settings: &Settings,
    shared_memory_only: bool,
) -> bool {
    coll == ccl_collectives::Collective::AllReduce
        && n == 2
        && !shared_memory_only
        && settings.exchange_bytes.0 > 0
        && (settings.exchange_bytes.0..=settings.exchange_bytes.1)
            .contains(&t.count.saturating_mul(t.dtype.size()))
}

/// The one-exchange schedule of a small collective: reductions fold every rank's input in rank
/// order after one exchange ([`ccl_collectives::allreduce_one_shot`],
/// [`ccl_collectives::reduce_scatter_one_shot`]); an all-gather sends straight to every rank
/// (the direct algorithm) instead of along the ring's `n-1` hops.
fn one_shot_schedule(
    coll: ccl_collectives::Collective,
    rank: usize,
    n: usize,
    ring: &[usize],
    count: usize,
) -> Result<ccl_collectives::Schedule> {
    use ccl_collectives::Collective as C;
    Ok(match coll {
        C::AllReduce => ccl_collectives::allreduce_one_shot(rank, n, count)?,
        C::ReduceScatter => ccl_collectives::reduce_scatter_one_shot(rank, n, count)?,
        _ => schedule_ordered(
            coll,
            Algorithm::Direct,
            rank,
            ring,
            count,
            Pipeline::default(),
        )?,
    })
}

/// Schedules kept per communicator (see [`crate::core::IssueState::schedules`]).
const SCHEDULE_CACHE: usize = 64;

/// The schedule of one collective: the cost model's algorithm within `NCCL_ALGO`, falling back
/// to one that implements the collective. `disjoint`: an all-to-all whose buffers do not
/// overlap ([`buffers_disjoint`]).
fn build_schedule(
    coll: ccl_collectives::Collective,
    t: &Task,
    rank: usize,
    n: usize,
    ring: &[usize],
    settings: &Settings,
    disjoint: bool,
) -> Result<ccl_collectives::Schedule> {
    if disjoint {
        return Ok(ccl_collectives::alltoall_out_of_place(rank, n, t.count)?);
    }
    let bytes = t.count.saturating_mul(t.dtype.size());
    let mut algo = default_algorithm(coll, n, bytes);
    if algo == Algorithm::Tree && !settings.tree_allowed {
        algo = Algorithm::Ring;
    } else if algo == Algorithm::Ring && !settings.ring_allowed && settings.tree_allowed {
        algo = Algorithm::Tree;
    }
    use ccl_collectives::Collective as C;
    let build = |a| {
        let s = schedule_ordered(coll, a, rank, ring, t.count, Pipeline::default())?;
        let fuse = settings.ring_one_step
            && a == Algorithm::Ring
            && matches!(coll, C::AllReduce | C::ReduceScatter | C::AllGather);
        Ok::<_, ccl_collectives::Error>(if fuse {
            ccl_collectives::one_step(s)
        } else {
            s
        })
    };
    Ok(match build(algo) {
        Ok(s) => s,
        Err(ccl_collectives::Error::Unsupported { .. }) if algo != Algorithm::Ring => {
            build(Algorithm::Ring).or_else(|_| build(Algorithm::Direct))?
        }
        Err(ccl_collectives::Error::Unsupported { .. }) => build(Algorithm::Direct)?,
        Err(e) => return Err(e.into()),
    })
}

pub(crate) fn plan_specs(
    comm: &Comm,
    state: &mut crate::core::IssueState,
    tasks: &[Task],
) -> Result<Vec<PlanSpec>> {
    let rank = comm.rank();
    let n = comm.nranks();
    let settings = settings();
    let mut specs = Vec::new();
    let mut p2p = Vec::new();
    for t in tasks {
        match t.kind {
            TaskKind::Coll(coll) => {
                let disjoint =
                    coll == ccl_collectives::Collective::AlltoAll && buffers_disjoint(t, n);
                let one_shot = one_shot(coll, t, n, settings, state.shared_memory_only);
                let key = (coll, t.count, t.dtype.size(), disjoint || one_shot);
                let sched = match state.schedules.get(&key) {
                    Some(s) => s.clone(),
                    None => {
                        let s = std::sync::Arc::new(if one_shot {
                            one_shot_schedule(coll, rank, n, &state.ring, t.count)?
                        } else if exchange(coll, t, n, settings, state.shared_memory_only) {
                            ccl_collectives::allreduce_exchange(rank, n, t.count)?
                        } else {
                            build_schedule(coll, t, rank, n, &state.ring, settings, disjoint)?
                        });
                        // Training loops repeat a handful of shapes; a bounded cache keeps
                        // schedule building off their path.
                        if state.schedules.len() >= SCHEDULE_CACHE {
                            state.schedules.clear();
                        }
                        state.schedules.insert(key, s.clone());
                        s
                    }
                };
                state.coll_seq += 1;
                specs.push(PlanSpec::Coll {
                    task: *t,
                    sched,
                    seq: state.coll_seq,
                    gates: None,
                });
            }
            TaskKind::Send { .. } | TaskKind::Recv { .. } => p2p.push(*t),
        }
    }
    if !p2p.is_empty() {
        let seqs = state.p2p_seqs.clone();
        for t in &p2p {
            match t.kind {
                TaskKind::Send { peer } if peer != rank => state.p2p_seqs[peer].0 += 1,
                TaskKind::Recv { peer } if peer != rank => state.p2p_seqs[peer].1 += 1,
                _ => {}
            }
        }
        specs.push(PlanSpec::P2p {
            tasks: p2p,
            seqs,
            gates: None,
            byte_gates: None,
        });
    }
    Ok(specs)
}

/// Runs one communicator's plans to completion on the calling thread (the GPU proxy).
pub(crate) fn run_plans(comm: &Comm, state: &mut CommState, plans: Vec<Plan>) -> Result<()> {
    let mut runs = [CommRun::new(comm, state, plans)];
    drive(&mut runs);
    finish(&mut runs)
}

/// Runs the host-memory parts of a group to completion on the calling thread: one plan per
/// collective, one for the sends and receives, every communicator's moved forward together.
pub(crate) fn run(host: Vec<(Comm, Vec<Task>)>) -> Result<()> {
    let mut guards: Vec<_> = host.iter().map(|(c, _)| c.0.state.lock()).collect();
    let mut runs = Vec::with_capacity(host.len());
    for ((comm, tasks), guard) in host.iter().zip(guards.iter_mut()) {
        let state = guard
            .as_mut()
            .ok_or_else(|| Error::invalid_usage("communicator was destroyed or aborted"))?;
        let (rank, n) = (comm.rank(), comm.nranks());
        let plans = plan_specs(comm, &mut comm.0.issue.lock(), tasks)?
            .iter()
            .map(|s| s.build(rank, n))
            .collect::<Result<Vec<_>>>()?;
        runs.push(CommRun::new(comm, state, plans));
    }
    drive(&mut runs);
    finish(&mut runs)
}

fn drive(runs: &mut [CommRun<'_>]) {
    let Settings {
        timeout,
        warn_after,
        ..
    } = *settings();
    let mut last_progress = Instant::now();
    let mut last_check = Instant::now();
    let mut warned = false;
    let mut idle_rounds: u32 = 0;
    loop {
        let mut progressed = false;
        let mut pending = false;
        for r in runs.iter_mut() {
            while r.failed.is_none() && r.cur < r.plans.len() {
                let CommRun {
                    state, plans, cur, ..
                } = r;
                let plan = &mut plans[*cur];
                match plan.progress(&mut state.links, &mut state.staging, &mut state.exec_stats) {
                    Ok(p) => progressed |= p,
                    Err(e) => {
                        r.failed = Some(e.context(format!(
                            "rank {}: {}",
                            r.comm.rank(),
                            r.plans[r.cur].desc()
                        )));
                        break;
                    }
                }
                if r.plans[r.cur].is_done() {
                    r.cur += 1;
                    progressed = true;
                } else {
                    break;
                }
            }
            pending |= r.failed.is_none() && r.cur < r.plans.len();
        }
        if !pending {
            // A failed plan may leave sends whose bytes a link still copies (deferred sends):
            // wait for them before the caller gets its buffers back.
            for r in runs.iter_mut().filter(|r| r.failed.is_some()) {
                for link in r.state.links.iter_mut().flatten() {
                    link.quiesce();
                }
            }
            return;
        }
        if progressed {
            if idle_rounds > 0 {
                // Once per idle stretch: the busy path reads no clock.
                let idle = last_progress.elapsed();
                for r in runs.iter_mut() {
                    r.state.exec_stats.idle += idle;
                }
            }
            idle_rounds = 0;
            warned = false;
            continue;
        }
        // The clock is read only once idle: on the busy path it cost a tenth of a small
        // operation. `last_progress` becomes the moment the loop first found nothing to do.
        if idle_rounds == 0 {
            last_progress = Instant::now();
        }
        idle_rounds = idle_rounds.saturating_add(1);
        if idle_rounds < 64 {
            std::hint::spin_loop();
        } else if idle_rounds < (1 << 16) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        if idle_rounds % 32 != 0 {
            continue;
        }
        let now = Instant::now();
        if now.duration_since(last_check) < Duration::from_millis(2) {
            continue;
        }
        last_check = now;
        let stuck = now.duration_since(last_progress);
        for r in runs.iter_mut() {
            if r.failed.is_some() || r.cur >= r.plans.len() {
                continue;
            }
            let waiting = r.plans[r.cur].waiting_on();
            let desc = r.plans[r.cur].desc();
            if r.comm.0.abort.load(std::sync::atomic::Ordering::Relaxed) {
                r.failed = Some(Error::system(format!(
                    "communicator aborted or revoked during {desc}"
                )));
                continue;
            }
            match r.state.ctrl.poll_health(&|j| waiting.contains(&j)) {
                Ok(Health::Ok) => r.left_grace = false,
                // The peer left or died; frames it sent before may still be arriving, so fail
                // only if the next look finds the operation still stuck.
                Ok(Health::NeededPeerLeft(_))
                    if !r.left_grace || stuck < Duration::from_millis(2) =>
                {
                    r.left_grace = true
                }
                Ok(Health::NeededPeerLeft(e)) | Err(e) => {
                    r.failed = Some(e.context(format!(
                        "rank {} during {desc} waiting on ranks {waiting:?}",
                        r.comm.rank()
                    )));
                    continue;
                }
            }
            if let Some(t) = timeout {
                if stuck > t {
                    r.failed = Some(Error::system(format!(
                        "rank {}: {desc} made no progress for {:?} (CCL_TIMEOUT_S) waiting on ranks {waiting:?}",
                        r.comm.rank(),
                        t
                    )));
                    continue;
                }
            }
            if stuck > warn_after && !warned {
                tracing::warn!(
                    "rank {}: {desc} has made no progress for {:?}, waiting on ranks {waiting:?}",
                    r.comm.rank(),
                    stuck
                );
            }
        }
        if stuck > warn_after {
            warned = true;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::task::Reduction;
    use ccl_collectives::Collective as C;
    use ccl_cuda::{DataType, ReduceKind};

    fn settings() -> Settings {
        Settings {
            timeout: None,
            warn_after: Duration::from_secs(300),
            tree_allowed: true,
            ring_allowed: true,
            one_shot_bytes: 32768,
            one_shot_ranks: 8,
            exchange_bytes: (0, 0),
            ring_one_step: false,
        }
    }

    /// A float sum `coll` of `count` elements on fake addresses.
    pub(crate) fn task(coll: C, count: usize) -> Task {
        Task {
            kind: TaskKind::Coll(coll),
            send: 0x1000,
            recv: 0x100000,
            count,
            dtype: DataType::Float32,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        }
    }

    /// Which collectives go in one exchange, over shared memory alone or across hosts (TCP or
    /// the multipath transport alike), per rank count, and the size boundary (what a rank
    /// sends: block x (ranks - 1)) on both sides.
    #[test]
    fn one_exchange_where_it_measured_faster_and_up_to_the_byte_limit() {
        let s = settings();
        let (f, tcp) = (true, false);
        let ar = |n, count, shm_only| {
            one_shot(C::AllReduce, &task(C::AllReduce, count), n, &s, shm_only)
        };
        // Two ranks: everywhere; more: not over shared memory alone.
        assert!(ar(2, 1, f) && ar(2, 1, tcp));
        assert!(!ar(4, 1, f) && ar(4, 1, tcp));
        // 4 ranks x 4 bytes x 3 peers: 2730 elements send 32760 bytes, 2731 send 32772.
        assert!(ar(4, 2730, tcp) && !ar(4, 2731, tcp));
        assert!(ar(2, 8192, tcp) && !ar(2, 8193, tcp));
        // Ranks: all-reduce up to half of one_shot_ranks, the others up to all of it; one
        // rank needs no exchange.
        assert!(ar(4, 1, tcp) && !ar(5, 1, tcp) && !ar(1, 1, tcp));
        for coll in [C::ReduceScatter, C::AllGather] {
            let t = task(coll, 1);
            assert!(one_shot(coll, &t, 4, &s, f) && one_shot(coll, &t, 4, &s, tcp));
            assert!(one_shot(coll, &t, 8, &s, tcp) && !one_shot(coll, &t, 9, &s, tcp));
        }
        for coll in [C::Broadcast { root: 0 }, C::Reduce { root: 0 }, C::AlltoAll] {
            assert!(!one_shot(coll, &task(coll, 1), 4, &s, tcp));
        }
        let off = Settings {
            one_shot_bytes: 0,
            ..s
        };
        assert!(!one_shot(
            C::AllReduce,
            &task(C::AllReduce, 1),
            2,
            &off,
            tcp
        ));
    }
}
