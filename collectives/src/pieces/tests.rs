//! The cutting rules, and pieces run on a model of two ranks' memories.

use super::*;
use crate::dtype::{DataType, ReduceKind};
use crate::task::Reduction;
use std::collections::{HashMap, VecDeque};

/// Each rank's memory: addresses BASE.. index a byte vector.
const BASE: usize = 0x1000;
const MEM: usize = 4096;

/// Streamed: lone all-reduces of plain reductions and lone all-to-alls longer than a
/// piece (an all-to-all's length is every rank's blocks); nothing else.
#[test]
fn streamed_takes_lone_all_reduces_and_all_to_alls_longer_than_a_piece() {
    use Collective as C;
    let one = |kind, count, red| {
        vec![Task {
            red,
            ..t(TaskKind::Coll(kind), 0, 64, count)
        }]
    };
    let sum = Reduction::Plain(ReduceKind::Sum);
    assert_eq!(
        streamed(&one(C::AllReduce, 100, sum), 4, StreamCut::fixed(10)),
        Some(10)
    );
    assert_eq!(
        streamed(&one(C::AllReduce, 10, sum), 4, StreamCut::fixed(10)),
        None
    );
    assert_eq!(
        streamed(
            &one(C::AllReduce, 100, Reduction::Avg),
            4,
            StreamCut::fixed(10)
        ),
        None
    );
    assert_eq!(
        streamed(&one(C::AllReduce, 100, sum), 4, StreamCut::fixed(0)),
        None
    );
    // 4 ranks x 3 elements = 12 bytes.
    assert_eq!(
        streamed(&one(C::AlltoAll, 3, sum), 4, StreamCut::fixed(10)),
        Some(10)
    );
    assert_eq!(
        streamed(&one(C::AlltoAll, 2, sum), 4, StreamCut::fixed(10)),
        None
    );
    assert_eq!(
        streamed(&one(C::AllGather, 100, sum), 4, StreamCut::fixed(10)),
        None
    );
    // Broadcast and reduce by their length; a reduce with a plain reduction only.
    assert_eq!(
        streamed(
            &one(C::Broadcast { root: 2 }, 11, sum),
            4,
            StreamCut::fixed(10)
        ),
        Some(10)
    );
    assert_eq!(
        streamed(
            &one(C::Reduce { root: 2 }, 11, sum),
            4,
            StreamCut::fixed(10)
        ),
        Some(10)
    );
    assert_eq!(
        streamed(
            &one(C::Reduce { root: 2 }, 11, Reduction::Avg),
            4,
            StreamCut::fixed(10)
        ),
        None
    );
    assert_eq!(
        streamed(
            &one(C::Broadcast { root: 2 }, 10, sum),
            4,
            StreamCut::fixed(10)
        ),
        None
    );
    // Gather and scatter by the root's buffer: 4 ranks x 3 elements.
    for c in [C::Gather { root: 1 }, C::Scatter { root: 1 }] {
        assert_eq!(streamed(&one(c, 3, sum), 4, StreamCut::fixed(10)), Some(10));
        assert_eq!(streamed(&one(c, 2, sum), 4, StreamCut::fixed(10)), None);
    }
    // A reduce-scatter by its input: 4 ranks x 3 elements.
    let rs = |count, red| streamed(&one(C::ReduceScatter, count, red), 4, StreamCut::fixed(10));
    assert_eq!(rs(3, sum), Some(10));
    assert_eq!(rs(2, sum), None);
    assert_eq!(rs(30, Reduction::Avg), None);
    let two = [one(C::AllReduce, 100, sum), one(C::AllReduce, 100, sum)].concat();
    assert_eq!(streamed(&two, 4, StreamCut::fixed(10)), None);
    // At most `most` pieces: 100 bytes in no more than 4 pieces of at least 10, or 30.
    let cut = |min, most| StreamCut { min, most };
    assert_eq!(
        streamed(&one(C::AllReduce, 100, sum), 4, cut(10, 4)),
        Some(25)
    );
    assert_eq!(
        streamed(&one(C::AllReduce, 100, sum), 4, cut(30, 4)),
        Some(30)
    );
    // At most MAX_PIECES pieces.
    assert_eq!(
        streamed(
            &one(C::AllReduce, 100 * MAX_PIECES, sum),
            4,
            StreamCut::fixed(10)
        ),
        Some(100)
    );
}

