//! What a streamed collective's schedule says of its pieces: the order they go down and come
//! back up, and the own block that stays on the device.

use crate::task::{buffer_counts, Task, TaskKind};

/// The own block of a streamed all-to-all, or a gather's, scatter's or broadcast's at its
/// root, whose buffers are both GPU memory, in place or apart: it goes from the input to the
/// output on the device (one device copy, none in place) instead of down to host memory,
/// through a host copy and back up -- with two ranks half of the data, and the host copy took
/// CPU the network path's engines need (one H100, two ranks over loopback, 128 and 512 MiB
/// all-to-all: streamed 2.7-3.4 GB/s against 3.1-4.2 for one collective per piece, which
/// copies own blocks on the device). Where nothing sends the block, that part of the input
/// stays on the device too.
pub(super) struct OwnBlock {
    /// The schedule's copy it replaces: elements into the input and the output, and how many.
    pub(super) src: usize,
    pub(super) dst: usize,
    pub(super) elems: usize,
    /// The schedule also sends the block (a broadcast's root): its input still goes down.
    sent: bool,
}

pub(super) fn own_block_on_device(
    task: &Task,
    rank: usize,
    n: usize,
    on_device: bool,
) -> Option<OwnBlock> {
    use ccl_collectives::Collective;
    let (c, r) = (task.count, rank.checked_mul(task.count)?);
    let (src, dst, sent) = match task.kind {
        TaskKind::Coll(Collective::AlltoAll) => (r, r, false),
        TaskKind::Coll(Collective::Gather { root }) if root == rank => (0, r, false),
        TaskKind::Coll(Collective::Scatter { root }) if root == rank => (r, 0, false),
        TaskKind::Coll(Collective::Broadcast { root }) if root == rank => (0, 0, true),
        _ => return None,
    };
    if !on_device {
        return None;
    }
    let sz = task.dtype.size();
    let (in_len, out_len) = buffer_counts(task.kind, rank, n, c)?;
    let (in_end, out_end) = (
        task.send.checked_add(in_len.checked_mul(sz)?)?,
        task.recv.checked_add(out_len.checked_mul(sz)?)?,
    );
    let apart = in_end <= task.recv || out_end <= task.send;
    // In place (NCCL's conventions): the block sits at the same address in both buffers.
    let in_place = task.send.checked_add(src * sz) == task.recv.checked_add(dst * sz);
    (apart || in_place).then_some(OwnBlock {
        src,
        dst,
        elems: c,
        sent,
    })
}

impl OwnBlock {
    /// Its byte range in the input (`input`) or the output.
    fn bytes(&self, sz: usize, input: bool) -> (usize, usize) {
        let at = if input { self.src } else { self.dst };
        (at * sz, (at + self.elems) * sz)
    }

    /// The byte range of the input (`input`) or output that does not go through host memory.
    pub(super) fn stays(&self, sz: usize, input: bool) -> Option<(usize, usize)> {
        (!(input && self.sent)).then(|| self.bytes(sz, input))
    }
}

/// `sched` without the copy of `own`'s block from the input to the output.
pub(super) fn without_copy(
    sched: &ccl_collectives::Schedule,
    own: &OwnBlock,
) -> ccl_collectives::Schedule {
    use ccl_collectives::{BufId, Op, Slice};
    let mut s = sched.clone();
    let is = |sl: &Slice, buf, at| sl.buf == buf && sl.offset == at && sl.count == own.elems;
    for st in &mut s.steps {
        st.ops.retain(|op| {
            !matches!(op, Op::Copy { src, dst }
                if is(src, BufId::Send, own.src) && is(dst, BufId::Recv, own.dst))
        });
    }
    s
}

