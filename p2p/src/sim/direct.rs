//! The direct paths: random groups of sends and receives, direct reductions (shared and done
//! by one rank), relayed broadcasts, local copies over idle lanes, and when a send waits for
//! its receiver.

use ccl_collectives::task::{Reduction, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use super::cases::*;
use super::device::*;
use super::harness::*;
use crate::device::Kernel;
use crate::direct::{plan, posting};
use crate::layout::Lane;
use crate::protocol::Counters;
use crate::rendezvous;
use ccl_collectives::relay::Relay;

/// Random point-to-point groups: each rank's group holds its sends and receives in its own
/// random order, several to the same peer (matched in order, as NCCL matches them), some to
/// itself, sizes from a few bytes to several chunks, every third round with mailed sends and
/// every third with eager ones (through the receivers' slots). Every byte arrives where it
/// should, under random lane orders and with merged queues.
#[test]
fn random_point_to_point_groups_deliver_every_byte() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    for round in 0..40 {
        let n = 2 + next(4) as usize;
        let s = Setup {
            slots: 2 + next(3) as u32,
            rx_lanes: 1 + next(2) as usize,
            single_max: if next(2) == 0 { 0 } else { 1 << 20 },
            direct: next(2) == 0,
            mailed: round % 3 == 2,
            // From any size, or from 4000 bytes (smaller sends posted first are pulled).
            eager: (round % 3 == 1).then_some([0, 4000][(round % 2) as usize]),
            ..Setup::new(n)
        };
        // (from, to, count) in the order the sender issues them.
        let transfers: Vec<(usize, usize, usize)> = (0..3 * n)
            .map(|_| {
                let a = next(n as u64) as usize;
                let b = next(n as u64) as usize;
                (a, b, [1usize, 7, 1000, 2500][next(4) as usize])
            })
            .collect();
        let mut groups = point_to_point_groups(n, &transfers);
        for g in groups.iter_mut() {
            interleave(g, &mut next);
        }
        // Odd rounds add an all-reduce to every rank's group (NCCL allows collectives and
        // point-to-point in one group): staged beside the direct transfers.
        if round % 2 == 1 {
            for (r, g) in groups.iter_mut().enumerate() {
                g.push(all_reduce_beside(r));
            }
        }
        for merged in [false, true] {
            let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
            let mut dx = DirectSim::new(n);
            if s.mailed {
                dx.mail = Some(super::mail::SimMail::new());
            }
            let layouts = s.layouts();
            // Ranks call in a random order (which side of a direct transfer copies).
            let first = next(n as u64) as usize;
            for r in (0..n).map(|i| (first + i) % n) {
                let mut c = Counters::new(n, s.rx_lanes);
                s.queue(&layouts[r], &mut c, &mut devs[r], &groups[r], &dx)
                    .unwrap();
            }
            let mut mem = point_to_point_mem(&s, &transfers);
            if let Err(e) = run_with_mail(&devs, &mut mem, merged, round * 31 + 7, &dx, None) {
                panic!(
                    "round {round} n {n} direct {} merged {merged}: {e}; transfers {transfers:?}",
                    s.direct
                );
            }
            let what = format!(
                "round {round} n {n} direct {} single {} merged {merged}",
                s.direct, s.single_max
            );
            check_point_to_point(&mut mem, &transfers, &what);
            if round % 2 == 1 {
                check_all_reduce_beside(&mut mem, n, &what);
            }
        }
    }
}

/// Transfer `i` of [`point_to_point_groups`]: its send buffer on rank `from`, its receive
/// buffer on rank `to`.
fn p2p_send_buffer(from: usize, i: usize) -> u64 {
    base(from) + 0x1000_0000 + i as u64 * BUF
}

fn p2p_recv_buffer(to: usize, i: usize) -> u64 {
    base(to) + 0x2000_0000 + i as u64 * BUF
}

/// Every rank's group of `transfers` (from, to, int32 count): sends and receives in issue
/// order.
fn point_to_point_groups(n: usize, transfers: &[(usize, usize, usize)]) -> Vec<Vec<Task>> {
    let mut groups: Vec<Vec<Task>> = vec![Vec::new(); n];
    for (i, &(a, b, count)) in transfers.iter().enumerate() {
        let t = |kind, send: u64, recv: u64| Task {
            kind,
            send: send as usize,
            recv: recv as usize,
            count,
            dtype: DataType::Int32,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        };
        groups[a].push(t(TaskKind::Send { peer: b }, p2p_send_buffer(a, i), 0));
        groups[b].push(t(TaskKind::Recv { peer: a }, 0, p2p_recv_buffer(b, i)));
    }
    groups
}

