//! A gather's and a scatter's stages: on every host at the root's index (modulo its ranks),
//! and each host's blocks in one message between that rank and the root.

use crate::Collective;

use super::parts::P2p;
use crate::hierarchy::placement::ranks_by_host;
use crate::task::{Task, TaskKind};

/// Gather or scatter `t`'s stages on `rank` (every host's ranks consecutive, of any number): on its
/// host, a gather to (a scatter from) the rank at the root's index modulo the host's ranks (the
/// root on its host), whose blocks are the root's own buffer at its host's range on the root's host
/// and `scratch` on the others; and across the hosts, each other host's blocks in one message
/// between that rank and the root (peers by their rank in the communicator, with the message's
/// element count). A gather's host stage goes first, a scatter's last. Host links carry the blocks
/// of the host's ranks; the network each other host's blocks once, in one message.
pub fn rooted_stages(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hierarchy::placement::places;
    use crate::hierarchy::placement::{hosts_consecutive, hosts_contiguous};

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
}
