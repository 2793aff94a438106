//! Hierarchical all-reduce, all-gather and broadcast for communicators that span hosts with
//! several ranks on each. An all-reduce: a reduce-scatter among the ranks of a host (cuda-ipc:
//! copy engines and kernels over NVLink), an all-reduce of each rank's share among the ranks of
//! the other hosts that hold the same share (the network path, a host's ranks each carrying 1/L
//! of the bytes), and an all-gather among the ranks of a host. An all-gather: each rank's block
//! across the hosts to the ranks holding its index, then every block so gathered to the other
//! ranks of the host, as sends and receives straight into each block's place. A broadcast:
//! across the hosts among the ranks holding the root's index on their hosts, then on every
//! host. Flat, every byte of such a communicator is staged through host memory and the proxy,
//! even between GPUs of one host.
//!
//! The two sub-communicators are made at init (`attach`) by splitting the communicator: one of
//! the ranks of each host, one of the ranks holding the same place on every host. Each
//! operation is decided on itself (its kind, count and memory, and settings every rank shares),
//! so ranks that group it differently decide alike; its three stages run after the rest of
//! its group, each a group of its own on the sub-communicators, in stream order.

use std::sync::Arc;

use ccl_collectives::Collective;

use crate::comm::{Comm, CommConfig};
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
}

/// How the ranks of `hosts` (each rank's host id, in rank order) sit on their hosts, if
/// every host has the same number of ranks, at least two, and there are at least two hosts:
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
    let per = *count.first()?;
    if order.len() < 2 || per < 2 || count.iter().any(|&c| c != per) {
        return None;
    }
    Some(place)
}

/// A rank's place in the communicator across the hosts that holds it: how many ranks before it
/// hold the same index on their hosts.
fn cross_rank(places: &[(usize, usize)], rank: usize) -> Option<usize> {
    let (_, local) = *places.get(rank)?;
    Some(places[..rank].iter().filter(|p| p.1 == local).count())
}

/// Makes `comm`'s hierarchy when `CCL_HIERARCHY` and the ranks' placement allow it. Collective:
/// every rank of `comm` calls it at the end of init (the decision is the same on all: the
/// table is, and whether every rank wants it is agreed first).
pub(crate) fn attach(comm: &Comm) -> Result<()> {
    let mode = params::CCL_HIERARCHY.get_str();
    let mode = mode.trim();
    if mode == "0" {
        return Ok(());
    }
    let forced = mode == "1";
    let hosts: Vec<u64> = {
        let g = comm.0.state.lock();
        match g.as_ref() {
            Some(st) => st.table.iter().map(|i| i.host_id).collect(),
            None => return Ok(()),
        }
    };
    let Some(places) = places(&hosts) else {
        return Ok(());
    };
    let Some(&(host, local)) = places.get(comm.rank()) else {
        return Ok(());
    };
    // Only GPU communicators gain (host memory moves through the same transports either way),
    // unless forced; a rank without a GPU would make the split one-sided, so all agree first.
    let want = forced || (comm.0.cuda_dev >= 0 && crate::gpu::available());
    if !comm.agree_all(want)? {
        return Ok(());
    }
    let config = CommConfig::blocking();
    let local_comm = comm
        .split_unchecked(host as i32, comm.rank() as i32, config.clone())?
        .ok_or_else(|| crate::error::Error::internal("no communicator of this host's ranks"))?;
    let cross = comm
        .split_unchecked(local as i32, comm.rank() as i32, config)?
        .ok_or_else(|| crate::error::Error::internal("no communicator across the hosts"))?;
    tracing::info!(
        "rank {}: hierarchy: {} ranks on this host (index {local}), {} hosts",
        comm.rank(),
        local_comm.nranks(),
        cross.nranks()
    );
    *comm.0.hier.lock() = Some(Arc::new(Hierarchy {
        local: local_comm,
        cross,
        host_memory: forced,
        places,
    }));
    Ok(())
}

/// Operations to run as one group.
pub(crate) type StageGroup = Vec<(Comm, Task)>;

/// The stages of the hierarchical operations of a group, in rounds: each round a group of its
/// own, holding the next stage of every communicator's sequence.
pub(crate) type Stages = Vec<StageGroup>;