/// Streamed groups of sends and receives: when one operation is longer than a stream
/// piece, however long (none is cut into messages while they stream); the pieces grow as
/// the cut says, and so that neither direction has more than half of MAX_PIECES by bytes.
#[test]
fn streamed_p2p_takes_groups_of_sends_and_receives() {
    let send = |count| t(TaskKind::Send { peer: 1 }, 0, usize::MAX, count);
    let recv = |count| t(TaskKind::Recv { peer: 1 }, usize::MAX, 0, count);
    let fixed = StreamCut::fixed;
    assert_eq!(streamed_p2p(&[send(100), recv(100)], fixed(10)), Some(64));
    assert_eq!(streamed_p2p(&[send(100), recv(100)], fixed(100)), None);
    assert_eq!(streamed_p2p(&[send(100), recv(100)], StreamCut::OFF), None);
    assert_eq!(streamed_p2p(&[send(2000), recv(100)], fixed(10)), Some(64));
    let ar = t(TaskKind::Coll(Collective::AllReduce), 0, 1024, 100);
    assert_eq!(streamed_p2p(&[send(100), ar], fixed(10)), None);
    let big = 64 * MAX_PIECES * 10;
    assert_eq!(
        streamed_p2p(&[recv(big)], fixed(64)),
        Some(big / (MAX_PIECES / 2))
    );
    // A sixteenth of the longer direction (6400 bytes out, 640 in), to whole 64 bytes.
    let sixteenth = StreamCut { min: 10, most: 16 };
    assert_eq!(streamed_p2p(&[send(6400), recv(640)], sixteenth), Some(448));
    assert_eq!(streamed_p2p(&[send(64), recv(640)], sixteenth), Some(64));
}

/// While sends and receives stream, the caller's own sends and receives are never cut,
/// so a rank that sent alone (one streamed message) meets a peer that received in a group
/// with a collective; that collective's own messages are still cut, alike on both ranks.
/// Without the rule the grouped receive would be cut into messages its sender never sends.
#[test]
fn sends_and_receives_stay_one_message_while_they_stream() {
    let (n, piece, cut) = (2, 128, StreamCut::fixed(128));
    let ag = t(TaskKind::Coll(Collective::AllGather), 0, 1024, 200);
    let groups = |r: usize| {
        if r == 0 {
            vec![
                vec![t(TaskKind::Send { peer: 1 }, 2000, usize::MAX, 700)],
                vec![ag],
            ]
        } else {
            vec![vec![
                t(TaskKind::Recv { peer: 0 }, usize::MAX, 2000, 700),
                ag,
            ]]
        }
    };
    let whole: Vec<Vec<Vec<Task>>> = (0..n).map(groups).collect();
    assert!(streamed_p2p(&whole[0][0], cut).is_some());
    assert!(streamed_p2p(&whole[1][0], cut).is_none());
    let receives = |jobs: &[Vec<Task>]| {
        jobs.iter()
            .flatten()
            .filter(|x| x.kind == TaskKind::Recv { peer: 0 })
            .map(|x| x.count)
            .collect::<Vec<_>>()
    };
    let split_up: Vec<Vec<Vec<Task>>> = (0..n)
        .map(|r| {
            whole[r]
                .iter()
                .flat_map(|g| match streamed_p2p(g, cut) {
                    Some(_) => vec![g.clone()],
                    None => jobs_with(g, r, n, piece, StreamCut::OFF, true).0,
                })
                .collect()
        })
        .collect();
    assert_eq!(receives(&split_up[1]), vec![700, 128, 72]);
    assert_eq!(run(&split_up, n), run(&whole, n));
    let (cut_up, _) = jobs_with(&whole[1][0], 1, n, piece, StreamCut::OFF, false);
    assert_eq!(
        receives(&cut_up),
        vec![128, 128, 128, 128, 128, 60, 128, 72]
    );
}

