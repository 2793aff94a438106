//! Hierarchical collectives for communicators that span hosts with several ranks on some.
//! Flat, every byte of such a communicator is staged through host memory and the proxy, even
//! between GPUs of one host.
//!
//! Hosts of equal size. An all-reduce: a reduce-scatter among the ranks of a host (cuda-ipc:
//! copy engines and kernels over NVLink), an all-reduce of each rank's share among the ranks of
//! the other hosts that hold the same share (the network path, a host's ranks each carrying 1/L
//! of the bytes), and an all-gather among the ranks of a host. An all-gather: each rank's block
//! across the hosts to the ranks holding its index, then every block so gathered to the other
//! ranks of the host, as sends and receives straight into each block's place. A broadcast:
//! across the hosts among the ranks holding the root's index on their hosts, then on every
//! host. A reduce-scatter (each host's ranks consecutive in rank order): on every host, one
//! reduce-scatter of each host's range of blocks, partial sums into a scratch; then a
//! reduce-scatter of those across the hosts (the network carries each block's partial sums
//! only). A reduce: on every host to the rank holding the root's index, then across the hosts
//! to the root. An all-to-all (`CCL_HIERARCHY_ALLTOALL=1`, each host's ranks consecutive): on
//! every host, each rank's blocks for the ranks holding another's index gathered at that rank;
//! then across the hosts among the ranks of one index, a host's blocks in one message (NCCL's
//! PXN). A gather (each host's ranks consecutive): on every host to the rank holding the root's
//! index, then each host's blocks in one message to the root; a scatter the reverse. Sends and
//! receives between ranks of one host go on the host's communicator.
//!
//! Hosts of different sizes (after a shrink, say): an all-reduce goes as a reduce to each
//! host's first rank, an all-reduce among those, a broadcast on each host; an all-gather's
//! blocks each cross to one rank of every other host (at the block's index modulo that host's
//! ranks), on the communicator itself, then go to the host's other ranks; a broadcast whose
//! root's index some host lacks goes on the root's host first, then among the hosts' first
//! ranks, then on the other hosts; a reduce to such a root the reverse (to each host's first
//! rank, among the first ranks to the root's host's, which sends it to the root); broadcasts
//! and reduces whose root's index every host holds as above; gathers and scatters (each host's
//! ranks consecutive) as above, each host's blocks at the root's index modulo its ranks; sends
//! and receives within a host as above; reduce-scatters and all-to-alls flat.
//!
//! The two sub-communicators are made at init (`attach`) by splitting the communicator: one of
//! the ranks of each host, one of the ranks holding the same place on every host. Each
//! operation is decided on itself (its kind, count and memory, and settings every rank shares),
//! so ranks that group it differently decide alike; its stages run in its place in the
//! communicator's call order, each a group of its own on the sub-communicators, in stream
//! order, with the flat operations between them groups of their own ([`take`]).

use std::sync::Arc;

use ccl_collectives::Collective;
use ccl_cuda::cuda::{Context, Stream};
use parking_lot::Mutex;

use crate::core::Comm;
use crate::error::Result;
use crate::params;
use crate::task::{Reduction, Scalar, Task, TaskKind};

/// A communicator's two sub-communicators.
pub struct Hierarchy {
    /// The ranks of this rank's host, in rank order.
    pub local: Comm,
    /// The ranks holding this rank's place (its index among its host's ranks) on every host,
    /// in rank order.
    pub cross: Comm,
    /// Whether operations on host memory take it too (`CCL_HIERARCHY=1`).
    host_memory: bool,
    /// Every rank's (host index, index among its host's ranks).
    places: Vec<(usize, usize)>,
    /// This rank's host index.
    host: usize,
    /// The number of ranks of the host with the fewest: the indices every host holds.
    fewest: usize,
    /// Whether every host holds as many ranks (else reduce-scatters and all-to-alls stay flat).
    even: bool,
    /// Where reduce-scatters and reduces keep their partial reductions between stages.
    scratch: Mutex<Scratch>,
}

/// A hierarchy's scratch for partial reductions, reused group after group.
#[derive(Default)]
struct Scratch {
    /// For host memory (`CCL_HIERARCHY=1`): the host path runs a group to completion, so it is
    /// free again once the group's stages have run. Words, for any element's alignment.
    host: Vec<u64>,
    /// For GPU memory: the work queued on the callers' streams reads it after the call
    /// returns, so the next group's streams wait for that first.
    gpu: crate::gpu::StreamScratch,
}

impl Drop for Hierarchy {
    fn drop(&mut self) {
        // Not freed under stream work still queued to read it (the sub-communicators were
        // destroyed or aborted first, which ends theirs).
        self.scratch.get_mut().gpu.settle();
    }
}

/// How the ranks of `hosts` (each rank's host id, in rank order) sit on their hosts, if there
/// are at least two hosts and one of them has two ranks or more (else there is nothing to gain):
/// each rank's (host index in order of first appearance, index among its host's ranks in rank
/// order).
fn places(hosts: &[u64]) -> Option<Vec<(usize, usize)>> {
    let mut order: Vec<u64> = Vec::new();
    let mut count: Vec<usize> = Vec::new();
    let mut place = Vec::with_capacity(hosts.len());
    for &h in hosts {
        let i = match order.iter().position(|&x| x == h) {
            Some(i) => i,
            None => {
                order.push(h);
                count.push(0);
                order.len() - 1
            }
        };
        place.push((i, count[i]));
        count[i] += 1;
    }
    if order.len() < 2 || count.iter().all(|&c| c < 2) {
        return None;
    }
    Some(place)
}

/// Each host's ranks (by host index), in rank order: a host's `i`-th holds index `i` there.
fn ranks_by_host(places: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let hosts = places.iter().map(|p| p.0).max().map_or(0, |h| h + 1);
    let mut ranks = vec![Vec::new(); hosts];
    for (r, &(h, _)) in places.iter().enumerate() {
        ranks[h].push(r);
    }
    ranks
}

/// A rank's place in the communicator across the hosts that holds it: how many ranks before it
/// hold the same index on their hosts.
fn cross_rank(places: &[(usize, usize)], rank: usize) -> Option<usize> {
    let (_, local) = *places.get(rank)?;
    Some(places[..rank].iter().filter(|p| p.1 == local).count())
}

/// Where `comm` would gain from a hierarchy: `CCL_HIERARCHY` and the ranks' placement allow
/// one, and every rank wants it (a rank without a GPU would make the split one-sided, so all
/// agree). Collective: every rank of `comm` calls it at the end of init (the decision is the
/// same on all: the table is). `agree_all` is the communicator's agreement among its ranks.
pub(crate) fn wanted(
    comm: &Comm,
    agree_all: impl FnOnce(bool) -> Result<bool>,
) -> Result<Option<Placement>> {
    let mode = params::CCL_HIERARCHY.get_str();
    let mode = mode.trim();
    if mode == "0" {
        return Ok(None);
    }
    let forced = mode == "1";
    let hosts: Vec<u64> = {
        let g = comm.0.state.lock();
        match g.as_ref() {
            Some(st) => st.table.iter().map(|i| i.host_id).collect(),
            None => return Ok(None),
        }
    };
    let Some(places) = places(&hosts) else {
        return Ok(None);
    };
    let Some(&(host, local)) = places.get(comm.rank()) else {
        return Ok(None);
    };
    // Only GPU communicators gain (host memory moves through the same transports either way),
    // unless forced.
    let want = forced || (comm.0.cuda_dev >= 0 && crate::gpu::available());
    if !agree_all(want)? {
        return Ok(None);
    }
    Ok(Some(Placement {
        forced,
        places,
        host,
        local,
    }))
}

/// Where this rank sits among the hosts, as [`wanted`] found it.
pub(crate) struct Placement {
    forced: bool,
    places: Vec<(usize, usize)>,
    /// This rank's host index, and its index among its host's ranks: the colours of the
    /// splits that make the two sub-communicators.
    pub host: usize,
    pub local: usize,
}

impl Hierarchy {
    /// The hierarchy over `local` (this host's ranks) and `cross` (the ranks of this index on
    /// every host), split from `comm` by the colours of `at`.
    pub(crate) fn new(comm: &Comm, at: Placement, local: Comm, cross: Comm) -> Hierarchy {
        let per_host: Vec<usize> = ranks_by_host(&at.places).iter().map(Vec::len).collect();
        tracing::info!(
            "rank {}: hierarchy: {} ranks on this host (index {}), {} hosts",
            comm.rank(),
            local.nranks(),
            at.local,
            per_host.len()
        );
        let fewest = per_host.iter().copied().min().unwrap_or(0);
        Hierarchy {
            local,
            cross,
            host_memory: at.forced,
            host: at.host,
            even: per_host.iter().all(|&c| c == fewest),
            fewest,
            places: at.places,
            scratch: Mutex::new(Scratch::default()),
        }
    }
}

impl crate::engine::Engine for Hierarchy {
    /// Its stages run on the sub-communicators, whose own lifecycle waits for them.
    fn wait_idle(&self, _: &std::sync::atomic::AtomicBool) -> Result<()> {
        Ok(())
    }

