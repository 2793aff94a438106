//! Handing a staged submission over: its flag slots taken (never more than [`SLOTS`]
//! outstanding), its jobs sent to the proxy, and its copies and flag writes and waits
//! ordered on the callers' streams.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ccl_cuda::cuda::{Stream, WaitCond};

use super::device::{cuda_err, plain_event};
use super::engine::GpuEngine;
use super::proxy::{Job, SLOTS};
use super::staging::PieceIo;
use crate::core::Comm;
use crate::error::{Error, Result};

/// A staged group laid out in a pinned chunk: its piece copies, own-block copies on the
/// device, and the chunk (index and address).
pub(super) struct Staged<'a> {
    pub(super) ios: &'a [PieceIo],
    pub(super) local: &'a [crate::pieces::LocalCopy],
    pub(super) chunk: usize,
    pub(super) base: usize,
}

/// Hands a staged group's jobs (slots `first..first+count`) to the proxy and orders its copies
/// on the streams. The ranks' sequence numbers are taken: a failure poisons the communicator,
/// and the proxy still runs (and releases) what was handed over.
pub(super) fn hand_over(
    comm: &Comm,
    eng: &GpuEngine,
    streams: &[Stream],
    first: u32,
    count: u32,
    jobs: impl Iterator<Item = Job>,
    st: Staged,
) -> Result<()> {
    let tx = eng
        .tx
        .lock()
        .clone()
        .ok_or_else(|| Error::invalid_usage("communicator is shutting down"))?;
    for job in jobs {
        tx.send(job)
            .map_err(|_| Error::internal("proxy thread is gone"))?;
    }
    eng.submitted
        .store(first.wrapping_add(count - 1), Ordering::Release);
    if let Err(e) = order_on_streams(eng, streams, first, st.ios, st.local, st.chunk, st.base) {
        // The stream may never write the start slots now: write them from here so the proxy
        // runs the operations with its peers and releases whatever the stream did queue.
        for k in 0..count {
            let s = first.wrapping_add(k);
            eng.start.atomic(s).store(s, Ordering::Release);
        }
        comm.set_async_error(&e);
        return Err(e);
    }
    Ok(())
}

/// Bounded enqueue: never more than [`SLOTS`] operations outstanding on one communicator.
/// The start/done slots of a submission of `pieces` pieces: the first one and the count, once
/// the proxy has room for all of them. `what` names the submission in the error.
pub(super) fn take_slots(
    eng: &GpuEngine,
    comm: &Comm,
    pieces: usize,
    what: &str,
) -> Result<(u32, u32)> {
    let count = u32::try_from(pieces)
        .ok()
        .filter(|c| (1..SLOTS).contains(c))
        .ok_or_else(|| Error::internal(format!("{what} split into too many pieces")))?;
    let first = eng.submitted.load(Ordering::Relaxed).wrapping_add(1);
    wait_for_room(eng, comm, first.wrapping_add(count - 1))?;
    Ok((first, count))
}

fn wait_for_room(eng: &GpuEngine, comm: &Comm, last: u32) -> Result<()> {
    while last.wrapping_sub(eng.completed.load(Ordering::Acquire)) >= SLOTS {
        if comm.0.abort.load(Ordering::Relaxed) {
            return Err(Error::system("communicator aborted"));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(())
}

/// The stream side of one group: every piece's inputs to the pinned chunk and its start slot,
/// then every piece's wait on its done slot and results back (so piece k's copies overlap the
/// proxy's work on its neighbours), the other streams joined before and after.
fn order_on_streams(
    eng: &GpuEngine,
    streams: &[Stream],
    first_seq: u32,
    pieces: &[PieceIo],
    local: &[crate::pieces::LocalCopy],
    chunk: usize,
    base: usize,
) -> Result<()> {
    let Some(first) = streams.first() else {
        return Ok(());
    };
    for s in &streams[1..] {
        let ev = plain_event(&eng.ctx)?;
        ev.record(s).map_err(cuda_err)?;
        first.wait_event(&ev).map_err(cuda_err)?;
    }
    let seq = |k: usize| first_seq.wrapping_add(k as u32);
    // SAFETY: device ranges are the caller's validated buffers; host ranges lie in the pinned
    // chunk sized for them, which is not reused before the event recorded below completes; the
    // slots live as long as the engine, which outlives every queued operation.
    unsafe {
        for (k, p) in pieces.iter().enumerate() {
            p.queue_inputs(first, base)?;
            first
                .write_value32(eng.start.device(seq(k)), seq(k))
                .map_err(cuda_err)?;
        }
        // Own blocks after every input went down, so they do not hold the pieces back.
        for c in local {
            first
                .memcpy_dtod(c.dst as u64, c.src as u64, c.bytes)
                .map_err(cuda_err)?;
        }
        for (k, p) in pieces.iter().enumerate() {
            first
                .wait_value32(eng.done.device(seq(k)), seq(k), WaitCond::Geq)
                .map_err(cuda_err)?;
            p.queue_outputs(first, base)?;
        }
    }
    let done_ev = plain_event(&eng.ctx)?;
    done_ev.record(first).map_err(cuda_err)?;
    for s in &streams[1..] {
        s.wait_event(&done_ev).map_err(cuda_err)?;
    }
    if let Some(c) = eng.chunks.lock().get_mut(chunk) {
        c.busy = Some(done_ev);
    }
    Ok(())
}