/// Two ranks' tasks for a program of `(kind, count)` operations (0: a send from rank 0
/// to 1, 1: from 1 to 0, 2: an all-gather, 3: an all-reduce, 4: an all-to-all of `count`
/// bytes per block, 5: a broadcast from rank `count % 2`), each on bytes of its own.
fn program(ops: &[(u8, usize)]) -> [Vec<Task>; 2] {
    let mut at = 0;
    let mut tasks: [Vec<Task>; 2] = Default::default();
    for &(kind, c) in ops {
        for (r, list) in tasks.iter_mut().enumerate() {
            list.push(match kind {
                0 | 1 if usize::from(kind) == r => {
                    t(TaskKind::Send { peer: 1 - r }, at, usize::MAX, c)
                }
                0 | 1 => t(TaskKind::Recv { peer: 1 - r }, usize::MAX, at, c),
                2 => t(TaskKind::Coll(Collective::AllGather), at, at + c, c),
                3 => t(TaskKind::Coll(Collective::AllReduce), at, at + c, c),
                4 => t(TaskKind::Coll(Collective::AlltoAll), at, at + 2 * c, c),
                _ => t(
                    TaskKind::Coll(Collective::Broadcast { root: c % 2 }),
                    at,
                    at + c,
                    c,
                ),
            });
        }
        at += match kind {
            2 => 3 * c,
            4 => 4 * c,
            _ => 2 * c,
        };
    }
    tasks
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(512))]

    /// Whatever two ranks call (sends either way, all-gathers, all-reduces, all-to-alls,
    /// broadcasts) and however each groups its calls, the groups run as
    /// `gpu::submit` runs them while sends and receives stream (a lone streamed collective
    /// whole, a send/receive group as one streamed plan, anything else split with the
    /// caller's sends and receives left whole) meet, and leave what the whole groups leave.
    #[test]
    fn any_grouping_meets_while_sends_and_receives_stream(
        ops in proptest::collection::vec((0u8..6, 1usize..150), 1..7),
        ends in proptest::collection::vec(proptest::bool::ANY, 12),
    ) {
        let (n, piece, cut) = (2, 64, StreamCut::fixed(128));
        let tasks = program(&ops);
        // Rank r ends a group after its task i where ends[r * 6 + i] says so.
        let whole: Vec<Vec<Vec<Task>>> = (0..n)
            .map(|r| {
                let mut groups = vec![Vec::new()];
                for (i, task) in tasks[r].iter().enumerate() {
                    if let Some(g) = groups.last_mut() {
                        g.push(*task);
                    }
                    if ends[r * 6 + i] && i + 1 < tasks[r].len() {
                        groups.push(Vec::new());
                    }
                }
                groups
            })
            .collect();
        let split_up: Vec<Vec<Vec<Task>>> = (0..n)
            .map(|r| {
                whole[r]
                    .iter()
                    .flat_map(|g| {
                        if streamed(g, n, cut).is_some() || streamed_p2p(g, cut).is_some() {
                            vec![g.clone()]
                        } else {
                            jobs_with(g, r, n, piece, cut, true).0
                        }
                    })
                    .collect()
            })
            .collect();
        proptest::prop_assert_eq!(run(&split_up, n), run(&whole, n));
    }
}

fn t(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
    Task {
        kind,
        send: if send == usize::MAX { 0 } else { BASE + send },
        recv: if recv == usize::MAX { 0 } else { BASE + recv },
        count,
        dtype: DataType::Uint8,
        red: Reduction::Plain(ReduceKind::Sum),
        stream: 0,
        fold: false,
    }
}