    /// The sub-communicators are destroyed or aborted with their parent ([`crate::comm`]);
    /// the scratch is freed on drop, after their streams' work.
    fn shutdown(&self, _aborted: bool) {}

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// Operations to run as one group.
pub(crate) type StageGroup = Vec<(Comm, Task)>;

/// The stages of the hierarchical operations of a group, in rounds: each round a group of its
/// own, holding the next stage of every communicator's sequence.
pub(crate) type Stages = Vec<StageGroup>;

/// The scratch a group's hierarchical operations hold on GPU memory: released once their
/// stages are queued ([`Held::release`]).
#[derive(Default)]
pub(crate) struct Held(Vec<(Arc<Hierarchy>, Arc<Context>, Vec<Stream>)>);

impl Held {
    /// Marks each hierarchy's scratch as used by the work queued on the streams so far, so the
    /// next group waits for it before writing there again. Called whether or not the stages
    /// ran (queued work may read the scratch either way).
    pub(crate) fn release(self) -> Result<()> {
        let mut first = Ok(());
        for (h, ctx, streams) in self.0 {
            let r = h.scratch.lock().gpu.release(&ctx, &streams);
            first = first.and(r);
        }
        first
    }
}

/// Takes out of a group the operations that go hierarchically and returns the rest with their
/// stages: an all-reduce a host reduce-scatter, an all-reduce across the hosts and a host
/// all-gather; an all-gather its blocks across the hosts, then within the host; a broadcast
/// across the hosts among the ranks holding the root's index on their hosts, then on every host
/// from that rank; a reduce-scatter the host's reduce-scatter of every host's blocks, then a
/// reduce-scatter of the partial sums across the hosts; a reduce on every host to the rank
/// holding the root's index, then across the hosts to the root; an all-to-all its blocks
/// gathered on the host by the index of their destination, then across the hosts; a gather
/// on every host to the rank holding the root's index, then each host's blocks to the root (a
/// scatter the reverse); a send or receive between ranks of one host the same on the host's
/// communicator.
///
/// A communicator's collectives keep their call order, each hierarchical one's stages in turn
/// and the flat ones between them as groups of their own on the communicator, then its sends
/// and receives (the flat engine's order within a group): so a rank that groups them and one
/// that calls them one by one issue the same sequence on the communicator and on every
/// sub-communicator (batching one stage of every operation together, or the flat ones first,
/// would reorder them on one rank only). Flat collectives before the first hierarchical one,
/// and a communicator's operations when none goes hierarchically, stay in the rest, which runs
/// first. Different communicators of the group go side by side, round by round: on the host
/// path a round runs to completion, and another process may hold the group's communicators in
/// another order.
pub(crate) fn take(tasks: Vec<(Comm, Task)>) -> Result<Taken> {
    let mut rest = Vec::with_capacity(tasks.len());
    let mut ops: Vec<CommOps> = Vec::new();
    for (comm, t) in tasks {
        let Some(h) = comm.0.hier.get::<Hierarchy>() else {
            rest.push((comm, t));
            continue;
        };
        let op = match plan(&h, &t, &comm) {
            Some(p) => {
                tracing::trace!(
                    "rank {}: {:?} of {} goes hierarchically",
                    comm.rank(),
                    t.kind,
                    t.count
                );
                Op::Hier(t, p)
            }
            None => Op::Flat(t),
        };
        match ops.iter_mut().find(|o| Arc::ptr_eq(&o.comm.0, &comm.0)) {
            Some(o) => o.ops.push(op),
            None => ops.push(CommOps {
                comm,
                h,
                ops: vec![op],
            }),
        }
    }
    let mut held = Held::default();
    let mut seqs: Vec<Vec<StageGroup>> = Vec::with_capacity(ops.len());
    let mut hierarchies = Vec::new();
    for CommOps { comm, h, ops } in ops {
        if ops.iter().all(|o| matches!(o, Op::Flat(_))) {
            rest.extend(ops.into_iter().map(|o| (comm.clone(), *o.task())));
            continue;
        }
        hierarchies.push(h.clone());
        // Collectives in call order, then flat sends and receives, then those on the host's
        // communicator (across the hosts first, as when they all ran in the rest).
        let (p2p, mut ordered): (Vec<Op>, Vec<Op>) =
            ops.into_iter().partition(|o| is_p2p(o.task()));
        let (flat_p2p, host_p2p): (Vec<Op>, Vec<Op>) =
            p2p.into_iter().partition(|o| matches!(o, Op::Flat(_)));
        ordered.extend(flat_p2p);
        ordered.extend(host_p2p);
        let at = claim(&comm, &h, &ordered, &mut held)?;
        let mut seq: Vec<StageGroup> = Vec::new();
        // Whether everything so far stayed flat (and went to the rest).
        let mut leading = true;
        // What the last stage group holds, if the next operation of that kind may join it: flat
        // operations of the communicator run as one group there, and a group's transfers on
        // the host's communicator stay one group (each alone, two ranks sending to each other
        // first would wait for each other).
        let mut open: Option<Segment> = None;
        for (op, scratch) in ordered.into_iter().zip(at) {
            let p2p = is_p2p(op.task());
            let (segment, groups) = match op {
                Op::Flat(t) if leading => {
                    rest.push((comm.clone(), t));
                    continue;
                }
                Op::Flat(t) => {
                    let segment = if p2p { Segment::FlatP2p } else { Segment::Flat };
                    (Some(segment), vec![vec![(comm.clone(), t)]])
                }
                Op::Hier(t, plan) => {
                    leading = false;
                    let groups = match plan {
                        Plan::Ready(groups) => groups,
                        Plan::Scratch(_) => {
                            scratch_stages(&h, &t, &comm, scratch).ok_or_else(|| {
                                crate::error::Error::internal("hierarchy: stages vanished")
                            })?
                        }
                    };
                    (p2p.then_some(Segment::HostP2p), groups)
                }
            };
            match (seq.last_mut(), segment.is_some() && segment == open) {
                (Some(last), true) => last.extend(groups.into_iter().flatten()),
                _ => seq.extend(groups),
            }
            open = segment;
        }
        seqs.push(seq);
    }
    let rounds = seqs.iter().map(Vec::len).max().unwrap_or(0);
    let mut stages: Stages = (0..rounds).map(|_| Vec::new()).collect();
    for seq in seqs {
        for (i, group) in seq.into_iter().enumerate() {
            stages[i].extend(group);
        }
    }
    Ok(Taken {
        rest,
        stages,
        held,
        hierarchies,
    })
}

/// What a stage group of [`take`] holds, where operations of one kind may join it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    /// Flat collectives of the communicator.
    Flat,
    /// Flat sends and receives of the communicator.
    FlatP2p,
    /// Sends and receives on the host's communicator.
    HostP2p,
}

fn is_p2p(t: &Task) -> bool {
    matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. })
}

/// A group split by [`take`].
pub(crate) struct Taken {
    /// The operations that stay flat.
    pub rest: Vec<(Comm, Task)>,
    /// The hierarchical ones' stages, to run after them.
    pub stages: Stages,
    /// The scratch those stages use, to release once they are queued.
    pub held: Held,
    /// The hierarchies the stages run on.
    pub hierarchies: Vec<Arc<Hierarchy>>,
}

impl Hierarchy {
    /// A send or receive of `count` of `t`'s elements between hosts, its peer by its rank in
    /// `comm`: on even hosts every such peer holds this rank's index on its host (the stages
    /// that use this make it so), so it goes on the communicator across the hosts; otherwise on
    /// `comm` itself.
    fn across(&self, comm: &Comm, t: &Task, p: &P2p, count: usize) -> Option<(Comm, Task)> {
        if self.even {
            let p = p.on_peer(cross_rank(&self.places, p.peer())?);
            return Some((self.cross.clone(), p2p_task(t, &p, count)));
        }
        Some((comm.clone(), p2p_task(t, p, count)))
    }

    /// Stages each one task on a sub-communicator, as stage groups.
    fn staged(&self, seq: Vec<(Sub, Task)>) -> Vec<StageGroup> {
        let on = |sub| match sub {
            Sub::Local => self.local.clone(),
            Sub::Cross => self.cross.clone(),
        };
        seq.into_iter().map(|(sub, t)| vec![(on(sub), t)]).collect()
    }

    /// Whether `comm` is one of its sub-communicators.
    fn owns(&self, comm: &Comm) -> bool {
        Arc::ptr_eq(&comm.0, &self.local.0) || Arc::ptr_eq(&comm.0, &self.cross.0)
    }

    /// `e` from `sub`, if it is one of the sub-communicators (whose errors name ranks by their
    /// place there), with which one and what its ranks are in this communicator.
    pub(crate) fn explain(&self, e: crate::error::Error, sub: &Comm) -> crate::error::Error {
        let index = self.local.rank();
        let (which, ranks): (&str, Vec<usize>) = if Arc::ptr_eq(&sub.0, &self.local.0) {
            let ranks = ranks_by_host(&self.places).swap_remove(self.host);
            ("the host's communicator", ranks)
        } else if Arc::ptr_eq(&sub.0, &self.cross.0) {
            let ranks = (0..self.places.len())
                .filter(|&r| self.places[r].1 == index)
                .collect();
            ("the communicator across the hosts", ranks)
        } else {
            return e;
        };
        e.context(format!(
            "in a hierarchical stage on {which}, whose ranks 0.. are this communicator's {ranks:?}"
        ))
    }
}

/// `e` from a stage group that ran on `comms`: explained by the hierarchy whose
/// sub-communicator it ran on, where that is one ([`Hierarchy::explain`]); and where a peer
/// failed (it died, or went silent past the timeout), the sub-communicators of the hierarchies
/// the stage ran on (theirs, or their communicator's flat operations) are broken with it, so
/// their peers are told `e` and they are aborted, which drops their connections without
/// goodbye. Their other ranks, waiting in a stage there for this one (which will not come),
/// then fail at once instead of at `CCL_TIMEOUT_S`, and fail theirs in turn. The communicators
/// themselves keep their connections (`ncclCommShrink` builds on them); an error of the
/// caller's (a bad argument, a capture it invalidated) aborts nothing.
pub(crate) fn stage_failed(
    e: crate::error::Error,
    comms: &[Comm],
    hierarchies: &[Arc<Hierarchy>],
) -> crate::error::Error {
    let on: Vec<&Arc<Hierarchy>> = hierarchies
        .iter()
        .filter(|h| {
            comms.iter().any(|c| {
                h.owns(c)
                    || c.0
                        .hier
                        .get::<Hierarchy>()
                        .is_some_and(|x| Arc::ptr_eq(&x, h))
            })
        })
        .collect();
    let e = match comms {
        [sub] => on.iter().fold(e, |e, h| h.explain(e, sub)),
        _ => e,
    };
    if !matches!(
        e.kind,
        crate::error::ErrorKind::Remote | crate::error::ErrorKind::System
    ) {
        return e;
    }
    for h in on {
        // Why first, so that they report the cause, not only that this rank is gone.
        h.local.notify_error(&e);
        h.cross.notify_error(&e);
        tracing::warn!(
            "a hierarchical operation failed: aborting its sub-communicators (this rank is {} \
             of its host's, {} across the hosts)",
            h.local.rank(),
            h.cross.rank()
        );
        h.local.abort();
        h.cross.abort();
    }
    e
}