/// Takes out of a group the all-reduces, all-gathers and broadcasts that go hierarchically and
/// returns the rest with their stages: an all-reduce a host reduce-scatter, an all-reduce
/// across the hosts and a host all-gather; an all-gather its blocks across the hosts, then
/// within the host; a broadcast across the hosts among the ranks holding the root's index on
/// their hosts, then on every host from that rank.
///
/// A communicator's operations keep their call order, each one's stages in turn, so a rank
/// that groups them and one that calls them one by one issue the same sequence on every
/// sub-communicator (batching one stage of every operation together would reorder an
/// all-gather's sends behind a later all-reduce's reduce-scatter on one rank only). Different
/// communicators of the group go side by side, round by round: on the host path a round runs
/// to completion, and another process may hold the group's communicators in another order.
pub(crate) fn take(tasks: Vec<(Comm, Task)>) -> (Vec<(Comm, Task)>, Stages) {
    let mut rest = Vec::with_capacity(tasks.len());
    // Per communicator (by identity): its sequence of stage groups.
    let mut seqs: Vec<(Comm, Vec<StageGroup>)> = Vec::new();
    for (comm, t) in tasks {
        let Some(h) = comm.0.hier.lock().clone() else {
            rest.push((comm, t));
            continue;
        };
        let Some(ops) = stages_for(&h, &t, &comm) else {
            rest.push((comm, t));
            continue;
        };
        match seqs.iter_mut().find(|(c, _)| Arc::ptr_eq(&c.0, &comm.0)) {
            Some((_, seq)) => seq.extend(ops),
            None => seqs.push((comm, ops)),
        }
    }
    let rounds = seqs.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    let mut stages: Stages = (0..rounds).map(|_| Vec::new()).collect();
    for (_, seq) in seqs {
        for (i, group) in seq.into_iter().enumerate() {
            stages[i].extend(group);
        }
    }
    (rest, stages)
}

/// One operation's stage groups on `h`'s sub-communicators, if it goes hierarchically (an
/// all-reduce's last elements, if its count does not split evenly, first, flat on `comm`
/// itself: in the operation's own sequence, so they keep its place among the others).
fn stages_for(h: &Hierarchy, t: &Task, comm: &Comm) -> Option<Vec<StageGroup>> {
    let rank = comm.rank();
    if let Some((cross, local)) = broadcast_stages(h, t, rank) {
        let mut seq = Vec::new();
        if let Some(c) = cross {
            seq.push(vec![(h.cross.clone(), c)]);
        }
        seq.push(vec![(h.local.clone(), local)]);
        return Some(seq);
    }
    if let Some(plan) = gather_plan(h, t, rank) {
        let task = |kind, send, recv| Task {
            kind,
            send,
            recv,
            red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
            ..*t
        };
        let to = |p: &P2p| match *p {
            P2p::Send { peer, from } => task(TaskKind::Send { peer }, from, 0),
            P2p::Recv { peer, into } => task(TaskKind::Recv { peer }, 0, into),
        };
        let on = |sub: &Comm, ps: &[P2p]| ps.iter().map(|p| (sub.clone(), to(p))).collect();
        let seq: Vec<Vec<(Comm, Task)>> =
            vec![on(&h.cross, &plan.cross), on(&h.local, &plan.local)];
        return Some(seq.into_iter().filter(|g| !g.is_empty()).collect());
    }
    let ([rs, ar, ag], tail) = stages_of(h, t)?;
    let mut seq: Vec<Vec<(Comm, Task)>> =
        tail.map(|t| vec![(comm.clone(), t)]).into_iter().collect();
    seq.extend([
        vec![(h.local.clone(), rs)],
        vec![(h.cross.clone(), ar)],
        vec![(h.local.clone(), ag)],
    ]);
    Some(seq)
}

