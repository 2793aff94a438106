//! Which path a group's operations take, decided from what every rank sees alike: the
//! low-latency kernel, a direct reduction, direct transfers or the staged protocol; and the
//! kernels that path launches.

use ccl_collectives::task::{Reduction, Scalar, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::cuda::source::LL_EXCHANGE_MAX_RANKS;
use ccl_cuda::cuda::{KernelOp, LlTransfers};
use ccl_cuda::{DataType, ReduceKind};

use crate::device::Kernel;
use crate::direct_reduce;
use crate::error::Result;
use crate::lower::{lower, Act, Program};

/// Can this group go through cuda-ipc? Decided from what every rank sees alike (the
/// communicator and the kind of reduction), never from local buffer properties.
pub fn takes(tasks: &[Task]) -> bool {
    // A device-resident PreMulSum scalar must be read in stream order: the staged path does.
    !tasks
        .iter()
        .any(|t| matches!(t.red, Reduction::PreMulSum(Scalar::Device(_))))
}

/// A small collective done by one low-latency kernel per rank instead of transfers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LowLatency {
    AllReduce(Task),
    ReduceScatter(Task),
    /// A reduce: the all-reduce kernel with only the root pushed to and reducing.
    Reduce(Task, usize),
    /// An all-reduce in two shots: the kernel as a reduce-scatter into this rank's part of
    /// the output, then the exchange as an all-gather of the parts in place.
    AllReduceTwoShot(Task),
    Exchange(LlTransfers),
}

/// The low-latency limits every rank agreed on (bytes; 0: never): all-reduces and reduces
/// (the whole buffer), reduce-scatters (per rank), and what the areas hold per sender, which
/// also bounds the data collectives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LlLimits {
    pub(crate) reduce: usize,
    pub(crate) scatter: usize,
    pub(crate) area: usize,
}

impl LlLimits {
    /// The limit for a group of `tasks`: its reduction's own, or the area's for data.
    fn for_tasks(&self, tasks: &[Task]) -> usize {
        let limit = match tasks.iter().find_map(|t| match t.kind {
            TaskKind::Coll(c) => Some(c),
            _ => None,
        }) {
            Some(Collective::ReduceScatter) => self.scatter,
            Some(Collective::AllReduce | Collective::Reduce { .. }) => self.reduce,
            _ => self.area,
        };
        limit.min(self.area)
    }
}

/// The low-latency kernel, or else a direct reduction (`direct_reduce` bytes and up, 0: never),
/// for a staged group. Never both: the low-latency kernel writes the result itself, and a
/// direct reduction over it would reduce an in-place result a second time. Each kind takes
/// the kernel up to its own limit in `lim`.
pub(crate) fn reduction_paths(
    tasks: &[Task],
    rank: usize,
    n: usize,
    lim: LlLimits,
    direct_reduce: usize,
) -> Result<(Option<LowLatency>, Option<Task>)> {
    let ll = low_latency(tasks, rank, n, lim.for_tasks(tasks))?;
    let sym = if ll.is_none() && direct_reduce > 0 {
        direct_reduce::candidate(
            tasks,
            n,
            direct_reduce,
            direct_reduce.max(direct_reduce::REDUCE_MIN_BYTES),
        )
    } else {
        None
    };
    Ok((ll, sym))
}

/// An all-reduce chosen for the low-latency kernel goes in two shots instead with more than
/// two ranks, from `min` bytes (0: never), when its elements divide by the ranks (the parts of
/// the reduce-scatter are equal). Depends only on what every rank sees alike.
pub(crate) fn two_shot(ll: Option<LowLatency>, n: usize, min: usize) -> Option<LowLatency> {
    match ll {
        Some(LowLatency::AllReduce(t))
            if n > 2
                && n <= LL_EXCHANGE_MAX_RANKS
                && min > 0
                && t.count % n == 0
                && t.count.saturating_mul(t.dtype.size()) >= min =>
        {
            Some(LowLatency::AllReduceTwoShot(t))
        }
        other => other,
    }
}