/// A communicator's operations of one group, in call order.
struct CommOps {
    comm: Comm,
    h: Arc<Hierarchy>,
    ops: Vec<Op>,
}

/// An operation of a communicator with a hierarchy.
enum Op {
    /// It stays on the communicator.
    Flat(Task),
    /// It goes hierarchically, so.
    Hier(Task, Plan),
}

impl Op {
    fn task(&self) -> &Task {
        match self {
            Op::Flat(t) | Op::Hier(t, _) => t,
        }
    }
}

/// How an operation that goes hierarchically is staged (decided once: the decision asks the
/// driver about its buffers).
enum Plan {
    /// Its stage groups, which need no scratch.
    Ready(Vec<StageGroup>),
    /// Its stages are built ([`scratch_stages`]) once its part of the scratch is claimed.
    Scratch(Need),
}

/// What an operation that goes hierarchically needs of its hierarchy's scratch.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Need {
    bytes: usize,
    /// GPU memory (else host memory).
    gpu: bool,
}

/// Whether `t` goes hierarchically on `comm`, and how.
fn plan(h: &Hierarchy, t: &Task, comm: &Comm) -> Option<Plan> {
    let rank = comm.rank();
    let bytes = t.count * t.dtype.size();
    let need = match t.kind {
        TaskKind::Coll(Collective::ReduceScatter) => Need {
            gpu: scatter_eligible(h, t)?,
            bytes: h.cross.nranks() * bytes,
        },
        TaskKind::Coll(Collective::AlltoAll) => Need {
            gpu: alltoall_eligible(h, t)?,
            bytes: h.places.len() * bytes,
        },
        TaskKind::Coll(Collective::Reduce { root }) => {
            let gpu = reduce_eligible(h, t, rank)?;
            // The ranks that reduce across the hosts keep their host's partial sum for that
            // stage (the root in its receive buffer).
            let bytes = match reduce_via_first_ranks(&h.places, h.fewest, root) {
                false => match broadcast_roots(&h.places, root, rank)? {
                    (Some(_), _) if rank != root => bytes,
                    _ => 0,
                },
                true if h.places.get(rank)?.1 == 0 => bytes,
                true => 0,
            };
            Need { bytes, gpu }
        }
        TaskKind::Coll(Collective::Gather { root } | Collective::Scatter { root }) => {
            let gpu = rooted_eligible(h, t, rank)?;
            // The other hosts' ranks at the root's index (modulo their ranks) keep their host's
            // blocks between the stages.
            let index = h.places.get(root)?.1 % h.local.nranks();
            let keeps = rank != root && h.places.get(rank)?.1 == index;
            Need {
                bytes: if keeps { h.local.nranks() * bytes } else { 0 },
                gpu,
            }
        }
        _ => return ready_stages(h, t, comm).map(Plan::Ready),
    };
    Some(Plan::Scratch(need))
}

/// Scratch for a communicator's operations of one group: each one's address (0 where it
/// needs none: flat ones too), parts aligned for any element and copy, one claim per kind of memory.
fn claim(comm: &Comm, h: &Arc<Hierarchy>, ops: &[Op], held: &mut Held) -> Result<Vec<usize>> {
    const ALIGN: usize = 256;
    let none = Need {
        bytes: 0,
        gpu: false,
    };
    let ts: Vec<(Task, Need)> = ops
        .iter()
        .map(|o| match o {
            Op::Hier(t, Plan::Scratch(n)) => (*t, *n),
            Op::Hier(t, Plan::Ready(_)) | Op::Flat(t) => (*t, none),
        })
        .collect();
    let mut at = vec![0usize; ts.len()];
    let mut ends = [0usize; 2];
    for (i, (_, n)) in ts.iter().enumerate() {
        if n.bytes > 0 {
            let end = &mut ends[usize::from(n.gpu)];
            at[i] = *end;
            *end += n.bytes.div_ceil(ALIGN) * ALIGN;
        }
    }
    let [host_bytes, gpu_bytes] = ends;
    if host_bytes + gpu_bytes == 0 {
        return Ok(at);
    }
    let mut scratch = h.scratch.lock();
    let mut bases = [0usize; 2];
    if host_bytes > 0 {
        let words = host_bytes / 8 + ALIGN / 8;
        if scratch.host.len() < words {
            scratch.host.resize(words, 0);
        }
        let p = scratch.host.as_mut_ptr() as usize;
        bases[0] = p.div_ceil(ALIGN) * ALIGN;
    }
    if gpu_bytes > 0 {
        let ctx = crate::gpu::device_context(comm.0.cuda_dev)?;
        let users: Vec<Task> = ts.iter().filter(|(_, n)| n.gpu).map(|(t, _)| *t).collect();
        let streams = crate::gpu::streams_of(&ctx, &users);
        bases[1] = scratch.gpu.claim(&ctx, gpu_bytes, &streams)? as usize;
        held.0.push((h.clone(), ctx, streams));
    }
    for (i, (_, n)) in ts.iter().enumerate() {
        if n.bytes > 0 {
            at[i] += bases[usize::from(n.gpu)];
        }
    }
    Ok(at)
}

/// The stage groups on `h`'s sub-communicators of an operation that needs no scratch, if it
/// goes hierarchically on `comm`.
fn ready_stages(h: &Hierarchy, t: &Task, comm: &Comm) -> Option<Vec<StageGroup>> {
    let rank = comm.rank();
    if let Some(seq) = broadcast_stages(h, t, rank) {
        return Some(h.staged(seq));
    }
    if let Some(plan) = gather_plan(h, t, rank) {
        let cross: StageGroup = plan
            .cross
            .iter()
            .map(|p| h.across(comm, t, p, t.count))
            .collect::<Option<_>>()?;
        let local = plan
            .local
            .iter()
            .map(|p| (h.local.clone(), p2p_task(t, p, t.count)))
            .collect();
        return Some(
            [cross, local]
                .into_iter()
                .filter(|g| !g.is_empty())
                .collect(),
        );
    }
    if let Some(p) = local_p2p(h, t, rank) {
        return Some(vec![vec![(h.local.clone(), p)]]);
    }
    let [host, cross, gather] = all_reduce_stages(h, t)?;
    let seq = [(&h.local, host), (&h.cross, cross), (&h.local, gather)]
        .into_iter()
        .filter(|(_, ts)| !ts.is_empty())
        .map(|(sub, ts)| ts.into_iter().map(|t| (sub.clone(), t)).collect())
        .collect();
    Some(seq)
}

/// The stage groups of an operation [`plan`] found to go hierarchically with a part of the
/// scratch, at `scratch`: a reduce-scatter, a reduce, an all-to-all, a gather or a scatter.
fn scratch_stages(h: &Hierarchy, t: &Task, comm: &Comm, scratch: usize) -> Option<Vec<StageGroup>> {
    let rank = comm.rank();
    match t.kind {
        TaskKind::Coll(Collective::AlltoAll) => {
            let per = h.local.nranks();
            let (local, cross) =
                alltoall_blocks(&h.places, t.send, t.recv, scratch, t.count * t.dtype.size())?;
            let local = local
                .iter()
                .map(|p| (h.local.clone(), p2p_task(t, p, t.count)))
                .collect();
            let cross = cross
                .iter()
                .map(|p| (h.cross.clone(), p2p_task(t, p, per * t.count)))
                .collect();
            Some(vec![local, cross])
        }
        TaskKind::Coll(Collective::ReduceScatter) => {
            let (local, cross) = scatter_stages(&h.places, t, rank, scratch)?;
            let local = local.into_iter().map(|t| (h.local.clone(), t)).collect();
            Some(vec![local, vec![(h.cross.clone(), cross)]])
        }
        TaskKind::Coll(Collective::Gather { .. } | Collective::Scatter { .. }) => {
            let (local, cross) = rooted_stages(&h.places, t, rank, scratch)?;
            let cross: StageGroup = cross
                .iter()
                .map(|(p, count)| h.across(comm, t, p, *count))
                .collect::<Option<_>>()?;
            let local = vec![(h.local.clone(), local)];
            let seq = match t.kind {
                TaskKind::Coll(Collective::Gather { .. }) => [local, cross],
                _ => [cross, local],
            };
            Some(seq.into_iter().filter(|g| !g.is_empty()).collect())
        }
        TaskKind::Coll(Collective::Reduce { .. }) => {
            Some(h.staged(reduce_stages(&h.places, h.fewest, t, rank, scratch)?))
        }
        _ => None,
    }
}

/// An all-reduce's stages (on the host, across the hosts, on the host), if it goes
/// hierarchically: it is at least `CCL_HIERARCHY_MIN_BYTES`, its buffers are GPU memory (or
/// `CCL_HIERARCHY=1`), and its stream is not capturing a CUDA graph. The largest part of the
/// count that splits evenly over a host's ranks goes as a host reduce-scatter, an all-reduce of
/// each share across the hosts and a host all-gather ([`stages`]); the last few elements (fewer
/// than a host's ranks), if any, as an all-reduce on the host and then one across the hosts,
/// beside the first two. Every part stays on the sub-communicators, so a rank that groups the
/// all-reduce with operations of the communicator itself and one that calls them one by one
/// issue the same sequence on it.
fn all_reduce_stages(h: &Hierarchy, t: &Task) -> Option<[Vec<Task>; 3]> {
    if t.kind != TaskKind::Coll(Collective::AllReduce) || int_avg(t) {
        return None;
    }
    eligible(h, t, true, true)?;
    if !h.even {
        return Some(leader_all_reduce(t, h.places.len(), h.local.rank()));
    }
    let per = h.local.nranks();
    let hosts = h.cross.nranks();
    let (head, tail) = split_count(t, per);
    let mut out: [Vec<Task>; 3] = Default::default();
    if head.count > 0 {
        let [rs, ar, ag] = stages(&head, per, hosts, h.local.rank());
        out = [vec![rs], vec![ar], vec![ag]];
    }
    if let Some(tail) = tail {
        let (first, second) = split_reduction(t, per * hosts);
        out[0].push(Task { red: first, ..tail });
        out[1].push(Task {
            send: tail.recv,
            red: second,
            ..tail
        });
    }
    Some(out)
}

