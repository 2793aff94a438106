//! Splitting staged GPU groups into pieces, so the copies to and from pinned host memory
//! overlap the network: the stream copies piece k+1 down while the proxy sends piece k, and
//! copies piece k back up while the proxy sends piece k+1. Unsplit, a 128 MiB operation over
//! the network path paid device-to-host, network and host-to-device one after the other.
//!
//! What a peer sees must not depend on how this rank grouped its calls, so every operation is
//! cut by its own size alone: an all-reduce, broadcast or reduce (elementwise: a piece of the
//! input gives the same piece of the output, in place too) into that many smaller collectives,
//! a send or receive into that many messages (both ends share the byte count; none while sends
//! and receives stream, `CCL_GPU_STREAM_P2P`, which every rank sets alike), an all-gather
//! or all-to-all into sends and receives per peer, cut likewise. Reduce-scatter, gather and
//! scatter stay whole.
//!
//! How the pieces run is this rank's own business. A lone elementwise collective runs as one
//! proxy job per piece, in order (every rank runs the same collectives in the same order).
//! Anything else runs as ONE proxy job whose sends wait for their piece's bytes to reach host
//! memory and whose receives report when their piece has landed (the executor's piece gates):
//! running pieces of point-to-point groups as jobs one after another could deadlock, a piece
//! of one rank waiting for a message the peer sends only in a later job.

use crate::Collective;

use crate::task::{Task, TaskKind};

/// Most gates (flag slots) of one group: longer groups share gates between neighbouring
/// pieces; larger operations get larger pieces, so no operation is cut more often than this.
pub const MAX_PIECES: usize = 256;

/// How a streamed operation ([`streamed`]) is cut: pieces of at least `min` bytes (an
/// operation no longer than that is not streamed; 0: nothing is), and no more than `most` of
/// them, so a larger operation gets larger pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCut {
    pub min: usize,
    pub most: usize,
}

impl StreamCut {
    /// Nothing streams.
    pub const OFF: StreamCut = StreamCut {
        min: 0,
        most: MAX_PIECES,
    };

    /// Pieces of `min` bytes, grown only where there would be more than [`MAX_PIECES`].
    pub const fn fixed(min: usize) -> StreamCut {
        StreamCut {
            min,
            most: MAX_PIECES,
        }
    }

    /// The piece length for an operation of `bytes`.
    fn per(self, bytes: usize) -> usize {
        self.min.max(bytes.div_ceil(self.most.clamp(1, MAX_PIECES)))
    }
}

/// How a staged group runs.
#[derive(Debug, Clone)]
pub enum Split {
    /// As it is: one proxy job.
    Whole,
    /// A lone all-reduce, broadcast or reduce: one collective per piece, each a proxy job,
    /// in order.
    Sequential(Vec<Task>),
    /// One proxy job over `tasks`. Gate `input[i]` opens when task i's input bytes are in host
    /// memory; its output may go back to the GPU once gate `output[i]` has landed. Gates run
    /// in order; the last lands when the job ends.
    Gated {
        tasks: Vec<Task>,
        input: Vec<usize>,
        output: Vec<usize>,
        gates: usize,
        local: Vec<LocalCopy>,
    },
}

/// A rank's own block of a cut all-to-all or all-gather whose input and output are both on its
/// GPU: copied there, on the stream, instead of down to host memory, across and back up (which
/// tripled the bytes an out-of-place all-to-all put over PCIe and cost the proxy a host copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalCopy {
    pub src: usize,
    pub dst: usize,
    pub bytes: usize,
}

/// Gates of a gated group's tasks (see [`Split::Gated`]).
#[derive(Debug, Clone)]
pub struct Gating {
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    pub gates: usize,
    pub local: Vec<LocalCopy>,
}

impl Split {
    /// The proxy jobs (each the tasks of one plan list) of the group `whole`, and the gates
    /// of a gated one.
    pub fn into_jobs(self, whole: Vec<Task>) -> (Vec<Vec<Task>>, Option<Gating>) {
        match self {
            Split::Whole => (vec![whole], None),
            Split::Sequential(pieces) => (pieces.into_iter().map(|t| vec![t]).collect(), None),
            Split::Gated {
                tasks,
                input,
                output,
                gates,
                local,
            } => (
                vec![tasks],
                Some(Gating {
                    input,
                    output,
                    gates,
                    local,
                }),
            ),
        }
    }
}

/// Pieces of `t` (at least one): `piece_bytes` each, or more for very large operations.
fn cut(t: &Task, piece_bytes: usize) -> Vec<Task> {
    let sz = t.dtype.size();
    let bytes = t.count.saturating_mul(sz);
    let per = (piece_bytes.max(bytes.div_ceil(MAX_PIECES)) / sz).max(1);
    let k = t.count.div_ceil(per).max(1);
    (0..k)
        .map(|i| {
            let lo = i * per;
            let at = |p: usize| if p == 0 { 0 } else { p + lo * sz };
            Task {
                send: at(t.send),
                recv: at(t.recv),
                count: per.min(t.count - lo.min(t.count)),
                ..*t
            }
        })
        .collect()
}