fn memories(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|r| (0..MEM).map(|i| (i * 7 + r * 31 + 1) as u8).collect())
        .collect()
}

/// Runs groups (`groups[rank]`, in order) the way the proxies would: collectives of all
/// ranks together, in order; sends and receives matched per (source, destination) in
/// order, sizes checked. Returns the memories after.
fn run(groups: &[Vec<Vec<Task>>], n: usize) -> Vec<Vec<u8>> {
    let mut mem = memories(n);
    let before = mem.clone();
    let colls: Vec<Vec<Task>> = (0..n)
        .map(|r| {
            groups[r]
                .iter()
                .flatten()
                .filter(|t| matches!(t.kind, TaskKind::Coll(_)))
                .copied()
                .collect()
        })
        .collect();
    let rounds = colls[0].len();
    assert!(
        colls.iter().all(|c| c.len() == rounds),
        "ranks run different collectives"
    );
    for k in 0..rounds {
        let ts: Vec<Task> = colls.iter().map(|c| c[k]).collect();
        let c = ts[0].count;
        assert!(
            ts.iter().all(|x| x.count == c && x.kind == ts[0].kind),
            "{ts:?}"
        );
        let rd = |m: &Vec<Vec<u8>>, r: usize, a: usize, i: usize| m[r][a - BASE + i];
        let snap = mem.clone();
        for i in 0..c {
            match ts[0].kind {
                TaskKind::Coll(Collective::AllReduce) => {
                    let v = (0..n).fold(0u8, |a, r| a.wrapping_add(rd(&snap, r, ts[r].send, i)));
                    for r in 0..n {
                        mem[r][ts[r].recv - BASE + i] = v;
                    }
                }
                TaskKind::Coll(Collective::Reduce { root }) => {
                    let v = (0..n).fold(0u8, |a, r| a.wrapping_add(rd(&snap, r, ts[r].send, i)));
                    mem[root][ts[root].recv - BASE + i] = v;
                }
                TaskKind::Coll(Collective::Broadcast { root }) => {
                    let v = rd(&snap, root, ts[root].send, i);
                    for r in 0..n {
                        mem[r][ts[r].recv - BASE + i] = v;
                    }
                }
                TaskKind::Coll(Collective::AllGather) => {
                    for r in 0..n {
                        for q in 0..n {
                            mem[r][ts[r].recv - BASE + q * c + i] = rd(&snap, q, ts[q].send, i);
                        }
                    }
                }
                TaskKind::Coll(Collective::AlltoAll) => {
                    for r in 0..n {
                        for q in 0..n {
                            mem[r][ts[r].recv - BASE + q * c + i] =
                                rd(&snap, q, ts[q].send, r * c + i);
                        }
                    }
                }
                k => panic!("not modelled: {k:?}"),
            }
        }
    }
    let mut sends: HashMap<(usize, usize), VecDeque<Task>> = HashMap::new();
    for (r, g) in groups.iter().enumerate() {
        for x in g.iter().flatten() {
            if let TaskKind::Send { peer } = x.kind {
                sends.entry((r, peer)).or_default().push_back(*x);
            }
        }
    }
    for (r, g) in groups.iter().enumerate() {
        for x in g.iter().flatten() {
            if let TaskKind::Recv { peer } = x.kind {
                let s = sends
                    .get_mut(&(peer, r))
                    .and_then(|q| q.pop_front())
                    .unwrap_or_else(|| panic!("receive {x:?} of rank {r} has no send"));
                assert_eq!(s.count, x.count, "rank {peer} -> {r}: piece sizes differ");
                for i in 0..x.count {
                    mem[r][x.recv - BASE + i] = before[peer][s.send - BASE + i];
                }
            }
        }
    }
    assert!(sends.values().all(|q| q.is_empty()), "unmatched sends");
    mem
}

/// The proxy jobs a split makes of a group, after checking its gates.
fn jobs(g: &[Task], r: usize, n: usize, piece: usize) -> (Vec<Vec<Task>>, bool) {
    jobs_with(g, r, n, piece, StreamCut::OFF, false)
}