/// The second shot's transfer table: every rank's part of `buf` (`part` bytes at `q * part`)
/// gathered in place, this rank sending its own part to every peer.
pub(crate) fn gather_parts(buf: u64, part: u64, rank: usize, n: usize) -> LlTransfers {
    let mut x = LlTransfers::default();
    for q in (0..n).filter(|&q| q != rank) {
        (x.src[q], x.sbytes[q]) = (buf + rank as u64 * part, part);
        (x.dst[q], x.rbytes[q]) = (buf + q as u64 * part, part);
    }
    x
}

/// Whether a group is one data collective small enough (`max` bytes, 0: never) for the
/// low-latency kernel rather than copy engines: at 8 B the copy engines' driver calls cost 2-3x
/// NCCL's one kernel. Depends only on what every rank sees alike.
pub(crate) fn small_exchange(tasks: &[Task], n: usize, max: usize) -> bool {
    let [t] = tasks else { return false };
    matches!(
        t.kind,
        TaskKind::Coll(
            Collective::AllGather
                | Collective::AlltoAll
                | Collective::Broadcast { .. }
                | Collective::Gather { .. }
                | Collective::Scatter { .. }
        )
    ) && (2..=LL_EXCHANGE_MAX_RANKS).contains(&n)
        && t.count.saturating_mul(t.dtype.size()) <= max
}

/// Chooses the low-latency kernel for a group of one small collective. The choice depends
/// only on what every rank sees alike (kind, count, type, reduction, ranks, settings).
fn low_latency(tasks: &[Task], rank: usize, n: usize, ll_max: usize) -> Result<Option<LowLatency>> {
    let [t] = tasks else { return Ok(None) };
    let bytes = t.count.saturating_mul(t.dtype.size());
    if n < 2 || t.count == 0 || bytes > ll_max {
        return Ok(None);
    }
    match t.kind {
        TaskKind::Coll(Collective::AllReduce) if matches!(t.red, Reduction::Plain(_)) => {
            Ok(Some(LowLatency::AllReduce(*t)))
        }
        TaskKind::Coll(Collective::ReduceScatter) if matches!(t.red, Reduction::Plain(_)) => {
            Ok(Some(LowLatency::ReduceScatter(*t)))
        }
        TaskKind::Coll(Collective::Reduce { root }) if matches!(t.red, Reduction::Plain(_)) => {
            Ok(Some(LowLatency::Reduce(*t, root)))
        }
        TaskKind::Coll(
            Collective::AllGather
            | Collective::AlltoAll
            | Collective::Broadcast { .. }
            | Collective::Gather { .. }
            | Collective::Scatter { .. },
        ) if n <= LL_EXCHANGE_MAX_RANKS => {
            let p = lower(tasks, rank, n, usize::MAX, 0)?;
            let mut x = LlTransfers::default();
            for q in 0..n {
                if let [s] = p.tx[q].as_slice() {
                    x.src[q] = s.src;
                    x.sbytes[q] = s.bytes as u64;
                }
                if let [r] = p.rx[q].as_slice() {
                    let Act::Copy { dst } = r.act else {
                        return Ok(None);
                    };
                    x.dst[q] = dst;
                    x.rbytes[q] = r.bytes as u64;
                }
            }
            if let [(dst, src, b)] = p.locals.as_slice() {
                x.src[rank] = *src;
                x.dst[rank] = *dst;
                x.sbytes[rank] = *b as u64;
            }
            Ok(Some(LowLatency::Exchange(x)))
        }
        _ => Ok(None),
    }
}

