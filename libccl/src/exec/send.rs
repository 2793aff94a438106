//! A send's frames: the header and first bytes through the staging buffer, the rest from the
//! source itself, each frame once the bytes it carries are ready.

use ccl_monitor::{ExecStats, TIMED_BYTES};
use ccl_transports::Link;

use super::gates::CollGateState;
use super::header::HDR_BYTES;
use super::op::XOp;
use crate::error::Result;

/// Bytes of an operation that ride in its first frame, behind the header, on links whose
/// frames are over 4 times as long (a multiple of every element size).
const FIRST_FRAME_DATA: usize = 256 << 10;

pub(super) fn send_op(
    op: &mut XOp,
    src: *const u8,
    link: &mut dyn Link,
    staging: &mut Vec<u8>,
    stats: &mut ExecStats,
    gates: Option<&CollGateState>,
    unlanded: &dyn Fn(usize, usize) -> bool,
) -> Result<bool> {
    // A staged piece not yet in host memory holds back the frames that read it, and so do
    // bytes an earlier receive of the step has yet to write.
    let ready = |at: usize, len: usize| {
        gates.map_or(true, |g| g.ready(src as usize + at, len))
            && !(op.after_receives && unlanded(src as usize + at, len))
    };
    let mut progressed = false;
    let max = link.max_frame();
    if op.header_done && op.done == op.bytes {
        // Everything was queued; the operation ends when the link has handed it to the OS.
        progressed |= link.flush()?;
        op.finished = !link.has_pending();
        return Ok(progressed);
    }
    while !op.finished {
        let left = op.bytes - op.done;
        let t0 = (left >= TIMED_BYTES).then(std::time::Instant::now);
        let before = op.done;
        if !op.header_done {
            // The first frame's bytes pass through `staging`, the rest go from the source
            // itself (deferrable): on links of large frames it carries at most
            // FIRST_FRAME_DATA behind the header (on small ones the extra frame cost ~3%).
            let first = if max > 4 * FIRST_FRAME_DATA {
                FIRST_FRAME_DATA
            } else {
                max
            };
            let data = left.min(max.saturating_sub(HDR_BYTES).min(first) & !15);
            if !ready(0, data) {
                break;
            }
            // Header, then the first bytes, appended (zero-filling the whole frame first cost
            // a memset as long as the copy).
            staging.clear();
            staging.resize(HDR_BYTES, 0);
            op.hdr.encode(staging);
            if data > 0 {
                // SAFETY: `src` is valid for `bytes` reads (validated at enqueue) and data <=
                // bytes; it is user (or plan-owned) memory, disjoint from `staging`.
                staging.extend_from_slice(unsafe { std::slice::from_raw_parts(src, data) });
            }
            if !link.try_send(staging)? {
                break;
            }
            op.header_done = true;
            op.done = data;
        } else {
            let data = left.min(max);
            if !ready(op.done, data) {
                break;
            }
            // SAFETY: done + data <= bytes, inside the validated source range.
            let s = unsafe { std::slice::from_raw_parts(src.add(op.done), data) };
            let queued = if op.copy_frames {
                // A receive of this step overwrites the source once these bytes are queued.
                link.try_send(s)?
            } else {
                // SAFETY: the source (a user buffer validated at enqueue, or plan-owned) stays
                // as it is until this operation finishes, which waits for `has_pending` to be
                // false; a failed plan quiesces its links before its buffers go back
                // (group::drive).
                unsafe { link.try_send_deferred(s) }?
            };
            if !queued {
                break;
            }
            op.done += data;
        }
        if let Some(t0) = t0 {
            stats.send_busy += t0.elapsed();
            stats.send_bytes += (op.done - before) as u64;
        }
        progressed = true;
        if op.done == op.bytes {
            progressed |= link.flush()?;
            op.finished = !link.has_pending();
            break;
        }
    }
    Ok(progressed)
}
