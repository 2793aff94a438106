use std::collections::HashMap;

use ccl_collectives::task::{Reduction, Task, TaskKind};
use ccl_collectives::Collective;

use super::*;
use crate::lower::{Act, MIN_CHUNK};
use ccl_collectives::task::float_sum as task;

/// Sender and receiver must agree on every chunk's logical time and size, pair by pair.
fn check_pairing(tasks_of: &dyn Fn(usize) -> Vec<Task>, n: usize, chunk: usize) {
    let items: Vec<Vec<Item>> = (0..n)
        .map(|r| schedule(&lower(&tasks_of(r), r, n, chunk, 0).unwrap(), chunk))
        .collect();
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let sent: Vec<(u64, usize)> = items[a]
                .iter()
                .filter(|i| i.peer == b)
                .filter_map(|i| match i.kind {
                    ItemKind::Tx { bytes, .. } => Some((i.t, bytes)),
                    _ => None,
                })
                .collect();
            let got: Vec<(u64, usize)> = items[b]
                .iter()
                .filter(|i| i.peer == a)
                .filter_map(|i| match i.kind {
                    ItemKind::Rx { bytes, .. } => Some((i.t, bytes)),
                    _ => None,
                })
                .collect();
            assert_eq!(sent, got, "ranks {a} -> {b}");
        }
    }
}

#[test]
fn every_collective_pairs_up_chunk_for_chunk() {
    for n in [2usize, 3, 4, 8] {
        for count in [0usize, 1, 3, 1000, 70_001] {
            for chunk in [4096usize, 65536] {
                let colls = [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::AllGather,
                    Collective::AlltoAll,
                    Collective::Broadcast { root: 1 },
                    Collective::Reduce { root: n - 1 },
                    Collective::Gather { root: 0 },
                    Collective::Scatter { root: 1 },
                ];
                for c in colls {
                    check_pairing(
                        &|_| vec![task(TaskKind::Coll(c), 0x1000_0000, 0x8000_0000, count)],
                        n,
                        chunk,
                    );
                }
                // A ring of sends and receives plus an exchange, in one group.
                check_pairing(
                    &|r| {
                        vec![
                            task(TaskKind::Send { peer: (r + 1) % n }, 0x1000_0000, 0, count),
                            task(
                                TaskKind::Recv {
                                    peer: (r + n - 1) % n,
                                },
                                0,
                                0x8000_0000,
                                count,
                            ),
                            task(
                                TaskKind::Send { peer: (r + 2) % n },
                                0x2000_0000,
                                0,
                                count + 5,
                            ),
                            task(
                                TaskKind::Recv {
                                    peer: (r + n - 2) % n,
                                },
                                0,
                                0x9000_0000,
                                count + 5,
                            ),
                        ]
                    },
                    n,
                    chunk,
                );
            }
        }
    }
}

#[test]
fn one_shot_all_reduce_pairs_up_and_runs_on_one_stream() {
    let t = task(
        TaskKind::Coll(Collective::AllReduce),
        0x1000_0000,
        0x1000_0000,
        100,
    );
    for r in 0..2 {
        let p = lower(&[t], r, 2, 4096, 1 << 20).unwrap();
        assert_eq!(p.tx[1 - r].len(), 1);
        assert_eq!(p.tx[1 - r][0].bytes, 400);
        assert!(p.bytes() <= 1 << 20);
    }
    // Three ranks never go one-shot (each rank would sum in its own order).
    let p = lower(&[t], 0, 3, 4096, 1 << 20).unwrap();
    assert!(p.tx[1].len() == 2);
}

/// All-reduce's second half is sent only after the reduction it carries was queued: each
/// dependent send comes later in the queue order than the receive that completes it.
#[test]
fn all_reduce_sends_follow_their_reductions() {
    for n in [2usize, 3, 4, 8] {
        for count in [1usize, 5, 1000, 123_457] {
            let t = task(
                TaskKind::Coll(Collective::AllReduce),
                0x1000_0000,
                0x1000_0000,
                count,
            );
            for r in 0..n {
                let p = lower(&[t], r, n, 4096, 0).unwrap();
                let items = schedule(&p, 4096);
                let mut seen: HashMap<usize, usize> = HashMap::new();
                for it in &items {
                    match it.kind {
                        ItemKind::Rx {
                            act: Act::Reduce { .. },
                            chunk,
                            ..
                        } => *seen.entry(chunk).or_default() += 1,
                        ItemKind::Tx {
                            after: Some((_, k)),
                            ..
                        } => assert_eq!(
                            seen.get(&k).copied(),
                            Some(n - 1),
                            "n {n} count {count} rank {r} chunk {k}"
                        ),
                        _ => {}
                    }
                }
                // In-place all-reduce still pipelines on two streams.
                assert!(!p.aliases());
            }
        }
    }
}