/// An all-reduce's three stages, if it goes hierarchically: it has at least one element per
/// rank of a host, it is at least `CCL_HIERARCHY_MIN_BYTES`, its buffers are GPU memory (or
/// `CCL_HIERARCHY=1`), and its stream is not capturing a CUDA graph. The stages cover the
/// largest part of the count that splits evenly over a host's ranks; the last few elements
/// (fewer than a host's ranks), if any, are a flat all-reduce of their own, returned beside
/// them.
fn stages_of(h: &Hierarchy, t: &Task) -> Option<([Task; 3], Option<Task>)> {
    // Integer average: truncating per host and again across hosts is not truncating the whole
    // sum once, so it stays flat.
    let int_avg = t.red == Reduction::Avg && !t.dtype.is_float();
    if t.kind != TaskKind::Coll(Collective::AllReduce) || int_avg {
        return None;
    }
    let per = h.local.nranks();
    let hosts = h.cross.nranks();
    if t.count < per {
        return None;
    }
    eligible(h, t, true)?;
    let (head, tail) = split_count(t, per);
    Some((stages(&head, per, hosts, h.local.rank()), tail))
}

/// Whether `t` goes hierarchically at all: the settings, its memory and its stream allow it.
/// `reads_send`: whether this rank's send buffer is used (a broadcast's other ranks ignore
/// theirs, so it must not sway the decision).
fn eligible(h: &Hierarchy, t: &Task, reads_send: bool) -> Option<()> {
    let min = params::CCL_HIERARCHY_MIN_BYTES.get_i64().max(0) as usize;
    if t.fold || t.count.checked_mul(t.dtype.size())? < min {
        return None;
    }
    let on_gpu = crate::gpu::is_device_ptr(t.recv)
        && (!reads_send || t.send == t.recv || crate::gpu::is_device_ptr(t.send));
    if !(on_gpu || h.host_memory) {
        return None;
    }
    if on_gpu && crate::graph::capturing(&h.local, std::slice::from_ref(t)).unwrap_or(true) {
        return None;
    }
    Some(())
}

/// A broadcast's stages on `rank`, if it goes hierarchically: across the hosts (only where this
/// rank holds the root's index on its host; the root's data lands in every such rank's
/// receive buffer), then on this rank's host from the rank holding that index (in place).
fn broadcast_stages(h: &Hierarchy, t: &Task, rank: usize) -> Option<(Option<Task>, Task)> {
    let TaskKind::Coll(Collective::Broadcast { root }) = t.kind else {
        return None;
    };
    eligible(h, t, rank == root)?;
    let (cross_root, local_root) = broadcast_roots(&h.places, root, rank)?;
    let cross = cross_root.map(|root| Task {
        kind: TaskKind::Coll(Collective::Broadcast { root }),
        ..*t
    });
    let local = Task {
        kind: TaskKind::Coll(Collective::Broadcast { root: local_root }),
        send: t.recv,
        ..*t
    };
    Some((cross, local))
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

/// A send or receive of one block of a hierarchical all-gather, by its peer's rank in the
/// sub-communicator and the address it reads or writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum P2p {
    Send { peer: usize, from: usize },
    Recv { peer: usize, into: usize },
}

/// A hierarchical all-gather's two stages on one rank, as sends and receives of blocks (so
/// every block lands straight where its rank's place in the output is, however the ranks sit
/// on the hosts).
#[derive(Debug, Default, PartialEq)]
struct GatherPlan {
    /// Across the hosts, among the ranks holding this rank's index on their hosts: this rank's
    /// block to each of them (and to itself, out of place), theirs into their places.
    cross: Vec<P2p>,
    /// On the host: every block the cross stage brought (one per host) to each other rank of
    /// the host, and theirs into their places.
    local: Vec<P2p>,
}

/// An all-gather's plan, if it goes hierarchically ([`eligible`]).
fn gather_plan(h: &Hierarchy, t: &Task, rank: usize) -> Option<GatherPlan> {
    if t.kind != TaskKind::Coll(Collective::AllGather) {
        return None;
    }
    eligible(h, t, true)?;
    gather_blocks(&h.places, rank, t.send, t.recv, t.count * t.dtype.size())
}