/// An all-reduce's stages where hosts hold different numbers of ranks (of `nranks` in all; this
/// rank `local`-th on its host): a reduce on every host to its first rank, in place in that
/// rank's receive buffer; an all-reduce of those across the hosts; a broadcast on every host
/// from its first rank. The network carries what a flat ring would across each host's
/// boundary; the host's links the rest.
fn leader_all_reduce(t: &Task, nranks: usize, local: usize) -> [Vec<Task>; 3] {
    let (first, second) = split_reduction(t, nranks);
    let reduce = Task {
        kind: TaskKind::Coll(Collective::Reduce { root: 0 }),
        red: first,
        ..*t
    };
    let cross = Task {
        send: t.recv,
        red: second,
        ..*t
    };
    let broadcast = Task {
        kind: TaskKind::Coll(Collective::Broadcast { root: 0 }),
        send: t.recv,
        red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
        ..*t
    };
    let cross = if local == 0 { vec![cross] } else { Vec::new() };
    [vec![reduce], cross, vec![broadcast]]
}

/// Whether `t` goes hierarchically at all: the settings, its memory and its stream allow it;
/// if so, whether its memory is the GPU's. `reads_send` / `writes_recv`: whether this rank's
/// send / receive buffer is used (a broadcast's other ranks ignore their send buffers, a
/// reduce's its receive buffer, so those must not sway the decision).
fn eligible(h: &Hierarchy, t: &Task, reads_send: bool, writes_recv: bool) -> Option<bool> {
    let min = params::CCL_HIERARCHY_MIN_BYTES.get_i64().max(0) as usize;
    if t.fold || t.count.checked_mul(t.dtype.size())? < min {
        return None;
    }
    let dev = crate::gpu::is_device_ptr;
    let on_gpu = (!writes_recv || dev(t.recv))
        && (!reads_send || (writes_recv && t.send == t.recv) || dev(t.send));
    if !(on_gpu || h.host_memory) {
        return None;
    }
    if on_gpu && crate::graph::capturing(&h.local, std::slice::from_ref(t)).unwrap_or(true) {
        return None;
    }
    Some(on_gpu)
}

/// Send or receive `t` as one on this rank's host communicator, if its peer is on this
/// rank's host and it goes hierarchically: between GPUs of one host it then goes over cuda-ipc
/// instead of being staged through host memory. Every such transfer to that peer goes there,
/// so the pair's order holds; both sides decide alike (the peer's host and the count are the
/// same on both; a transfer of nothing stays, its buffers may be NULL on one side only).
fn local_p2p(h: &Hierarchy, t: &Task, rank: usize) -> Option<Task> {
    let (peer, send) = match t.kind {
        TaskKind::Send { peer } => (peer, true),
        TaskKind::Recv { peer } => (peer, false),
        _ => return None,
    };
    let (host, _) = *h.places.get(rank)?;
    let (peer_host, peer_local) = *h.places.get(peer)?;
    if peer_host != host || t.count == 0 {
        return None;
    }
    eligible(h, t, send, !send)?;
    let kind = match send {
        true => TaskKind::Send { peer: peer_local },
        false => TaskKind::Recv { peer: peer_local },
    };
    Some(Task { kind, ..*t })
}

/// Integer average: truncating per host and again across hosts is not truncating the whole
/// sum once, so such reductions stay flat.
fn int_avg(t: &Task) -> bool {
    t.red == Reduction::Avg && !t.dtype.is_float()
}

/// Whether reduce-scatter `t` goes hierarchically (and then whether on GPU memory): the ranks
/// of every host must be consecutive in rank order, so that each host's blocks of the input
/// are one range a host reduce-scatter takes whole.
fn scatter_eligible(h: &Hierarchy, t: &Task) -> Option<bool> {
    if t.kind != TaskKind::Coll(Collective::ReduceScatter) || int_avg(t) {
        return None;
    }
    hosts_consecutive(&h.places).then_some(())?;
    eligible(h, t, true, true)
}

/// Whether all-to-all `t` goes hierarchically (and then whether on GPU memory):
/// `CCL_HIERARCHY_ALLTOALL=1` and every host's ranks consecutive in rank order, as
/// [`alltoall_blocks`] lays the blocks out.
fn alltoall_eligible(h: &Hierarchy, t: &Task) -> Option<bool> {
    if t.kind != TaskKind::Coll(Collective::AlltoAll) || !params::CCL_HIERARCHY_ALLTOALL.get_bool()
    {
        return None;
    }
    hosts_consecutive(&h.places).then_some(())?;
    eligible(h, t, true, true)
}

/// An all-to-all's two stages on a rank (every host's ranks consecutive, `per` of them on
/// each), blocks of `bytes`, as sends and receives: on the host, to each rank of the host
/// (itself too) the blocks for the ranks holding that rank's index on every host, received
/// into `scratch` by (host, sender); then across the hosts, to each host's rank holding this
/// rank's index the `per` blocks gathered for it (one message), received straight into the
/// output where its host's ranks' blocks go. The network carries each block once, in messages
/// of a host's blocks; the host's links the rest -- NCCL's PXN.
fn alltoall_blocks(
    places: &[(usize, usize)],
    send: usize,
    recv: usize,
    scratch: usize,
    bytes: usize,
) -> Option<(Vec<P2p>, Vec<P2p>)> {
    let per = places.iter().filter(|p| p.0 == 0).count();
    if per == 0 || places.len() % per != 0 {
        return None;
    }
    let hosts = places.len() / per;
    let mut local = Vec::with_capacity(2 * places.len());
    for q in 0..per {
        let block = |host: usize| (host * per + q) * bytes;
        local.extend((0..hosts).map(|host| P2p::Send {
            peer: q,
            from: send + block(host),
        }));
        local.extend((0..hosts).map(|host| P2p::Recv {
            peer: q,
            into: scratch + block(host),
        }));
    }
    let mut cross = Vec::with_capacity(2 * hosts);
    for k in 0..hosts {
        cross.push(P2p::Send {
            peer: k,
            from: scratch + k * per * bytes,
        });
        cross.push(P2p::Recv {
            peer: k,
            into: recv + k * per * bytes,
        });
    }
    Some((local, cross))
}

/// Whether every host's ranks are consecutive in rank order (hosts of any sizes).
fn hosts_contiguous(places: &[(usize, usize)]) -> bool {
    places.first() == Some(&(0, 0))
        && places.windows(2).all(|w| match w[1].0 == w[0].0 {
            true => w[1].1 == w[0].1 + 1,
            false => w[1] == (w[0].0 + 1, 0),
        })
}

/// Whether every host holds as many ranks, consecutive in rank order.
fn hosts_consecutive(places: &[(usize, usize)]) -> bool {
    let per = places.iter().filter(|p| p.0 == 0).count();
    per > 0
        && places.len() % per == 0
        && places
            .iter()
            .enumerate()
            .all(|(r, &p)| p == (r / per, r % per))
}

/// Whether reduce `t` goes hierarchically on `rank` (and then whether on GPU memory).
fn reduce_eligible(h: &Hierarchy, t: &Task, rank: usize) -> Option<bool> {
    let TaskKind::Coll(Collective::Reduce { root }) = t.kind else {
        return None;
    };
    if int_avg(t) {
        return None;
    }
    eligible(h, t, true, rank == root)
}

/// Whether gather or scatter `t` goes hierarchically on `rank` (and then whether on GPU
/// memory): every host's ranks must be consecutive in rank order, so that each host's blocks
/// are one range of the root's buffer.
fn rooted_eligible(h: &Hierarchy, t: &Task, rank: usize) -> Option<bool> {
    let (root, gather) = match t.kind {
        TaskKind::Coll(Collective::Gather { root }) => (root, true),
        TaskKind::Coll(Collective::Scatter { root }) => (root, false),
        _ => return None,
    };
    hosts_contiguous(&h.places).then_some(())?;
    eligible(h, t, gather || rank == root, !gather || rank == root)
}

/// Gather or scatter `t`'s stages on `rank` (every host's ranks consecutive, of any number,
/// [`rooted_eligible`]): on its host, a gather to (a scatter from) the rank at the root's index
/// modulo the host's ranks (the root on its host), whose blocks are the root's own buffer at its
/// host's range on the root's host and `scratch` on the others; and across the hosts, each
/// other host's blocks in one message between that rank and the root (peers by their rank in
/// the communicator, with the message's element count). A gather's host stage goes first, a
/// scatter's last. Host links carry the blocks of the host's ranks; the network each other
/// host's blocks once, in one message.
fn rooted_stages(
    places: &[(usize, usize)],
    t: &Task,
    rank: usize,
    scratch: usize,
) -> Option<(Task, Vec<(P2p, usize)>)> {
    let (root, gather) = match t.kind {
        TaskKind::Coll(Collective::Gather { root }) => (root, true),
        TaskKind::Coll(Collective::Scatter { root }) => (root, false),
        _ => return None,
    };
    let ranks_of = ranks_by_host(places);
    let hosts = ranks_of.len();
    let (root_host, root_index) = *places.get(root)?;
    let (host, _) = *places.get(rank)?;
    // Each host's rank that gathers (scatters) its blocks, and where they start in the root's
    // buffer (consecutive hosts: at its first rank's block).
    let lead = |k: usize| ranks_of[k][root_index % ranks_of[k].len()];
    let block = t.count.checked_mul(t.dtype.size())?;
    let whole = if gather { t.recv } else { t.send };
    let at = |k: usize| Some(whole.wrapping_add(ranks_of[k][0].checked_mul(block)?));
    let kind = |root| match gather {
        true => TaskKind::Coll(Collective::Gather { root }),
        false => TaskKind::Coll(Collective::Scatter { root }),
    };
    let mut host_stage = Task {
        kind: kind(places[lead(host)].1),
        ..*t
    };
    let mut cross = Vec::new();
    if rank == lead(host) {
        let blocks = match host == root_host {
            true => at(host)?,
            false => scratch,
        };
        match gather {
            true => host_stage.recv = blocks,
            false => host_stage.send = blocks,
        }
        let count = |k: usize| ranks_of[k].len() * t.count;
        if rank == root {
            for k in (0..hosts).filter(|&k| k != root_host) {
                let peer = lead(k);
                let p = match gather {
                    true => P2p::Recv { peer, into: at(k)? },
                    false => P2p::Send { peer, from: at(k)? },
                };
                cross.push((p, count(k)));
            }
        } else {
            let p = match gather {
                true => P2p::Send {
                    peer: root,
                    from: scratch,
                },
                false => P2p::Recv {
                    peer: root,
                    into: scratch,
                },
            };
            cross.push((p, count(host)));
        }
    }
    Some((host_stage, cross))
}

