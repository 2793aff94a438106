//! Where a group's device buffers live in pinned host memory while the proxy works on them,
//! and the stream's copies of each piece down and back up.

use ccl_cuda::cuda::Stream;

use super::device::cuda_err;
use crate::error::{Error, Result};
use crate::host::PlanSpec;
use crate::pieces::Gating;
use crate::task::{buffer_counts, Reduction, Scalar, Task};

/// Where a group's device buffers live in host memory while the proxy works on them.
#[derive(Default)]
pub(super) struct Staging {
    /// (device start, device end, host offset) of each merged device range.
    unions: Vec<(usize, usize, usize)>,
    pub(super) bytes: usize,
}

/// A device range a group reads (`true`) or writes: (start, end, input).
type DevRange = (usize, usize, bool);

/// The device ranges of `tasks`' buffers (`is_dev` tells device memory); device-resident
/// PreMulSum scalars are read too.
pub(super) fn device_ranges<'a>(
    tasks: impl IntoIterator<Item = &'a Task>,
    rank: usize,
    n: usize,
    is_dev: &dyn Fn(usize) -> bool,
) -> Result<Vec<DevRange>> {
    let mut ranges = Vec::new();
    for t in tasks {
        let (se, re) = buffer_counts(t.kind, rank, n, t.count)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let sz = t.dtype.size();
        if se > 0 && is_dev(t.send) {
            ranges.push((t.send, t.send + se * sz, true));
        }
        if re > 0 && is_dev(t.recv) {
            ranges.push((t.recv, t.recv + re * sz, false));
        }
        if let Reduction::PreMulSum(Scalar::Device(p)) = t.red {
            if is_dev(p) {
                ranges.push((p, p + t.dtype.size(), true));
            }
        }
    }
    Ok(ranges)
}

/// The staging layout of a group's jobs and the copies of each piece: per job (`gated`
/// None), or per gate, a task's inputs going down before its input gate opens and its outputs
/// coming back once its output gate has landed.
pub(super) fn stage_pieces(
    jobs: &[Vec<Task>],
    gated: Option<&Gating>,
    rank: usize,
    n: usize,
    is_dev: &dyn Fn(usize) -> bool,
) -> Result<(Staging, Vec<PieceIo>)> {
    let st = Staging::plan(&device_ranges(jobs.iter().flatten(), rank, n, is_dev)?);
    let ios = match gated {
        None => jobs
            .iter()
            .map(|p| st.io(&device_ranges(p, rank, n, is_dev)?))
            .collect::<Result<Vec<_>>>()?,
        Some(Gating {
            input,
            output,
            gates,
            ..
        }) => {
            let gates = *gates;
            let mut ios: Vec<PieceIo> = (0..gates).map(|_| PieceIo::default()).collect();
            for (i, t) in jobs.iter().flatten().enumerate() {
                let io = st.io(&device_ranges([t], rank, n, is_dev)?)?;
                let at = |g: Option<&usize>| {
                    g.copied()
                        .filter(|&g| g < gates)
                        .ok_or_else(|| Error::internal("a task without a gate"))
                };
                let (gi, go) = (at(input.get(i))?, at(output.get(i))?);
                ios[gi].inputs.extend(io.inputs);
                ios[go].outputs.extend(io.outputs);
            }
            ios
        }
    };
    Ok((st, ios))
}

/// Copies of one piece of a group: device ranges to the host before its start flag, and back
/// after its done flag, as (device, host offset, bytes).
#[derive(Default)]
pub(super) struct PieceIo {
    pub(super) inputs: Vec<(usize, usize, usize)>,
    pub(super) outputs: Vec<(usize, usize, usize)>,
}