/// Interleaves a rank's group at random, keeping the issue order per (direction, peer):
/// repeatedly takes the front of a random non-empty queue.
fn interleave(g: &mut Vec<Task>, next: &mut impl FnMut(u64) -> u64) {
    let key = |t: &Task| match t.kind {
        TaskKind::Send { peer } => (0, peer),
        TaskKind::Recv { peer } => (1, peer),
        _ => (2, 0),
    };
    let mut queues: Vec<((usize, usize), std::collections::VecDeque<Task>)> = Vec::new();
    for t in g.drain(..) {
        match queues.iter_mut().find(|(k, _)| *k == key(&t)) {
            Some((_, q)) => q.push_back(t),
            None => queues.push((key(&t), std::collections::VecDeque::from([t]))),
        }
    }
    while queues.iter().any(|(_, q)| !q.is_empty()) {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].1.is_empty())
            .collect();
        let pick = live[next(live.len() as u64) as usize];
        if let Some(t) = queues[pick].1.pop_front() {
            g.push(t);
        }
    }
}

/// Elements of the all-reduce some rounds add beside the transfers.
const BESIDE_COUNT: usize = 700;

/// Rank `r`'s input and output of the all-reduce beside the transfers.
fn beside_buffers(r: usize) -> (u64, u64) {
    (base(r) + 0x3000_0000, base(r) + 0x3000_0000 + BUF)
}

fn all_reduce_beside(r: usize) -> Task {
    let (send, recv) = beside_buffers(r);
    Task {
        kind: TaskKind::Coll(Collective::AllReduce),
        send: send as usize,
        recv: recv as usize,
        count: BESIDE_COUNT,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        stream: 0,
        fold: false,
    }
}

/// Fresh memory for a run: the protocol's, every transfer's buffers (the send buffers
/// holding numbers unique to the transfer), and every rank's all-reduce buffers and input.
fn point_to_point_mem(s: &Setup, transfers: &[(usize, usize, usize)]) -> Mem {
    let mut mem = s.protocol_mem();
    for (i, &(a, b, count)) in transfers.iter().enumerate() {
        let send = p2p_send_buffer(a, i);
        mem.alloc(send, count * 4);
        mem.alloc(p2p_recv_buffer(b, i), count * 4);
        let data: Vec<u8> = (0..count)
            .flat_map(|e| ((i * 100_000 + e) as i32).to_le_bytes())
            .collect();
        mem.range(send, count * 4).copy_from_slice(&data);
    }
    for r in 0..s.n {
        let (send, recv) = beside_buffers(r);
        mem.alloc(send, BESIDE_COUNT * 4);
        mem.alloc(recv, BESIDE_COUNT * 4);
        let data: Vec<u8> = (0..BESIDE_COUNT)
            .flat_map(|i| (input(r, i) as i32).to_le_bytes())
            .collect();
        mem.range(send, BESIDE_COUNT * 4).copy_from_slice(&data);
    }
    mem
}

/// Every transfer's receive buffer holds what its send buffer does.
fn check_point_to_point(mem: &mut Mem, transfers: &[(usize, usize, usize)], what: &str) {
    for (i, &(a, b, count)) in transfers.iter().enumerate() {
        let got = mem.read(p2p_recv_buffer(b, i), count * 4);
        let want = mem.read(p2p_send_buffer(a, i), count * 4);
        assert!(
            got == want,
            "{what}: transfer {i} {a}->{b} ({count} elements): wrong bytes"
        );
    }
}

/// Every rank's all-reduce beside the transfers holds the sum of the inputs.
fn check_all_reduce_beside(mem: &mut Mem, n: usize, what: &str) {
    let want: Vec<u8> = (0..BESIDE_COUNT)
        .flat_map(|i| ((0..n).map(|q| input(q, i)).sum::<i64>() as i32).to_le_bytes())
        .collect();
    for r in 0..n {
        let got = mem.read(beside_buffers(r).1, BESIDE_COUNT * 4);
        assert!(
            got == want,
            "{what}: rank {r}'s all-reduce in the group wrong at element {:?}",
            got.chunks(4).zip(want.chunks(4)).position(|(a, b)| a != b)
        );
    }
}

#[test]
fn direct_reductions_run_when_every_rank_posts_and_fall_back_together() {
    for n in [2usize, 3, 4, 8] {
        let s = Setup::new(n);
        let plain = |kind, in_place| Case::int_sum(kind, 3001, in_place);
        let cases = [
            plain(Kind::Coll(Collective::AllReduce), false),
            plain(Kind::Coll(Collective::AllReduce), true),
            plain(Kind::Coll(Collective::ReduceScatter), false),
            plain(Kind::Coll(Collective::ReduceScatter), true),
            plain(Kind::Coll(Collective::Reduce { root: 0 }), false),
            plain(Kind::Coll(Collective::Reduce { root: n - 1 }), true),
            plain(Kind::Coll(Collective::Reduce { root: n / 2 }), false),
        ];
        for (merged, seed) in [(false, 0u64), (true, 4), (false, 1), (false, 2), (true, 6)] {
            let direct = simulate(&s, &cases, merged, seed, None)
                .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged}: {e}"));
            // Even seeds post all ranks first, odd ones queue rank by rank; seeds 2 mod 3
            // make one rank's buffers unmappable per case (staged for everyone).
            let want = if seed % 3 == 2 || seed % 2 == 1 {
                0
            } else {
                cases.len() * n
            };
            assert_eq!(direct, want, "n {n} seed {seed}: direct reductions");
        }
    }
}