/// Groups whose earlier operations move more one way than the other between two ranks (a
/// receive, a reduce, an all-reduce of fewer elements than ranks) still pair up chunk for
/// chunk, and every all-reduce's second half still comes after its reductions: with a clock
/// per peer and direction, the receives of a later all-reduce fell at the time of its
/// result's sends and were queued after them (on one stream: the unreduced result sent).
#[test]
fn mixed_groups_keep_sends_after_their_reductions() {
    let at = |k: usize| 0x1000_0000 + k * 0x100_0000;
    let avg = |t: Task| Task {
        red: Reduction::Avg,
        ..t
    };
    let ar = |k: usize, count| {
        avg(task(
            TaskKind::Coll(Collective::AllReduce),
            at(k),
            at(k) + 0x80_0000,
            count,
        ))
    };
    for n in [2usize, 3, 4, 8] {
        let groups = |r: usize| -> Vec<Vec<Task>> {
            let recv_from_next = task(TaskKind::Recv { peer: (r + 1) % n }, 0, at(20), 3000);
            let send_to_prev = task(
                TaskKind::Send {
                    peer: (r + n - 1) % n,
                },
                at(21),
                0,
                3000,
            );
            let reduce = |root| {
                avg(task(
                    TaskKind::Coll(Collective::Reduce { root }),
                    at(22),
                    at(23),
                    5000,
                ))
            };
            vec![
                vec![ar(0, 3001), ar(1, 1)],
                vec![ar(1, 1), ar(0, 3001), ar(2, n - 1)],
                vec![recv_from_next, send_to_prev, ar(0, 70_001)],
                vec![reduce(1 % n), ar(0, 20_000), ar(1, 1)],
            ]
        };
        for g in 0..4 {
            check_pairing(&|r| groups(r)[g].clone(), n, 4096);
            for r in 0..n {
                let p = lower(&groups(r)[g], r, n, 4096, 0).unwrap();
                let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
                for it in &schedule(&p, 4096) {
                    match it.kind {
                        ItemKind::Rx {
                            act: Act::Reduce { target, .. },
                            chunk,
                            ..
                        } => *seen.entry((target, chunk)).or_default() += 1,
                        ItemKind::Tx {
                            after: Some(key), ..
                        } => {
                            let want = p.targets[key.0].contributions;
                            let got = seen.get(&key).copied();
                            assert_eq!(got, Some(want), "n {n} group {g} rank {r} {key:?}");
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

#[test]
fn in_place_alltoall_and_overlapping_p2p_run_on_one_stream() {
    let a2a = task(
        TaskKind::Coll(Collective::AlltoAll),
        0x1000_0000,
        0x1000_0000,
        1000,
    );
    assert!(lower(&[a2a], 0, 2, 4096, 0).unwrap().aliases());
    let oop = task(
        TaskKind::Coll(Collective::AlltoAll),
        0x1000_0000,
        0x2000_0000,
        1000,
    );
    assert!(!lower(&[oop], 0, 2, 4096, 0).unwrap().aliases());
    let send = task(TaskKind::Send { peer: 1 }, 0x1000_0000, 0, 1000);
    let recv = task(TaskKind::Recv { peer: 1 }, 0, 0x1000_0100, 1000);
    assert!(lower(&[send, recv], 0, 2, 4096, 0).unwrap().aliases());
    let ag = task(
        TaskKind::Coll(Collective::AllGather),
        0x1000_0000 + 4000,
        0x1000_0000,
        1000,
    );
    assert!(!lower(&[ag], 1, 2, 4096, 0).unwrap().aliases());
}

#[test]
fn pieces_are_cut_into_quarters_within_bounds() {
    let slot = 8 << 20;
    assert_eq!(piece_chunk(8, slot), MIN_CHUNK);
    assert_eq!(piece_chunk(4 << 20, slot), 1 << 20);
    assert_eq!(piece_chunk(16 << 20, slot), 4 << 20);
    assert_eq!(piece_chunk(256 << 20, slot), slot);
    assert_eq!(piece_chunk(1 << 20, 4096), 4096);
    // Every chunk boundary is 4 KiB aligned, so elements of any type stay whole.
    assert_eq!(piece_chunk(3_000_001, slot) % 4096, 0);
    // Sender and receiver pair up with the mixed sizes of a real sweep.
    for count in [1usize, 1 << 18, 3_000_001, 50 << 20] {
        check_pairing(
            &|_| {
                vec![task(
                    TaskKind::Coll(Collective::AllReduce),
                    0x1000_0000,
                    0x9000_0000,
                    count,
                )]
            },
            2,
            slot,
        );
    }
}

#[test]
fn self_sends_must_meet_self_receives() {
    let send = task(TaskKind::Send { peer: 0 }, 0x1000, 0, 10);
    assert!(lower(&[send], 0, 2, 4096, 0).is_err());
    let recv = task(TaskKind::Recv { peer: 0 }, 0, 0x2000, 10);
    let p = lower(&[send, recv], 0, 2, 4096, 0).unwrap();
    assert_eq!(p.locals, vec![(0x2000, 0x1000, 40)]);
}
