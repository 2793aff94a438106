//! Targeted tests: hand-checked step lists, step counts, chunk boundaries, tree shapes,
//! the cost model and errors (the simulator's own error detection: `sim_errors.rs`).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use ccl_collectives::reference::{check, expected, simulate, Case, ReduceOp, SimError, SimOptions};
use ccl_collectives::{
    btree_children, btree_parent, default_algorithm, estimate_us, schedule, schedule_with, split,
    supports, Algorithm, BufId, Collective, Error, Op, Pipeline, Schedule, Step,
};

mod common;
use common::{rcv, s, snd, steps};

fn run(
    coll: Collective,
    algo: Algorithm,
    n: usize,
    count: usize,
    pipe: Pipeline,
) -> ccl_collectives::reference::SimReport {
    let case = Case {
        coll,
        algo,
        nranks: n,
        count,
        pipeline: pipe,
        opts: SimOptions {
            in_place: false,
            op: ReduceOp::Sum,
        },
        seed: 1,
    };
    check(&case).unwrap_or_else(|e| panic!("{case:?}: {e}"))
}
const P1: Pipeline = Pipeline {
    min_piece: 1,
    max_pieces: 1,
};

#[test]
fn ring_allreduce_two_ranks_by_hand() {
    let r0 = schedule(Collective::AllReduce, Algorithm::Ring, 0, 2, 4).unwrap();
    assert_eq!(r0.scratch, 0);
    assert_eq!(
        r0.steps,
        steps(vec![
            vec![
                Op::Send {
                    peer: 1,
                    src: snd(0, 2)
                },
                Op::RecvReduce {
                    peer: 1,
                    local: snd(2, 2),
                    dst: rcv(2, 2)
                },
            ],
            vec![
                Op::Send {
                    peer: 1,
                    src: rcv(2, 2)
                },
                Op::Recv {
                    peer: 1,
                    dst: rcv(0, 2)
                }
            ],
        ])
    );
    let r1 = schedule(Collective::AllReduce, Algorithm::Ring, 1, 2, 4).unwrap();
    assert_eq!(
        r1.steps,
        steps(vec![
            vec![
                Op::Send {
                    peer: 0,
                    src: snd(2, 2)
                },
                Op::RecvReduce {
                    peer: 0,
                    local: snd(0, 2),
                    dst: rcv(0, 2)
                },
            ],
            vec![
                Op::Send {
                    peer: 0,
                    src: rcv(0, 2)
                },
                Op::Recv {
                    peer: 0,
                    dst: rcv(2, 2)
                }
            ],
        ])
    );
}

#[test]
fn ring_allreduce_three_ranks_by_hand() {
    let r0 = schedule(Collective::AllReduce, Algorithm::Ring, 0, 3, 3).unwrap();
    assert_eq!(
        r0.steps,
        steps(vec![
            vec![
                Op::Send {
                    peer: 1,
                    src: snd(0, 1)
                },
                Op::RecvReduce {
                    peer: 2,
                    local: snd(2, 1),
                    dst: rcv(2, 1)
                },
            ],
            vec![
                Op::Send {
                    peer: 1,
                    src: rcv(2, 1)
                },
                Op::RecvReduce {
                    peer: 2,
                    local: snd(1, 1),
                    dst: rcv(1, 1)
                },
            ],
            vec![
                Op::Send {
                    peer: 1,
                    src: rcv(1, 1)
                },
                Op::Recv {
                    peer: 2,
                    dst: rcv(0, 1)
                }
            ],
            vec![
                Op::Send {
                    peer: 1,
                    src: rcv(0, 1)
                },
                Op::Recv {
                    peer: 2,
                    dst: rcv(2, 1)
                }
            ],
        ])
    );
}