/// Direct reductions on symmetric windows, two to eight ranks: every all-reduce and
/// reduce-scatter runs directly whoever calls first, even where each rank queues before its
/// peers post (without windows those go staged, as nobody waits here), with every byte exact,
/// in place or not, on separate and merged queues. A reduce (only its root has an output to
/// mirror) meets as without windows.
#[test]
fn symmetric_windows_reduce_directly_whoever_calls_first() {
    for n in [2usize, 3, 4, 8] {
        let cases = reductions(n);
        let windows = Setup {
            windows: true,
            ..Setup::new(n)
        };
        for seed in 0..6u64 {
            for merged in [false, true] {
                let direct = simulate(&windows, &cases, merged, seed, None)
                    .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged}: {e}"));
                // Even seeds post every rank first (the reduce finds its peers too), odd
                // ones queue rank by rank.
                let reduce = if seed % 2 == 0 { n } else { 0 };
                assert_eq!(direct, 4 * n + reduce, "n {n} seed {seed} merged {merged}");
            }
            let plain = simulate(&Setup::new(n), &cases[..4], false, seed | 1, None)
                .unwrap_or_else(|e| panic!("n {n} seed {seed} without windows: {e}"));
            assert_eq!(plain, 0, "n {n} seed {seed}: without windows, staged");
        }
    }
}

/// Int32 sums of 3001 elements: all-reduce and reduce-scatter out of place and in place (the
/// four that may run directly whoever calls first), then a reduce to the last of `n` ranks.
fn reductions(n: usize) -> Vec<Case> {
    let case = |kind, in_place| Case::int_sum(Kind::Coll(kind), 3001, in_place);
    let mut cases = Vec::new();
    for in_place in [false, true] {
        cases.push(case(Collective::AllReduce, in_place));
        cases.push(case(Collective::ReduceScatter, in_place));
    }
    cases.push(case(Collective::Reduce { root: n - 1 }, false));
    cases
}

/// Mailed direct reductions (`CCL_IPC_DIRECT_REDUCE_MAILED`): ranks that queue before their
/// peers post wait for nobody and still reduce directly, their kernels taking every address
/// from the slots the mail thread fills at random points. Exact with two to eight ranks, in
/// place or not, under any stream order, with one rank's buffers unmappable per case (every
/// third seed: they go through its bounce buffer); nothing goes staged but the reduces (only
/// their roots have an output to post, so they still meet).
#[test]
fn mailed_reductions_wait_for_nobody_and_are_exact() {
    for n in [2usize, 3, 4, 8] {
        let cases = reductions(n);
        let s = Setup {
            mailed_reduce: true,
            ..Setup::new(n)
        };
        for seed in 0..6u64 {
            for merged in [false, true] {
                let mailed = std::cell::Cell::new(0usize);
                let count = |d: &mut SimDevice, _r: usize| {
                    let k = d.lanes.values().flatten();
                    let m = k.filter(|o| matches!(o, Op::Kernel(Kernel::ReduceNMail { .. })));
                    mailed.set(mailed.get() + m.count());
                };
                let direct = simulate(&s, &cases, merged, seed, Some(&count))
                    .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged}: {e}"));
                // Even seeds post every rank first (nothing to mail; the reduce finds its
                // peers too unless a rank cannot map its buffers), odd ones queue rank by rank.
                let reduce = if seed % 2 == 0 && seed % 3 != 2 { n } else { 0 };
                assert_eq!(direct, 4 * n + reduce, "n {n} seed {seed} merged {merged}");
                let want = if seed % 2 == 1 { 4 * (n - 1) } else { 0 };
                assert_eq!(
                    mailed.get(),
                    want,
                    "n {n} seed {seed} merged {merged}: mailed"
                );
            }
        }
    }
}

/// Direct all-reduces whose kernel writes the slice into every rank's output
/// (`CCL_IPC_DIRECT_REDUCE_WRITE_ALL`): exact with two to eight ranks, in place or not, under
/// any stream order, with no copy queued anywhere; ranks mixing both ways are exact too.
#[test]
fn all_reduces_written_by_their_kernels_are_exact_and_copy_nothing() {
    let case = |in_place, red| Case {
        kind: Kind::Coll(Collective::AllReduce),
        count: 3001,
        dtype: DataType::Int32,
        red: Reduction::Plain(red),
        in_place,
    };
    let cases = [
        case(false, ReduceKind::Sum),
        case(true, ReduceKind::Sum),
        case(true, ReduceKind::Max),
    ];
    for n in [2usize, 3, 4, 8] {
        for (write_all, seed) in [(Some(true), 0u64), (Some(true), 4), (None, 6), (None, 10)] {
            for merged in [false, true] {
                let s = Setup {
                    write_all,
                    ..Setup::new(n)
                };
                let copies = std::cell::Cell::new(0usize);
                let count = |d: &mut SimDevice, _r: usize| {
                    let c = d.lanes.values().flatten();
                    copies.set(copies.get() + c.filter(|o| matches!(o, Op::Copy(..))).count());
                };
                let direct = simulate(&s, &cases, merged, seed, Some(&count))
                    .unwrap_or_else(|e| panic!("n {n} {write_all:?} seed {seed}: {e}"));
                assert_eq!(direct, cases.len() * n, "n {n} seed {seed}");
                if write_all.is_some() {
                    assert_eq!(copies.get(), 0, "n {n} seed {seed}: copies queued");
                }
            }
        }
    }
}