/// [`gather_plan`] over `places` for `rank`, blocks of `bytes` from `send` into `recv`.
fn gather_blocks(
    places: &[(usize, usize)],
    rank: usize,
    send: usize,
    recv: usize,
    bytes: usize,
) -> Option<GatherPlan> {
    let (_, mine) = *places.get(rank)?;
    let at = |r: usize| recv + r * bytes;
    // The ranks holding index `l`, in rank order: a communicator across the hosts.
    let holding =
        |l: usize| -> Vec<usize> { (0..places.len()).filter(|&r| places[r].1 == l).collect() };
    let column = holding(mine);
    let mut plan = GatherPlan::default();
    for (k, &r) in column.iter().enumerate() {
        if r == rank && send == at(rank) {
            continue;
        }
        plan.cross.push(P2p::Send {
            peer: k,
            from: send,
        });
        plan.cross.push(P2p::Recv {
            peer: k,
            into: at(r),
        });
    }
    // The host's ranks, in rank order: the communicator of this host.
    let host = places[rank].0;
    let mates: Vec<usize> = (0..places.len()).filter(|&r| places[r].0 == host).collect();
    for (q, &mate) in mates.iter().enumerate() {
        if mate == rank {
            continue;
        }
        for &r in &column {
            plan.local.push(P2p::Send {
                peer: q,
                from: at(r),
            });
        }
        for r in holding(places[mate].1) {
            plan.local.push(P2p::Recv {
                peer: q,
                into: at(r),
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
/// every share is gathered. Reductions: the operator in both reductions; PreMulSum scales in
/// the first and sums in the second; float average multiplies by 1/nranks in the first
/// (NCCL's average of floats). Not for integer average ([`stages_of`] keeps it flat).
fn stages(t: &Task, per: usize, hosts: usize, local: usize) -> [Task; 3] {
    let share = t.count / per;
    let at = t.recv + local * share * t.dtype.size();
    let sum = Reduction::Plain(ccl_cuda::ReduceKind::Sum);
    let (first, second) = match t.red {
        Reduction::Plain(k) => (Reduction::Plain(k), Reduction::Plain(k)),
        Reduction::PreMulSum(s) => (Reduction::PreMulSum(s), sum),
        Reduction::Avg => match t.premul_scalar(per * hosts) {
            Some(inv) => (Reduction::PreMulSum(Scalar::Immediate(inv)), sum),
            None => (sum, sum),
        },
    };
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
        assert_eq!(
            plan.cross,
            [
                Send {
                    peer: 0,
                    from: send
                },
                Recv {
                    peer: 0,
                    into: 0x1020
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
        assert_eq!(
            plan.local,
            [
                Send {
                    peer: 0,
                    from: 0x1020
                },
                Send {
                    peer: 0,
                    from: 0x1030
                },
                Recv {
                    peer: 0,
                    into: 0x1000
                },
                Recv {
                    peer: 0,
                    into: 0x1010
                },
            ]
        );
        // In place (the block already in its place): no copy to itself.
        let in_place = gather_blocks(&p, 3, 0x1030, recv, 16).unwrap();
        assert_eq!(
            in_place.cross,
            [
                Send {
                    peer: 0,
                    from: 0x1030
                },
                Recv {
                    peer: 0,
                    into: 0x1020
                }
            ]
        );
    }

    /// A count that does not split evenly: the even part goes hierarchically, the last
    /// elements as an all-reduce of their own right behind it.
    #[test]
    fn an_uneven_count_leaves_its_last_elements_to_a_flat_all_reduce() {
        let t = crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 14);
        let (head, tail) = split_count(&t, 4);
        assert_eq!((head.send, head.recv, head.count), (0x1000, 0x9000, 12));
        let tail = tail.unwrap();
        assert_eq!((tail.send, tail.recv, tail.count), (0x1030, 0x9030, 2));
        assert_eq!(tail.kind, t.kind);
        let (even, none) = split_count(&Task { count: 12, ..t }, 4);
        assert_eq!((even.count, none.is_none()), (12, true));
    }

    #[test]
    fn hosts_of_equal_size_make_a_hierarchy_others_do_not() {
        // Two hosts of two, interleaved: host index by first appearance, place by rank order.
        let p = places(&[7, 9, 9, 7]).unwrap();
        assert_eq!(p, [(0, 0), (1, 0), (1, 1), (0, 1)]);
        // The communicator of index 1 holds ranks 2 and 3 in rank order: host 1 first.
        assert_eq!(cross_rank(&p, 2), Some(0));
        assert_eq!(cross_rank(&p, 3), Some(1));
        assert_eq!(cross_rank(&p, 1), Some(1));
        // One host; one rank a host; hosts of unequal size: none.
        assert_eq!(places(&[1, 1, 1, 1]), None);
        assert_eq!(places(&[1, 2, 3]), None);
        assert_eq!(places(&[1, 1, 2, 2, 2]), None);
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