/// [`jobs`] with collectives streamed as `stream` says and the caller's sends and
/// receives left whole or not.
fn jobs_with(
    g: &[Task],
    r: usize,
    n: usize,
    piece: usize,
    stream: StreamCut,
    whole_p2p: bool,
) -> (Vec<Vec<Task>>, bool) {
    match split(g, r, n, piece, stream, whole_p2p, &|_| false) {
        Split::Whole => (vec![g.to_vec()], false),
        Split::Sequential(ts) => (ts.into_iter().map(|t| vec![t]).collect(), true),
        Split::Gated {
            tasks,
            input,
            output,
            gates,
            local,
        } => {
            assert!(local.is_empty());
            assert!((1..=MAX_PIECES).contains(&gates));
            assert_eq!((input.len(), output.len()), (tasks.len(), tasks.len()));
            let mut lane_gate: HashMap<(usize, bool), usize> = HashMap::new();
            for (i, t) in tasks.iter().enumerate() {
                assert!(input[i] < gates && output[i] < gates);
                match t.kind {
                    TaskKind::Send { peer } | TaskKind::Recv { peer } => {
                        assert_eq!(input[i], output[i]);
                        let l = (peer, matches!(t.kind, TaskKind::Send { .. }));
                        let last = lane_gate.insert(l, input[i]).unwrap_or(0);
                        assert!(input[i] >= last, "gates go back on a lane");
                    }
                    TaskKind::Coll(_) => assert_eq!((input[i], output[i]), (0, gates - 1)),
                }
            }
            (vec![tasks], true)
        }
    }
}

/// Splits every rank's groups and checks: the same outcome as unsplit, and whether it split.
fn same_outcome(groups: &dyn Fn(usize) -> Vec<Vec<Task>>, n: usize, piece: usize, splits: bool) {
    let whole: Vec<Vec<Vec<Task>>> = (0..n).map(groups).collect();
    let mut did = false;
    let split_up: Vec<Vec<Vec<Task>>> = (0..n)
        .map(|r| {
            whole[r]
                .iter()
                .flat_map(|g| {
                    let (j, d) = jobs(g, r, n, piece);
                    did |= d;
                    j
                })
                .collect()
        })
        .collect();
    assert_eq!(did, splits, "split {split_up:?}");
    assert_eq!(run(&split_up, n), run(&whole, n));
}

/// An operation that would stream alone (a plain all-reduce or an all-to-all longer than
/// a stream piece) stays whole in a group too, so a peer that called it alone (one
/// streamed collective) sees the same collectives; without streaming it is cut.
#[test]
fn an_operation_that_would_stream_alone_stays_whole_in_a_group() {
    let n = 2;
    let send = t(TaskKind::Send { peer: 1 }, 3000, usize::MAX, 100);
    for (coll, count) in [(Collective::AllReduce, 1000), (Collective::AlltoAll, 200)] {
        let op = t(TaskKind::Coll(coll), 0, 1024, count);
        let colls = |tasks: &[Task]| {
            tasks
                .iter()
                .filter(|x| matches!(x.kind, TaskKind::Coll(_)))
                .map(|x| x.count)
                .collect::<Vec<_>>()
        };
        let Split::Gated { tasks, .. } =
            split(&[op, send], 0, n, 64, StreamCut::fixed(128), false, &|_| {
                false
            })
        else {
            panic!("{coll:?}: not gated");
        };
        assert_eq!(colls(&tasks), vec![count], "{coll:?} streamed");
        assert!(
            streamed(&[op], n, StreamCut::fixed(128)).is_some(),
            "{coll:?}"
        );
        let Split::Gated { tasks, .. } =
            split(&[op, send], 0, n, 64, StreamCut::OFF, false, &|_| false)
        else {
            panic!("{coll:?}: not gated");
        };
        assert_ne!(colls(&tasks), vec![count], "{coll:?} not streamed");
    }
}