/// Reduce-scatter `t`'s stages on `rank` (its host's ranks consecutive, [`scatter_eligible`]):
/// on its host, one reduce-scatter of each host's blocks of the input (a range of the host's
/// ranks' blocks, in order), this rank's share of each landing in `scratch` at the place its
/// host takes among the hosts; then a reduce-scatter of those partial sums across the hosts,
/// whose share for this rank is its own block's. Host links carry every byte once per host;
/// the network only each block's partial sums.
fn scatter_stages(
    places: &[(usize, usize)],
    t: &Task,
    rank: usize,
    scratch: usize,
) -> Option<(Vec<Task>, Task)> {
    let per = places.iter().filter(|p| p.0 == 0).count();
    let hosts = places.len() / per.max(1);
    places.get(rank)?;
    let block = t.count.checked_mul(t.dtype.size())?;
    let (first, second) = split_reduction(t, places.len());
    let local = (0..hosts)
        .map(|host| Task {
            send: t.send + host * per * block,
            recv: scratch + host * block,
            red: first,
            ..*t
        })
        .collect();
    let cross = Task {
        send: scratch,
        red: second,
        ..*t
    };
    Some((local, cross))
}

/// Whether a reduce to `root` goes through the hosts' first ranks (its index is missing on a
/// host holding only `fewest` ranks) rather than among the ranks holding the root's index.
fn reduce_via_first_ranks(places: &[(usize, usize)], fewest: usize, root: usize) -> bool {
    places.get(root).is_some_and(|p| p.1 >= fewest)
}

/// Reduce `t`'s stages on `rank` (hosts of `fewest` ranks at least). Where every host holds a
/// rank at the root's index: a reduce on its host to the rank holding that index (into the
/// root's receive buffer on the root's host, into `scratch` on the others), then, among the
/// ranks holding that index, a reduce across the hosts to the root (in place there). Where some
/// host does not: a reduce on every host to its first rank (into `scratch`), a reduce among the
/// first ranks to the root's host's (in place), which sends the sum to the root on their host.
fn reduce_stages(
    places: &[(usize, usize)],
    fewest: usize,
    t: &Task,
    rank: usize,
    scratch: usize,
) -> Option<Vec<(Sub, Task)>> {
    let TaskKind::Coll(Collective::Reduce { root }) = t.kind else {
        return None;
    };
    let reduce = |root| TaskKind::Coll(Collective::Reduce { root });
    let (first, second) = split_reduction(t, places.len());
    let mut seq = Vec::new();
    if !reduce_via_first_ranks(places, fewest, root) {
        let (cross_root, local_root) = broadcast_roots(places, root, rank)?;
        let partial = match (rank == root, cross_root) {
            (false, Some(_)) => scratch,
            _ => t.recv,
        };
        let local = Task {
            kind: reduce(local_root),
            recv: partial,
            red: first,
            ..*t
        };
        seq.push((Sub::Local, local));
        if let Some(root) = cross_root {
            let cross = Task {
                kind: reduce(root),
                send: partial,
                recv: partial,
                red: second,
                ..*t
            };
            seq.push((Sub::Cross, cross));
        }
        return Some(seq);
    }
    let (root_host, root_index) = *places.get(root)?;
    let (host, index) = *places.get(rank)?;
    let first_of_root_host = places.iter().position(|&p| p == (root_host, 0))?;
    let local = Task {
        kind: reduce(0),
        recv: if index == 0 { scratch } else { t.recv },
        red: first,
        ..*t
    };
    seq.push((Sub::Local, local));
    if index == 0 {
        let cross = Task {
            kind: reduce(cross_rank(places, first_of_root_host)?),
            send: scratch,
            recv: scratch,
            red: second,
            ..*t
        };
        seq.push((Sub::Cross, cross));
    }
    let hop = match (host == root_host, rank) {
        (true, r) if r == first_of_root_host => Some(P2p::Send {
            peer: root_index,
            from: scratch,
        }),
        (true, r) if r == root => Some(P2p::Recv {
            peer: 0,
            into: t.recv,
        }),
        _ => None,
    };
    seq.extend(hop.map(|p| (Sub::Local, p2p_task(t, &p, t.count))));
    Some(seq)
}

/// How a reduction splits over a first stage (among a host's ranks) and a second (across the
/// hosts) of `nranks` ranks in all: the operator in both; PreMulSum scales in the first and
/// sums in the second; float average multiplies by 1/nranks in the first (NCCL's average of
/// floats). Not for integer average ([`int_avg`] keeps it flat).
fn split_reduction(t: &Task, nranks: usize) -> (Reduction, Reduction) {
    let sum = Reduction::Plain(ccl_cuda::ReduceKind::Sum);
    match t.red {
        Reduction::Plain(k) => (Reduction::Plain(k), Reduction::Plain(k)),
        Reduction::PreMulSum(s) => (Reduction::PreMulSum(s), sum),
        Reduction::Avg => match ccl_cuda::host::reduce::premul_scalar(t, nranks) {
            Some(inv) => (Reduction::PreMulSum(Scalar::Immediate(inv)), sum),
            None => (sum, sum),
        },
    }
}

/// Which of a hierarchy's sub-communicators a stage goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    Local,
    Cross,
}

/// A broadcast's stages on `rank`, if it goes hierarchically. Where every host holds a rank at
/// the root's index: across the hosts among those ranks (only where this rank holds it; the
/// root's data lands in every such rank's receive buffer), then on this rank's host from the
/// rank holding that index (in place). Where some host does not (uneven hosts): on the root's
/// host first, then across the hosts among their first ranks from the root's host's, then on
/// the other hosts from their first ranks.
fn broadcast_stages(h: &Hierarchy, t: &Task, rank: usize) -> Option<Vec<(Sub, Task)>> {
    let TaskKind::Coll(Collective::Broadcast { root }) = t.kind else {
        return None;
    };
    eligible(h, t, rank == root, true)?;
    broadcast_plan(&h.places, h.fewest, t, rank)
}

/// [`broadcast_stages`] over `places`, whose smallest host holds `fewest` ranks.
fn broadcast_plan(
    places: &[(usize, usize)],
    fewest: usize,
    t: &Task,
    rank: usize,
) -> Option<Vec<(Sub, Task)>> {
    let TaskKind::Coll(Collective::Broadcast { root }) = t.kind else {
        return None;
    };
    let bcast = |root| TaskKind::Coll(Collective::Broadcast { root });
    let mut seq = Vec::new();
    let (root_host, root_index) = *places.get(root)?;
    if root_index < fewest {
        let (cross_root, local_root) = broadcast_roots(places, root, rank)?;
        if let Some(r) = cross_root {
            seq.push((
                Sub::Cross,
                Task {
                    kind: bcast(r),
                    ..*t
                },
            ));
        }
        let local = Task {
            kind: bcast(local_root),
            send: t.recv,
            ..*t
        };
        seq.push((Sub::Local, local));
        return Some(seq);
    }
    let (host, index) = *places.get(rank)?;
    let first_of_root_host = places.iter().position(|&p| p == (root_host, 0))?;
    if host == root_host {
        seq.push((
            Sub::Local,
            Task {
                kind: bcast(root_index),
                ..*t
            },
        ));
    }
    if index == 0 {
        let cross = Task {
            kind: bcast(cross_rank(places, first_of_root_host)?),
            send: t.recv,
            ..*t
        };
        seq.push((Sub::Cross, cross));
    }
    if host != root_host {
        let local = Task {
            kind: bcast(0),
            send: t.recv,
            ..*t
        };
        seq.push((Sub::Local, local));
    }
    Some(seq)
}

/// A hierarchical broadcast from `root`, on `rank`: the root of its stage across the hosts
/// (`None`: this rank holds another index on its host and takes no part), and the root of its
/// host's stage (the host's rank holding the root's index).
fn broadcast_roots(
    places: &[(usize, usize)],
    root: usize,
    rank: usize,
) -> Option<(Option<usize>, usize)> {
    let (_, root_local) = *places.get(root)?;
    let (_, mine) = *places.get(rank)?;
    let cross = match mine == root_local {
        true => Some(cross_rank(places, root)?),
        false => None,
    };
    Some((cross, root_local))
}

/// `p` as a send or receive of `count` of `t`'s elements.
fn p2p_task(t: &Task, p: &P2p, count: usize) -> Task {
    let (kind, send, recv) = match *p {
        P2p::Send { peer, from } => (TaskKind::Send { peer }, from, 0),
        P2p::Recv { peer, into } => (TaskKind::Recv { peer }, 0, into),
    };
    Task {
        kind,
        send,
        recv,
        count,
        red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
        ..*t
    }
}

/// A send or receive of blocks of a hierarchical operation, by its peer's rank in the
/// communicator it goes on and the address it reads or writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum P2p {
    Send { peer: usize, from: usize },
    Recv { peer: usize, into: usize },
}

impl P2p {
    fn peer(&self) -> usize {
        match *self {
            P2p::Send { peer, .. } | P2p::Recv { peer, .. } => peer,
        }
    }

    /// The same with its peer numbered `peer` (on another communicator).
    fn on_peer(self, peer: usize) -> P2p {
        match self {
            P2p::Send { from, .. } => P2p::Send { peer, from },
            P2p::Recv { into, .. } => P2p::Recv { peer, into },
        }
    }
}

