//! A group's hierarchical operations taken out of it: the rest runs flat, their stages after
//! it in rounds, each communicator's in its call order, on the scratch they claim.

use std::sync::Arc;

use ccl_cuda::cuda::{Context, Stream};

use super::hierarchy::Hierarchy;
use super::stages::{plan, scratch_stages, Need, Plan, StageGroup};
use crate::core::Comm;
use crate::error::Result;
use crate::task::{Task, TaskKind};

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
    let ops = by_comm(tasks, &mut rest);
    let mut held = Held::default();
    let mut seqs: Vec<Vec<StageGroup>> = Vec::with_capacity(ops.len());
    let mut hierarchies = Vec::new();
    for c in ops {
        if c.ops.iter().all(|o| matches!(o, Op::Flat(_))) {
            rest.extend(c.ops.into_iter().map(|o| (c.comm.clone(), *o.task())));
            continue;
        }
        hierarchies.push(c.h.clone());
        seqs.push(c.sequence(&mut rest, &mut held)?);
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

/// A group's operations on communicators with a hierarchy, each decided ([`plan`]), by
/// communicator in the order they first appear; the others go to `rest`.
fn by_comm(tasks: Vec<(Comm, Task)>, rest: &mut Vec<(Comm, Task)>) -> Vec<CommOps> {
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
    ops
}

impl CommOps {
    /// The communicator's stage groups, in the order [`take`] keeps, on the scratch it claims
    /// for them (into `held`); its flat operations before its first hierarchical one go to
    /// `rest`.
    fn sequence(self, rest: &mut Vec<(Comm, Task)>, held: &mut Held) -> Result<Vec<StageGroup>> {
        let CommOps { comm, h, ops } = self;
        // Collectives in call order, then flat sends and receives, then those on the host's
        // communicator (across the hosts first, as when they all ran in the rest).
        let (p2p, mut ordered): (Vec<Op>, Vec<Op>) =
            ops.into_iter().partition(|o| is_p2p(o.task()));
        let (flat_p2p, host_p2p): (Vec<Op>, Vec<Op>) =
            p2p.into_iter().partition(|o| matches!(o, Op::Flat(_)));
        ordered.extend(flat_p2p);
        ordered.extend(host_p2p);
        let at = claim(&comm, &h, &ordered, held)?;
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
        Ok(seq)
    }
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