impl PieceIo {
    /// Queues on `stream` the copies of the piece's inputs into host memory at `base`.
    ///
    /// # Safety
    /// The device ranges are buffers of the caller's operations, and `base` holds the staging
    /// layout they were planned in, alive until the copies ran.
    pub(super) unsafe fn queue_inputs(&self, stream: &Stream, base: usize) -> Result<()> {
        for &(dev, off, bytes) in &self.inputs {
            // SAFETY: per this function's contract.
            unsafe { stream.memcpy_dtoh((base + off) as *mut u8, dev as u64, bytes) }
                .map_err(cuda_err)?;
        }
        Ok(())
    }

    /// Queues on `stream` the copies of the piece's outputs back from host memory at `base`.
    ///
    /// # Safety
    /// As [`PieceIo::queue_inputs`].
    pub(super) unsafe fn queue_outputs(&self, stream: &Stream, base: usize) -> Result<()> {
        for &(dev, off, bytes) in &self.outputs {
            // SAFETY: per this function's contract.
            unsafe { stream.memcpy_htod(dev as u64, (base + off) as *const u8, bytes) }
                .map_err(cuda_err)?;
        }
        Ok(())
    }
}

impl Staging {
    /// Lays out every device range of the group in host memory: overlapping ranges share one
    /// host range, so operations of the group see each other's results in call order.
    pub(super) fn plan(ranges: &[DevRange]) -> Staging {
        let mut spans: Vec<(usize, usize)> = ranges.iter().map(|r| (r.0, r.1)).collect();
        spans.sort_unstable();
        let mut st = Staging::default();
        for (lo, hi) in spans {
            match st.unions.last_mut() {
                Some(u) if lo < u.1 => u.1 = u.1.max(hi),
                _ => st.unions.push((lo, hi, 0)),
            }
        }
        for u in st.unions.iter_mut() {
            u.2 = st.bytes;
            st.bytes += (u.1 - u.0).div_ceil(64) * 64;
        }
        st
    }

    /// The copies of a piece whose device ranges are `ranges` (within the group's).
    pub(super) fn io(&self, ranges: &[DevRange]) -> Result<PieceIo> {
        let mut io = PieceIo::default();
        for &(lo, hi, input) in ranges {
            let off = self
                .offset(lo)
                .ok_or_else(|| Error::internal("staging range lost"))?;
            if input {
                io.inputs.push((lo, off, hi - lo));
            } else {
                io.outputs.push((lo, off, hi - lo));
            }
        }
        Ok(io)
    }

    pub(super) fn offset(&self, p: usize) -> Option<usize> {
        self.unions
            .iter()
            .find(|u| p >= u.0 && p < u.1)
            .map(|u| u.2 + (p - u.0))
    }

