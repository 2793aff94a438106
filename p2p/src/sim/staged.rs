//! The staged protocol through the receive slots: every collective, coalesced groups, more
//! ranks, mirrored slots; and a broken protocol caught.

use ccl_collectives::task::{Reduction, Scalar, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use super::cases::*;
use super::device::*;
use super::harness::*;
use crate::direct::plan;
use crate::protocol::Counters;

/// Every collective, in and out of place, several chunks per piece and few slots (credits
/// cycle), one and two receive lanes, random lane orders and the merged single queue: all
/// finish, all exact.
#[test]
fn every_collective_finishes_exact_under_any_stream_order() {
    for n in [1usize, 2, 3, 4] {
        for (count, chunk, slots) in [(3000usize, 4096usize, 2u32), (1000, 4096, 4), (5, 4096, 2)] {
            for rx_lanes in [1usize, 2] {
                for (single_max, direct, lanes) in [
                    (0usize, false, 1usize),
                    (1 << 20, false, 1),
                    (0, true, 1),
                    (0, true, 4),
                    (1 << 20, true, 1),
                ] {
                    // Local copies cut into parts of at least 1 KiB over up to 4 lanes.
                    let s = Setup {
                        n,
                        chunk,
                        slots,
                        rx_lanes,
                        single_max,
                        direct,
                        local_split: plan::LocalSplit {
                            lanes,
                            min_part: 1024,
                        },
                        relay: None,
                        takeover: false,
                        host: None,
                        mirror: false,
                        mailed: false,
                        // Half the direct runs send eagerly (sends posted first go through
                        // the receive slots, after the staged program).
                        eager: (direct && rx_lanes == 2).then_some(0),
                        reduce_n: None,
                        write_all: None,
                        // A third of the direct runs on symmetric windows: their collectives
                        // push whoever calls first.
                        windows: direct && count == 1000,
                        // A third of the direct runs mail the reductions a rank queues
                        // before its peers post.
                        mailed_reduce: direct && lanes == 4,
                    };
                    let cases = every_case(n, count);
                    for (merged, seeds) in [(true, 0..2u64), (false, 0..3u64)] {
                        for seed in seeds {
                            if let Err(e) = simulate(&s, &cases, merged, seed * 7919 + 1, None) {
                                panic!(
                                    "n {n} count {count} chunk {chunk} slots {slots} rx lanes {rx_lanes} \
                                     single {single_max} direct {direct} local lanes {lanes} merged {merged} seed {seed}: {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Host-only with more than two ranks (or direct transfers off): every collective through the
/// receive slots, each chunk to be reduced copied into the receiver's mirror first. Few slots
/// (a mirror slot is refilled as soon as its credit allows), one and two receive lanes (the
/// copy into a mirror slot and the kernel still reading it may sit on different lanes), random
/// lane orders and the merged queue: all exact.
#[test]
fn reductions_through_mirrored_slots_are_exact_under_any_stream_order() {
    for n in [2usize, 3, 4] {
        for (count, slots) in [(3000usize, 2u32), (1000, 4)] {
            for rx_lanes in [1usize, 2] {
                let s = Setup {
                    chunk: 4096,
                    slots,
                    rx_lanes,
                    direct: false,
                    mirror: true,
                    ..Setup::new(n)
                };
                let cases = every_case(n, count);
                for (merged, seeds) in [(true, 0..2u64), (false, 0..3u64)] {
                    for seed in seeds {
                        if let Err(e) = simulate(&s, &cases, merged, seed * 7919 + 1, None) {
                            panic!(
                                "n {n} count {count} slots {slots} rx lanes {rx_lanes} merged \
                                 {merged} seed {seed}: {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Several collectives in one group (PyTorch's coalescing manager, `all_reduce_coalesced`):
/// all-reduces of different sizes, a reduce-scatter and an all-gather together, 2-4 ranks,
/// staged and direct, one stream and lanes, random and merged stream orders: every result
/// exact.
#[test]
fn coalesced_collectives_in_one_group_are_exact() {
    // Plain sums, and PreMulSum by 3 (a hierarchy's first stage scales so: a host
    // reduce-scatter grouped with an all-reduce of an uneven count's last element). The
    // all-reduce of one element last: its ranks but one have an empty share, which misordered
    // its sends and receives behind the others' (an internal error, or on one stream the
    // unreduced element sent) until the group's collectives shared one logical clock.
    let three = Scalar::Immediate([3, 0, 0, 0, 0, 0, 0, 0]);
    for (red, factor) in [
        (Reduction::Plain(ReduceKind::Sum), 1i64),
        (Reduction::PreMulSum(three), 3),
    ] {
        for n in [2usize, 3, 4, 8] {
            for (single_max, direct) in [
                (0usize, false),
                (1 << 20, false),
                (0, true),
                (1 << 20, true),
            ] {
                let s = Setup {
                    rx_lanes: 2,
                    single_max,
                    direct,
                    ..Setup::new(n)
                };
                let layouts = s.layouts();
                // (collective, count, input base, output base) for rank r.
                let ops = |r: usize| {
                    let b = base(r) + 0x1000_0000;
                    vec![
                        (Collective::AllReduce, 3001usize, b, b + BUF),
                        (Collective::AllReduce, 17, b + 2 * BUF, b + 3 * BUF),
                        (Collective::ReduceScatter, 900, b + 4 * BUF, b + 5 * BUF),
                        (Collective::AllGather, 1200, b + 6 * BUF, b + 7 * BUF),
                        (Collective::AllReduce, 1, b + 8 * BUF, b + 9 * BUF),
                    ]
                };
                for (merged, seed) in [(false, 1u64), (false, 2), (true, 3)] {
                    let mut mem = s.protocol_mem();
                    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
                    let dx = DirectSim::new(n);
                    for r in 0..n {
                        for (k, &(coll, count, inp, out)) in ops(r).iter().enumerate() {
                            let (ie, oe) = ccl_collectives::task::buffer_counts(
                                TaskKind::Coll(coll),
                                r,
                                n,
                                count,
                            )
                            .unwrap();
                            mem.alloc(inp, ie.max(1) * 4);
                            mem.alloc(out, oe.max(1) * 4);
                            let data: Vec<u8> = (0..ie)
                                .flat_map(|i| (input(r, i + k) as i32).to_le_bytes())
                                .collect();
                            mem.range(inp, ie * 4).copy_from_slice(&data);
                        }
                    }
                    let group = |r: usize| -> Vec<Task> {
                        ops(r)
                            .into_iter()
                            .map(|(coll, count, inp, out)| Task {
                                kind: TaskKind::Coll(coll),
                                send: inp as usize,
                                recv: out as usize,
                                count,
                                dtype: DataType::Int32,
                                red: match coll {
                                    Collective::AllGather => Reduction::Plain(ReduceKind::Sum),
                                    _ => red,
                                },
                                stream: 0,
                                fold: false,
                            })
                            .collect()
                    };
                    let mut counters: Vec<Counters> =
                        (0..n).map(|_| Counters::new(n, s.rx_lanes)).collect();
                    let first = seed as usize % n;
                    for r in (0..n).map(|i| (first + i) % n) {
                        s.queue(&layouts[r], &mut counters[r], &mut devs[r], &group(r), &dx)
                            .unwrap_or_else(|e| {
                                panic!("{red:?} n {n} single {single_max} direct {direct}: {e}")
                            });
                    }
                    if let Err(e) = run(&devs, &mut mem, merged, seed) {
                        panic!("n {n} single {single_max} direct {direct} merged {merged}: {e}");
                    }
                    for r in 0..n {
                        for (k, &(coll, count, _, out)) in ops(r).iter().enumerate() {
                            let sum =
                                |i: usize| factor * (0..n).map(|q| input(q, i + k)).sum::<i64>();
                            let want: Vec<i64> = match coll {
                                Collective::AllReduce => (0..count).map(sum).collect(),
                                Collective::ReduceScatter => {
                                    (0..count).map(|i| sum(r * count + i)).collect()
                                }
                                _ => (0..n * count)
                                    .map(|j| input(j / count, j % count + k))
                                    .collect(),
                            };
                            let want: Vec<u8> = want
                                .iter()
                                .flat_map(|&v| (v as i32).to_le_bytes())
                                .collect();
                            let got = mem.read(out, want.len());
                            assert!(
                            got == want,
                            "{red:?} n {n} single {single_max} direct {direct} merged {merged}: \
                             rank {r} {coll:?} #{k} wrong"
                        );
                        }
                    }
                }
            }
        }
    }
}

/// Eight ranks (an 8-GPU NVSwitch machine) and five (not a power of two): every collective,
/// staged and direct, under a random lane order and the merged queue, exact.
#[test]
fn every_collective_is_exact_with_five_and_eight_ranks() {
    for n in [5usize, 8] {
        for direct in [false, true] {
            let s = Setup {
                direct,
                ..Setup::new(n)
            };
            let cases = every_case(n, 3000);
            for merged in [true, false] {
                if let Err(e) = simulate(&s, &cases, merged, 17, None) {
                    panic!("n {n} direct {direct} merged {merged}: {e}");
                }
            }
        }
    }
}

/// Mailed sends (`CCL_IPC_MAILED_PUSH`): every collective on 2, 3, 5 and 8 ranks, with the
/// mail thread filling slots at random points, under random lane orders and the merged queue,
/// exact.
#[test]
fn every_collective_is_exact_with_mailed_sends() {
    for n in [2usize, 3, 5, 8] {
        let s = Setup {
            mailed: true,
            ..Setup::new(n)
        };
        let cases = every_case(n, 3000);
        for (merged, seed) in [(false, 5u64), (false, 6), (true, 7)] {
            match simulate_counts(&s, &cases, merged, seed, None) {
                Ok((.., mailed)) => assert!(mailed > 0, "n {n}: no send was mailed"),
                Err(e) => panic!("n {n} merged {merged} seed {seed}: {e}"),
            }
        }
    }
}

/// The checker itself must catch a broken protocol: with the senders' credit waits removed,
/// a sender overwrites slots the receiver has not read yet, and some stream order shows it.
#[test]
fn the_simulation_catches_a_missing_credit_wait() {
    let s = Setup {
        direct: false,
        ..Setup::new(2)
    };
    let case = Case {
        kind: Kind::Ring,
        count: 8192,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    };
    for seed in 0..5 {
        simulate(&s, &[case], false, seed, None).unwrap();
    }
    // Credit words of sender r (from receiver q, slot k) sit at index q*2*slots + slots + k.
    let drop_credit_waits = |d: &mut SimDevice, r: usize| {
        let lo = base(r) + (2 * 2 * 2) as u64 * 64;
        for q in d.lanes.values_mut() {
            for op in q.iter_mut() {
                if let Op::Wait(a, _) = *op {
                    let slot_index = (a - base(r)) / 64;
                    if a >= base(r) && a < lo && slot_index % 4 >= 2 {
                        *op = Op::Record(usize::MAX);
                    }
                }
            }
        }
    };
    let failures = (0..40)
        .filter(|&seed| simulate(&s, &[case], false, seed, Some(&drop_credit_waits)).is_err())
        .count();
    assert!(
        failures > 0,
        "40 random orders never exposed the missing credit waits"
    );
}