/// A hierarchical all-gather's two stages on one rank, as sends and receives of blocks (so
/// every block lands straight where its rank's place in the output is, however the ranks sit
/// on the hosts).
#[derive(Debug, Default, PartialEq)]
struct GatherPlan {
    /// Across the hosts, peers by their rank in the communicator: this rank's block to one
    /// rank of every other host, the blocks it takes for its host into their places.
    cross: Vec<P2p>,
    /// On the host, peers by their index there: the blocks this rank holds to each other rank
    /// of the host (and its own into its place, out of place), theirs into their places.
    local: Vec<P2p>,
}

/// An all-gather's plan, if it goes hierarchically ([`eligible`]).
fn gather_plan(h: &Hierarchy, t: &Task, rank: usize) -> Option<GatherPlan> {
    if t.kind != TaskKind::Coll(Collective::AllGather) {
        return None;
    }
    eligible(h, t, true, true)?;
    gather_blocks(&h.places, rank, t.send, t.recv, t.count * t.dtype.size())
}

/// [`gather_plan`] over `places` for `rank`, blocks of `bytes` from `send` into `recv`. Each
/// rank's block crosses to one rank of every other host: the one at its index, modulo that
/// host's ranks (its index itself where hosts are even, so the cross stage stays among the
/// ranks of one index); each rank then sends the blocks it holds (its own, those it took) to
/// the other ranks of its host.
fn gather_blocks(
    places: &[(usize, usize)],
    rank: usize,
    send: usize,
    recv: usize,
    bytes: usize,
) -> Option<GatherPlan> {
    let (host, _) = *places.get(rank)?;
    let at = |r: usize| recv + r * bytes;
    let ranks_of = ranks_by_host(places);
    // The rank of host `on` that takes rank `q`'s block across the hosts.
    let taker = |q: usize, on: usize| {
        let ranks = &ranks_of[on];
        ranks[places[q].1 % ranks.len()]
    };
    let mut plan = GatherPlan::default();
    for (q, &(on, _)) in places.iter().enumerate() {
        if on == host {
            continue;
        }
        if taker(rank, on) == q {
            plan.cross.push(P2p::Send {
                peer: q,
                from: send,
            });
        }
        if taker(q, host) == rank {
            plan.cross.push(P2p::Recv {
                peer: q,
                into: at(q),
            });
        }
    }
    // The blocks a rank of this host holds after the cross stage, in rank order.
    let held = |m: usize| -> Vec<usize> {
        (0..places.len())
            .filter(|&q| q == m || (places[q].0 != host && taker(q, host) == m))
            .collect()
    };
    let mine = held(rank);
    for (index, &mate) in ranks_of[host].iter().enumerate() {
        if mate == rank {
            // Its own block into its place (none in place), on the host's links.
            if send != at(rank) {
                plan.local.push(P2p::Send {
                    peer: index,
                    from: send,
                });
                plan.local.push(P2p::Recv {
                    peer: index,
                    into: at(rank),
                });
            }
            continue;
        }
        for &q in &mine {
            // Its own block from its input: its place may still be filling in this stage.
            let from = if q == rank { send } else { at(q) };
            plan.local.push(P2p::Send { peer: index, from });
        }
        for q in held(mate) {
            plan.local.push(P2p::Recv {
                peer: index,
                into: at(q),
            });
        }
    }
    Some(plan)
}

/// `t` as the part of its count that splits evenly over `per` ranks and, if anything is left,
/// an all-reduce of the rest (the same operation on the last elements).
fn split_count(t: &Task, per: usize) -> (Task, Option<Task>) {
    let left = t.count % per;
    let head = Task {
        count: t.count - left,
        ..*t
    };
    let at = (t.count - left) * t.dtype.size();
    let tail = (left > 0).then_some(Task {
        send: t.send + at,
        recv: t.recv + at,
        count: left,
        ..*t
    });
    (head, tail)
}