#[test]
fn ring_broadcast_three_ranks_by_hand() {
    let pipe = Pipeline {
        min_piece: 1,
        max_pieces: 2,
    };
    let coll = Collective::Broadcast { root: 1 };
    let [r0, r1, r2] =
        [0, 1, 2].map(|r| schedule_with(coll, Algorithm::Ring, r, 3, 2, pipe).unwrap());
    assert_eq!(
        r1.steps,
        steps(vec![
            vec![
                Op::Copy {
                    src: snd(0, 2),
                    dst: rcv(0, 2)
                },
                Op::Send {
                    peer: 2,
                    src: snd(0, 1)
                }
            ],
            vec![Op::Send {
                peer: 2,
                src: snd(1, 1)
            }],
        ])
    );
    assert_eq!(
        r2.steps,
        steps(vec![
            vec![Op::Recv {
                peer: 1,
                dst: rcv(0, 1)
            }],
            vec![
                Op::Send {
                    peer: 0,
                    src: rcv(0, 1)
                },
                Op::Recv {
                    peer: 1,
                    dst: rcv(1, 1)
                }
            ],
            vec![Op::Send {
                peer: 0,
                src: rcv(1, 1)
            }],
        ])
    );
    assert_eq!(
        r0.steps,
        steps(vec![
            vec![Op::Recv {
                peer: 2,
                dst: rcv(0, 1)
            }],
            vec![Op::Recv {
                peer: 2,
                dst: rcv(1, 1)
            }]
        ])
    );
}

#[test]
fn ring_reduce_scatter_two_ranks_by_hand() {
    let r0 = schedule(Collective::ReduceScatter, Algorithm::Ring, 0, 2, 3).unwrap();
    assert_eq!(r0.scratch, 0);
    assert_eq!(
        r0.steps,
        steps(vec![vec![
            Op::Send {
                peer: 1,
                src: snd(3, 3)
            },
            Op::RecvReduce {
                peer: 1,
                local: snd(0, 3),
                dst: rcv(0, 3)
            },
        ]])
    );
}

#[test]
fn split_is_exact_and_uneven() {
    for count in 0..40 {
        for parts in 1..15 {
            let mut next = 0;
            for i in 0..parts {
                let (o, l) = split(count, parts, i);
                assert_eq!(o, next);
                assert!(l == count / parts || l == count / parts + 1);
                next += l;
            }
            assert_eq!(next, count);
        }
    }
    // count < parts: leading parts get one element, the rest are empty.
    assert_eq!(split(2, 5, 0), (0, 1));
    assert_eq!(split(2, 5, 1), (1, 1));
    assert_eq!(split(2, 5, 2), (2, 0));
    assert_eq!(split(2, 5, 4), (2, 0));
}

#[test]
fn count_below_nranks_drops_empty_chunks() {
    // 7 ranks, 3 elements: chunks 3..7 are empty, so their messages are never emitted.
    for r in 0..7 {
        let sch = schedule(Collective::AllReduce, Algorithm::Ring, r, 7, 3).unwrap();
        for st in &sch.steps {
            assert!(!st.ops.is_empty());
            for op in &st.ops {
                let n = match op {
                    Op::Send { src, .. } => src.count,
                    Op::Recv { dst, .. }
                    | Op::RecvReduce { dst, .. }
                    | Op::RecvFold { dst, .. }
                    | Op::Copy { dst, .. }
                    | Op::Reduce { dst, .. } => dst.count,
                };
                assert_eq!(n, 1);
            }
        }
    }
    for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Direct] {
        run(Collective::AllReduce, algo, 7, 3, P1);
        run(
            Collective::AllReduce,
            algo,
            7,
            1,
            Pipeline {
                min_piece: 1,
                max_pieces: 4,
            },
        );
    }
}

#[test]
fn ring_step_counts() {
    for n in 2..=12 {
        for count in [n, 3 * n + 1, 100] {
            for r in 0..n {
                let ar = schedule(Collective::AllReduce, Algorithm::Ring, r, n, count).unwrap();
                assert_eq!(ar.steps.len(), 2 * (n - 1), "n={n} count={count}");
                let ag = schedule(Collective::AllGather, Algorithm::Ring, r, n, count).unwrap();
                assert_eq!(ag.steps.len(), n - 1);
                let rs = schedule(Collective::ReduceScatter, Algorithm::Ring, r, n, count).unwrap();
                assert_eq!(rs.steps.len(), n - 1);
                assert_eq!(rs.scratch, (n - 2).min(2) * count);
            }
            assert_eq!(
                run(Collective::AllReduce, Algorithm::Ring, n, count, P1).rounds,
                2 * (n - 1)
            );
            // Every rank sends 2(n-1)/n of the data (exact when n divides count).
            if count % n == 0 {
                let rep = run(Collective::AllReduce, Algorithm::Ring, n, count, P1);
                assert!(rep.sent.iter().all(|&x| x == 2 * (n - 1) * count / n));
            }
        }
    }
}

