//! Which reductions fold on the GPU, as a pure rule: a reduction that goes as sends and
//! receives of its operands, folded by a kernel, and what each rank sends, folds and scales.
//! The staged GPU engine (`ccl`'s `gpu::fold`) applies it with its settings; every rank decides
//! alike on the operation alone, which is what lets a rank that groups an operation and one that
//! calls it alone agree.

use crate::task::{Reduction, Scalar, Task, TaskKind};
use crate::Collective;

/// A reduction that goes as sends and receives of the operands, folded on the GPU
/// (`CCL_GPU_FOLD_BYTES`): of two ranks an all-reduce, reduce-scatter or reduce; of three to
/// eight ([`Wide`]) an all-reduce or reduce-scatter, block by block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fold {
    /// What each transfer carries (and the fold covers): of more than two ranks, one block.
    pub bytes: usize,
    /// Two ranks: where in the send buffer the operand this rank sends starts (`None`: it
    /// sends nothing, a reduce's root).
    pub send_at: Option<usize>,
    /// Where in the send buffer this rank's own operand starts, folded with the ones it
    /// receives into its receive buffer (`None`: it receives nothing, a reduce's other rank).
    pub own_at: Option<usize>,
    /// Float average and PreMulSum: each rank scales its operands by this before they meet.
    pub prescale: Option<[u8; 8]>,
    /// Integer average: the sum divided by the number of ranks afterwards.
    pub divide: bool,
    /// More than two ranks.
    pub wide: Option<Wide>,
}

/// A fold of `n` ranks (3 to [`REDUCE_N_MAX`]): each rank sends block `j` of its input to rank
/// `j`, receives its own block of every other rank's input, and folds the `n` of them in rank
/// order in one kernel; an all-reduce (`gather`) then sends its folded block to every rank and
/// receives theirs, as an all-gather. The same bytes as the ring cross the network, each rank
/// reaching every other at once, and no CPU reduces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wide {
    pub n: usize,
    pub gather: bool,
}

/// Most ranks a wide fold takes: one kernel reads every operand (the GPU kernels' limit,
/// which `ccl` checks against its own constant).
pub const MAX_RANKS: usize = 8;

/// Whether task `i`'s buffers overlap those of another task of the group.
pub fn shares_memory(tasks: &[Task], i: usize, (rank, nranks): (usize, usize)) -> bool {
    let ranges = |t: &Task| {
        let size = t.dtype.size();
        let (s, r) = crate::task::buffer_counts(t.kind, rank, nranks, t.count).unwrap_or((0, 0));
        [
            (t.send, s.saturating_mul(size)),
            (t.recv, r.saturating_mul(size)),
        ]
    };
    let overlap = |(a, la): (usize, usize), (b, lb): (usize, usize)| {
        la > 0 && lb > 0 && a < b.saturating_add(lb) && b < a.saturating_add(la)
    };
    let mine = ranges(&tasks[i]);
    tasks.iter().enumerate().any(|(j, t)| {
        j != i
            && ranges(t)
                .into_iter()
                .any(|o| mine.into_iter().any(|m| overlap(m, o)))
    })
}