/// Two ranks with takeover: a reduction whose first poster gives up waiting is done entirely
/// by the second (both slices of a reduce-scatter, the whole all-reduce and the copy into the
/// peer's output, a whole reduce into the root's output, whichever rank is root), with no host wait on either side. Exact under every stream order and call
/// order, in place or not, and with the passive rank's partner unable to export its own
/// buffers (the active rank needs only the passive one's).
#[test]
fn two_rank_reductions_done_by_one_rank_are_exact() {
    let s = Setup {
        takeover: true,
        ..Setup::new(2)
    };
    let mut cases = Vec::new();
    for kind in [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::Reduce { root: 0 },
        Collective::Reduce { root: 1 },
    ] {
        for in_place in [false, true] {
            for red in [ReduceKind::Sum, ReduceKind::Max] {
                cases.push(Case {
                    kind: Kind::Coll(kind),
                    count: 3001,
                    dtype: DataType::Int32,
                    red: Reduction::Plain(red),
                    in_place,
                });
            }
        }
    }
    let mut alone_total = 0;
    for seed in 0..12u64 {
        for merged in [false, true] {
            let (direct, alone, _) = simulate_counts(&s, &cases, merged, seed, None)
                .unwrap_or_else(|e| panic!("seed {seed} merged {merged}: {e}"));
            if seed % 2 == 1 && seed % 3 != 2 {
                // Rank by rank: the first poster never waits, so every case goes alone.
                assert_eq!(alone, cases.len(), "seed {seed}");
                assert_eq!(direct, 2 * cases.len(), "seed {seed}");
            }
            alone_total += alone;
        }
    }
    assert!(alone_total > 0);
}

/// Broadcasts over more than two ranks relayed as a pipelined scatter and all-gather of
/// direct transfers (one group per phase): exact under any lane order, merged queues, rank
/// call orders and unmappable buffers, in place or not, whatever the root.
#[test]
fn relayed_broadcasts_are_exact_under_any_stream_order() {
    for n in [3usize, 4, 5] {
        let s = Setup {
            // Four-byte elements: 3001 of them make four chunks of up to 1000.
            relay: Some(Relay {
                min_bytes: 1,
                chunk_bytes: 4000,
            }),
            ..Setup::new(n)
        };
        let mut cases = Vec::new();
        for root in [0, 1, n - 1] {
            for in_place in [false, true] {
                cases.push(Case {
                    kind: Kind::Coll(Collective::Broadcast { root }),
                    count: 3001,
                    dtype: DataType::Int32,
                    red: Reduction::Plain(ReduceKind::Sum),
                    in_place,
                });
            }
        }
        for seed in 0..6 {
            for merged in [true, false] {
                if let Err(e) = simulate(&s, &cases, merged, seed, None) {
                    panic!("n {n} seed {seed} merged {merged}: {e}");
                }
            }
        }
    }
}

/// With `CCL_IPC_LOCAL_COPY_LANES` above 1 an all-gather's own block is copied in parts on
/// several lanes that its transfers leave idle (so several copy engines move it), and the
/// result stays exact under any lane order.
#[test]
fn local_copies_split_over_idle_lanes_stay_exact() {
    let s = Setup {
        rx_lanes: 4,
        local_split: plan::LocalSplit {
            lanes: 4,
            min_part: 1024,
        },
        ..Setup::new(2)
    };
    let case = Case {
        kind: Kind::Coll(Collective::AllGather),
        count: 3000,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    };
    // Lanes holding a copy of exactly one part of the 12000-byte own block (4096 or 3808).
    let lanes_used = std::cell::RefCell::new(Vec::new());
    let look = |d: &mut SimDevice, r: usize| {
        let mut v: Vec<Lane> = d
            .lanes
            .iter()
            .filter(|(_, ops)| {
                ops.iter()
                    .any(|op| matches!(op, Op::Copy(_, _, b) if *b == 4096 || *b == 3808))
            })
            .map(|(l, _)| *l)
            .collect();
        v.sort_by_key(|l| format!("{l:?}"));
        lanes_used.borrow_mut().push((r, v));
    };
    for seed in 0..6 {
        // Seeds 2 and 5 make a rank's buffers unmappable (bounce path): exact all the same.
        simulate(&s, &[case], seed % 2 == 0, seed * 31 + 3, Some(&look)).unwrap();
    }
    let used = lanes_used.into_inner();
    assert!(
        used.iter().any(|(_, v)| v.len() >= 2),
        "no rank cut its local copy over several lanes: {used:?}"
    );
}