/// The stages of all-reduce `t` over `per` ranks a host on `hosts` hosts, this rank `local`-th
/// on its host: its share of the output (`count / per` elements at `local`) gets the host's
/// reduction of that share of the inputs, then the all-reduce of it across the hosts, then
/// every share is gathered; the reduction split as [`split_reduction`] says.
fn stages(t: &Task, per: usize, hosts: usize, local: usize) -> [Task; 3] {
    let share = t.count / per;
    let at = t.recv + local * share * t.dtype.size();
    let sum = Reduction::Plain(ccl_cuda::ReduceKind::Sum);
    let (first, second) = split_reduction(t, per * hosts);
    let rs = Task {
        kind: TaskKind::Coll(Collective::ReduceScatter),
        recv: at,
        count: share,
        red: first,
        ..*t
    };
    let ar = Task {
        kind: TaskKind::Coll(Collective::AllReduce),
        send: at,
        recv: at,
        count: share,
        red: second,
        ..*t
    };
    let ag = Task {
        kind: TaskKind::Coll(Collective::AllGather),
        send: at,
        count: share,
        red: sum,
        ..*t
    };
    [rs, ar, ag]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hosts a,b,b,a and root 3 (host a, index 1): ranks 2 and 3 hold index 1 and broadcast
    /// across the hosts from 3 (their communicator's rank 1); every host then broadcasts from
    /// its index-1 rank.
    #[test]
    fn a_broadcast_crosses_the_hosts_among_the_roots_index_then_each_host() {
        let p = places(&[7, 9, 9, 7]).unwrap();
        assert_eq!(broadcast_roots(&p, 3, 0), Some((None, 1)));
        assert_eq!(broadcast_roots(&p, 3, 1), Some((None, 1)));
        assert_eq!(broadcast_roots(&p, 3, 2), Some((Some(1), 1)));
        assert_eq!(broadcast_roots(&p, 3, 3), Some((Some(1), 1)));
        assert_eq!(broadcast_roots(&p, 0, 1), Some((Some(0), 0)));
        assert_eq!(broadcast_roots(&p, 4, 1), None);
    }

    /// Hosts a,b,b,a (places (0,0), (1,0), (1,1), (0,1)), rank 3, out of place, 16-byte
    /// blocks: across the hosts with rank 2 (index 1; rank 3 is that communicator's rank 1)
    /// it sends its block to both (itself included) and takes block 2 and its own into their
    /// places; on host a it sends blocks 2 and 3 to rank 0 (the host communicator's rank 0)
    /// and takes rank 0's column, blocks 0 and 1.
    #[test]
    fn an_all_gather_moves_blocks_straight_to_their_places() {
        let p = places(&[7, 9, 9, 7]).unwrap();
        let (send, recv) = (0x100, 0x1000);
        let plan = gather_blocks(&p, 3, send, recv, 16).unwrap();
        use P2p::{Recv, Send};
        // Across: with rank 2, the other host's rank of index 1.
        assert_eq!(
            plan.cross,
            [
                Send {
                    peer: 2,
                    from: send
                },
                Recv {
                    peer: 2,
                    into: 0x1020
                },
            ]
        );
        // On the host (ranks 0 and 3): the blocks of ranks 2 and 3 to rank 0, its and rank
        // 1's from it; its own block into its place.
        assert_eq!(
            plan.local,
            [
                Send {
                    peer: 0,
                    from: 0x1020
                },
                Send {
                    peer: 0,
                    from: send
                },
                Recv {
                    peer: 0,
                    into: 0x1000
                },
                Recv {
                    peer: 0,
                    into: 0x1010
                },
                Send {
                    peer: 1,
                    from: send
                },
                Recv {
                    peer: 1,
                    into: 0x1030
                },
            ]
        );
        // In place (the block already in its place): no copy to itself.
        let in_place = gather_blocks(&p, 3, 0x1030, recv, 16).unwrap();
        assert_eq!(in_place.local.len(), 4);
        assert_eq!(
            in_place.cross,
            plan.cross
                .iter()
                .map(|&x| match x {
                    Send { peer, .. } => Send { peer, from: 0x1030 },
                    r => r,
                })
                .collect::<Vec<_>>()
        );
    }

    /// Hosts of two ranks and one: the lone rank takes both blocks of the other host and sends
    /// its own to that host's first rank, which passes it on.
    #[test]
    fn an_all_gather_over_uneven_hosts_crosses_each_block_once_per_host() {
        use P2p::{Recv, Send};
        let p = places(&[4, 4, 6]).unwrap();
        let at = |r: usize| 0x1000 + r * 16;
        let lone = gather_blocks(&p, 2, at(2), 0x1000, 16).unwrap();
        assert_eq!(
            lone.cross,
            [
                Send {
                    peer: 0,
                    from: at(2)
                },
                Recv {
                    peer: 0,
                    into: at(0)
                },
                Recv {
                    peer: 1,
                    into: at(1)
                },
            ]
        );
        assert!(lone.local.is_empty());
        let first = gather_blocks(&p, 0, 0x100, 0x1000, 16).unwrap();
        assert_eq!(
            first.cross,
            [
                Send {
                    peer: 2,
                    from: 0x100
                },
                Recv {
                    peer: 2,
                    into: at(2)
                },
            ]
        );
        // To rank 1: its own block and rank 2's; from rank 1: rank 1's.
        assert_eq!(
            &first.local[2..],
            [
                Send {
                    peer: 1,
                    from: 0x100
                },
                Send {
                    peer: 1,
                    from: at(2)
                },
                Recv {
                    peer: 1,
                    into: at(1)
                },
            ]
        );
        let second = gather_blocks(&p, 1, 0x200, 0x1000, 16).unwrap();
        assert_eq!(
            second.cross,
            [Send {
                peer: 2,
                from: 0x200
            }]
        );
        assert_eq!(
            &second.local[..3],
            [
                Send {
                    peer: 0,
                    from: 0x200
                },
                Recv {
                    peer: 0,
                    into: at(0)
                },
                Recv {
                    peer: 0,
                    into: at(2)
                },
            ]
        );
    }

    /// Runs every rank's all-gather plan over `hosts` (each rank's host id) as the two stage
    /// groups would: each stage's sends read memory as it was when the stage began (its
    /// transfers run concurrently), every send meets its receive, pair by pair in order. Each
    /// rank's memory: block ids by address; its input at `SEND`, its output from `RECV`.
    fn all_gather_over(hosts: &[u64], in_place: bool) -> Vec<Vec<Option<usize>>> {
        use std::collections::{HashMap, VecDeque};
        const RECV: usize = 0x1000;
        const SEND: usize = 0x100;
        let p = places(hosts).unwrap();
        let n = p.len();
        let send = |r: usize| if in_place { RECV + r } else { SEND };
        let mut mem: Vec<HashMap<usize, usize>> =
            (0..n).map(|r| HashMap::from([(send(r), r)])).collect();
        let plans: Vec<GatherPlan> = (0..n)
            .map(|r| gather_blocks(&p, r, send(r), RECV, 1).unwrap())
            .collect();
        let mates = |r: usize| -> Vec<usize> { (0..n).filter(|&q| p[q].0 == p[r].0).collect() };
        for stage in 0..2 {
            let start = mem.clone();
            let mut wires: HashMap<(usize, usize), VecDeque<usize>> = HashMap::new();
            let peer_of = |r: usize, peer: usize| if stage == 0 { peer } else { mates(r)[peer] };
            let ops = |r: usize| {
                if stage == 0 {
                    &plans[r].cross
                } else {
                    &plans[r].local
                }
            };
            for (r, held) in start.iter().enumerate() {
                for op in ops(r) {
                    if let P2p::Send { peer, from } = *op {
                        let v = *held.get(&from).expect("a send of nothing");
                        wires.entry((r, peer_of(r, peer))).or_default().push_back(v);
                    }
                }
            }
            for (r, held) in mem.iter_mut().enumerate() {
                for op in ops(r) {
                    if let P2p::Recv { peer, into } = *op {
                        let wire = wires.get_mut(&(peer_of(r, peer), r)).expect("no send");
                        held.insert(into, wire.pop_front().expect("too few sends"));
                    }
                }
            }
            assert!(
                wires.values().all(VecDeque::is_empty),
                "sends nobody received"
            );
        }
        (0..n)
            .map(|r| (0..n).map(|q| mem[r].get(&(RECV + q)).copied()).collect())
            .collect()
    }

    proptest::proptest! {
        /// Whatever hosts the ranks sit on (even or not, interleaved or not), every rank ends
        /// with every block in its place, each stage's transfers meeting pair by pair.
        #[test]
        fn an_all_gather_leaves_every_block_everywhere(
            hosts in proptest::collection::vec(0u64..4, 2..10),
            in_place in proptest::bool::ANY,
        ) {
            proptest::prop_assume!(places(&hosts).is_some());
            let n = hosts.len();
            for out in all_gather_over(&hosts, in_place) {
                proptest::prop_assert_eq!(out, (0..n).map(Some).collect::<Vec<_>>());
            }
        }
    }

    /// A count that does not split evenly: the even part goes as the three stages, the last
    /// elements as an all-reduce of their own.
    #[test]
    fn an_uneven_count_splits_off_its_last_elements() {
        let t = crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 14);
        let (head, tail) = split_count(&t, 4);
        assert_eq!((head.send, head.recv, head.count), (0x1000, 0x9000, 12));
        let tail = tail.unwrap();
        assert_eq!((tail.send, tail.recv, tail.count), (0x1030, 0x9030, 2));
        assert_eq!(tail.kind, t.kind);
        let (even, none) = split_count(&Task { count: 12, ..t }, 4);
        assert_eq!((even.count, none.is_none()), (12, true));
    }

    /// Two hosts of three (ranks 0-2, 3-5), rank 4 (host 1, index 1), 4 floats a block:
    /// on its host, one reduce-scatter of host 0's blocks (bytes 0..48 of the input) into
    /// scratch slot 0 and one of host 1's (48..96) into slot 1; then across the hosts the two
    /// slots, its own share (slot 1: its own block) into its receive buffer.
    #[test]
    fn a_reduce_scatter_reduces_each_hosts_blocks_on_the_host_then_across_the_hosts() {
        let p = places(&[7, 7, 7, 9, 9, 9]).unwrap();
        assert!(hosts_consecutive(&p));
        let t = Task {
            red: Reduction::Avg,
            ..crate::task::float_sum(TaskKind::Coll(Collective::ReduceScatter), 0x1000, 0x9000, 4)
        };
        let (local, cross) = scatter_stages(&p, &t, 4, 0x5000).unwrap();
        let at: Vec<_> = local.iter().map(|t| (t.send, t.recv, t.count)).collect();
        assert_eq!(at, [(0x1000, 0x5000, 4), (0x1030, 0x5010, 4)]);
        assert!(local.iter().all(|l| l.kind == t.kind));
        let sixth = ccl_cuda::host::reduce::from_f64(ccl_cuda::DataType::Float32, 1.0 / 6.0);
        assert_eq!(local[0].red, Reduction::PreMulSum(Scalar::Immediate(sixth)));
        assert_eq!((cross.send, cross.recv, cross.count), (0x5000, 0x9000, 4));
        assert_eq!(cross.red, Reduction::Plain(ccl_cuda::ReduceKind::Sum));
        // Hosts interleaved: a host's blocks are no one range, so it stays flat.
        assert!(!hosts_consecutive(&places(&[7, 9, 9, 7]).unwrap()));
        assert!(!hosts_consecutive(&places(&[7, 9, 7, 9]).unwrap()));
    }

    /// Two hosts of two (ranks 0,1 and 2,3), 16-byte blocks, from rank 1's view: on its host
    /// it sends rank 0 (its host index 0) the blocks for ranks 0 and 2 and itself those for
    /// 1 and 3, receiving each one's into the scratch by (destination host, sender); across
    /// the hosts it sends the two blocks gathered for each host's index-1 rank in one message
    /// (to itself too) and takes each host's two blocks into their places.
    #[test]
    fn an_all_to_all_gathers_on_the_host_then_crosses_once_per_host() {
        let p = places(&[7, 7, 9, 9]).unwrap();
        let (send, recv, scratch) = (0x1000, 0x2000, 0x5000);
        let (local, cross) = alltoall_blocks(&p, send, recv, scratch, 16).unwrap();
        use P2p::{Recv, Send};
        let s = |peer, from| Send { peer, from };
        let r = |peer, into| Recv { peer, into };
        assert_eq!(
            local,
            [
                s(0, 0x1000),
                s(0, 0x1020),
                r(0, 0x5000),
                r(0, 0x5020),
                s(1, 0x1010),
                s(1, 0x1030),
                r(1, 0x5010),
                r(1, 0x5030),
            ]
        );
        assert_eq!(
            cross,
            [s(0, 0x5000), r(0, 0x2000), s(1, 0x5020), r(1, 0x2020)]
        );
    }

    /// Hosts a,b,b,a, root 2 (host b, index 1): every host reduces to its index-1 rank (3 on
    /// host a, into its scratch; the root itself on host b, into its receive buffer); ranks 3
    /// and 2 then reduce across the hosts to 2 (their communicator's rank 0), in place. Rank 0
    /// only takes part on its host.
    #[test]
    fn a_reduce_goes_to_the_roots_index_on_every_host_then_across_to_the_root() {
        let p = places(&[7, 9, 9, 7]).unwrap();
        let t = crate::task::float_sum(
            TaskKind::Coll(Collective::Reduce { root: 2 }),
            0x1000,
            0x9000,
            8,
        );
        let reduce = |root| TaskKind::Coll(Collective::Reduce { root });
        // (sub-communicator, kind, send, recv) of each stage.
        let stages = |places: &[(usize, usize)], fewest, t: &Task, rank| {
            reduce_stages(places, fewest, t, rank, 0x5000)
                .unwrap()
                .into_iter()
                .map(|(sub, x)| (sub, x.kind, x.send, x.recv))
                .collect::<Vec<_>>()
        };
        use Sub::{Cross, Local};
        assert_eq!(
            stages(&p, 2, &t, 3),
            [
                (Local, reduce(1), 0x1000, 0x5000),
                (Cross, reduce(0), 0x5000, 0x5000)
            ]
        );
        assert_eq!(
            stages(&p, 2, &t, 2),
            [
                (Local, reduce(1), 0x1000, 0x9000),
                (Cross, reduce(0), 0x9000, 0x9000)
            ]
        );
        assert_eq!(stages(&p, 2, &t, 0), [(Local, reduce(1), 0x1000, 0x9000)]);
        // Hosts of two ranks and one, root 1 (index 1, which the second host lacks): on every
        // host to its first rank, among the first ranks to rank 0, which sends it to rank 1.
        let q = places(&[4, 4, 6]).unwrap();
        let t = crate::task::float_sum(reduce(1), 0x1000, 0x9000, 8);
        let send = TaskKind::Send { peer: 1 };
        let recv = TaskKind::Recv { peer: 0 };
        assert_eq!(
            stages(&q, 1, &t, 0),
            [
                (Local, reduce(0), 0x1000, 0x5000),
                (Cross, reduce(0), 0x5000, 0x5000),
                (Local, send, 0x5000, 0)
            ]
        );
        assert_eq!(
            stages(&q, 1, &t, 1),
            [(Local, reduce(0), 0x1000, 0x9000), (Local, recv, 0, 0x9000)]
        );
        assert_eq!(
            stages(&q, 1, &t, 2),
            [
                (Local, reduce(0), 0x1000, 0x5000),
                (Cross, reduce(0), 0x5000, 0x5000)
            ]
        );
    }

    #[test]
    fn a_gather_collects_on_each_host_at_the_roots_index_then_crosses_once_per_host() {
        // Three hosts of two, consecutive; root 3 (host 1, index 1); blocks of 4 floats.
        let p = places(&[5, 5, 6, 6, 7, 7]).unwrap();
        let gather = |root| TaskKind::Coll(Collective::Gather { root });
        let t = crate::task::float_sum(gather(3), 0x1000, 0x9000, 4);
        let span = 2 * 4 * 4;
        // The root: its host's blocks straight into its buffer, the others' from each host.
        let (local, cross) = rooted_stages(&p, &t, 3, 0).unwrap();
        assert_eq!(
            (local.kind, local.send, local.recv),
            (gather(1), 0x1000, 0x9000 + span)
        );
        // Peers by rank: the other hosts' ranks of index 1, each host's two blocks.
        let from = |peer, k| {
            let p = P2p::Recv {
                peer,
                into: 0x9000 + k * span,
            };
            (p, 8)
        };
        assert_eq!(cross, [from(1, 0), from(5, 2)]);
        // Index 1 on another host: its host's blocks into the scratch, then to the root.
        let (local, cross) = rooted_stages(&p, &t, 5, 0x5000).unwrap();
        assert_eq!((local.kind, local.recv), (gather(1), 0x5000));
        let to_root = P2p::Send {
            peer: 3,
            from: 0x5000,
        };
        assert_eq!(cross, [(to_root, 8)]);
        // Index 0: its block to its host's index 1 only (its receive buffer untouched).
        let (local, cross) = rooted_stages(&p, &t, 2, 0x5000).unwrap();
        assert_eq!((local.kind, local.recv), (gather(1), 0x9000));
        assert!(cross.is_empty());
    }

    #[test]
    fn a_scatter_crosses_once_per_host_then_scatters_on_each_host() {
        let p = places(&[5, 5, 6, 6]).unwrap();
        let scatter = |root| TaskKind::Coll(Collective::Scatter { root });
        let t = crate::task::float_sum(scatter(0), 0x1000, 0x9000, 8);
        let span = 2 * 8 * 4;
        let (local, cross) = rooted_stages(&p, &t, 0, 0).unwrap();
        assert_eq!(
            (local.kind, local.send, local.recv),
            (scatter(0), 0x1000, 0x9000)
        );
        let to_other = P2p::Send {
            peer: 2,
            from: 0x1000 + span,
        };
        assert_eq!(cross, [(to_other, 16)]);
        let (local, cross) = rooted_stages(&p, &t, 2, 0x5000).unwrap();
        assert_eq!(
            (local.kind, local.send, local.recv),
            (scatter(0), 0x5000, 0x9000)
        );
        let from_root = P2p::Recv {
            peer: 0,
            into: 0x5000,
        };
        assert_eq!(cross, [(from_root, 16)]);
        let (local, cross) = rooted_stages(&p, &t, 3, 0x5000).unwrap();
        assert_eq!((local.kind, local.recv), (scatter(0), 0x9000));
        assert!(cross.is_empty());
    }

    /// Hosts of three ranks and one, consecutive; root 2 (index 2): the lone rank sends its one
    /// block to the root, which gathers its host's three in place.
    #[test]
    fn a_gather_over_uneven_hosts_takes_each_hosts_blocks_at_the_roots_index_modulo_its_ranks() {
        let p = places(&[5, 5, 5, 6]).unwrap();
        assert!(hosts_contiguous(&p) && !hosts_consecutive(&p));
        assert!(!hosts_contiguous(&places(&[5, 6, 5, 6]).unwrap()));
        let gather = |root| TaskKind::Coll(Collective::Gather { root });
        let t = crate::task::float_sum(gather(2), 0x1000, 0x9000, 4);
        let (local, cross) = rooted_stages(&p, &t, 2, 0).unwrap();
        assert_eq!((local.kind, local.recv), (gather(2), 0x9000));
        let from_lone = P2p::Recv {
            peer: 3,
            into: 0x9000 + 3 * 16,
        };
        assert_eq!(cross, [(from_lone, 4)]);
        // The lone rank holds index 2 modulo 1: it gathers its own block, then sends it.
        let (local, cross) = rooted_stages(&p, &t, 3, 0x5000).unwrap();
        assert_eq!((local.kind, local.recv), (gather(0), 0x5000));
        let to_root = P2p::Send {
            peer: 2,
            from: 0x5000,
        };
        assert_eq!(cross, [(to_root, 4)]);
        let (local, cross) = rooted_stages(&p, &t, 0, 0x5000).unwrap();
        assert_eq!(local.kind, gather(2));
        assert!(cross.is_empty());
    }

    /// Hosts of two ranks and one, root 1 (index 1, which the second host lacks): on the
    /// root's host first, then across the hosts from its first rank, then on the other host.
    #[test]
    fn a_broadcast_from_an_index_some_host_lacks_starts_on_the_roots_host() {
        let p = places(&[4, 4, 6]).unwrap();
        let bcast = |root| TaskKind::Coll(Collective::Broadcast { root });
        let t = crate::task::float_sum(bcast(1), 0x1000, 0x9000, 8);
        let stages = |rank| -> Vec<(Sub, TaskKind, usize)> {
            broadcast_plan(&p, 1, &t, rank)
                .unwrap()
                .into_iter()
                .map(|(sub, x)| (sub, x.kind, x.send))
                .collect()
        };
        use Sub::{Cross, Local};
        assert_eq!(stages(1), [(Local, bcast(1), 0x1000)]);
        assert_eq!(
            stages(0),
            [(Local, bcast(1), 0x1000), (Cross, bcast(0), 0x9000)]
        );
        assert_eq!(
            stages(2),
            [(Cross, bcast(0), 0x9000), (Local, bcast(0), 0x9000)]
        );
        // Root 2 (index 0, on every host): across the hosts first, as on even hosts.
        let t2 = Task {
            kind: bcast(2),
            ..t
        };
        let first = broadcast_plan(&p, 1, &t2, 0).unwrap();
        assert_eq!(
            first.iter().map(|(s, x)| (*s, x.kind)).collect::<Vec<_>>(),
            [(Cross, bcast(1)), (Local, bcast(0))]
        );
    }

    #[test]
    fn two_hosts_or_more_with_a_host_of_two_ranks_make_a_hierarchy() {
        // Two hosts of two, interleaved: host index by first appearance, place by rank order.
        let p = places(&[7, 9, 9, 7]).unwrap();
        assert_eq!(p, [(0, 0), (1, 0), (1, 1), (0, 1)]);
        // The communicator of index 1 holds ranks 2 and 3 in rank order: host 1 first.
        assert_eq!(cross_rank(&p, 2), Some(0));
        assert_eq!(cross_rank(&p, 3), Some(1));
        assert_eq!(cross_rank(&p, 1), Some(1));
        // One host; one rank a host: none.
        assert_eq!(places(&[1, 1, 1, 1]), None);
        assert_eq!(places(&[1, 2, 3]), None);
        // Hosts of unequal size: a hierarchy, but not one of equal hosts' consecutive ranks.
        let p = places(&[1, 1, 2, 2, 2]).unwrap();
        assert_eq!(p, [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]);
        assert!(!hosts_consecutive(&p));
        assert!(!hosts_consecutive(&places(&[1, 1, 2]).unwrap()));
        assert!(!hosts_consecutive(&places(&[1, 1, 1, 2, 2, 3]).unwrap()));
        assert!(hosts_consecutive(&places(&[1, 1, 2, 2, 3, 3]).unwrap()));
        assert!(!hosts_consecutive(&places(&[1, 2, 1, 2]).unwrap()));
    }

    /// Hosts of different sizes: reduce on each host to its first rank, all-reduce among the
    /// first ranks, broadcast on each host; the scaling of an average in the first stage, by
    /// every rank of the communicator.
    #[test]
    fn an_all_reduce_over_uneven_hosts_goes_through_each_hosts_first_rank() {
        let t = Task {
            red: Reduction::Avg,
            ..crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 12)
        };
        let [reduce, cross, bcast] = leader_all_reduce(&t, 5, 0);
        assert_eq!(reduce.len(), 1);
        let r = reduce[0];
        assert_eq!(
            (r.kind, r.send, r.recv, r.count),
            (
                TaskKind::Coll(Collective::Reduce { root: 0 }),
                0x1000,
                0x9000,
                12
            )
        );
        assert!(matches!(r.red, Reduction::PreMulSum(Scalar::Immediate(_))));
        assert_eq!(cross.len(), 1);
        let c = cross[0];
        assert_eq!(
            (c.kind, c.send, c.recv, c.red),
            (
                TaskKind::Coll(Collective::AllReduce),
                0x9000,
                0x9000,
                Reduction::Plain(ccl_cuda::ReduceKind::Sum)
            )
        );
        let b = bcast[0];
        assert_eq!(
            (b.kind, b.send, b.recv),
            (
                TaskKind::Coll(Collective::Broadcast { root: 0 }),
                0x9000,
                0x9000
            )
        );
        // A host's other ranks take no part across the hosts.
        let [_, cross, _] = leader_all_reduce(&t, 5, 1);
        assert!(cross.is_empty());
    }

    /// The three stages cover the output in shares, in place as NCCL's in-place reduce-scatter
    /// and all-gather, with each reduction's arithmetic split across them.
    #[test]
    fn an_all_reduce_becomes_a_host_reduce_scatter_a_cross_all_reduce_and_a_host_all_gather() {
        use ccl_cuda::DataType;
        let t = crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 12);
        let [rs, ar, ag] = stages(&t, 3, 2, 1);
        // Share 1 of 3: 4 floats at 16 bytes into the output.
        assert_eq!(rs.kind, TaskKind::Coll(Collective::ReduceScatter));
        assert_eq!((rs.send, rs.recv, rs.count), (0x1000, 0x9010, 4));
        assert_eq!(ar.kind, TaskKind::Coll(Collective::AllReduce));
        assert_eq!((ar.send, ar.recv, ar.count), (0x9010, 0x9010, 4));
        assert_eq!(ag.kind, TaskKind::Coll(Collective::AllGather));
        assert_eq!((ag.send, ag.recv, ag.count), (0x9010, 0x9000, 4));
        let reds = |dtype, red| {
            let [a, b, _] = stages(&Task { dtype, red, ..t }, 3, 2, 0);
            (a.red, b.red)
        };
        let sum = Reduction::Plain(ccl_cuda::ReduceKind::Sum);
        let max = Reduction::Plain(ccl_cuda::ReduceKind::Max);
        assert_eq!(reds(DataType::Float32, max), (max, max));
        let sixth = ccl_cuda::host::reduce::from_f64(DataType::Float32, 1.0 / 6.0);
        assert_eq!(
            reds(DataType::Float32, Reduction::Avg),
            (Reduction::PreMulSum(Scalar::Immediate(sixth)), sum)
        );
        let s = Reduction::PreMulSum(Scalar::Immediate([3, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(reds(DataType::Int32, s), (s, sum));
    }
}