/// Whether `t` folds on the GPU for rank `rank` of `nranks`, and how: `(min, max)` is the
/// window of bytes a fold may carry, `is_dev` tells device memory.
pub fn fold_rule(
    t: &Task,
    (rank, nranks): (usize, usize),
    shared_memory_only: bool,
    (min, max): (usize, usize),
    is_dev: &dyn Fn(usize) -> bool,
) -> Option<Fold> {
    if !(2..=MAX_RANKS).contains(&nranks) || shared_memory_only || rank >= nranks {
        return None;
    }
    let peer = 1 - rank.min(1);
    let size = t.dtype.size();
    let whole = t.count.checked_mul(size)?;
    let (bytes, send_at, own_at, wide) = match t.kind {
        TaskKind::Coll(Collective::AllReduce) if nranks == 2 => (whole, Some(0), Some(0), None),
        TaskKind::Coll(Collective::ReduceScatter) if nranks == 2 => {
            (whole, Some(peer * whole), Some(rank * whole), None)
        }
        TaskKind::Coll(Collective::Reduce { root }) if nranks == 2 && root == rank => {
            (whole, None, Some(0), None)
        }
        TaskKind::Coll(Collective::Reduce { root }) if nranks == 2 && root == peer => {
            (whole, Some(0), None, None)
        }
        TaskKind::Coll(Collective::AllReduce) if nranks > 2 && t.count % nranks == 0 => {
            let block = whole / nranks;
            let wide = Wide {
                n: nranks,
                gather: true,
            };
            (block, None, Some(rank * block), Some(wide))
        }
        TaskKind::Coll(Collective::ReduceScatter) if nranks > 2 => {
            let wide = Wide {
                n: nranks,
                gather: false,
            };
            (whole, None, Some(rank * whole), Some(wide))
        }
        _ => return None,
    };
    // The kernels read whole elements; a reduce's other rank has no receive buffer.
    let folds = own_at.is_some();
    let usable = |p: usize| p % size == 0 && is_dev(p);
    if !(min..=max).contains(&bytes) || !usable(t.send) || (folds && !usable(t.recv)) {
        return None;
    }
    // A device-resident PreMulSum scalar is written by earlier stream work: its value is not
    // known when the kernels are queued.
    if let Reduction::PreMulSum(Scalar::Device(_)) = t.red {
        return None;
    }
    let prescale = crate::task::premul_scalar(t, nranks);
    let divide = t.red == Reduction::Avg && !t.dtype.is_float();
    Some(Fold {
        bytes,
        send_at,
        own_at,
        prescale,
        divide,
        wide,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::float_sum as t;

    /// The GPU fold takes two-rank reductions of aligned device buffers over the network within
    /// the window, with what each rank sends and folds and the scaling each reduction needs;
    /// nothing else.
    #[test]
    fn fold_takes_two_rank_reductions_of_device_memory_over_the_network() {
        use crate::{DataType, ReduceKind};
        let dev = |p: usize| p >= 0x1000;
        let coll = |c, count| t(TaskKind::Coll(c), 0x10_0000, 0x20_0000, count);
        let ar = |count| coll(Collective::AllReduce, count);
        let win = (4096, 1 << 20);
        let rule = |ts: &[Task], rank, n, shm| fold_rule(&ts[0], (rank, n), shm, win, &dev);
        let plain = Some(Fold {
            bytes: 4096,
            send_at: Some(0),
            own_at: Some(0),
            prescale: None,
            divide: false,
            wide: None,
        });
        // floats: 1024 of them is just in the window, 1023 just out; the top edge likewise.
        assert_eq!(rule(&[ar(1024)], 0, 2, false), plain);
        assert_eq!(rule(&[ar(1024)], 1, 2, false), plain);
        assert_eq!(rule(&[ar(1023)], 0, 2, false), None);
        assert!(rule(&[ar(1 << 18)], 0, 2, false).is_some());
        assert_eq!(rule(&[ar((1 << 18) + 1)], 0, 2, false), None);
        // Reduce-scatter: each rank sends the peer's block and folds its own.
        let rs = coll(Collective::ReduceScatter, 1024);
        let at = |f: Option<Fold>| f.map(|f| (f.send_at, f.own_at));
        assert_eq!(at(rule(&[rs], 0, 2, false)), Some((Some(4096), Some(0))));
        assert_eq!(at(rule(&[rs], 1, 2, false)), Some((Some(0), Some(4096))));
        // Reduce: the root only receives and folds, the other rank only sends (and its receive
        // buffer, unused, is not looked at: both ranks decide alike).
        let mut to_one = coll(Collective::Reduce { root: 1 }, 1024);
        assert_eq!(at(rule(&[to_one], 1, 2, false)), Some((None, Some(0))));
        to_one.recv = 0;
        assert_eq!(at(rule(&[to_one], 0, 2, false)), Some((Some(0), None)));
        assert_eq!(rule(&[to_one], 1, 2, false), None);
        // Three to eight ranks: all-reduces whose count splits evenly go block by block (the
        // window is on a block: 3 x 1024 floats just in), reduce-scatters too, reduces not;
        // nine ranks, shared memory alone, a collective without arithmetic: not folded.
        let wide = |n, gather| Some(Wide { n, gather });
        let w = rule(&[ar(3 * 1024)], 1, 3, false);
        assert_eq!(
            w.map(|f| (f.bytes, f.own_at, f.wide)),
            Some((4096, Some(4096), wide(3, true)))
        );
        assert_eq!(rule(&[ar(3 * 1024 + 1)], 1, 3, false), None);
        assert_eq!(rule(&[ar(3 * 1023)], 1, 3, false), None);
        let rs8 = rule(&[rs], 7, 8, false);
        assert_eq!(
            rs8.map(|f| (f.own_at, f.wide)),
            Some((Some(7 * 4096), wide(8, false)))
        );
        let to_one = coll(Collective::Reduce { root: 1 }, 1024);
        assert_eq!(rule(&[to_one], 1, 3, false), None);
        assert_eq!(rule(&[ar(9 * 1024)], 0, 9, false), None);
        assert_eq!(rule(&[ar(1024)], 0, 2, true), None);
        let bc = coll(Collective::Broadcast { root: 0 }, 1024);
        assert_eq!(rule(&[bc], 0, 2, false), None);
        // Host memory or a misaligned element on either side: not folded.
        let mut host = ar(1024);
        host.send = 0x100;
        assert_eq!(rule(&[host], 0, 2, false), None);
        let mut odd = ar(1024);
        odd.recv += 2;
        assert_eq!(rule(&[odd], 0, 2, false), None);
        // Reductions: float average scales by 1/2 first, integer average divides after;
        // PreMulSum with an immediate scalar scales by it, with a device scalar it stays on the
        // ring; max stays plain.
        let with = |dtype, red| {
            let mut x = ar(1024);
            x.dtype = dtype;
            x.red = red;
            rule(&[x], 0, 2, false)
        };
        let half = crate::dtype::from_f64(DataType::Float32, 0.5);
        assert_eq!(
            with(DataType::Float32, Reduction::Avg).map(|f| (f.prescale, f.divide)),
            Some((Some(half), false))
        );
        assert_eq!(
            with(DataType::Int32, Reduction::Avg).map(|f| (f.prescale, f.divide)),
            Some((None, true))
        );
        let s = [7, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            with(DataType::Int32, Reduction::PreMulSum(Scalar::Immediate(s))).map(|f| f.prescale),
            Some(Some(s))
        );
        assert_eq!(
            with(
                DataType::Int32,
                Reduction::PreMulSum(Scalar::Device(0x3000))
            ),
            None
        );
        assert_eq!(
            with(DataType::Int32, Reduction::Plain(ReduceKind::Max)).map(|f| f.bytes),
            Some(4096)
        );
    }

    /// In a group, an operation whose buffers another one's overlap is not folded (they see
    /// each other's results in call order); disjoint ones are, the way the peer calling them
    /// alone decides.
    #[test]
    fn fold_leaves_operations_sharing_memory_in_a_group_staged() {
        let ar = |send, recv| t(TaskKind::Coll(Collective::AllReduce), send, recv, 1024);
        let send = |at, count| t(TaskKind::Send { peer: 1 }, at, 0, count);
        let who = (0, 2);
        // 4096 bytes each: [0x10000, 0x11000) -> [0x20000, 0x21000).
        let group = [ar(0x1_0000, 0x2_0000), send(0x3_0000, 1024)];
        assert!(!shares_memory(&group, 0, who));
        assert!(!shares_memory(&group, 1, who));
        // A send of the all-reduce's last float of output overlaps; one just past it does not.
        assert!(shares_memory(
            &[ar(0x1_0000, 0x2_0000), send(0x2_0ffc, 1)],
            0,
            who
        ));
        assert!(!shares_memory(
            &[ar(0x1_0000, 0x2_0000), send(0x2_1000, 1)],
            0,
            who
        ));
        // An all-reduce reading another's output.
        let chained = [ar(0x1_0000, 0x2_0000), ar(0x2_0000, 0x4_0000)];
        assert!(shares_memory(&chained, 0, who) && shares_memory(&chained, 1, who));
        // In place alone shares nothing with another task.
        assert!(!shares_memory(&[ar(0x1_0000, 0x1_0000)], 0, who));
    }
}
