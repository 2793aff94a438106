//! Ring-order tests: schedules built over a given ring order (`schedule_ordered`) are exact
//! under the simulator for random permutations, equal the identity schedules relabelled, equal
//! `schedule_with` for the identity order, and ring schedules only talk to ring neighbours.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use ccl_collectives::reference::{check_ordered, mix, Case, ReduceOp, SimError, SimOptions};
use ccl_collectives::{
    schedule_ordered, schedule_with, supports, Algorithm, BufId, Collective, Error, Op, Pipeline,
    Schedule, Slice,
};
use proptest::prelude::*;

const ALGOS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Direct];

fn collective(kind: usize, root: usize) -> Collective {
    match kind % 8 {
        0 => Collective::AllReduce,
        1 => Collective::Broadcast { root },
        2 => Collective::Reduce { root },
        3 => Collective::AllGather,
        4 => Collective::ReduceScatter,
        5 => Collective::AlltoAll,
        6 => Collective::Gather { root },
        _ => Collective::Scatter { root },
    }
}

/// Every collective once per root (unrooted ones once).
fn collectives(n: usize) -> Vec<Collective> {
    let mut v = Vec::new();
    for kind in 0..8 {
        for root in 0..n {
            let c = collective(kind, root);
            let rooted = matches!(
                c,
                Collective::Broadcast { .. }
                    | Collective::Reduce { .. }
                    | Collective::Gather { .. }
                    | Collective::Scatter { .. }
            );
            if rooted || root == 0 {
                v.push(c);
            }
        }
    }
    v
}