#[test]
fn elementwise_collectives_split_in_and_out_of_place() {
    for n in [2, 3] {
        for (s, r) in [(0, 1024), (0, 0)] {
            let ar = |_| vec![vec![t(TaskKind::Coll(Collective::AllReduce), s, r, 1000)]];
            same_outcome(&ar, n, 64, true);
            let bc = |_| {
                vec![vec![t(
                    TaskKind::Coll(Collective::Broadcast { root: 1 }),
                    s,
                    r,
                    999,
                )]]
            };
            same_outcome(&bc, n, 100, true);
            let rd = |_| {
                vec![vec![t(
                    TaskKind::Coll(Collective::Reduce { root: n - 1 }),
                    s,
                    r,
                    777,
                )]]
            };
            same_outcome(&rd, n, 256, true);
        }
    }
}

#[test]
fn all_gather_and_alltoall_become_pieces_of_sends_and_receives() {
    for n in [2, 3, 4] {
        let c = 200;
        let ag = |_| vec![vec![t(TaskKind::Coll(Collective::AllGather), 0, 1024, c)]];
        same_outcome(&ag, n, 48, true);
        // In place: the rank's own block is the input.
        let ag_in = |r: usize| {
            vec![vec![t(
                TaskKind::Coll(Collective::AllGather),
                1024 + r * c,
                1024,
                c,
            )]]
        };
        same_outcome(&ag_in, n, 48, true);
        let a2a = |_| vec![vec![t(TaskKind::Coll(Collective::AlltoAll), 0, 2048, c)]];
        same_outcome(&a2a, n, 64, true);
    }
}

/// With both buffers on the device, a cut all-to-all's or all-gather's own block is a
/// local copy (not a send to and receive from itself); in place there is nothing to copy.
#[test]
fn own_block_on_the_device_becomes_a_local_copy() {
    let self_lane = |ts: &[Task], r: usize| {
        ts.iter().any(
            |t| matches!(t.kind, TaskKind::Send { peer } | TaskKind::Recv { peer } if peer == r),
        )
    };
    for n in [2, 3, 4] {
        for r in 0..n {
            let c = 200;
            let cases = [
                (
                    t(TaskKind::Coll(Collective::AlltoAll), 0, 2048, c),
                    Some((r * c, 2048 + r * c)),
                ),
                (
                    t(TaskKind::Coll(Collective::AllGather), 0, 1024, c),
                    Some((0, 1024 + r * c)),
                ),
                (
                    t(TaskKind::Coll(Collective::AllGather), 1024 + r * c, 1024, c),
                    None,
                ),
            ];
            for (task, own) in cases {
                let Split::Gated { tasks, local, .. } =
                    split(&[task], r, n, 48, StreamCut::OFF, false, &|_| true)
                else {
                    panic!("{task:?} not gated");
                };
                let want: Vec<LocalCopy> = own
                    .map(|(s, d)| LocalCopy {
                        src: BASE + s,
                        dst: BASE + d,
                        bytes: c,
                    })
                    .into_iter()
                    .collect();
                assert_eq!(local, want, "{task:?} rank {r} of {n}");
                assert!(!self_lane(&tasks, r), "{task:?}: still a lane to itself");
                // Off the device the own block stays a send and receive (out of place).
                let Split::Gated { tasks, local, .. } =
                    split(&[task], r, n, 48, StreamCut::OFF, false, &|_| false)
                else {
                    panic!("{task:?} not gated");
                };
                assert!(local.is_empty());
                assert_eq!(self_lane(&tasks, r), own.is_some());
            }
        }
    }
}