/// Whether `tasks` is a lone all-reduce, reduce-scatter or reduce with a plain reduction, or a
/// lone broadcast, all-to-all, gather or scatter, longer than `cut.min` (by its input; a
/// gather by the root's output, a broadcast by the root's input), that runs as ONE plan on
/// piece gates (the executor's collective gates): its operations read each piece of the input once
/// the stream copied it down and release each piece of the output once written, instead of one
/// collective (and proxy job) per piece, whose steps each drained the links, or (reduce-scatter,
/// gather, scatter) one collective whose whole input went down before it started and whole
/// output up after it ended: for these the messages are the same either way. Returns the piece
/// length in bytes (whole elements, at most `cut.most` pieces). Pre-scaled and averaged
/// reductions touch the whole buffer before or after the steps, so they stay as they were. Like
/// every cut, decided by the operation alone (not by where its buffers are), so every rank
/// decides alike.
pub fn streamed(tasks: &[Task], nranks: usize, cut: StreamCut) -> Option<usize> {
    let [t] = tasks else { return None };
    let plain = matches!(t.red, crate::task::Reduction::Plain(_));
    let elems = match t.kind {
        TaskKind::Coll(Collective::AllReduce) if plain => t.count,
        TaskKind::Coll(Collective::ReduceScatter) if plain => t.count.checked_mul(nranks)?,
        TaskKind::Coll(Collective::AlltoAll) => t.count.checked_mul(nranks)?,
        // By the root's larger buffer, so every rank decides alike.
        TaskKind::Coll(Collective::Gather { .. } | Collective::Scatter { .. }) => {
            t.count.checked_mul(nranks)?
        }
        TaskKind::Coll(Collective::Broadcast { .. }) => t.count,
        TaskKind::Coll(Collective::Reduce { .. }) if plain => t.count,
        _ => return None,
    };
    let sz = t.dtype.size();
    let bytes = elems.checked_mul(sz)?;
    if cut.min == 0 || bytes <= cut.min {
        return None;
    }
    Some((cut.per(bytes) / sz).max(1) * sz)
}

/// Whether `tasks` is a group of sends and receives worth streaming under `cut` (the send and
/// receive cut, [`StreamCut::OFF`] when `CCL_GPU_STREAM_P2P` is off): some operation is longer
/// than `cut.min`. It then runs as one plan on byte-range gates
/// (the executor plan's gate bytes): each send's frames wait for the stream to copy their
/// piece down, each receive's finished pieces go back up while the rest arrive. With the cut
/// on, [`split`] never cuts a send or receive either, so each is one message whichever way the
/// ranks grouped it. Returns the piece length in bytes (`cut.per` of the longer direction's
/// bytes, and at most [`MAX_PIECES`] / 2 pieces per direction).
pub fn streamed_p2p(tasks: &[Task], cut: StreamCut) -> Option<usize> {
    let mut total = [0usize; 2];
    let mut longest = 0;
    for t in tasks {
        let bytes = t.count.checked_mul(t.dtype.size())?;
        let dir = match t.kind {
            TaskKind::Send { .. } => 0,
            TaskKind::Recv { .. } => 1,
            TaskKind::Coll(_) => return None,
        };
        total[dir] = total[dir].checked_add(bytes)?;
        longest = longest.max(bytes);
    }
    if cut.min == 0 || longest <= cut.min || tasks.len() > MAX_PIECES / 2 {
        return None;
    }
    // Every operation starts a piece of its own: half the pieces for those, half for bytes.
    let most = total[0].max(total[1]);
    let per = cut.per(most).max(most.div_ceil(MAX_PIECES / 2));
    Some(per.next_multiple_of(64))
}