#[test]
fn chain_pipelines() {
    for n in 2..=9 {
        for p in 1..=8 {
            let pipe = Pipeline {
                min_piece: 1,
                max_pieces: p,
            };
            let count = 10 * p + 3;
            let root = n / 2;
            let b = run(
                Collective::Broadcast { root },
                Algorithm::Ring,
                n,
                count,
                pipe,
            );
            assert_eq!(b.rounds, p + n - 2, "broadcast n={n} p={p}");
            let r = run(Collective::Reduce { root }, Algorithm::Ring, n, count, pipe);
            assert_eq!(r.rounds, p + n - 2, "reduce n={n} p={p}");
            // Chain nodes keep at most two pieces of partial sums.
            for rank in 0..n {
                let sch = schedule_with(
                    Collective::Reduce { root },
                    Algorithm::Ring,
                    rank,
                    n,
                    count,
                    pipe,
                )
                .unwrap();
                assert!(sch.scratch <= 2 * count.div_ceil(p));
            }
        }
    }
}

fn height(n: usize) -> usize {
    (0..n)
        .map(|mut i| {
            let mut d = 0;
            while let Some(p) = btree_parent(n, i) {
                i = p;
                d += 1;
            }
            d
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn bit_tree_shape() {
    for m in 1..=300usize {
        assert_eq!(btree_parent(m, 0), None);
        for i in 0..m {
            for c in btree_children(m, i).into_iter().flatten() {
                assert!(c < m);
                assert_eq!(btree_parent(m, c), Some(i), "m={m} i={i} c={c}");
            }
            if let Some(p) = btree_parent(m, i) {
                assert!(btree_children(m, p).contains(&Some(i)), "m={m} i={i} p={p}");
            }
            if i % 2 == 1 {
                assert_eq!(
                    btree_children(m, i),
                    [None, None],
                    "odd positions are leaves"
                );
            }
        }
        for i in 1..m {
            let mut j = i;
            let mut hops = 0;
            while let Some(p) = btree_parent(m, j) {
                j = p;
                hops += 1;
                assert!(hops <= m);
            }
            assert_eq!(j, 0);
        }
        let h = if m < 2 {
            0
        } else {
            1 + (m - 1).ilog2() as usize
        };
        assert_eq!(height(m), h, "m={m}");
    }
}

#[test]
fn double_tree_odd_shift() {
    // Odd n: tree 1 is shifted by one; only rank 0 is interior in both trees.
    for n in (3..=63).step_by(2) {
        for r in 1..n {
            let interior_a = btree_children(n, r) != [None, None];
            let interior_b = btree_children(n, (r + n - 1) % n) != [None, None];
            assert!(!(interior_a && interior_b), "n={n} r={r}");
        }
    }
}

#[test]
fn double_tree_interior_in_one_tree() {
    for n in (2..=64).step_by(2) {
        for r in 0..n {
            let interior_a = btree_children(n, r) != [None, None];
            let interior_b = btree_children(n, n - 1 - r) != [None, None];
            assert!(!(interior_a && interior_b), "n={n} r={r}");
        }
    }
}

#[test]
fn tree_latency_is_logarithmic() {
    for n in 2..=64 {
        let h = height(n);
        for p in [1, 4] {
            let pipe = Pipeline {
                min_piece: 1,
                max_pieces: p,
            };
            let count = 2 * p * 8;
            let ar = run(Collective::AllReduce, Algorithm::Tree, n, count, pipe);
            assert!(
                ar.rounds <= 3 * h + p - 2,
                "allreduce n={n} p={p} rounds={} h={h}",
                ar.rounds
            );
            let b = run(
                Collective::Broadcast { root: n - 1 },
                Algorithm::Tree,
                n,
                count,
                pipe,
            );
            assert_eq!(b.rounds, h + p - 1, "broadcast n={n} p={p}");
            let r = run(
                Collective::Reduce { root: 0 },
                Algorithm::Tree,
                n,
                count,
                pipe,
            );
            assert!(
                r.rounds < 2 * h + p,
                "reduce n={n} p={p} rounds={}",
                r.rounds
            );
            for rank in 0..n {
                let sch =
                    schedule_with(Collective::AllReduce, Algorithm::Tree, rank, n, count, pipe)
                        .unwrap();
                assert!(sch.steps.len() <= 3 * h + p - 2);
            }
        }
    }
}

#[test]
fn direct_step_counts() {
    for n in 2..=8 {
        let c = 5;
        for r in 0..n {
            let st = |coll| {
                schedule(coll, Algorithm::Direct, r, n, c)
                    .unwrap()
                    .steps
                    .len()
            };
            assert_eq!(st(Collective::AlltoAll), 2);
            assert_eq!(st(Collective::Gather { root: 0 }), 1);
            assert_eq!(st(Collective::Scatter { root: n - 1 }), 1);
            assert_eq!(st(Collective::AllGather), 1);
            assert_eq!(st(Collective::Broadcast { root: 1 }), 1);
            assert_eq!(st(Collective::ReduceScatter), n - 1);
        }
        assert_eq!(
            run(Collective::AlltoAll, Algorithm::Direct, n, c, P1).rounds,
            1
        );
    }
}

#[test]
fn degenerate_sizes() {
    for coll in [
        Collective::AllReduce,
        Collective::Broadcast { root: 0 },
        Collective::AllGather,
        Collective::AlltoAll,
        Collective::Scatter { root: 0 },
    ] {
        for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Direct] {
            if !supports(coll, algo) {
                continue;
            }
            let one = schedule(coll, algo, 0, 1, 9).unwrap();
            assert_eq!(
                one.steps,
                steps(vec![vec![Op::Copy {
                    src: snd(0, 9),
                    dst: rcv(0, 9)
                }]])
            );
            assert_eq!(one.scratch, 0);
            for n in 1..5 {
                for r in 0..n {
                    assert_eq!(schedule(coll, algo, r, n, 0).unwrap(), Schedule::default());
                }
            }
        }
    }
}

#[test]
fn errors() {
    let ar = Collective::AllReduce;
    assert_eq!(
        schedule(ar, Algorithm::Ring, 4, 4, 1),
        Err(Error::BadRank { rank: 4, nranks: 4 })
    );
    assert_eq!(
        schedule(ar, Algorithm::Ring, 0, 0, 1),
        Err(Error::BadRank { rank: 0, nranks: 0 })
    );
    let b = Collective::Broadcast { root: 3 };
    assert_eq!(
        schedule(b, Algorithm::Tree, 0, 3, 1),
        Err(Error::BadRoot { root: 3, nranks: 3 })
    );
    let a2a = Collective::AlltoAll;
    assert_eq!(
        schedule(a2a, Algorithm::Ring, 0, 3, 1),
        Err(Error::Unsupported {
            coll: a2a,
            algo: Algorithm::Ring
        })
    );
    assert_eq!(
        schedule(Collective::AllGather, Algorithm::Tree, 0, 3, 1),
        Err(Error::Unsupported {
            coll: Collective::AllGather,
            algo: Algorithm::Tree
        })
    );
    assert_eq!(
        schedule(Collective::AllGather, Algorithm::Ring, 0, 3, usize::MAX / 2),
        Err(Error::Overflow)
    );
}

#[test]
fn default_algorithm_choices() {
    let ar = Collective::AllReduce;
    assert_eq!(default_algorithm(ar, 32, 1024), Algorithm::Tree);
    assert_eq!(default_algorithm(ar, 32, 1 << 30), Algorithm::Ring);
    assert_eq!(default_algorithm(ar, 2, 1024), Algorithm::Ring);
    assert_eq!(
        default_algorithm(Collective::Broadcast { root: 0 }, 64, 4096),
        Algorithm::Tree
    );
    assert_eq!(
        default_algorithm(Collective::Broadcast { root: 0 }, 8, 1 << 28),
        Algorithm::Ring
    );
    assert_eq!(
        default_algorithm(Collective::Reduce { root: 0 }, 64, 4096),
        Algorithm::Tree
    );
    assert_eq!(
        default_algorithm(Collective::AllGather, 64, 4096),
        Algorithm::Ring
    );
    assert_eq!(
        default_algorithm(Collective::AlltoAll, 8, 1 << 20),
        Algorithm::Direct
    );
    assert_eq!(
        default_algorithm(Collective::Gather { root: 1 }, 8, 16),
        Algorithm::Direct
    );
    assert_eq!(
        default_algorithm(Collective::Scatter { root: 1 }, 8, 16),
        Algorithm::Direct
    );
    for n in [1, 2, 3, 8, 100, 4096] {
        for bytes in [0, 1, 1 << 10, 1 << 20, 1 << 30] {
            for coll in [
                ar,
                Collective::Broadcast { root: 0 },
                Collective::ReduceScatter,
                Collective::AlltoAll,
            ] {
                let chosen = default_algorithm(coll, n, bytes);
                assert!(supports(coll, chosen));
                let c = estimate_us(coll, chosen, n, bytes).unwrap();
                for other in [Algorithm::Ring, Algorithm::Tree] {
                    if let Some(o) = estimate_us(coll, other, n, bytes) {
                        assert!(
                            c <= o,
                            "{coll:?} n={n} bytes={bytes}: {chosen:?} {c} vs {other:?} {o}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn reference_max_and_roots() {
    let inputs = vec![vec![1, 9], vec![5, 2], vec![3, 3]];
    let out = expected(Collective::Reduce { root: 2 }, 3, 2, &inputs, ReduceOp::Max).unwrap();
    assert_eq!(out, vec![vec![], vec![], vec![5, 9]]);
    let out = expected(Collective::AllReduce, 3, 2, &inputs, ReduceOp::Sum).unwrap();
    assert_eq!(out, vec![vec![9, 14]; 3]);
    let out = expected(
        Collective::AlltoAll,
        2,
        1,
        &[vec![1, 2], vec![3, 4]],
        ReduceOp::Sum,
    )
    .unwrap();
    assert_eq!(out, vec![vec![1, 3], vec![2, 4]]);
}

/// The out-of-place all-to-all receives straight into place, with no scratch, and matches the
/// reference on every rank count; it is only for disjoint buffers (in place it is a hazard).
#[test]
fn alltoall_out_of_place_lands_every_block_once() {
    use ccl_collectives::alltoall_out_of_place;
    use ccl_collectives::reference::check_schedules;
    for n in 1..=9 {
        for count in [0, 1, 2, 7, 64] {
            let scheds: Vec<_> = (0..n)
                .map(|r| alltoall_out_of_place(r, n, count).unwrap())
                .collect();
            assert!(scheds.iter().all(|s| s.scratch == 0 && s.steps.len() <= 1));
            for in_place in [false, true] {
                let case = Case {
                    coll: Collective::AlltoAll,
                    algo: Algorithm::Direct,
                    nranks: n,
                    count,
                    pipeline: Pipeline::DEFAULT,
                    opts: SimOptions {
                        in_place,
                        op: ReduceOp::Sum,
                    },
                    seed: (n * 100 + count) as u64,
                };
                // In place too: each block's send comes before the receive that overwrites it.
                check_schedules(&case, &scheds)
                    .unwrap_or_else(|e| panic!("n {n} count {count} in place {in_place}: {e}"));
            }
        }
    }
    assert!(alltoall_out_of_place(3, 3, 1).is_err());
}

/// The one-exchange all-reduce matches the reference for 1..9 ranks, in place and out of
/// place, in one exchange step and then local folds only; with an operation that is neither
/// commutative nor associative too, so every rank folds the inputs in rank order with the
/// partial result first (the reference's order), which is what makes float results equal bit
/// for bit on every rank.
#[test]
fn allreduce_one_shot_folds_in_rank_order_on_every_rank() {
    use ccl_collectives::allreduce_one_shot;
    for n in 1..=9 {
        for count in [0, 1, 2, 7, 64, 1000] {
            let scheds: Vec<_> = (0..n)
                .map(|r| allreduce_one_shot(r, n, count).unwrap())
                .collect();
            for (r, s) in scheds.iter().enumerate() {
                assert_eq!(s.scratch, n * count);
                let steps = if count == 0 {
                    0
                } else {
                    n.max(2) - 1 + (n > 1) as usize
                };
                assert_eq!(s.steps.len(), steps, "{n} ranks, count {count}");
                // Only the first step talks, to every other rank once each way.
                for (i, st) in s.steps.iter().enumerate() {
                    let talks = st
                        .ops
                        .iter()
                        .filter(|o| matches!(o, Op::Send { .. } | Op::Recv { .. }))
                        .count();
                    assert_eq!(
                        talks,
                        if i == 0 && n > 1 { 2 * (n - 1) } else { 0 },
                        "rank {r}"
                    );
                }
            }
            let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Ordered];
            for rep in check_one_shot(Collective::AllReduce, n, count, &scheds, &ops) {
                if count > 0 && n > 1 {
                    assert_eq!(rep.messages, n * (n - 1));
                }
            }
        }
    }
    assert!(allreduce_one_shot(2, 2, 1).is_err());
    assert!(allreduce_one_shot(0, usize::MAX, 2).is_err());
}

/// Reduce-scatter in one exchange folds in rank order too: it matches the reference with the
/// `Ordered` operation for 1..9 ranks, in place and out of place.
#[test]
fn reduce_scatter_one_shot_folds_in_rank_order() {
    use ccl_collectives::reduce_scatter_one_shot;
    for n in 1..=9 {
        for count in [0, 1, 7, 100] {
            let scheds: Vec<_> = (0..n)
                .map(|r| reduce_scatter_one_shot(r, n, count).unwrap())
                .collect();
            let ops = [ReduceOp::Sum, ReduceOp::Ordered];
            check_one_shot(Collective::ReduceScatter, n, count, &scheds, &ops);
            // One exchange: only the first step talks.
            for s in &scheds {
                assert!(s.steps.iter().skip(1).all(|st| st
                    .ops
                    .iter()
                    .all(|o| matches!(o, Op::Reduce { .. } | Op::Copy { .. }))));
            }
        }
    }
    assert!(reduce_scatter_one_shot(3, 3, 1).is_err());
}

/// Every rank's one-exchange schedule `scheds` of `coll` against the reference, in place and
/// out of place, with each of `ops`; the reports, in that order.
fn check_one_shot(
    coll: Collective,
    n: usize,
    count: usize,
    scheds: &[ccl_collectives::Schedule],
    ops: &[ReduceOp],
) -> Vec<ccl_collectives::reference::SimReport> {
    let mut reports = Vec::new();
    for in_place in [false, true] {
        for &op in ops {
            let case = Case {
                coll,
                algo: Algorithm::Direct,
                nranks: n,
                count,
                pipeline: Pipeline::DEFAULT,
                opts: SimOptions { in_place, op },
                seed: (n * 131 + count) as u64,
            };
            reports.push(
                ccl_collectives::reference::check_schedules(&case, scheds).unwrap_or_else(|e| {
                    panic!("{coll:?} {n} ranks count {count} in place {in_place} {op:?}: {e}")
                }),
            );
        }
    }
    reports
}

/// The two-rank exchange all-reduce: one step, each rank sends its whole input and folds what
/// arrives, rank 0's operand first on both ranks (the `Ordered` operation tells a fold in the
/// other order apart), in place and out of place; other rank counts are refused.
#[test]
fn allreduce_exchange_folds_in_rank_order_in_one_step() {
    use ccl_collectives::allreduce_exchange;
    for count in [0, 1, 2, 7, 64, 1000] {
        let scheds: Vec<_> = (0..2)
            .map(|r| allreduce_exchange(r, 2, count).unwrap())
            .collect();
        for (r, s) in scheds.iter().enumerate() {
            assert_eq!(s.scratch, 0);
            assert_eq!(s.steps.len(), (count > 0) as usize, "rank {r}");
            if count > 0 {
                let folds = s.steps[0]
                    .ops
                    .iter()
                    .filter(|o| matches!(o, Op::RecvFold { .. }))
                    .count();
                assert_eq!(folds, (r == 0) as usize, "rank {r}");
            }
        }
        let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Ordered];
        for rep in check_one_shot(Collective::AllReduce, 2, count, &scheds, &ops) {
            assert_eq!(rep.messages, 2 * (count > 0) as usize);
            assert_eq!(rep.sent, vec![count; 2]);
        }
    }
    for n in [1, 3, 4] {
        assert!(allreduce_exchange(0, n, 8).is_err(), "{n} ranks");
    }
    assert!(allreduce_exchange(2, 2, 8).is_err());
}

/// Ring all-reduce, reduce-scatter and all-gather with their steps run as one
/// (`one_step`): the same results as the reference for 1..9 ranks, in place and out of place,
/// with the order-sensitive operation too, in one step; the tree and the one-exchange
/// schedules are left as they are.
#[test]
fn ring_steps_run_as_one_match_the_reference() {
    use ccl_collectives::{one_step, reference::check_schedules};
    for coll in [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
    ] {
        for n in 1..=9 {
            for count in [1, 7, 64, 1000] {
                let scheds: Vec<_> = (0..n)
                    .map(|r| one_step(schedule(coll, Algorithm::Ring, r, n, count).unwrap()))
                    .collect();
                for s in &scheds {
                    assert!(s.steps.len() <= 1, "{coll:?} {n} ranks count {count}");
                }
                for in_place in [false, true] {
                    for op in [ReduceOp::Sum, ReduceOp::Max] {
                        let case = Case {
                            coll,
                            algo: Algorithm::Ring,
                            nranks: n,
                            count,
                            pipeline: Pipeline::DEFAULT,
                            opts: SimOptions { in_place, op },
                            seed: (n * 7 + count) as u64,
                        };
                        check_schedules(&case, &scheds).unwrap_or_else(|e| {
                            panic!("{coll:?} {n} ranks count {count} in place {in_place}: {e}")
                        });
                    }
                }
            }
        }
    }
    let tree = schedule(Collective::AllReduce, Algorithm::Tree, 1, 4, 64).unwrap();
    assert_eq!(one_step(tree.clone()), tree);
    let shot = ccl_collectives::allreduce_one_shot(0, 3, 8).unwrap();
    assert_eq!(one_step(shot.clone()), shot);
}

/// Overlaps inside a step that executors order, in op order: a receive overwriting what an
/// earlier send reads (the send's data is taken first), and a send of what an earlier receive
/// writes (it forwards what landed). A local copy into what a send reads is still a hazard.
#[test]
fn overlaps_inside_a_step_follow_op_order() {
    let count = 4;
    let sched = |ops: Vec<Op>, scratch: usize| Schedule {
        steps: vec![Step { ops }],
        scratch,
    };
    let send = |peer| Op::Send {
        peer,
        src: snd(0, count),
    };
    let recv = |peer| Op::Recv {
        peer,
        dst: rcv(0, count),
    };
    let inputs: Vec<Vec<u64>> = (0..2u64)
        .map(|r| (0..count as u64).map(|i| 100 * r + i).collect())
        .collect();
    // In place (the all-to-all layout of 2 ranks x 2 elements: one buffer of 4 per rank).
    let run = |scheds: &[Schedule]| {
        let opts = SimOptions {
            in_place: true,
            op: ReduceOp::Sum,
        };
        simulate(Collective::AlltoAll, 2, count / 2, scheds, &inputs, opts)
    };
    // Send, then receive over it: the ranks swap their buffers.
    let swap = run(&[
        sched(vec![send(1), recv(1)], 0),
        sched(vec![send(0), recv(0)], 0),
    ])
    .unwrap();
    assert_eq!(swap.recv, vec![inputs[1].clone(), inputs[0].clone()]);
    // Receive, then send it on: rank 0 sends back what rank 1 sent it.
    let fwd = run(&[
        sched(vec![recv(1), send(1)], 0),
        sched(vec![send(0), recv(0)], 0),
    ])
    .unwrap();
    assert_eq!(fwd.recv, vec![inputs[1].clone(), inputs[1].clone()]);
    // A local copy into what a send of its step reads.
    let scratch = s(BufId::Scratch, 0, count);
    let copy = sched(
        vec![
            Op::Send {
                peer: 1,
                src: scratch,
            },
            Op::Copy {
                src: snd(0, count),
                dst: scratch,
            },
        ],
        count,
    );
    assert!(matches!(
        run(&[copy, sched(vec![recv(0)], 0)]),
        Err(SimError::Hazard { rank: 0, .. })
    ));
}

/// The ring schedule does not fold in rank order: the `Ordered` operation tells the two apart
/// (so the test above shows something).
#[test]
fn the_ordered_operation_catches_a_ring_fold() {
    let case = Case {
        coll: Collective::AllReduce,
        algo: Algorithm::Ring,
        nranks: 4,
        count: 8,
        pipeline: Pipeline::DEFAULT,
        opts: SimOptions {
            in_place: false,
            op: ReduceOp::Ordered,
        },
        seed: 3,
    };
    assert!(matches!(
        ccl_collectives::reference::check(&case),
        Err(ccl_collectives::reference::SimError::Mismatch { .. })
    ));
}
