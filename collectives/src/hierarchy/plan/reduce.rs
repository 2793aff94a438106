//! A reduce-scatter's and a reduce's stages: partial reductions on every host, then across
//! the hosts.

use crate::Collective;

use super::broadcast::broadcast_roots;
use super::parts::{p2p_task, split_reduction, P2p, Sub};
use crate::hierarchy::placement::cross_rank;
use crate::task::{Task, TaskKind};

/// Reduce-scatter `t`'s stages on `rank` (its host's ranks consecutive):
/// on its host, one reduce-scatter of each host's blocks of the input (a range of the host's
/// ranks' blocks, in order), this rank's share of each landing in `scratch` at the place its
/// host takes among the hosts; then a reduce-scatter of those partial sums across the hosts,
/// whose share for this rank is its own block's. Host links carry every byte once per host;
/// the network only each block's partial sums.
pub fn scatter_stages(
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
pub fn reduce_via_first_ranks(places: &[(usize, usize)], fewest: usize, root: usize) -> bool {
    places.get(root).is_some_and(|p| p.1 >= fewest)
}

/// Reduce `t`'s stages on `rank` (hosts of `fewest` ranks at least). Where every host holds a
/// rank at the root's index: a reduce on its host to the rank holding that index (into the
/// root's receive buffer on the root's host, into `scratch` on the others), then, among the
/// ranks holding that index, a reduce across the hosts to the root (in place there). Where some
/// host does not: a reduce on every host to its first rank (into `scratch`), a reduce among the
/// first ranks to the root's host's (in place), which sends the sum to the root on their host.
pub fn reduce_stages(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hierarchy::placement::hosts_consecutive;
    use crate::hierarchy::placement::places;
    use crate::task::{Reduction, Scalar};

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
        let sixth = crate::dtype::from_f64(crate::dtype::DataType::Float32, 1.0 / 6.0);
        assert_eq!(local[0].red, Reduction::PreMulSum(Scalar::Immediate(sixth)));
        assert_eq!((cross.send, cross.recv, cross.count), (0x5000, 0x9000, 4));
        assert_eq!(cross.red, Reduction::Plain(crate::dtype::ReduceKind::Sum));
        // Hosts interleaved: a host's blocks are no one range, so it stays flat.
        assert!(!hosts_consecutive(&places(&[7, 9, 9, 7]).unwrap()));
        assert!(!hosts_consecutive(&places(&[7, 9, 7, 9]).unwrap()));
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
}
