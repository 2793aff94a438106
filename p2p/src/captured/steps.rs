//! What every captured group queues, direct or host-only: the handshakes on its words and the
//! reductions into a rank's output, where its receives land (parked or in place); and which
//! operations and kernels that takes.

use ccl_collectives::task::{Reduction, Scalar, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::cuda::source::REDUCE_N_MAX;
use ccl_cuda::cuda::KernelOp;
use ccl_cuda::DataType;

use crate::device::{Device, Kernel};
use crate::error::Result;
use crate::layout::{Lane, Layout};

pub(crate) fn reduces(kind: TaskKind) -> bool {
    matches!(
        kind,
        TaskKind::Coll(
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
        )
    )
}

/// Whether this rank can capture `t` on the direct path: every operation can, but a
/// reduction whose PreMulSum scalar is in device memory, which must be read in stream order at
/// every replay (the staged path does).
pub(crate) fn supported(t: &Task) -> bool {
    !(reduces(t.kind) && matches!(t.red, Reduction::PreMulSum(Scalar::Device(_))))
}

/// Per partner: (this rank's word of `kind` there, the partner's word here).
pub(crate) fn word_pairs(
    l: &Layout,
    index: usize,
    partners: &[usize],
    kind: usize,
) -> Vec<(u64, u64)> {
    partners
        .iter()
        .map(|&j| {
            (
                l.captured_word(j, index, kind, l.rank),
                l.captured_word(l.rank, index, kind, j),
            )
        })
        .collect()
}

/// Set own word of `kind` at every partner, wait for every partner's, reset them (as one
/// kernel where the device has it, [`Device::handshake_kernel`]).
pub(crate) fn handshake(
    dev: &mut dyn Device,
    l: &Layout,
    index: usize,
    partners: &[usize],
    kind: usize,
) -> Result<()> {
    if dev.handshake_is_kernel() {
        let words = word_pairs(l, index, partners, kind);
        return dev.handshake_kernel(Lane::User, &words);
    }
    for &j in partners {
        dev.write(Lane::User, l.captured_word(j, index, kind, l.rank), 1)?;
    }
    for &j in partners {
        dev.wait(Lane::User, l.captured_word(l.rank, index, kind, j), 1)?;
    }
    for &j in partners {
        dev.write(Lane::User, l.captured_word(l.rank, index, kind, j), 0)?;
    }
    Ok(())
}

/// `dst = srcs[0] (op) srcs[1] ...` over `elems` elements (each input scaled first for
/// PreMulSum and float Avg; integer Avg divided once after); `dst` may be `srcs[own]`.
pub(crate) fn reduce_into(
    dev: &mut dyn Device,
    t: &Task,
    dst: u64,
    srcs: &[u64],
    own: usize,
    elems: usize,
    reduce_n: bool,
) -> Result<()> {
    let (dtype, op) = (t.dtype, t.red.arithmetic());
    if let Some(scalar) = ccl_cuda::host::reduce::premul_scalar(t, srcs.len()) {
        // Own input first: in place, `dst` is that input, read before anything writes it.
        dev.kernel(
            Lane::User,
            Kernel::PreMul {
                dtype,
                dst,
                src: srcs[own],
                n: elems,
                scalar,
            },
        )?;
        for (_, &src) in srcs.iter().enumerate().filter(|&(j, _)| j != own) {
            dev.kernel(
                Lane::User,
                Kernel::PreMulAdd {
                    dtype,
                    dst,
                    src,
                    acc: dst,
                    n: elems,
                    scalar,
                },
            )?;
        }
        return Ok(());
    }
    match srcs.len() {
        0 => {}
        1 => {
            if dst != srcs[0] {
                dev.copy(Lane::User, dst, srcs[0], elems * dtype.size())?;
            }
        }
        2 => dev.kernel(
            Lane::User,
            Kernel::Reduce {
                dtype,
                op,
                dst,
                a: srcs[0],
                b: srcs[1],
                n: elems,
            },
        )?,
        k if reduce_n && k <= REDUCE_N_MAX => {
            let mut s = [0u64; REDUCE_N_MAX];
            s[..k].copy_from_slice(srcs);
            dev.kernel(
                Lane::User,
                Kernel::ReduceN {
                    dtype,
                    op,
                    dst,
                    srcs: s,
                    k,
                    n: elems,
                    also: [0; REDUCE_N_MAX],
                    nalso: 0,
                },
            )?
        }
        _ => {
            // A chain of two-input kernels, own input first: in place, `dst` is that input,
            // read by the first kernel before anything writes it.
            let mut acc = srcs[own];
            for (_, &s) in srcs.iter().enumerate().filter(|&(j, _)| j != own) {
                dev.kernel(
                    Lane::User,
                    Kernel::Reduce {
                        dtype,
                        op,
                        dst,
                        a: acc,
                        b: s,
                        n: elems,
                    },
                )?;
                acc = dst;
            }
        }
    }
    if matches!(t.red, Reduction::Avg) && !dtype.is_float() && elems > 0 {
        dev.kernel(
            Lane::User,
            Kernel::DivInt {
                dtype,
                dst,
                n: elems,
                divisor: srcs.len() as u64,
            },
        )?;
    }
    Ok(())
}

/// A copy within this rank on [`Lane::User`], skipped where source and destination coincide.
pub(crate) fn copy_unless_same(dev: &mut dyn Device, dst: u64, src: u64, bytes: u64) -> Result<()> {
    if dst == src {
        return Ok(());
    }
    dev.copy(Lane::User, dst, src, bytes as usize)
}

/// The kernels a captured group of `tasks` may launch, direct or host-only, to load before
/// capturing.
pub(crate) fn kernels_needed(
    tasks: &[Task],
    n: usize,
    reduce_n: bool,
) -> Vec<(DataType, KernelOp)> {
    let mut v = Vec::new();
    for t in tasks.iter().filter(|t| reduces(t.kind) && t.count > 0) {
        if ccl_cuda::host::reduce::premul_scalar(t, n).is_some() {
            for k in [KernelOp::PreMul, KernelOp::PreMulAdd] {
                if !v.contains(&(t.dtype, k)) {
                    v.push((t.dtype, k));
                }
            }
            continue;
        }
        let op = t.red.arithmetic();
        let k = if n > 2 && reduce_n && n <= REDUCE_N_MAX {
            KernelOp::ReduceN(op.into(), n as u8)
        } else {
            KernelOp::reduce(op)
        };
        if !v.contains(&(t.dtype, k)) {
            v.push((t.dtype, k));
        }
        if matches!(t.red, Reduction::Avg) && !v.contains(&(t.dtype, KernelOp::DivInt)) {
            v.push((t.dtype, KernelOp::DivInt));
        }
    }
    v
}

/// Whether `t` is an all-reduce small enough (at most `limit` bytes) that every rank reduces
/// all of it, reading every input whole: one kernel between two handshakes, where the two
/// phases (each rank's share, then the others' shares copied) cost a handshake and a copy more.
pub(crate) fn one_shot(t: &Task, limit: usize) -> bool {
    t.kind == TaskKind::Coll(Collective::AllReduce)
        && t.count > 0
        && t.count.saturating_mul(t.dtype.size()) <= limit
}

/// Receives that land on a buffer partners read in the first phase -- one of the group's send
/// buffers (an in-place ring exchange), an in-place all-to-all's own send buffer -- land in
/// scratch memory of this rank instead and are copied into place after `HALFWAY`; an in-place
/// [`one_shot`] all-reduce's sum, read by partners until the end, after `DONE`. Per task its
/// offset in the scratch memory, and the bytes that needs.
pub(crate) fn parked(
    tasks: &[Task],
    rank: usize,
    n: usize,
    one_shot_max: usize,
) -> (Vec<Option<usize>>, usize) {
    let bytes_of = |t: &Task, elems: usize| elems.saturating_mul(t.dtype.size());
    let span = |p: usize, len: usize| (p, p.saturating_add(len));
    let sends: Vec<(usize, usize)> = tasks
        .iter()
        .filter(|t| matches!(t.kind, TaskKind::Send { .. }) && t.count > 0)
        .map(|t| span(t.send, bytes_of(t, t.count)))
        .collect();
    let overlap = |(a, b): (usize, usize), (c, d): (usize, usize)| a < d && c < b;
    let mut bytes = 0usize;
    let offsets = tasks
        .iter()
        .map(|t| {
            let (send_elems, recv_elems) =
                ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count)?;
            let recv = span(t.recv, bytes_of(t, recv_elems));
            let lands_on_a_read = match t.kind {
                TaskKind::Recv { .. } => sends.iter().any(|&s| overlap(recv, s)),
                TaskKind::Coll(Collective::AlltoAll) => {
                    overlap(recv, span(t.send, bytes_of(t, send_elems)))
                }
                TaskKind::Coll(Collective::AllReduce) if one_shot(t, one_shot_max) => {
                    overlap(recv, span(t.send, bytes_of(t, send_elems)))
                }
                _ => false,
            };
            if t.count == 0 || !lands_on_a_read {
                return None;
            }
            let off = bytes;
            bytes = bytes.saturating_add((recv.1 - recv.0).next_multiple_of(256));
            Some(off)
        })
        .collect();
    (offsets, bytes)
}
