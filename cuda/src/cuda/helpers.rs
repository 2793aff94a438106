//! Small compositions of the driver wrappers that every GPU engine needs.

use std::sync::Arc;

use super::{sys, Context, CudaError, Event, EventFlags, Result, Stream};

/// An event for ordering only (no timing, no cross-process sharing, no blocking sync): the
/// cheapest kind the driver records.
pub fn plain_event(ctx: &Arc<Context>) -> Result<Event> {
    let flags = EventFlags {
        timing: false,
        interprocess: false,
        blocking_sync: false,
    };
    Event::new(ctx, flags)
}

/// Device `dev`'s primary context, leaving the calling thread's current context as it found
/// it: the caller's own CUDA code (PyTorch) must not see its device change under it.
pub fn device_context(dev: i32) -> Result<Arc<Context>> {
    let prev = super::current_device().ok().flatten();
    let ctx = Context::new(dev)?;
    if let Some(d) = prev.filter(|&d| d != dev) {
        Context::new(d)?;
    }
    Ok(ctx)
}

/// The distinct caller streams among `raw` (`cudaStream_t` values), in first-seen order.
///
/// # Safety
/// Every value must be a live stream of `ctx`'s device or 0 (the legacy default stream), as
/// NCCL's contract asks of its callers.
pub unsafe fn streams_from_raw(
    ctx: &Arc<Context>,
    raw: impl IntoIterator<Item = usize>,
) -> Vec<Stream> {
    let mut seen: Vec<usize> = Vec::new();
    for s in raw {
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    seen.iter()
        // SAFETY: the caller vouches for every value (this function's contract).
        .map(|&s| unsafe { Stream::from_raw(ctx, s as sys::CUstream) })
        .collect()
}

/// Queues `work` on the first of `streams` after everything queued on the others so far, and
/// makes the others wait for it, so one piece of work joins several callers' streams.
pub fn on_first_stream<E: From<CudaError>>(
    ctx: &Arc<Context>,
    streams: &[Stream],
    work: impl FnOnce(&Stream) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let Some(first) = streams.first() else {
        return Ok(());
    };
    for s in &streams[1..] {
        let ev = plain_event(ctx)?;
        ev.record(s)?;
        first.wait_event(&ev)?;
    }
    work(first)?;
    if streams.len() > 1 {
        let ev = plain_event(ctx)?;
        ev.record(first)?;
        for s in &streams[1..] {
            s.wait_event(&ev)?;
        }
    }
    Ok(())
}