/// `CCL_IPC_PUSH_WAIT_MIN_BYTES`: a send below it gives up its push wait at once even with a
/// minute of wait allowed and the GPU busy, so the receiver, posting later, does both copies
/// (pulls ours, pushes its own); a send at the threshold still waits its window out.
#[test]
fn sends_below_the_wait_threshold_never_hold_the_host() {
    use std::time::{Duration, Instant};
    for (min, want_first) in [(1025usize, true), (1024, false)] {
        let dx = DirectSim::new(2);
        let mut counters: Vec<Counters> = (0..2).map(|_| Counters::new(2, 1)).collect();
        let (c0, c1) = counters.split_at_mut(1);
        let posting0 = post_exchange(&dx.boards, 0, 256, &mut c0[0]);
        // Rank 1 posts only after rank 0 settled (or would wait forever: it is the test).
        let far = Instant::now() + Duration::from_secs(60);
        let wait = rendezvous::PushWait {
            soft: far,
            hard: if want_first {
                far
            } else {
                Instant::now() + Duration::from_millis(50)
            },
            busy: &|| true,
            futile: &|| false,
        };
        let t = Instant::now();
        let plan0 = settle(&dx.boards, posting0, 0, wait, min, None, None);
        let took = t.elapsed();
        let send0 = plan0.transfers.iter().find(|t| t.outgoing).unwrap();
        if want_first {
            assert!(
                took < Duration::from_secs(5),
                "waited {took:?} below the threshold"
            );
            assert_eq!(send0.role, plan::Role::First);
            assert_eq!((plan0.waits.pushed, plan0.waits.left_to_pull), (0, 1));
        } else {
            // Nobody posted within the wait: it ran its 50 ms out, then left the pull.
            assert!(
                took >= Duration::from_millis(50),
                "did not wait at the threshold"
            );
            assert_eq!(send0.role, plan::Role::First);
        }
        let plan1 = settle(
            &dx.boards,
            post_exchange(&dx.boards, 1, 256, &mut c1[0]),
            1,
            wait,
            min,
            None,
            None,
        );
        // Rank 1 came second to both transfers: it copies both.
        assert!(plan1
            .transfers
            .iter()
            .all(|t| matches!(t.role, plan::Role::Second { .. })));
    }
}

/// `CCL_IPC_REMOTE_COPY`: a send of at least the remote-copy size gives up waiting for its
/// receiver at once, however long the exchange and push windows (the receiver will have this
/// GPU's engine push it); one byte under that size it waits its window out. The receiver,
/// posting later, copies both directions and marks the transfer it pulls as reachable from
/// either GPU (no VMM memory on either side), which is what lets its device queue that copy on
/// the peer GPU.
#[test]
fn a_send_the_receiver_copies_remotely_never_waits_for_it() {
    use std::time::{Duration, Instant};
    // Send and receive of 256 floats each: 1024 bytes.
    for (remote_min, gives_up) in [(1024usize, true), (1025, false)] {
        let dx = DirectSim::new(2);
        let mut counters: Vec<Counters> = (0..2).map(|_| Counters::new(2, 1)).collect();
        let (c0, c1) = counters.split_at_mut(1);
        let posting0 = post_exchange(&dx.boards, 0, 256, &mut c0[0]);
        let far = Instant::now() + Duration::from_secs(60);
        let wait = rendezvous::PushWait {
            soft: far,
            hard: Instant::now() + Duration::from_millis(50),
            busy: &|| true,
            futile: &|| false,
        };
        let t = Instant::now();
        // The exchange window is what a waiting send would sit out: 50 ms.
        let exchange = Some(t + Duration::from_millis(50));
        let plan0 = settle(&dx.boards, posting0, 0, wait, 0, exchange, Some(remote_min));
        let took = t.elapsed();
        let send0 = plan0.transfers.iter().find(|t| t.outgoing).unwrap();
        assert_eq!(send0.role, plan::Role::First);
        if gives_up {
            assert!(took < Duration::from_secs(5), "waited {took:?}");
        } else {
            assert!(
                took >= Duration::from_millis(50),
                "did not wait under the size"
            );
        }
        let plan1 = settle(
            &dx.boards,
            post_exchange(&dx.boards, 1, 256, &mut c1[0]),
            1,
            wait,
            0,
            None,
            Some(remote_min),
        );
        let pull = plan1.transfers.iter().find(|t| !t.outgoing).unwrap();
        assert!(matches!(pull.role, plan::Role::Second { .. }));
        assert_eq!(
            pull.there, None,
            "no context on the peer's GPU in the simulation"
        );
    }
}