/// The kernels a lowered group launches.
pub(crate) fn kernels_needed<'a>(
    programs: impl Iterator<Item = &'a Program>,
    ll: Option<&LowLatency>,
) -> Vec<(DataType, KernelOp)> {
    let mut v = Vec::new();
    for p in programs {
        kernels_of(p, &mut v);
    }
    match ll {
        Some(
            LowLatency::AllReduce(t) | LowLatency::ReduceScatter(t) | LowLatency::Reduce(t, _),
        ) => v.push((t.dtype, KernelOp::LlAllReduce(t.red.arithmetic().into()))),
        Some(LowLatency::AllReduceTwoShot(t)) => {
            v.push((t.dtype, KernelOp::LlAllReduce(t.red.arithmetic().into())));
            v.push((DataType::Uint8, KernelOp::LlExchange));
        }
        Some(LowLatency::Exchange(_)) => v.push((DataType::Uint8, KernelOp::LlExchange)),
        None => {}
    }
    let mut unique = Vec::with_capacity(v.len());
    for k in v {
        if !unique.contains(&k) {
            unique.push(k);
        }
    }
    unique
}

/// The reduction kernels one lowered program launches.
fn kernels_of(p: &Program, v: &mut Vec<(DataType, KernelOp)>) {
    for k in &p.local_kernels {
        if let Kernel::PreMul { dtype, .. } = k {
            v.push((*dtype, KernelOp::PreMul));
        }
    }
    for tg in &p.targets {
        match tg.scalar {
            Some(_) => {
                v.push((tg.dtype, KernelOp::PreMul));
                v.push((tg.dtype, KernelOp::PreMulAdd));
                v.push((tg.dtype, KernelOp::reduce(ReduceKind::Sum)));
            }
            None => v.push((tg.dtype, KernelOp::reduce(tg.arith))),
        }
        if tg.postdiv.is_some() {
            v.push((tg.dtype, KernelOp::DivInt));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_collectives::task::float_sum as task;

    /// Limits with reduce-scatters at the all-reduces' limit.
    fn lim(reduce: usize, area: usize) -> LlLimits {
        LlLimits {
            reduce,
            scatter: reduce,
            area,
        }
    }

    #[test]
    fn low_latency_exchange_tables_pair_up() {
        let colls = |n: usize| {
            [
                Collective::AllGather,
                Collective::AlltoAll,
                Collective::Broadcast { root: n - 1 },
                Collective::Gather { root: 0 },
                Collective::Scatter { root: n / 2 },
            ]
        };
        for n in 2..=LL_EXCHANGE_MAX_RANKS {
            for c in colls(n) {
                for count in [1usize, 5, 1000] {
                    let tables: Vec<LlTransfers> = (0..n)
                        .map(|r| {
                            let t = task(TaskKind::Coll(c), 0x1000_0000, 0x2000_0000, count);
                            match low_latency(&[t], r, n, 1 << 20).unwrap() {
                                Some(LowLatency::Exchange(x)) => x,
                                other => panic!("{c:?} n {n}: {other:?}"),
                            }
                        })
                        .collect();
                    for a in 0..n {
                        for b in 0..n {
                            if a != b {
                                assert_eq!(
                                    tables[a].sbytes[b], tables[b].rbytes[a],
                                    "{c:?} n {n} count {count}: {a} -> {b}"
                                );
                            }
                        }
                        for q in n..LL_EXCHANGE_MAX_RANKS {
                            assert_eq!((tables[a].sbytes[q], tables[a].rbytes[q]), (0, 0));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn small_collectives_become_one_low_latency_kernel() {
        let ag = task(TaskKind::Coll(Collective::AllGather), 0x1000, 0x8000, 4);
        let Some(LowLatency::Exchange(x)) = low_latency(&[ag], 1, 2, 1 << 20).unwrap() else {
            panic!("all-gather of 16 bytes should be low-latency");
        };
        assert_eq!((x.src[0], x.sbytes[0]), (0x1000, 16));
        assert_eq!((x.dst[0], x.rbytes[0]), (0x8000, 16));
        assert_eq!((x.src[1], x.dst[1], x.sbytes[1]), (0x1000, 0x8010, 16));
        // In place: no local copy.
        let ag = task(TaskKind::Coll(Collective::AllGather), 0x8010, 0x8000, 4);
        let Some(LowLatency::Exchange(x)) = low_latency(&[ag], 1, 2, 1 << 20).unwrap() else {
            panic!("in-place all-gather should be low-latency");
        };
        assert_eq!(x.sbytes[1], 0);
        // Broadcast: the root only sends, the others only receive.
        let bc = task(
            TaskKind::Coll(Collective::Broadcast { root: 0 }),
            0x1000,
            0x2000,
            4,
        );
        let Some(LowLatency::Exchange(x)) = low_latency(&[bc], 1, 3, 1 << 20).unwrap() else {
            panic!("broadcast should be low-latency");
        };
        assert_eq!(x.sbytes, [0; 8]);
        assert_eq!((x.dst[0], x.rbytes[0], x.rbytes[2]), (0x2000, 16, 0));
        // Too big, reductions other than all-reduce, and groups stay on the copy engines.
        assert!(low_latency(&[ag], 1, 2, 8).unwrap().is_none());
        let rs = task(TaskKind::Coll(Collective::ReduceScatter), 0x1000, 0x8000, 4);
        assert!(matches!(
            low_latency(&[rs], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::ReduceScatter(_))
        ));
        let mut avg = rs;
        avg.red = Reduction::Avg;
        assert!(low_latency(&[avg], 0, 2, 1 << 20).unwrap().is_none());
        assert!(low_latency(&[ag, ag], 1, 2, 1 << 20).unwrap().is_none());
        let ar = task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, 4);
        assert!(matches!(
            low_latency(&[ar], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::AllReduce(_))
        ));
        // More ranks than the exchange table holds.
        assert!(low_latency(&[bc], 1, 9, 1 << 20).unwrap().is_none());
    }

    /// Two shots only for more than two ranks, from the threshold, with equal parts; every
    /// other choice passes through.
    #[test]
    fn all_reduces_go_in_two_shots_from_the_threshold() {
        let ar = |count| task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, count);
        let shot = |count, n, min| two_shot(Some(LowLatency::AllReduce(ar(count))), n, min);
        assert!(matches!(
            shot(4096, 4, 16384),
            Some(LowLatency::AllReduceTwoShot(_))
        ));
        assert!(
            matches!(shot(4092, 4, 16384), Some(LowLatency::AllReduce(_))),
            "below 16 KiB"
        );
        assert!(
            matches!(shot(4098, 4, 16384), Some(LowLatency::AllReduce(_))),
            "parts unequal"
        );
        assert!(
            matches!(shot(4096, 2, 16384), Some(LowLatency::AllReduce(_))),
            "two ranks"
        );
        assert!(
            matches!(shot(4104, 9, 16384), Some(LowLatency::AllReduce(_))),
            "past the table"
        );
        assert!(
            matches!(shot(1 << 20, 8, 0), Some(LowLatency::AllReduce(_))),
            "off"
        );
        let rs = task(
            TaskKind::Coll(Collective::ReduceScatter),
            0x1000,
            0x8000,
            4096,
        );
        assert!(matches!(
            two_shot(Some(LowLatency::ReduceScatter(rs)), 4, 1),
            Some(LowLatency::ReduceScatter(_))
        ));
        assert!(two_shot(None, 4, 1).is_none());
    }

    /// The second shot sends this rank's part to every peer and takes each peer's part into
    /// its place, nothing to or from itself.
    #[test]
    fn the_second_shot_gathers_every_part_in_place() {
        let x = gather_parts(0x10000, 0x100, 2, 4);
        assert_eq!(&x.src[..4], &[0x10200, 0x10200, 0, 0x10200]);
        assert_eq!(&x.sbytes[..4], &[0x100, 0x100, 0, 0x100]);
        assert_eq!(&x.dst[..4], &[0x10000, 0x10100, 0, 0x10300]);
        assert_eq!(&x.rbytes[..4], &[0x100, 0x100, 0, 0x100]);
        assert_eq!(
            (&x.sbytes[4..], &x.rbytes[4..]),
            (&[0u64; 4][..], &[0u64; 4][..])
        );
    }

    /// A small reduce takes the all-reduce kernel with its root (every rank alike, root or
    /// not), within the reductions' limit rather than the exchange's.
    #[test]
    fn small_reduces_take_the_kernel_with_their_root() {
        let red = |count| {
            task(
                TaskKind::Coll(Collective::Reduce { root: 1 }),
                0x1000,
                0x2000,
                count,
            )
        };
        for rank in 0..3 {
            let (ll, sym) = reduction_paths(&[red(4)], rank, 3, lim(1024, 4096), 1 << 20).unwrap();
            assert!(matches!(ll, Some(LowLatency::Reduce(t, 1)) if t.count == 4) && sym.is_none());
        }
        let (ll, _) = reduction_paths(&[red(257)], 0, 2, lim(1024, 4096), 1 << 20).unwrap();
        assert!(ll.is_none(), "1028 bytes are over the reductions' 1024");
        let mut avg = red(4);
        avg.red = Reduction::Avg;
        assert!(low_latency(&[avg], 0, 2, 1 << 20).unwrap().is_none());
    }

    /// A reduce-scatter whose slice fits the low-latency kernel while the whole input reaches
    /// the direct-reduction threshold (1 MiB slices of 2 ranks at 2 MiB) takes the kernel
    /// alone: both at once reduced an in-place result twice (found on the GPU machine).
    #[test]
    fn low_latency_and_direct_reduction_never_both() {
        let (ll_max, dr) = (1 << 20, 2 << 20);
        let rs = |count| {
            task(
                TaskKind::Coll(Collective::ReduceScatter),
                0x1000,
                0x1000,
                count,
            )
        };
        // float slices of 1 MiB (just the kernel), then 1 MiB + 4 B (just direct).
        let (ll, sym) = reduction_paths(&[rs(1 << 18)], 0, 2, lim(ll_max, ll_max), dr).unwrap();
        assert!(matches!(ll, Some(LowLatency::ReduceScatter(_))) && sym.is_none());
        let (ll, sym) =
            reduction_paths(&[rs((1 << 18) + 1)], 0, 2, lim(ll_max, ll_max), dr).unwrap();
        assert!(ll.is_none() && sym.is_some());
        // All-reduce: the kernel up to ll_max, direct from the threshold, staged between.
        let ar = |count| task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, count);
        let (ll, sym) = reduction_paths(&[ar(1 << 18)], 0, 2, lim(ll_max, ll_max), dr).unwrap();
        assert!(ll.is_some() && sym.is_none());
        let (ll, sym) =
            reduction_paths(&[ar((1 << 18) + 1)], 0, 2, lim(ll_max, ll_max), dr).unwrap();
        assert!(ll.is_none() && sym.is_none());
        let (ll, sym) = reduction_paths(&[ar(1 << 19)], 0, 2, lim(ll_max, ll_max), dr).unwrap();
        assert!(ll.is_none() && sym.is_some());
        // Switched off.
        let (_, sym) = reduction_paths(&[ar(1 << 19)], 0, 2, lim(ll_max, ll_max), 0).unwrap();
        assert!(sym.is_none());
    }

    /// Boundary pair of the small-exchange route: exactly the limit takes the kernel, one
    /// element more goes to the copy engines; never with the limit 0, a group of two, an
    /// operation with arithmetic, or more ranks than the kernel serves.
    #[test]
    fn small_data_collectives_take_the_kernel_up_to_the_limit() {
        let ag = |count| task(TaskKind::Coll(Collective::AllGather), 0x1000, 0x9000, count);
        assert!(small_exchange(&[ag(1024)], 2, 4096));
        assert!(!small_exchange(&[ag(1025)], 2, 4096));
        assert!(!small_exchange(&[ag(1)], 2, 0));
        assert!(!small_exchange(&[ag(1), ag(1)], 2, 4096));
        assert!(!small_exchange(&[ag(1)], LL_EXCHANGE_MAX_RANKS + 1, 4096));
        assert!(!small_exchange(&[ag(1)], 1, 4096));
        let ar = task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, 1);
        assert!(!small_exchange(&[ar], 2, 4096));
        let a2a = task(TaskKind::Coll(Collective::AlltoAll), 0x1000, 0x9000, 2);
        assert!(small_exchange(&[a2a], 2, 4096));
        // What the kernel then does with it: the exchange (the same limit as its area).
        assert!(matches!(
            low_latency(&[ag(1024)], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::Exchange(_))
        ));
    }

    /// Reductions stop at their own limit while data collectives go on to what the areas
    /// hold: with 1 MiB for all-reduces and 2 MiB areas, a 2 MiB all-gather part takes the
    /// kernel and a 2 MiB all-reduce does not; one element over the area, neither.
    #[test]
    fn reductions_and_exchanges_have_their_own_low_latency_limits() {
        let (reduce, area) = (1 << 20, 2 << 20);
        let ag = |count| task(TaskKind::Coll(Collective::AllGather), 0x1000, 0x9000, count);
        let ar = |count| task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, count);
        // Counts of floats: 4 bytes each.
        let (ll, _) = reduction_paths(&[ag(area / 4)], 0, 2, lim(reduce, area), 0).unwrap();
        assert!(matches!(ll, Some(LowLatency::Exchange(_))));
        let (ll, _) = reduction_paths(&[ag(area / 4 + 1)], 0, 2, lim(reduce, area), 0).unwrap();
        assert!(ll.is_none());
        let (ll, _) = reduction_paths(&[ar(reduce / 4)], 0, 2, lim(reduce, area), 0).unwrap();
        assert!(matches!(ll, Some(LowLatency::AllReduce(_))));
        let (ll, _) = reduction_paths(&[ar(area / 4)], 0, 2, lim(reduce, area), 0).unwrap();
        assert!(ll.is_none());
        // A reduction limit above the area is cut to it.
        let (ll, _) = reduction_paths(&[ar(area / 4 + 1)], 0, 2, lim(4 << 20, area), 0).unwrap();
        assert!(ll.is_none());
    }

    /// Reduce-scatters stop at their own limit per rank while all-reduces and reduces go on to
    /// theirs (8 MiB all-reduces, 4 MiB reduce-scatter parts with two ranks): boundary pairs
    /// of each, and the area still bounds both.
    #[test]
    fn reduce_scatters_have_their_own_low_latency_limit() {
        let l = LlLimits {
            reduce: 8 << 20,
            scatter: 4 << 20,
            area: 8 << 20,
        };
        let rs = |count| {
            task(
                TaskKind::Coll(Collective::ReduceScatter),
                0x1000,
                0x9000,
                count,
            )
        };
        let ar = |count| task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, count);
        let rd = |count| {
            task(
                TaskKind::Coll(Collective::Reduce { root: 0 }),
                0x1000,
                0x9000,
                count,
            )
        };
        let path = |t| reduction_paths(&[t], 0, 2, l, 0).unwrap().0;
        assert!(matches!(
            path(rs(1 << 20)),
            Some(LowLatency::ReduceScatter(_))
        ));
        assert!(path(rs((1 << 20) + 1)).is_none());
        assert!(matches!(path(ar(2 << 20)), Some(LowLatency::AllReduce(_))));
        assert!(path(ar((2 << 20) + 1)).is_none());
        assert!(matches!(path(rd(2 << 20)), Some(LowLatency::Reduce(_, 0))));
        assert!(path(rd((2 << 20) + 1)).is_none());
        let small_area = LlLimits { area: 2 << 20, ..l };
        let path = |t| reduction_paths(&[t], 0, 2, small_area, 0).unwrap().0;
        assert!(path(rs((1 << 19) + 1)).is_none());
        assert!(path(ar((1 << 19) + 1)).is_none());
    }
}
