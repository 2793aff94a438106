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
mod tests;