/// `CCL_IPC_EXCHANGE_WAIT_US`: a group that sends to and receives from one peer (a pipeline
/// exchange) waits past its push window for the peer's receive, so each side pushes its own
/// data; the peer, posting 100 ms later, copies only its own send. With an exchange wait
/// shorter than the peer's delay (just too short) the sender gives up and the peer copies
/// both directions, as without one.
#[test]
fn an_exchange_waits_for_its_peer_so_that_each_side_pushes_its_own() {
    use std::time::{Duration, Instant};
    let delay = Duration::from_millis(100);
    for (exchange, each_pushes) in [
        (Duration::from_secs(30), true),
        (Duration::from_millis(20), false),
    ] {
        let dx = DirectSim::new(2);
        let boards = &dx.boards;
        let post = |rank: usize| post_exchange(boards, rank, 4096, &mut Counters::new(2, 1));
        let settle = |posting: posting::Posting, rank: usize, exchange_until: Option<Instant>| {
            // The push window itself is over before it starts.
            let now = Instant::now();
            let wait = rendezvous::PushWait {
                soft: now,
                hard: now,
                busy: &|| true,
                futile: &|| false,
            };
            settle(boards, posting, rank, wait, 0, exchange_until, None)
        };
        let posting0 = post(0);
        let t = Instant::now();
        let (plan0, plan1) = std::thread::scope(|sc| {
            let h = sc.spawn(|| {
                let p = settle(posting0, 0, Some(t + exchange));
                (p, t.elapsed())
            });
            std::thread::sleep(delay);
            let plan1 = settle(post(1), 1, Some(Instant::now() + exchange));
            let (plan0, took0) = h.join().unwrap();
            if each_pushes {
                assert!(took0 >= delay, "rank 0 returned after {took0:?}");
            } else {
                assert!(
                    took0 < delay,
                    "rank 0 waited {took0:?} past its exchange window"
                );
            }
            (plan0, plan1)
        });
        let role = |plan: &plan::Plan, outgoing: bool| {
            plan.transfers
                .iter()
                .find(|t| t.outgoing == outgoing)
                .map(|t| matches!(t.role, plan::Role::Second { .. }))
                .unwrap()
        };
        // Rank 0 posted its receive first: rank 1 always pushes its send.
        assert!(role(&plan1, true));
        assert!(!role(&plan0, false));
        // Rank 0's send: pushed by rank 0 after waiting, or pulled by rank 1.
        assert_eq!(role(&plan0, true), each_pushes);
        assert_eq!(role(&plan1, false), !each_pushes);
        assert_eq!(
            (plan0.waits.pushed, plan0.waits.left_to_pull),
            if each_pushes { (1, 0) } else { (0, 1) }
        );
    }
}

/// `CCL_IPC_MAILED_PUSH`: a send posted before its receive waits for nothing (the push windows
/// here are a minute long); it is mailed, the receiver posting later leaves the copy to it,
/// and the mail thread's step, run after the receiver posted, fills the send's slot with the
/// receiver's buffer: each side pushes its own data and neither host waited.
#[test]
fn a_mailed_send_never_waits_and_still_pushes_its_own_data() {
    use ccl_cuda::cuda::source::{MAIL_BYTES, MAIL_DST, MAIL_SLOT_WORDS, MAIL_TAG};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let dx = DirectSim::new(2);
    let mut counters: Vec<Counters> = (0..2).map(|_| Counters::new(2, 1)).collect();
    let (c0, c1) = counters.split_at_mut(1);
    let handed = std::sync::Mutex::new(Vec::new());
    let mail = |peer: usize, seq: u64, bytes: usize| {
        let mut h = handed.lock().unwrap();
        h.push((peer, seq, bytes));
        Some((0xA000 + h.len() as u64, 40 + h.len() as u64))
    };
    let t = Instant::now();
    let plan0 = settle_mailed(
        &dx.boards,
        post_exchange(&dx.boards, 0, 256, &mut c0[0]),
        0,
        &mail,
    );
    assert!(t.elapsed() < Duration::from_secs(5), "rank 0 waited");
    let send0 = plan0.transfers.iter().find(|t| t.outgoing).unwrap();
    assert_eq!(
        send0.role,
        plan::Role::Mailed {
            slot: 0xA001,
            tag: 41
        }
    );
    assert_eq!(*handed.lock().unwrap(), vec![(1, 0, 1024)]);
    assert_eq!(
        (
            plan0.waits.mailed,
            plan0.waits.pushed,
            plan0.waits.left_to_pull
        ),
        (1, 0, 0)
    );
    // Rank 1 posts second: it pushes its own send and leaves rank 0's to rank 0.
    let plan1 = settle_mailed(
        &dx.boards,
        post_exchange(&dx.boards, 1, 256, &mut c1[0]),
        1,
        &mail,
    );
    let role1 = |out: bool| {
        plan1
            .transfers
            .iter()
            .find(|t| t.outgoing == out)
            .unwrap()
            .role
    };
    assert!(matches!(role1(true), plan::Role::Second { .. }));
    assert_eq!(role1(false), plan::Role::First);
    assert_eq!(
        handed.lock().unwrap().len(),
        1,
        "rank 1 mailed a send it could push"
    );
    // The mail thread's look at rank 0's send now finds rank 1's receive buffer.
    let words: Vec<std::sync::atomic::AtomicU64> =
        (0..MAIL_SLOT_WORDS).map(|_| Default::default()).collect();
    let job = crate::mail::MailJob {
        slot: 0,
        tag: 41,
        src: 0,
        dst: 1,
        seq: 0,
        bytes: 1024,
        abort: Arc::new(AtomicBool::new(false)),
    };
    let step = crate::mail::step(&job, &dx.boards[1], &words, &mut |p| Ok(p.addr)).unwrap();
    assert_eq!(step, crate::mail::Step::Filled);
    let w = |i: usize| words[i].load(Ordering::Acquire);
    assert_eq!(
        (w(MAIL_TAG), w(MAIL_DST), w(MAIL_BYTES)),
        (41, base(1) + 1024 * 1024, 1024)
    );
}