/// Rank 0 sends A then B to rank 1 in two groups; rank 1 receives both in one group, and
/// sends back in between: pieces still pair in call order per peer.
#[test]
fn sends_and_receives_pair_up_whatever_the_groups() {
    let groups = |r: usize| {
        if r == 0 {
            vec![
                vec![t(TaskKind::Send { peer: 1 }, 0, usize::MAX, 700)],
                vec![
                    t(TaskKind::Send { peer: 1 }, 800, usize::MAX, 90),
                    t(TaskKind::Recv { peer: 1 }, usize::MAX, 2000, 300),
                ],
            ]
        } else {
            vec![vec![
                t(TaskKind::Recv { peer: 0 }, usize::MAX, 1000, 700),
                t(TaskKind::Send { peer: 0 }, 3000, usize::MAX, 300),
                t(TaskKind::Recv { peer: 0 }, usize::MAX, 1800, 90),
            ]]
        }
    };
    same_outcome(&groups, 2, 128, true);
    // Self send/receive in a group with others.
    let selfish = |r: usize| {
        vec![vec![
            t(TaskKind::Send { peer: r }, 0, usize::MAX, 500),
            t(TaskKind::Recv { peer: r }, usize::MAX, 1000, 500),
            t(TaskKind::Send { peer: 1 - r }, 1600, usize::MAX, 300),
            t(TaskKind::Recv { peer: 1 - r }, usize::MAX, 2400, 300),
        ]]
    };
    same_outcome(&selfish, 2, 100, true);
}

#[test]
fn what_cannot_be_split_stays_whole_and_mixed_groups_cut_alike() {
    let n = 2;
    // Small: one piece anyway.
    let small = |_| vec![vec![t(TaskKind::Coll(Collective::AllReduce), 0, 1024, 50)]];
    same_outcome(&small, n, 64, false);
    // Off.
    let off = |_| vec![vec![t(TaskKind::Coll(Collective::AllReduce), 0, 1024, 500)]];
    same_outcome(&off, n, 0, false);
    let rs = t(TaskKind::Coll(Collective::ReduceScatter), 0, 2048, 500);
    assert!(matches!(
        split(&[rs], 0, 2, 64, StreamCut::OFF, false, &|_| false),
        Split::Whole
    ));
    // A collective beside point-to-point on one rank, alone on the other (and the
    // receive in a group of its own): every operation is cut alike.
    let mixed = |r: usize| {
        if r == 0 {
            vec![vec![
                t(TaskKind::Coll(Collective::AllReduce), 0, 0, 500),
                t(TaskKind::Send { peer: 1 }, 1000, usize::MAX, 500),
                t(TaskKind::Recv { peer: 1 }, usize::MAX, 2000, 300),
            ]]
        } else {
            vec![
                vec![t(TaskKind::Coll(Collective::AllReduce), 0, 0, 500)],
                vec![t(TaskKind::Send { peer: 0 }, 600, usize::MAX, 300)],
                vec![t(TaskKind::Recv { peer: 0 }, usize::MAX, 1000, 500)],
            ]
        }
    };
    same_outcome(&mixed, n, 64, true);
    // Tiny pieces of a large operation: at most MAX_PIECES, still exact.
    let big = |_| vec![vec![t(TaskKind::Coll(Collective::AllReduce), 0, 0, 4000)]];
    same_outcome(&big, n, 1, true);
    let ar = t(TaskKind::Coll(Collective::AllReduce), 0, 0, 4000);
    let Split::Sequential(p) = split(&[ar], 0, 2, 1, StreamCut::OFF, false, &|_| false) else {
        panic!("not cut");
    };
    assert!(
        (MAX_PIECES / 2..=MAX_PIECES).contains(&p.len()),
        "{} pieces",
        p.len()
    );
    // Many sends to one peer, each cut: more positions than gates, gates shared.
    let many = |r: usize| {
        let kind = |_| {
            if r == 0 {
                TaskKind::Send { peer: 1 }
            } else {
                TaskKind::Recv { peer: 0 }
            }
        };
        vec![(0..300)
            .map(|i| t(kind(i), i * 10, i * 10, 10))
            .collect::<Vec<_>>()]
    };
    same_outcome(&many, n, 4, true);
}
