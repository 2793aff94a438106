//! An all-gather's stages: each rank's block across to one rank of every other host, then
//! every block so gathered to the other ranks of the host, straight into their places.

use super::parts::P2p;
use crate::hierarchy::placement::ranks_by_host;

/// A hierarchical all-gather's two stages on one rank, as sends and receives of blocks (so
/// every block lands straight where its rank's place in the output is, however the ranks sit
/// on the hosts).
#[derive(Debug, Default, PartialEq)]
pub struct GatherPlan {
    /// Across the hosts, peers by their rank in the communicator: this rank's block to one
    /// rank of every other host, the blocks it takes for its host into their places.
    pub cross: Vec<P2p>,
    /// On the host, peers by their index there: the blocks this rank holds to each other rank
    /// of the host (and its own into its place, out of place), theirs into their places.
    pub local: Vec<P2p>,
}

/// A hierarchical all-gather's plan over `places` for `rank`, blocks of `bytes` from `send` into `recv`. Each
/// rank's block crosses to one rank of every other host: the one at its index, modulo that
/// host's ranks (its index itself where hosts are even, so the cross stage stays among the
/// ranks of one index); each rank then sends the blocks it holds (its own, those it took) to
/// the other ranks of its host.
pub fn gather_blocks(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hierarchy::placement::places;

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
}