/// How the group runs (`piece_bytes` 0: whole). `whole_p2p`: the caller's sends and receives
/// are never cut (sends and receives stream, [`streamed_p2p`]). `on_device(p)`: address `p` is
/// GPU memory of this rank, so a cut operation's own block from and to such memory becomes a
/// [`LocalCopy`].
pub fn split(
    tasks: &[Task],
    rank: usize,
    nranks: usize,
    piece_bytes: usize,
    stream: StreamCut,
    whole_p2p: bool,
    on_device: &dyn Fn(usize) -> bool,
) -> Split {
    if piece_bytes == 0 || tasks.is_empty() {
        return Split::Whole;
    }
    if let [t] = tasks {
        if t.elementwise() {
            let p = cut(t, piece_bytes);
            return if p.len() > 1 {
                Split::Sequential(p)
            } else {
                Split::Whole
            };
        }
    }
    // Cut every operation; point-to-point pieces take consecutive positions on their
    // (peer, direction) lane, so a later operation's pieces follow an earlier one's.
    let mut lanes: std::collections::HashMap<(usize, bool), usize> = Default::default();
    let mut out = Vec::new();
    let mut pos = Vec::new();
    let mut cut_any = false;
    let mut local = Vec::new();
    for t in tasks {
        if streamed(std::slice::from_ref(t), nranks, stream).is_some() {
            // Alone it would run whole on piece gates ([`streamed`]); in a group it runs
            // whole too, so its peers see the same messages however each rank grouped it.
            pos.push(None);
            out.push(*t);
            continue;
        }
        let parts = match t.kind {
            // Worth cutting only when a block is (what every rank sees alike).
            TaskKind::Coll(Collective::AllGather | Collective::AlltoAll)
                if t.count.saturating_mul(t.dtype.size()) > piece_bytes =>
            {
                match as_p2p(t, rank, nranks, on_device) {
                    Some((v, own)) => {
                        local.extend(own);
                        v
                    }
                    None => vec![*t],
                }
            }
            _ => vec![*t],
        };
        for p in parts {
            let lane = match p.kind {
                TaskKind::Send { peer } => Some((peer, true)),
                TaskKind::Recv { peer } => Some((peer, false)),
                TaskKind::Coll(_) => None,
            };
            let pieces = match p.kind {
                TaskKind::Coll(_) if !p.elementwise() => vec![p],
                // The caller's own sends and receives stay one message each while sends and
                // receives stream ([`streamed_p2p`]): the peer may have grouped its end alone.
                TaskKind::Send { .. } | TaskKind::Recv { .. } if whole_p2p && p.kind == t.kind => {
                    vec![p]
                }
                _ => cut(&p, piece_bytes),
            };
            cut_any |= pieces.len() > 1 || p.kind != t.kind;
            let first = lane.map_or(0, |l| *lanes.get(&l).unwrap_or(&0));
            if let Some(l) = lane {
                lanes.insert(l, first + pieces.len());
            }
            for (i, q) in pieces.into_iter().enumerate() {
                // Collectives need all their input at the start and give output at the end.
                pos.push(lane.map(|_| first + i));
                out.push(q);
            }
        }
    }
    if !cut_any {
        return Split::Whole;
    }
    let positions = pos.iter().flatten().map(|&p| p + 1).max().unwrap_or(1);
    let gates = positions.min(MAX_PIECES);
    let gate = |p: usize| p * gates / positions;
    let input = pos.iter().map(|p| p.map_or(0, gate)).collect();
    let output = pos.iter().map(|p| p.map_or(gates - 1, gate)).collect();
    Split::Gated {
        tasks: out,
        input,
        output,
        gates,
        local,
    }
}

/// An all-gather or all-to-all as the sends and receives it amounts to, peer by peer; this
/// rank's own block is a send to itself and a receive from itself (none when in place), or a
/// [`LocalCopy`] when both ends are on the device.
fn as_p2p(
    t: &Task,
    rank: usize,
    nranks: usize,
    on_device: &dyn Fn(usize) -> bool,
) -> Option<(Vec<Task>, Option<LocalCopy>)> {
    let bytes = t.count.checked_mul(t.dtype.size())?;
    t.recv.checked_add(bytes.checked_mul(nranks)?)?;
    let mut v = Vec::with_capacity(2 * nranks);
    let mut own = None;
    for q in 0..nranks {
        // What goes to q, and where what comes from q lands (block q of the output).
        let send = match t.kind {
            TaskKind::Coll(Collective::AllGather) => t.send,
            TaskKind::Coll(Collective::AlltoAll) => t.send.checked_add(q * bytes)?,
            _ => return None,
        };
        let recv = t.recv + q * bytes;
        if q == rank && send == recv {
            continue;
        }
        if q == rank && on_device(send) && on_device(recv) {
            own = Some(LocalCopy {
                src: send,
                dst: recv,
                bytes,
            });
            continue;
        }
        let base = Task {
            send: 0,
            recv: 0,
            ..*t
        };
        v.push(Task {
            kind: TaskKind::Send { peer: q },
            send,
            ..base
        });
        v.push(Task {
            kind: TaskKind::Recv { peer: q },
            recv,
            ..base
        });
    }
    Some((v, own))
}

#[cfg(test)]
mod tests {
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
                        let v =
                            (0..n).fold(0u8, |a, r| a.wrapping_add(rd(&snap, r, ts[r].send, i)));
                        for r in 0..n {
                            mem[r][ts[r].recv - BASE + i] = v;
                        }
                    }
                    TaskKind::Coll(Collective::Reduce { root }) => {
                        let v =
                            (0..n).fold(0u8, |a, r| a.wrapping_add(rd(&snap, r, ts[r].send, i)));
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
    fn same_outcome(
        groups: &dyn Fn(usize) -> Vec<Vec<Task>>,
        n: usize,
        piece: usize,
        splits: bool,
    ) {
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
            ts.iter().any(|t| {
                matches!(t.kind, TaskKind::Send { peer } | TaskKind::Recv { peer } if peer == r)
            })
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
}