/// `CCL_IPC_EAGER_SEND`: a send posted before its receive waits for nothing (the push and
/// exchange windows here are a minute long): it goes through the receiver's slots. The
/// receiver, posting later, pushes its own send and copies the eager one out of its slots,
/// cut from the sender's size; a receive posted before the send it matches is pushed into
/// by the sender as before. A receiver expecting less than the eager sender sends gets a size
/// error and its chunks land in spare bounce space, not past its buffer.
#[test]
fn an_eager_send_never_waits_and_the_receiver_copies_it_out_of_its_slots() {
    use std::time::{Duration, Instant};

    let dx = DirectSim::new(2);
    let mut counters: Vec<Counters> = (0..2).map(|_| Counters::new(2, 1)).collect();
    let (c0, c1) = counters.split_at_mut(1);
    let t = Instant::now();
    let (plan0, err) = settle_eager(&dx.boards, post_exchange(&dx.boards, 0, 256, &mut c0[0]), 0);
    assert!(t.elapsed() < Duration::from_secs(5), "rank 0 waited");
    assert!(err.is_none());
    let send = plan::Eager {
        peer: 1,
        outgoing: true,
        buf: base(0),
        bytes: 1024,
    };
    assert_eq!(plan0.eager, vec![send]);
    assert_eq!(
        (
            plan0.waits.eager,
            plan0.waits.pushed,
            plan0.waits.left_to_pull
        ),
        (1, 0, 0)
    );
    // Its receive was posted before rank 1's send: rank 1 pushes into it.
    assert_eq!(plan0.transfers.len(), 1);
    assert_eq!(plan0.transfers[0].role, plan::Role::First);
    let (plan1, err) = settle_eager(&dx.boards, post_exchange(&dx.boards, 1, 256, &mut c1[0]), 1);
    assert!(err.is_none());
    let recv = plan::Eager {
        peer: 0,
        outgoing: false,
        buf: base(1) + 1024 * 1024,
        bytes: 1024,
    };
    assert_eq!(plan1.eager, vec![recv]);
    assert_eq!(plan1.transfers.len(), 1);
    assert!(plan1.transfers[0].outgoing);
    assert!(matches!(plan1.transfers[0].role, plan::Role::Second { .. }));
    assert_eq!(
        plan1.waits.eager, 0,
        "rank 1's send found its receive posted"
    );

    // The next exchange: rank 1 sends 256 floats first, rank 0 expects 128.
    let (plan1, _) = settle_eager(&dx.boards, post_exchange(&dx.boards, 1, 256, &mut c1[0]), 1);
    assert_eq!(plan1.waits.eager, 1);
    let (plan0, err) = settle_eager(&dx.boards, post_exchange(&dx.boards, 0, 128, &mut c0[0]), 0);
    let err = err.expect("a size disagreement");
    assert!(err.to_string().contains("receives"), "{err}");
    let into = plan0.eager.iter().find(|e| !e.outgoing).unwrap();
    assert_eq!(into.bytes, 1024);
    assert!(
        into.buf >= bounce_base(0),
        "spare bounce space: {:#x}",
        into.buf
    );
}

/// `CCL_IPC_BATCH_COPIES`: a rank's direct copies (its own block included) go as one batch
/// on the caller's stream, queued in reverse (a batch has no order), beside ranks that still
/// use a lane per peer; every collective stays exact under any lane order and with every
/// queue merged into one, and batches were really queued. Two ranks as well (`1`), and with
/// a local-copy limit between the cases' own blocks.
#[test]
fn batched_copies_stay_exact_beside_per_lane_ranks() {
    for n in [2, 3, 4, 8] {
        let s = Setup::new(n);
        let cases = every_case(n, 700);
        let batches = std::cell::Cell::new(0);
        let count = |d: &mut SimDevice, _r: usize| batches.set(batches.get() + d.batches);
        // Seeds 2, 3 mod 5 batch on every rank, 4 mod 5 on odd ranks; even seeds post all
        // ranks first, 7 makes a rank's buffers unmappable (bounce copies).
        for (seed, merged) in [
            (2u64, false),
            (3, true),
            (4, false),
            (7, true),
            (12, false),
            (9, true),
        ] {
            simulate(&s, &cases, merged, seed, Some(&count))
                .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged}: {e}"));
        }
        assert!(batches.get() > 0, "n {n}: no batch queued");
        // Seeds 3 mod 5 batch only own blocks up to SIM_BATCH_LOCAL_MAX: blocks on both sides
        // of it, so one rank's groups go batched and on lanes in turn.
        let mut sized = every_case(n, 700);
        sized.extend(every_case(n, 3000));
        const { assert!(3000 * 4 > SIM_BATCH_LOCAL_MAX && 700 * 4 <= SIM_BATCH_LOCAL_MAX) };
        for (seed, merged) in [(8u64, false), (13, true), (18, false)] {
            simulate(&s, &sized, merged, seed, None)
                .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged} sized: {e}"));
        }
    }
}

