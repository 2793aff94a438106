//! What the N-GPU paths load NVLink with: every large collective on 4 and 8 simulated GPUs,
//! each GPU's bytes out and in (its NVLink ports' load, which decides a large collective's
//! speed) against what the design promises, in units of one rank's `COUNT` elements.
//!
//! Every data-movement op and the all-reduce and reduce-scatter move the least any algorithm
//! must (all-reduce `2(n-1)/n` each way, as a ring); the relayed broadcast sends the buffer
//! about once from the root; a direct reduce takes `2(n-1)/n` into the root (its own slice
//! read from every peer, every other slice written by its reducer). Where the ranks call one
//! after another and the rendezvous of a reduction fails, the staged reduce is a star: the
//! root takes in `n - 1` buffers.

use ccl_collectives::relay::Relay;
use ccl_collectives::task::Reduction;
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use super::cases::{Case, Kind};
use super::device::Traffic;
use super::harness::{simulate_traffic, Setup};

/// Elements per rank: a multiple of 8, so every rank's slice of a reduction is alike.
const COUNT: usize = 16384;
const ROOT: usize = 0;

fn ops(n: usize) -> Vec<Kind> {
    use Collective as C;
    vec![
        Kind::Coll(C::AllReduce),
        Kind::Coll(C::ReduceScatter),
        Kind::Coll(C::AllGather),
        Kind::Coll(C::AlltoAll),
        Kind::Coll(C::Broadcast { root: ROOT }),
        Kind::Coll(C::Reduce { root: n - 1 }),
        Kind::Coll(C::Gather { root: ROOT }),
        Kind::Coll(C::Scatter { root: ROOT }),
        Kind::Ring,
    ]
}

/// The engine's choices for large operations: broadcasts relayed (four chunks here), direct
/// reductions in one kernel over all inputs.
fn setup(n: usize) -> Setup {
    Setup {
        relay: Some(Relay {
            min_bytes: 1,
            chunk_bytes: COUNT,
        }),
        reduce_n: Some(true),
        ..Setup::new(n)
    }
}

/// What GPU `r` of `n` sends and receives for `kind` (units of `COUNT` elements); `staged`:
/// the ranks called one by one, so a reduction's rendezvous failed.
fn promised(kind: Kind, n: usize, r: usize, staged: bool) -> (f64, f64) {
    use Collective as C;
    let nf = n as f64;
    let all = |x: f64| (x, x);
    match kind {
        Kind::Coll(C::AllReduce) => all(2.0 * (nf - 1.0) / nf),
        Kind::Coll(C::ReduceScatter | C::AllGather | C::AlltoAll) => all(nf - 1.0),
        Kind::Coll(C::Broadcast { root }) if r == root => (1.0, 0.0),
        Kind::Coll(C::Broadcast { .. }) => ((nf - 2.0) / (nf - 1.0), 1.0),
        Kind::Coll(C::Reduce { root }) if staged => {
            if r == root {
                (0.0, nf - 1.0)
            } else {
                (1.0, 0.0)
            }
        }
        Kind::Coll(C::Reduce { root }) if r == root => ((nf - 1.0) / nf, 2.0 * (nf - 1.0) / nf),
        Kind::Coll(C::Reduce { .. }) => (1.0, (nf - 1.0) / nf),
        Kind::Coll(C::Gather { root }) if r == root => (0.0, nf - 1.0),
        Kind::Coll(C::Gather { .. }) => (1.0, 0.0),
        Kind::Coll(C::Scatter { root }) if r == root => (nf - 1.0, 0.0),
        Kind::Coll(C::Scatter { .. }) => (0.0, 1.0),
        Kind::Ring => all(1.0),
    }
}

fn run(kind: Kind, n: usize, seed: u64) -> Traffic {
    let case = Case {
        kind,
        count: COUNT,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    };
    simulate_traffic(&setup(n), &[case], seed)
        .unwrap_or_else(|e| panic!("{kind:?} on {n} ranks, seed {seed}: {e}"))
}

/// Runs `kind` on `n` GPUs (`seed` 0: every rank posts first; 1: one after another) and
/// checks each GPU's load against [`promised`] within 1% of a buffer (slices that split
/// `COUNT` unevenly, a relayed broadcast's `n - 1` owners, move a few elements more or less).
fn carries_the_promise(kind: Kind, n: usize, seed: u64) -> Traffic {
    let t = run(kind, n, seed);
    let unit = (COUNT * 4) as f64;
    let l: Vec<((f64, f64), (f64, f64))> = (0..n)
        .map(|r| {
            let got = (t.egress(r) as f64 / unit, t.ingress(r) as f64 / unit);
            (promised(kind, n, r, seed == 1), got)
        })
        .collect();
    let close =
        |(a, b): ((f64, f64), (f64, f64))| (a.0 - b.0).abs() < 0.01 && (a.1 - b.1).abs() < 0.01;
    assert!(
        l.iter().copied().all(close),
        "{kind:?} on {n} GPUs, seed {seed}, (promised, carried) out/in per GPU: {l:?}"
    );
    t
}

/// Every rank posts before any queues (seed 0, as one thread driving all GPUs does, or
/// ranks arriving within the rendezvous wait): each GPU's NVLink load is the promised one,
/// and for the ops that only move data each GPU's own engines move what leaves it (every
/// sender pushes: no GPU's copy engines carry a peer's share).
#[test]
fn every_gpu_carries_what_the_design_promises_when_all_have_posted() {
    for n in [4usize, 8] {
        for kind in ops(n) {
            let t = carries_the_promise(kind, n, 0);
            if !matches!(
                kind,
                Kind::Coll(
                    Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
                )
            ) {
                for r in 0..n {
                    let moved = t.moved_by.get(&r).copied().unwrap_or(0);
                    assert_eq!(
                        moved,
                        t.egress(r),
                        "{kind:?} on {n} GPUs: GPU {r}'s engines"
                    );
                }
            }
        }
    }
}

/// Ranks calling one after another (seed 1): the same loads, but for the reduce, whose
/// rendezvous fails and which goes staged as a star into the root. Which GPU's engines move
/// a transfer now follows the call order (the later side copies): NVLink carries the same
/// bytes, but some GPUs' copy engines carry their peers' shares.
#[test]
fn in_call_order_the_links_carry_the_same_but_a_reduce_goes_as_a_star() {
    for n in [4usize, 8] {
        for kind in ops(n) {
            carries_the_promise(kind, n, 1);
        }
        let t = run(Kind::Coll(Collective::AllGather), n, 1);
        let most = t.moved_by.values().copied().max().unwrap_or(0);
        assert!(
            most > t.egress(0),
            "all-gather on {n} GPUs in call order: {t:?}"
        );
    }
}
