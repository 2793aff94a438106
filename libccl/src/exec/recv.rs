//! A receive's frames: the header checked against this rank's call, then each frame copied or
//! folded into its destination, or taken where the link already placed it.

use ccl_cuda::host::reduce;
use ccl_cuda::{DataType, ReduceKind};
use ccl_monitor::{ExecStats, TIMED_BYTES};
use ccl_transports::Link;

use super::gates::CollGateState;
use super::header::{OpHeader, HDR_BYTES};
use super::op::{XKind, XOp};
use crate::error::{Error, Result};

/// How a plan's receives fold what arrives: its type, reduction and pre-multiplier.
#[derive(Clone, Copy)]
pub(super) struct Arith<'a> {
    pub(super) dtype: DataType,
    pub(super) arith: ReduceKind,
    pub(super) scalar: &'a [u8; 8],
}

pub(super) fn recv_op(
    op: &mut XOp,
    link: &mut dyn Link,
    arith: Arith<'_>,
    stats: &mut ExecStats,
    mut gates: Option<&mut CollGateState>,
    unsent: &dyn Fn(usize, usize) -> bool,
) -> Result<bool> {
    let mut progressed = false;
    while !op.finished {
        if let Some(g) = gates.as_deref() {
            if !next_frame_ready(op, g, link.max_frame()) {
                break;
            }
        }
        let Some(frame) = link.peek()? else { break };
        let data = payload(op, frame, arith.dtype.size())?;
        let n = data.len();
        // Addresses as integers: the parts may run on the copy threads (ccl_transports::par).
        let (from, done) = (data.as_ptr() as usize, op.done);
        let to = Target::of(op.kind);
        if op.after_sends && unsent(to.dst + done, n) {
            // This rank's own send of these bytes has not left yet (in place).
            break;
        }
        // A frame the link wrote straight into the destination lent to it (below) is where
        // it belongs already; one shown anywhere else inside the destination means the two
        // sides cut the operation into frames differently, which would corrupt it.
        let lent_frame = to.what == 0 && n > 0 && (to.dst..to.dst + op.bytes).contains(&from);
        if lent_frame && from != to.dst + done {
            return Err(Error::internal(format!(
                "a frame from rank {} arrived at offset {} of its destination, expected {done}",
                op.peer,
                from - to.dst
            )));
        }
        if lent_frame {
            stats.placed_bytes += n as u64;
        } else if n > 0 {
            let t0 = (n >= TIMED_BYTES).then(std::time::Instant::now);
            to.take(arith, from, done, n);
            if let Some(t0) = t0 {
                stats.recv_busy += t0.elapsed();
                stats.recv_bytes += n as u64;
            }
        }
        if let Some(g) = gates.as_deref_mut() {
            g.wrote(to.dst + done, n);
        }
        op.done += n;
        op.header_done = true;
        link.pop();
        progressed = true;
        if op.done == op.bytes {
            op.finished = true;
        } else if to.what == 0 && gates.is_none() && !op.after_sends {
            // The rest of the operation comes in frames cut as min(left, the largest), so the
            // link can be told where each goes (it checks that the sender's largest frame is
            // its own before it takes the offer).
            // SAFETY: the rest of the destination, validated at enqueue (or plan-owned), is
            // written by nothing but this operation's frames until it finishes; a failed plan
            // quiesces its links (which withdraws the loan) before its buffers go back
            // (group::drive).
            unsafe { link.lend((to.dst + op.done) as *mut u8, op.bytes - op.done) };
        }
    }
    Ok(progressed)
}

/// Whether the next frame's local input (and, in place, its destination) is in host memory,
/// as it must be before the frame is taken; its length is at most what is left of `op`, and
/// at most `max_frame`.
fn next_frame_ready(op: &XOp, g: &CollGateState, max_frame: usize) -> bool {
    let left = op.bytes - op.done;
    let (dst, local) = match op.kind {
        XKind::Recv { dst } => (dst as usize, dst as usize),
        XKind::RecvReduce { local, dst, .. } => (dst as usize, local as usize),
        _ => (0, 0),
    };
    g.ready(dst + op.done, left.min(max_frame)) && g.ready(local + op.done, left.min(max_frame))
}

/// The bytes of `op` in `frame`: behind the header in its first frame, which must be this
/// rank's own call's; whole elements of `size`, no more than are left.
fn payload<'f>(op: &XOp, frame: &'f [u8], size: usize) -> Result<&'f [u8]> {
    let data = if op.header_done {
        frame
    } else {
        let theirs = OpHeader::decode(frame).ok_or_else(|| {
            Error::invalid_usage(format!(
                "rank {} sent data this rank did not expect (no operation header)",
                op.peer
            ))
        })?;
        if theirs != op.hdr {
            return Err(Error::invalid_usage(format!(
                "mismatched operations: rank {} issued {} while this rank expects {}",
                op.peer,
                theirs.describe(),
                op.hdr.describe()
            )));
        }
        &frame[HDR_BYTES..]
    };
    let n = data.len();
    if n > op.bytes - op.done || n % size != 0 {
        return Err(Error::invalid_usage(format!(
            "rank {} sent {n} bytes where {} remained of this operation",
            op.peer,
            op.bytes - op.done
        )));
    }
    Ok(data)
}

/// Where a receive's frames go, and how.
#[derive(Clone, Copy)]
struct Target {
    /// 0 copy, 1 reduce, 2 pre-multiplied sum, 3 reduce with the local operand first (4: not
    /// a receive).
    what: u8,
    dst: usize,
    /// The local input of a reduction.
    local: usize,
}

impl Target {
    fn of(kind: XKind) -> Target {
        let (what, dst, local) = match kind {
            XKind::Recv { dst } => (0u8, dst as usize, 0usize),
            XKind::RecvReduce {
                local,
                dst,
                fused,
                local_first,
            } => {
                let what = match (fused, local_first) {
                    (true, _) => 2,
                    (false, true) => 3,
                    (false, false) => 1,
                };
                (what, dst as usize, local as usize)
            }
            _ => (4, 0, 0),
        };
        Target { what, dst, local }
    }

    /// Copies or folds the `n` bytes of a frame at `from` into the destination at offset
    /// `done`, in parts on the copy threads.
    fn take(
        &self,
        Arith {
            dtype,
            arith,
            scalar,
        }: Arith<'_>,
        from: usize,
        done: usize,
        n: usize,
    ) {
        let size = dtype.size();
        let Target { what, dst, local } = *self;
        let part = |r: std::ops::Range<usize>| {
            let (src, len, at) = ((from + r.start) as *const u8, r.len(), done + r.start);
            let (d, l) = ((dst + at) as *mut u8, (local + at) as *const u8);
            // SAFETY: dst/local ranges [done, done+n) lie inside buffers validated at
            // enqueue (or plan-owned) and r lies inside [0, n), element-aligned; `from` is
            // the link's frame, disjoint from user memory and left in place until every
            // part has run; `scalar` holds one element of `dtype`.
            unsafe {
                match what {
                    0 => std::ptr::copy_nonoverlapping(src, d, len),
                    1 => reduce::reduce(dtype, arith, d, src, l, len / size),
                    2 => reduce::premul_add(dtype, d, l, src, len / size, scalar.as_ptr()),
                    3 => reduce::reduce(dtype, arith, d, l, src, len / size),
                    _ => {}
                }
            }
        };
        ccl_transports::par::for_parts(n, size, &part);
    }
}