/// Every rank posted before any queues (seeds 6 and 12 differ only in batching): driver calls
/// per rank on a lane per peer and direction against one batch (18 as 12, its batches limited). An out-of-place all-gather or
/// all-to-all takes 13 against 3 with two ranks (its "here", a fork and a join of two lanes,
/// the push's arrival wait, copy and "done" on its lane, the own block's copy beside, the wait
/// for the peer's push; batched, the flag operations before and after the batch go as one
/// call each), 25 and 49 with four and eight, and still 3 batched; a send/receive ring 9
/// against 3; a gather 7 against 3 on every rank (the root's own block alone batches too).
/// With a local-copy limit below the own block (seed 18, as `auto` has with two ranks) the
/// exchanges and the gather's root keep their lanes and the rest still batches. All exact.
#[test]
fn batches_take_three_driver_calls_at_any_rank_count() {
    for (n, exchange_on_lanes) in [(2, 13), (4, 25), (8, 49)] {
        let s = Setup::new(n);
        for (kind, lanes) in [
            (Kind::Coll(Collective::AllGather), exchange_on_lanes),
            (Kind::Coll(Collective::AlltoAll), exchange_on_lanes),
            (Kind::Ring, 9),
            (Kind::Coll(Collective::Gather { root: 0 }), 7),
        ] {
            let case = Case {
                kind,
                count: 4096,
                dtype: DataType::Int32,
                red: Reduction::Plain(ReduceKind::Sum),
                in_place: false,
            };
            let calls = |seed: u64| {
                let got = std::cell::RefCell::new(Vec::new());
                let count = |d: &mut SimDevice, _r: usize| got.borrow_mut().push(d.driver_calls());
                simulate(&s, &[case], false, seed, Some(&count))
                    .unwrap_or_else(|e| panic!("n {n} {kind:?} seed {seed}: {e}"));
                got.into_inner()
            };
            assert_eq!(calls(6), vec![lanes; n], "n {n} {kind:?} on lanes");
            assert_eq!(calls(12), vec![3; n], "n {n} {kind:?} batched");
            let own_block = 4096 * 4;
            assert!(own_block > SIM_BATCH_LOCAL_MAX);
            let limited = |r: usize| match kind {
                Kind::Coll(Collective::AllGather | Collective::AlltoAll) => lanes,
                Kind::Coll(Collective::Gather { root }) if r == root => lanes,
                _ => 3,
            };
            let want: Vec<usize> = (0..n).map(limited).collect();
            assert_eq!(calls(18), want, "n {n} {kind:?} limited");
        }
    }
}

/// Collectives on symmetric windows, two to eight ranks calling in random orders: every send
/// is pushed by its sender (none left to its receiver, who posted later or earlier), with every
/// byte where it belongs, on separate queues and on one merged queue. The same runs without
/// windows leave sends to their receivers. An in-place all-to-all (its receivers take their
/// blocks through their bounce buffers, which only their posts name) and a scatter whose
/// output may be in place (the peers' outputs could be at either of two places) meet as any,
/// exact.
#[test]
fn symmetric_windows_push_every_send_whoever_calls_first() {
    let case = |kind, in_place| Case::int_sum(Kind::Coll(kind), 1500, in_place);
    for n in [2usize, 3, 4, 8] {
        let mut cases = Vec::new();
        for in_place in [false, true] {
            for kind in [
                Collective::AllGather,
                Collective::Broadcast { root: n - 1 },
                Collective::Gather { root: 1 },
            ] {
                cases.push(case(kind, in_place));
            }
        }
        cases.push(case(Collective::Scatter { root: 0 }, false));
        cases.push(case(Collective::AlltoAll, false));
        let windows = Setup {
            windows: true,
            ..Setup::new(n)
        };
        let mut plain = 0;
        for seed in 0..8u64 {
            for merged in [false, true] {
                let pulled = simulate_pulls(&windows, &cases, merged, seed)
                    .unwrap_or_else(|e| panic!("n {n} seed {seed} merged {merged}: {e}"));
                assert_eq!(
                    pulled, 0,
                    "n {n} seed {seed} merged {merged}: sends left to pull"
                );
            }
            plain += simulate_pulls(&Setup::new(n), &cases, false, seed)
                .unwrap_or_else(|e| panic!("n {n} seed {seed} without windows: {e}"));
        }
        assert!(plain > 0, "n {n}: without windows some send is pulled");
        let in_place = [
            case(Collective::AlltoAll, true),
            case(Collective::Scatter { root: n / 2 }, true),
        ];
        for seed in 0..4u64 {
            simulate_pulls(&windows, &in_place, seed % 2 == 0, seed)
                .unwrap_or_else(|e| panic!("n {n} in-place all-to-all seed {seed}: {e}"));
        }
    }
}