/// The order a streamed collective's `k` pieces of `per` elements go down and come back up:
/// inputs by the first step (and place in it) that reads them from the send buffer, outputs by
/// the last step that writes them in the receive buffer. Element `[i*per, (i+1)*per)` is
/// piece `i`; returned as piece indices in order.
pub(super) fn piece_orders(
    sched: &ccl_collectives::Schedule,
    per: usize,
    k_in: usize,
    k_out: usize,
) -> (Vec<usize>, Vec<usize>) {
    use ccl_collectives::{BufId, Op, Slice};
    let mut first_read = vec![(usize::MAX, 0usize); k_in];
    let mut last_write = vec![(0usize, 0usize); k_out];
    // (step, thousandths into the slice) of each piece a slice covers.
    let touch = |s: &Slice, k: usize, step: usize, f: &mut dyn FnMut(usize, (usize, usize))| {
        let end = s.offset + s.count;
        for i in s.offset / per.max(1)..end.div_ceil(per.max(1)).min(k) {
            let from = (i * per).max(s.offset);
            f(i, (step, (from - s.offset) * 1000 / s.count.max(1)));
        }
    };
    for (step, st) in sched.steps.iter().enumerate() {
        for op in &st.ops {
            let (reads, write): (Vec<&Slice>, Option<&Slice>) = match op {
                Op::Send { src, .. } => (vec![src], None),
                Op::Recv { dst, .. } => (vec![], Some(dst)),
                Op::RecvReduce { local, dst, .. } | Op::RecvFold { local, dst, .. } => {
                    (vec![local], Some(dst))
                }
                Op::Copy { src, dst } => (vec![src], Some(dst)),
                Op::Reduce { src, local, dst } => (vec![src, local], Some(dst)),
            };
            for s in reads.into_iter().filter(|s| s.buf == BufId::Send) {
                touch(s, k_in, step, &mut |i, key| {
                    first_read[i] = first_read[i].min(key)
                });
            }
            if let Some(s) = write.filter(|s| s.buf == BufId::Recv) {
                touch(s, k_out, step, &mut |i, key| {
                    last_write[i] = last_write[i].max(key)
                });
            }
        }
    }
    let sorted = |keys: &[(usize, usize)]| {
        let mut v: Vec<usize> = (0..keys.len()).collect();
        v.sort_by_key(|&i| keys[i]);
        v
    };
    (sorted(&first_read), sorted(&last_write))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::float_sum as t;
    use ccl_collectives::Collective;

    /// A streamed two-rank all-reduce of 8 pieces: each rank copies down first the pieces its
    /// reduce-scatter reads first (the half it sends and the half it reduces into,
    /// alternating), and copies up first the 4 pieces of its own half, final after the
    /// reduce-scatter, while the all-gather still brings the rest.
    #[test]
    fn streamed_pieces_go_down_as_first_read_and_up_as_last_written() {
        use ccl_collectives::{schedule, Algorithm, BufId, Op};
        for rank in 0..2 {
            let sched = schedule(Collective::AllReduce, Algorithm::Ring, rank, 2, 800).unwrap();
            let own = sched.steps[0]
                .ops
                .iter()
                .find_map(|o| match o {
                    Op::RecvReduce { dst, .. } if dst.buf == BufId::Recv => Some(dst.offset / 100),
                    _ => None,
                })
                .unwrap();
            let (down, up) = piece_orders(&sched, 100, 8, 8);
            let mut sorted = down.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..8).collect::<Vec<_>>());
            let mine = |p: usize| (own..own + 4).contains(&p);
            assert!(up[..4].iter().all(|&p| mine(p)), "rank {rank}: {up:?}");
            assert!(
                down.chunks(2).all(|c| mine(c[0]) != mine(c[1])),
                "rank {rank}: {down:?}"
            );
        }
    }

    /// A streamed reduce-scatter has twice as many input pieces as output pieces (two ranks):
    /// both orders are whole permutations of their own pieces.
    #[test]
    fn a_streamed_reduce_scatter_orders_its_input_and_output_pieces_apart() {
        use ccl_collectives::{schedule, Algorithm};
        for rank in 0..2 {
            let sched = schedule(Collective::ReduceScatter, Algorithm::Ring, rank, 2, 400).unwrap();
            let (down, up) = piece_orders(&sched, 100, 8, 4);
            let mut d = down.clone();
            d.sort_unstable();
            assert_eq!(d, (0..8).collect::<Vec<_>>(), "rank {rank}");
            let mut u = up.clone();
            u.sort_unstable();
            assert_eq!(u, (0..4).collect::<Vec<_>>(), "rank {rank}");
        }
    }

    /// A streamed all-to-all, and a gather, scatter or broadcast at its root, keep the own
    /// block of GPU buffers on the device: the schedule loses exactly the copy of that block
    /// (in place and apart), nothing else; the input's block goes down only where it is sent.
    /// Non-roots, buffers that overlap only partly, host buffers and other collectives keep
    /// theirs.
    #[test]
    fn a_streamed_collective_leaves_its_own_block_on_the_device() {
        use ccl_collectives::{Algorithm, BufId, Op, Schedule};
        let task = |coll, send, recv| t(TaskKind::Coll(coll), send, recv, 100);
        let copies = |s: &Schedule| {
            s.steps
                .iter()
                .flat_map(|st| &st.ops)
                .filter(|op| matches!(op, Op::Copy { .. }))
                .cloned()
                .collect::<Vec<_>>()
        };
        for (n, rank) in [(2, 0), (2, 1), (3, 2)] {
            let ar = task(Collective::AllReduce, 0x1000, 0x9000);
            assert!(own_block_on_device(&ar, rank, n, true).is_none());
            let r = 100 * rank;
            // 4-byte floats, 100 per block: (collective, input block, output block, input and
            // output addresses in place).
            for (coll, src, dst, in_place, sent) in [
                (Collective::AlltoAll, r, r, (0x1000, 0x1000), false),
                (
                    Collective::Gather { root: rank },
                    0,
                    r,
                    (0x1000 + 4 * r, 0x1000),
                    false,
                ),
                (
                    Collective::Scatter { root: rank },
                    r,
                    0,
                    (0x1000, 0x1000 + 4 * r),
                    false,
                ),
                (
                    Collective::Broadcast { root: rank },
                    0,
                    0,
                    (0x1000, 0x1000),
                    true,
                ),
            ] {
                let apart = task(coll, 0x100000, 0x1000);
                let o = own_block_on_device(&apart, rank, n, true).expect("buffers apart");
                assert_eq!(
                    (o.src, o.dst, o.elems, o.sent),
                    (src, dst, 100, sent),
                    "{coll:?}"
                );
                let input = (!sent).then_some((4 * src, 4 * src + 400));
                assert_eq!(o.stays(4, true), input);
                assert_eq!(o.stays(4, false), Some((4 * dst, 4 * dst + 400)));
                let ip = task(coll, in_place.0, in_place.1);
                assert!(
                    own_block_on_device(&ip, rank, n, true).is_some(),
                    "{coll:?}"
                );
                let part = task(coll, in_place.0 + 4, in_place.1);
                assert!(
                    own_block_on_device(&part, rank, n, true).is_none(),
                    "{coll:?}"
                );
                assert!(own_block_on_device(&apart, rank, n, false).is_none());
                let algos: &[Algorithm] = match coll {
                    Collective::Broadcast { .. } => {
                        &[Algorithm::Direct, Algorithm::Ring, Algorithm::Tree]
                    }
                    _ => &[Algorithm::Direct],
                };
                let mut scheds: Vec<Schedule> = algos
                    .iter()
                    .map(|&a| ccl_collectives::schedule(coll, a, rank, n, 100).unwrap())
                    .collect();
                if coll == Collective::AlltoAll {
                    scheds.push(ccl_collectives::alltoall_out_of_place(rank, n, 100).unwrap());
                }
                for sched in scheds {
                    let before = copies(&sched);
                    let after = copies(&without_copy(&sched, &o));
                    assert_eq!(after.len() + 1, before.len(), "{coll:?} n {n} rank {rank}");
                    let gone: Vec<_> = before.iter().filter(|c| !after.contains(c)).collect();
                    assert!(
                        matches!(gone[..], [Op::Copy { src: s, dst: d }]
                            if s.buf == BufId::Send && d.buf == BufId::Recv
                                && s.offset == src && d.offset == dst),
                        "{gone:?}"
                    );
                    // Nothing sends the block from the output, which the host no longer
                    // holds, nor from the input unless it still goes down.
                    let sends = |buf, at: usize| {
                        sched.steps.iter().flat_map(|st| &st.ops).any(|op| {
                            matches!(op, Op::Send { src: s, .. }
                                if s.buf == buf && (at..at + 100).contains(&s.offset) && s.count > 0)
                        })
                    };
                    assert!(
                        !sends(BufId::Recv, dst),
                        "{coll:?} sends from its output block"
                    );
                    assert_eq!(
                        sends(BufId::Send, src),
                        sent,
                        "{coll:?} sends its input block"
                    );
                }
            }
            // A non-root gather, scatter or broadcast has no own block.
            let other = (rank + 1) % n;
            for coll in [
                Collective::Gather { root: other },
                Collective::Scatter { root: other },
                Collective::Broadcast { root: other },
            ] {
                let x = task(coll, 0x100000, 0x1000);
                assert!(own_block_on_device(&x, rank, n, true).is_none(), "{coll:?}");
            }
        }
    }
}
