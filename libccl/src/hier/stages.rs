//! One operation's stages: whether it goes hierarchically and how ([`plan`]), and its stage
//! groups on the sub-communicators, with or without a part of the hierarchy's scratch.

use ccl_collectives::Collective;

use super::eligible::{
    all_reduce_stages, alltoall_eligible, broadcast_stages, gather_plan, local_p2p,
    reduce_eligible, rooted_eligible, scatter_eligible,
};
use super::hierarchy::Hierarchy;
use crate::core::Comm;
use crate::task::{Task, TaskKind};
use ccl_collectives::hierarchy::placement::cross_rank;
use ccl_collectives::hierarchy::plan::{
    alltoall_blocks, broadcast_roots, p2p_task, reduce_stages, reduce_via_first_ranks,
    rooted_stages, scatter_stages, P2p, Sub,
};

/// Operations to run as one group.
pub(crate) type StageGroup = Vec<(Comm, Task)>;

/// How an operation that goes hierarchically is staged (decided once: the decision asks the
/// driver about its buffers).
pub(super) enum Plan {
    /// Its stage groups, which need no scratch.
    Ready(Vec<StageGroup>),
    /// Its stages are built ([`scratch_stages`]) once its part of the scratch is claimed.
    Scratch(Need),
}

/// What an operation that goes hierarchically needs of its hierarchy's scratch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Need {
    pub(super) bytes: usize,
    /// GPU memory (else host memory).
    pub(super) gpu: bool,
}

/// Whether `t` goes hierarchically on `comm`, and how.
pub(super) fn plan(h: &Hierarchy, t: &Task, comm: &Comm) -> Option<Plan> {
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
pub(super) fn scratch_stages(
    h: &Hierarchy,
    t: &Task,
    comm: &Comm,
    scratch: usize,
) -> Option<Vec<StageGroup>> {
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
