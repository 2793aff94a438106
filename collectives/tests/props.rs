//! Property tests: every collective x algorithm, simulated on all ranks under rendezvous
//! semantics, compared exactly with the reference reducer.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use ccl_collectives::reference::{check, Case, ReduceOp, SimOptions};
use ccl_collectives::{supports, Algorithm, Collective, Pipeline};
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

fn run_all(
    coll: Collective,
    nranks: usize,
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
            nranks,
            count,
            pipeline,
            opts: SimOptions { in_place, op },
            seed,
        };
        if let Err(e) = check(&case) {
            panic!("{case:?}: {e}");
        }
    }
    assert!(tried > 0, "no algorithm for {coll:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Small pieces so that pipelining really happens at these counts.
    #[test]
    fn every_collective_matches_reference(
        nranks in 1usize..=12,
        count in 0usize..=300,
        kind in 0usize..8,
        root_seed in any::<usize>(),
        in_place in any::<bool>(),
        max in any::<bool>(),
        min_piece in 1usize..=64,
        max_pieces in 1usize..=9,
        seed in any::<u64>(),
    ) {
        let coll = collective(kind, root_seed % nranks);
        let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
        run_all(coll, nranks, count, Pipeline { min_piece, max_pieces }, in_place, op, seed);
    }

    /// The pipelining the library uses by default.
    #[test]
    fn default_pipeline_matches_reference(
        nranks in 1usize..=12,
        count in 0usize..=300,
        kind in 0usize..8,
        root_seed in any::<usize>(),
        in_place in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let coll = collective(kind, root_seed % nranks);
        run_all(coll, nranks, count, Pipeline::DEFAULT, in_place, ReduceOp::Sum, seed);
    }
}

/// A few big counts with the default pipeline (16 pieces of several thousand elements).
#[test]
fn big_counts() {
    for (nranks, count) in [(2, 70_001), (3, 65_536 + 17), (5, 100_003), (8, 131_072)] {
        for kind in 0..8 {
            for in_place in [false, true] {
                let coll = collective(kind, nranks - 1);
                run_all(
                    coll,
                    nranks,
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

/// Larger rank counts than the property test covers, small data.
#[test]
fn many_ranks() {
    for nranks in [13, 16, 17, 31, 32, 33, 64] {
        for kind in 0..8 {
            for in_place in [false, true] {
                let coll = collective(kind, nranks / 3);
                let pipe = Pipeline {
                    min_piece: 3,
                    max_pieces: 4,
                };
                run_all(
                    coll,
                    nranks,
                    2 * nranks + 5,
                    pipe,
                    in_place,
                    ReduceOp::Sum,
                    11,
                );
            }
        }
    }
}
