//! A broadcast's stages: across the hosts among the ranks at the root's index, then on every
//! host; where some host lacks that index, on the root's host first.

use crate::Collective;

use super::parts::Sub;
use crate::hierarchy::placement::cross_rank;
use crate::task::{Task, TaskKind};

/// A hierarchical broadcast's stages on `rank`, over `places`, whose smallest host holds
/// `fewest` ranks. Where every host holds a rank at the root's index: across the hosts among
/// those ranks (only where this rank holds it; the root's data lands in every such rank's
/// receive buffer), then on this rank's host from the rank holding that index (in place).
/// Where some host does not (uneven hosts): on the root's host first, then across the hosts
/// among their first ranks from the root's host's, then on the other hosts from their first
/// ranks.
pub fn broadcast_plan(
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
pub fn broadcast_roots(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hierarchy::placement::places;

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
}