    /// Points every device address of the tasks at its host copy under `base`.
    pub(super) fn rebase(&self, specs: &mut [PlanSpec], base: usize) {
        let host = |p: usize| self.offset(p).map(|o| base + o).unwrap_or(p);
        for spec in specs.iter_mut() {
            for t in spec.tasks_mut() {
                if t.send != 0 {
                    t.send = host(t.send);
                }
                if t.recv != 0 {
                    t.recv = host(t.recv);
                }
                if let Reduction::PreMulSum(Scalar::Device(p)) = t.red {
                    t.red = Reduction::PreMulSum(Scalar::Device(host(p)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::float_sum as t;
    use crate::task::TaskKind;
    use ccl_collectives::Collective;

    /// Device bytes a list of copies covers, as a sorted list of byte addresses' ranges merged.
    fn covered(copies: impl Iterator<Item = (usize, usize, usize)>) -> Vec<(usize, usize)> {
        let mut v: Vec<(usize, usize)> = copies.map(|(d, _, b)| (d, d + b)).collect();
        v.sort_unstable();
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (lo, hi) in v {
            match out.last_mut() {
                Some(l) if lo <= l.1 => l.1 = l.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        out
    }

    /// Pieces copy exactly what the whole group copies, each range once, at the host offsets
    /// of the one staging layout; a gated group's receives come back at their own piece.
    #[test]
    fn pieces_copy_what_the_whole_group_copies() {
        let dev = |p: usize| p != 0;
        let (rank, n) = (0, 2);
        let groups = [
            vec![
                t(TaskKind::Send { peer: 1 }, 0x10_0000, 0, 3 << 20),
                t(TaskKind::Recv { peer: 1 }, 0, 0x400_0000, 3 << 20),
            ],
            vec![t(
                TaskKind::Coll(Collective::AllReduce),
                0x10_0000,
                0x10_0000,
                5 << 20,
            )],
            vec![t(
                TaskKind::Coll(Collective::AlltoAll),
                0x10_0000,
                0x800_0000,
                2 << 20,
            )],
            vec![t(
                TaskKind::Coll(Collective::AllGather),
                0x800_0000 + (1 << 23) * rank,
                0x800_0000,
                2 << 20,
            )],
        ];
        for g in &groups {
            let (whole_st, whole) =
                stage_pieces(std::slice::from_ref(g), None, rank, n, &dev).unwrap();
            let split = crate::pieces::split(
                g,
                rank,
                n,
                4 << 20,
                crate::pieces::StreamCut::OFF,
                false,
                &|_| false,
            );
            assert!(
                !matches!(split, crate::pieces::Split::Whole),
                "{g:?} not cut"
            );
            let (jobs, gated) = split.into_jobs(g.clone());
            let (st, ios) = stage_pieces(&jobs, gated.as_ref(), rank, n, &dev).unwrap();
            assert!(ios.len() > 1, "{g:?}");
            assert_eq!(st.bytes, whole_st.bytes);
            let all_in = || ios.iter().flat_map(|p| p.inputs.iter().copied());
            let all_out = || ios.iter().flat_map(|p| p.outputs.iter().copied());
            let bytes = |v: &[(usize, usize, usize)]| v.iter().map(|c| c.2).sum::<usize>();
            assert_eq!(
                covered(all_in()),
                covered(whole[0].inputs.iter().copied()),
                "{g:?}"
            );
            // Outputs: the whole group's, less what no piece writes because it is the input
            // itself (an in-place all-gather's own block).
            let out = covered(all_out());
            let whole_out = covered(whole[0].outputs.iter().copied());
            let ins = covered(whole[0].inputs.iter().copied());
            let inside = |a: (usize, usize), v: &[(usize, usize)]| {
                v.iter().any(|b| b.0 <= a.0 && a.1 <= b.1)
            };
            assert!(out.iter().all(|&o| inside(o, &whole_out)), "{g:?}");
            let mut gaps = Vec::new();
            for w in &whole_out {
                let mut at = w.0;
                for o in out.iter().filter(|o| o.0 < w.1 && w.0 < o.1) {
                    if o.0 > at {
                        gaps.push((at, o.0));
                    }
                    at = at.max(o.1);
                }
                if at < w.1 {
                    gaps.push((at, w.1));
                }
            }
            assert!(
                gaps.iter().all(|&gap| inside(gap, &ins)),
                "{g:?}: {gaps:x?} lost"
            );
            // No byte copied twice in one direction (in place, a range is both, once each).
            assert_eq!(
                all_in().map(|c| c.2).sum::<usize>(),
                bytes(&whole[0].inputs),
                "{g:?}"
            );
            let out_bytes: usize = out.iter().map(|o| o.1 - o.0).sum();
            assert_eq!(all_out().map(|c| c.2).sum::<usize>(), out_bytes, "{g:?}");
            for (d, off, b) in all_in().chain(all_out()) {
                assert_eq!(st.offset(d), Some(off));
                assert!(off + b <= st.bytes);
            }
            if let Some(Gating {
                input,
                output,
                gates,
                ..
            }) = &gated
            {
                // A receive returns at its own gate, not at the end.
                assert_eq!(ios.len(), *gates);
                let early = output.iter().filter(|&&o| o + 1 < *gates).count();
                assert!(early > 0, "receives all wait for the end: {output:?}");
                assert!(input.iter().all(|&i| i < *gates));
            }
        }
    }
}