/// A deterministic pseudo-random permutation of `0..n`.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (mix(seed ^ (i as u64).wrapping_mul(0x1234_5678_9abc)) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// Ranks grouped by host (stable: ranks of one host keep their relative order), hosts in order
/// of first appearance. `hosts[r]` is rank r's host.
fn grouped(hosts: &[usize]) -> Vec<usize> {
    let mut firsts: Vec<usize> = Vec::new();
    for &h in hosts {
        if !firsts.contains(&h) {
            firsts.push(h);
        }
    }
    firsts
        .iter()
        .flat_map(|&h| (0..hosts.len()).filter(move |&r| hosts[r] == h))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn run_all(
    coll: Collective,
    order: &[usize],
    count: usize,
    pipeline: Pipeline,
    in_place: bool,
    op: ReduceOp,
    seed: u64,
) {
    let mut tried = 0;
    for algo in ALGOS {
        if !supports(coll, algo) {
            continue;
        }
        tried += 1;
        let case = Case {
            coll,
            algo,
            nranks: order.len(),
            count,
            pipeline,
            opts: SimOptions { in_place, op },
            seed,
        };
        if let Err(e) = check_ordered(&case, order) {
            panic!("{case:?} order {order:?}: {e}");
        }
    }
    assert!(tried > 0, "no algorithm for {coll:?}");
}

fn permutation() -> impl Strategy<Value = Vec<usize>> {
    (1usize..=12).prop_flat_map(|n| Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Random ring orders, small pieces so that pipelining really happens.
    #[test]
    fn ordered_matches_reference(
        order in permutation(),
        count in 0usize..=300,
        kind in 0usize..8,
        root_seed in any::<usize>(),
        in_place in any::<bool>(),
        max in any::<bool>(),
        min_piece in 1usize..=64,
        max_pieces in 1usize..=9,
        seed in any::<u64>(),
    ) {
        let coll = collective(kind, root_seed % order.len());
        let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
        run_all(coll, &order, count, Pipeline { min_piece, max_pieces }, in_place, op, seed);
    }

    /// Random ring orders with the default pipelining.
    #[test]
    fn ordered_default_pipeline_matches_reference(
        order in permutation(),
        count in 0usize..=300,
        kind in 0usize..8,
        root_seed in any::<usize>(),
        in_place in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let coll = collective(kind, root_seed % order.len());
        run_all(coll, &order, count, Pipeline::DEFAULT, in_place, ReduceOp::Sum, seed);
    }

    /// Ring schedules over host-grouped orders only use ring neighbours (random host maps).
    #[test]
    fn grouped_rings_use_only_neighbours(
        hosts in prop::collection::vec(0usize..4, 1..=12),
        count in 1usize..=100,
        root_seed in any::<usize>(),
    ) {
        check_neighbours(&hosts, count, root_seed % hosts.len());
    }
}

/// Every collective x algorithm x root, in and out of place, for several fixed orders of every
/// size 1..=12 (reversed, rotated, interleaved, shuffled).
#[test]
fn fixed_orders_exhaustive() {
    let pipe = Pipeline {
        min_piece: 2,
        max_pieces: 5,
    };
    for n in 1..=12usize {
        let mut orders = vec![
            (0..n).rev().collect::<Vec<_>>(),
            (0..n).map(|p| (p + n / 2) % n).collect(),
            (0..n)
                .step_by(2)
                .chain((1..n).step_by(2))
                .collect::<Vec<_>>(),
        ];
        for seed in 0..3 {
            orders.push(shuffled(n, seed));
        }
        for order in &orders {
            for coll in collectives(n) {
                for in_place in [false, true] {
                    for count in [1, 7, 2 * n + 3] {
                        run_all(coll, order, count, pipe, in_place, ReduceOp::Sum, n as u64);
                    }
                }
            }
        }
    }
}

/// Larger rank counts than the property tests cover, shuffled and host-grouped orders.
#[test]
fn ordered_many_ranks() {
    let pipe = Pipeline {
        min_piece: 3,
        max_pieces: 4,
    };
    for n in [13usize, 16, 17, 32, 33, 64] {
        let hosts: Vec<usize> = (0..n).map(|r| (mix(r as u64) % 4) as usize).collect();
        for order in [shuffled(n, 5), grouped(&hosts)] {
            for kind in 0..8 {
                for in_place in [false, true] {
                    let coll = collective(kind, order[n / 3]);
                    run_all(coll, &order, 2 * n + 5, pipe, in_place, ReduceOp::Sum, 11);
                }
            }
        }
    }
}

/// Big counts with the default pipeline over a shuffled order.
#[test]
fn ordered_big_counts() {
    for (n, count) in [(3usize, 65_536 + 17), (6, 100_003)] {
        let order = shuffled(n, 9);
        for kind in 0..8 {
            for in_place in [false, true] {
                let coll = collective(kind, n - 1);
                run_all(
                    coll,
                    &order,
                    count,
                    Pipeline::DEFAULT,
                    in_place,
                    ReduceOp::Sum,
                    7,
                );
            }
        }
    }
}

/// `schedule_with` equals `schedule_ordered` with the identity order, errors included.
#[test]
fn identity_order_equals_schedule_with() {
    let pipes = [
        Pipeline::DEFAULT,
        Pipeline {
            min_piece: 1,
            max_pieces: 1,
        },
        Pipeline {
            min_piece: 3,
            max_pieces: 4,
        },
        Pipeline {
            min_piece: 1,
            max_pieces: 9,
        },
    ];
    let mut compared = 0usize;
    for n in (1..=12usize).chain([16, 17, 33]) {
        let id: Vec<usize> = (0..n).collect();
        for coll in collectives(n) {
            for algo in ALGOS {
                for count in [0usize, 1, 2, 5, 37, 300, 9001] {
                    for pipe in pipes {
                        for rank in 0..=n {
                            let a = schedule_with(coll, algo, rank, n, count, pipe);
                            let b = schedule_ordered(coll, algo, rank, &id, count, pipe);
                            assert_eq!(a, b, "{coll:?} {algo:?} n={n} rank={rank} count={count}");
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 100_000, "{compared}");
}

/// Maps a slice of an identity-order schedule to the one the ordered schedule must hold:
/// blocks indexed by rank (AllGather's `Recv`, ReduceScatter's `Send`) move with their rank.
fn relabel_slice(s: Slice, coll: Collective, order: &[usize], count: usize) -> Slice {
    let moved = match coll {
        Collective::AllGather => s.buf == BufId::Recv,
        Collective::ReduceScatter => s.buf == BufId::Send,
        _ => false,
    };
    if !moved {
        return s;
    }
    assert_eq!(s.offset % count, 0, "{s:?} is not block aligned");
    assert_eq!(s.count, count, "{s:?} is not one block");
    Slice {
        offset: order[s.offset / count] * count,
        ..s
    }
}

fn relabel(sched: &Schedule, coll: Collective, order: &[usize], count: usize) -> Schedule {
    let sl = |s: &Slice| relabel_slice(*s, coll, order, count);
    let mut out = sched.clone();
    for step in &mut out.steps {
        for op in &mut step.ops {
            *op = match op {
                Op::Send { peer, src } => Op::Send {
                    peer: order[*peer],
                    src: sl(src),
                },
                Op::Recv { peer, dst } => Op::Recv {
                    peer: order[*peer],
                    dst: sl(dst),
                },
                Op::RecvReduce { peer, local, dst } => Op::RecvReduce {
                    peer: order[*peer],
                    local: sl(local),
                    dst: sl(dst),
                },
                Op::RecvFold { peer, local, dst } => Op::RecvFold {
                    peer: order[*peer],
                    local: sl(local),
                    dst: sl(dst),
                },
                Op::Copy { src, dst } => Op::Copy {
                    src: sl(src),
                    dst: sl(dst),
                },
                Op::Reduce { src, local, dst } => Op::Reduce {
                    src: sl(src),
                    local: sl(local),
                    dst: sl(dst),
                },
            };
        }
    }
    out
}

/// Ring and tree schedules over an order are exactly the identity schedules with position p
/// played by rank `order[p]` (and the root's position kept), data placement fixed up: the
/// order changes who talks to whom and nothing else.
#[test]
fn ordered_is_relabelled_identity() {
    for n in 2..=12usize {
        for seed in 0..4 {
            let order = shuffled(n, seed + 100);
            for algo in [Algorithm::Ring, Algorithm::Tree] {
                for coll_pos in collectives(n) {
                    if !supports(coll_pos, algo) {
                        continue;
                    }
                    // The same collective with the root named by rank instead of position.
                    let coll = match coll_pos {
                        Collective::Broadcast { root } => {
                            Collective::Broadcast { root: order[root] }
                        }
                        Collective::Reduce { root } => Collective::Reduce { root: order[root] },
                        c => c,
                    };
                    for count in [1usize, 5, 3 * n + 1] {
                        let pipe = Pipeline {
                            min_piece: 2,
                            max_pieces: 3,
                        };
                        for p in 0..n {
                            let id = schedule_with(coll_pos, algo, p, n, count, pipe).unwrap();
                            let got = schedule_ordered(coll, algo, order[p], &order, count, pipe)
                                .unwrap();
                            assert_eq!(
                                got,
                                relabel(&id, coll, &order, count),
                                "{coll:?} {algo:?} order {order:?} position {p}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Every ring schedule over the host-grouped order of `hosts` sends only to the next rank in
/// the ring and receives only from the previous one; cross-host messages use only the ring
/// edges that cross hosts, and the ring AllReduce / AllGather / ReduceScatter use all of them.
fn check_neighbours(hosts: &[usize], count: usize, root: usize) {
    let n = hosts.len();
    let order = grouped(hosts);
    let pos_of = |r: usize| order.iter().position(|&x| x == r).unwrap();
    let next = |r: usize| order[(pos_of(r) + 1) % n];
    let prev = |r: usize| order[(pos_of(r) + n - 1) % n];
    // Directed ring edges that cross hosts.
    let crossing: BTreeSet<(usize, usize)> = (0..n)
        .map(|p| (order[p], order[(p + 1) % n]))
        .filter(|&(a, b)| hosts[a] != hosts[b])
        .collect();
    let nhosts = hosts.iter().collect::<BTreeSet<_>>().len();
    assert_eq!(crossing.len(), if nhosts > 1 { nhosts } else { 0 });
    let colls = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast { root },
        Collective::Reduce { root },
    ];
    for coll in colls {
        for pipe in [
            Pipeline::DEFAULT,
            Pipeline {
                min_piece: 1,
                max_pieces: 4,
            },
        ] {
            let mut used = BTreeSet::new();
            for rank in 0..n {
                let s = schedule_ordered(coll, Algorithm::Ring, rank, &order, count, pipe).unwrap();
                for op in s.steps.iter().flat_map(|st| &st.ops) {
                    match *op {
                        Op::Send { peer, .. } => {
                            assert_eq!(peer, next(rank), "{coll:?} rank {rank} order {order:?}");
                            used.insert((rank, peer));
                        }
                        Op::Recv { peer, .. }
                        | Op::RecvReduce { peer, .. }
                        | Op::RecvFold { peer, .. } => {
                            assert_eq!(peer, prev(rank), "{coll:?} rank {rank} order {order:?}");
                        }
                        Op::Copy { .. } | Op::Reduce { .. } => {}
                    }
                }
            }
            let cross: BTreeSet<_> = used
                .iter()
                .copied()
                .filter(|&(a, b)| hosts[a] != hosts[b])
                .collect();
            assert!(
                cross.is_subset(&crossing),
                "{coll:?}: {cross:?} vs {crossing:?}"
            );
            match coll {
                Collective::Broadcast { .. } | Collective::Reduce { .. } => {
                    // An open chain leaves out exactly one ring edge.
                    assert!(cross.len() + 1 >= crossing.len(), "{coll:?}: {cross:?}");
                }
                _ => assert_eq!(cross, crossing, "{coll:?}"),
            }
        }
    }
}

#[test]
fn two_hosts_use_exactly_two_crossing_edges() {
    let hosts = [0, 0, 1, 1, 0, 1];
    assert_eq!(grouped(&hosts), vec![0, 1, 4, 2, 3, 5]);
    for root in 0..hosts.len() {
        for count in [1, 6, 1000] {
            check_neighbours(&hosts, count, root);
        }
    }
    // The concrete edges: 4 -> 2 and 5 -> 0 are the only cross-host messages of AllReduce.
    let order = [0, 1, 4, 2, 3, 5];
    let mut cross = BTreeSet::new();
    for rank in 0..6 {
        let s = schedule_ordered(
            Collective::AllReduce,
            Algorithm::Ring,
            rank,
            &order,
            600,
            Pipeline::DEFAULT,
        )
        .unwrap();
        for op in s.steps.iter().flat_map(|st| &st.ops) {
            if let Op::Send { peer, .. } = *op {
                if hosts[rank] != hosts[peer] {
                    cross.insert((rank, peer));
                }
            }
        }
    }
    assert_eq!(cross, BTreeSet::from([(4, 2), (5, 0)]));
}

/// With hosts grouped, the tree AllReduce crosses hosts on fewer distinct links than over the
/// identity order of an interleaved placement (trees follow ring positions).
#[test]
fn grouped_trees_cross_less() {
    let hosts: Vec<usize> = (0..16).map(|r| r % 2).collect();
    let cross_links = |order: &[usize]| {
        let mut links = BTreeSet::new();
        for rank in 0..16 {
            let s = schedule_ordered(
                Collective::AllReduce,
                Algorithm::Tree,
                rank,
                order,
                64,
                Pipeline::DEFAULT,
            )
            .unwrap();
            for op in s.steps.iter().flat_map(|st| &st.ops) {
                if let Op::Send { peer, .. } = *op {
                    if hosts[rank] != hosts[peer] {
                        links.insert((rank.min(peer), rank.max(peer)));
                    }
                }
            }
        }
        links.len()
    };
    let id: Vec<usize> = (0..16).collect();
    let (g, i) = (cross_links(&grouped(&hosts)), cross_links(&id));
    assert!(g < i, "grouped {g} identity {i}");
}

#[test]
fn order_errors() {
    let ar = Collective::AllReduce;
    let p = Pipeline::DEFAULT;
    let bad = |order: &[usize]| schedule_ordered(ar, Algorithm::Ring, 0, order, 4, p);
    assert_eq!(
        bad(&[0, 1, 1]),
        Err(Error::BadOrder {
            nranks: 3,
            index: 2,
            value: 1
        })
    );
    assert_eq!(
        bad(&[0, 3, 1]),
        Err(Error::BadOrder {
            nranks: 3,
            index: 1,
            value: 3
        })
    );
    assert_eq!(
        bad(&[usize::MAX]),
        Err(Error::BadOrder {
            nranks: 1,
            index: 0,
            value: usize::MAX
        })
    );
    let msg = bad(&[2, 2, 0]).unwrap_err().to_string();
    assert!(
        msg.contains("permutation of 0..3") && msg.contains("entry 1 is 2"),
        "{msg}"
    );
    // Bad orders are reported for every algorithm, even the order-independent ones.
    assert!(matches!(
        schedule_ordered(ar, Algorithm::Direct, 0, &[1, 1], 4, p),
        Err(Error::BadOrder { .. })
    ));
    assert_eq!(
        schedule_ordered(ar, Algorithm::Ring, 3, &[2, 0, 1], 4, p),
        Err(Error::BadRank { rank: 3, nranks: 3 })
    );
    assert_eq!(
        schedule_ordered(ar, Algorithm::Ring, 0, &[], 4, p),
        Err(Error::BadRank { rank: 0, nranks: 0 })
    );
    assert_eq!(
        schedule_ordered(
            Collective::Broadcast { root: 3 },
            Algorithm::Tree,
            0,
            &[2, 0, 1],
            4,
            p
        ),
        Err(Error::BadRoot { root: 3, nranks: 3 })
    );
    assert_eq!(
        schedule_ordered(Collective::AlltoAll, Algorithm::Ring, 0, &[1, 0], 4, p),
        Err(Error::Unsupported {
            coll: Collective::AlltoAll,
            algo: Algorithm::Ring
        })
    );
    // The simulator refuses an order of the wrong length.
    let case = Case {
        coll: ar,
        algo: Algorithm::Ring,
        nranks: 3,
        count: 4,
        pipeline: p,
        opts: SimOptions {
            in_place: false,
            op: ReduceOp::Sum,
        },
        seed: 0,
    };
    assert!(matches!(
        check_ordered(&case, &[0, 1]),
        Err(SimError::RankCount {
            expected: 3,
            got: 2
        })
    ));
    assert!(matches!(
        check_ordered(&case, &[0, 0, 1]),
        Err(SimError::Schedule(Error::BadOrder { .. }))
    ));
}

/// Direct algorithms ignore the order.
#[test]
fn direct_ignores_order() {
    for n in 2..=9usize {
        let order = shuffled(n, 3);
        for coll in collectives(n) {
            for rank in 0..n {
                let p = Pipeline::DEFAULT;
                assert_eq!(
                    schedule_ordered(coll, Algorithm::Direct, rank, &order, 13, p),
                    schedule_with(coll, Algorithm::Direct, rank, n, 13, p)
                );
            }
        }
    }
}
