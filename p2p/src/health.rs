//! The engine between operations: whether queued work can still finish, waiting for it to
//! run out, and letting the engine go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda;
use ccl_cuda::cuda::source::ll_spin_words_bytes;

use crate::control::{CommCtx, PeerHealth};
use crate::engine::{IpcEngine, Watch};
use crate::error::{cuda_err, Error, Result};
use crate::small_p2p;

/// For `ncclCommGetAsyncError`: compares this rank's recent collectives with what its peers
/// posted, and looks for queued GPU work that cannot finish; either becomes the communicator's
/// async error. Skipped while another thread is queueing on the communicator.
pub fn check_health(comm: &CommCtx, eng: &IpcEngine) {
    // The caller may be capturing a CUDA graph in global mode (PyTorch polls the async error
    // of nonblocking communicators between captured calls): the event query below would
    // break its capture.
    let _relaxed = cuda::RelaxedCapture::new();
    let Some(mut q) = eng.queued.try_lock() else {
        return;
    };
    let ops = q.ops;
    if let Some(e) = small_mismatch(eng) {
        drop(q);
        comm.set_async_error(&e);
        return;
    }
    if let Some(e) = eng.board.check(&mut q.calls) {
        drop(q);
        comm.set_async_error(&e);
        return;
    }
    drop(q);
    check_stuck(comm, eng, ops);
}

/// A small receive whose size differed from its send's, as the point-to-point kernel reported.
fn small_mismatch(eng: &IpcEngine) -> Option<Error> {
    let v = eng.small_mismatch.load();
    (v != 0).then(|| {
        Error::invalid_usage(format!(
            "rank {}: a receive of at most {} bytes from rank {} did not match the size of its \
             send (ncclSend and ncclRecv counts x type sizes must agree)",
            eng.layout.rank,
            small_p2p::max_bytes(eng.p2p_max),
            v - 1
        ))
    })
}

/// With GPU work still queued: a peer that died, left or failed means that work may never
/// finish, and `CCL_TIMEOUT_S` without any operation finishing is a failure too. Both become
/// the async error (PyTorch's watchdog then aborts), instead of a hang with no word.
fn check_stuck(comm: &CommCtx, eng: &IpcEngine, ops: u64) {
    let pending = !eng.last_done.query().unwrap_or(true);
    let mut watch = eng.watch.lock();
    if !pending {
        *watch = Watch::default();
        return;
    }
    let now = std::time::Instant::now();
    if let Some(health) = comm.control.poll_peers() {
        let failed = match health {
            PeerHealth::Ok => None,
            // A peer that left in order (or died) may have delivered all this rank still
            // needs: fail only if the work stays queued a while after.
            PeerHealth::NeededPeerLeft(e) => {
                let first = *watch.peer_left.get_or_insert(now);
                (now.duration_since(first) > PEER_LEFT_GRACE).then_some(e)
            }
            PeerHealth::Failed(e) => Some(e),
        };
        if let Some(e) = failed {
            comm.set_async_error(&e.context(format!(
                "rank {}: GPU operations are still queued",
                comm.rank()
            )));
            return;
        }
    }
    let since = match watch.pending {
        Some((t, seen)) if seen == ops => t,
        _ => {
            watch.pending = Some((now, ops));
            now
        }
    };
    let limit = eng.cfg.timeout_s;
    if limit > 0 && now.duration_since(since) > Duration::from_secs(limit as u64) {
        comm.set_async_error(&Error::system(format!(
            "rank {}: GPU operations queued on this communicator made no progress for {limit} s \
             (CCL_TIMEOUT_S); {ops} queued so far",
            comm.rank()
        )));
    }
}

/// How long queued work may outlive a peer's departure before it counts as stuck.
const PEER_LEFT_GRACE: Duration = Duration::from_secs(1);

/// Waits until the engine's streams have run everything queued (finalize), giving up when the
/// communicator is aborted.
pub fn wait_idle(eng: &IpcEngine, abort: &AtomicBool) -> Result<()> {
    for s in eng.tx.iter().chain(&eng.rx) {
        while !s.query().map_err(cuda_err)? {
            if abort.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(Error::system("communicator aborted"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(())
}

/// Releases the engine. After an abort its streams may wait forever on peers that are gone,
/// and peers may still write into its memory: then it is leaked rather than freed.
pub fn shutdown(eng: Arc<IpcEngine>, aborted: bool) {
    // What ended since the last group (wait_idle has waited for the rest, unless aborted).
    if let Some(m) = eng.copies.get() {
        m.poll();
    }
    if let Some(q) = eng.queued.try_lock() {
        tracing::info!(
            "rank {}: cuda-ipc sent {} bytes straight between user buffers, {} of them through \
             the bounce buffer and {} through the host path beside NVLink, {} bytes through \
             receive slots and {} bytes as small sends; {} transfers went without the host path \
             while the GPU was at its power or thermal limit",
            eng.layout.rank,
            q.sent_direct,
            q.sent_bounced,
            q.sent_host,
            q.sent_staged,
            q.sent_small,
            eng.host_skipped.load(Ordering::Relaxed)
        );
        if let Some(r) = &eng.remote {
            tracing::info!(
                "rank {}: cuda-ipc had the peer GPU's copy engine push {} of the transfers it \
                 pulled ({} bytes)",
                eng.layout.rank,
                r.pulls.load(Ordering::Relaxed),
                r.bytes.load(Ordering::Relaxed)
            );
        }
        let t = &q.queueing;
        tracing::info!(
            "rank {}: cuda-ipc queued {} groups in {:.3} ms of host time ({} over 100 us, {} \
             over 1 ms, {} us at most; prepared and locked {:.3} ms, posted {:.3}, settled and \
             begun {:.3}, emitted and ended {:.3})",
            eng.layout.rank,
            t.groups,
            t.total.as_secs_f64() * 1e3,
            t.over_100us,
            t.over_1ms,
            t.longest.as_micros(),
            t.phases.prepare.as_secs_f64() * 1e3,
            t.phases.post.as_secs_f64() * 1e3,
            t.phases.begin.as_secs_f64() * 1e3,
            t.phases.emit.as_secs_f64() * 1e3,
        );
        let w = &q.push_waits;
        let posted_first = w.pushed + w.left_to_pull + w.mailed + w.eager;
        if posted_first > 0 {
            tracing::info!(
                "rank {}: {} sends posted before their receives: {} sent eagerly through the \
                 receiver's slots (no wait, CCL_IPC_EAGER_SEND), {} mailed (pushed by a kernel \
                 once the receiver posted, no wait), {} pushed (the receiver had posted), {} \
                 left to the receiver to pull; the host waited {:.3} ms in all, {} us at most \
                 (CCL_IPC_PUSH_WAIT_US, CCL_IPC_PUSH_WAIT_BUSY_US)",
                eng.layout.rank,
                posted_first,
                w.eager,
                w.mailed,
                w.pushed,
                w.left_to_pull,
                w.waited.as_secs_f64() * 1e3,
                w.longest.as_micros()
            );
        }
        if let Some(f) = eng.mail.as_ref().map(|m| m.fills()).filter(|f| f.count > 0) {
            tracing::info!(
                "rank {}: cuda-ipc's mail thread filled {} mailed reductions' slots, {:.1} us \
                 after the call on average, {} us at most (how late the last peer called, and \
                 the thread's own delay)",
                eng.layout.rank,
                f.count,
                f.total.as_secs_f64() * 1e6 / f.count as f64,
                f.longest.as_micros()
            );
        }
        let [shared, alone, passive, staged] = q.sym_outcomes;
        if shared + alone + passive + staged + q.sym_mailed > 0 {
            tracing::info!(
                "rank {}: direct reductions: {shared} shared, {alone} done alone, {passive} left \
                 to the peer, {staged} staged after the rendezvous, {} of all on symmetric \
                 windows (no wait), {} mailed (queued before the others posted, no wait); the \
                 host waited {:.3} ms for the other ranks' posts \
                 (CCL_IPC_DIRECT_REDUCE_TAKEOVER_US)",
                eng.layout.rank,
                q.sym_windowed,
                q.sym_mailed,
                q.sym_waited.as_secs_f64() * 1e3
            );
        }
    }
    if aborted {
        if let Some(m) = &eng.mail {
            m.close();
        }
        release_waits(&eng);
    }
    // Graphs that captured groups on the direct paths keep the flag area's addresses (ours
    // and, mapped, the peers'), and captured low-latency kernels the areas': they stay for
    // as long as the process may replay them.
    if aborted
        || eng.captured.load(Ordering::Relaxed) > 0
        || eng.ll_captured.load(Ordering::Relaxed)
    {
        std::mem::forget(eng);
    }
}

/// How long an abort waits for the GPU to take the released flags.
const RELEASE_DEADLINE: Duration = Duration::from_millis(500);

/// After an abort: moves every word of this rank's flag area (which peers write and this
/// rank's streams and wait kernels wait on, cyclically `>=`) and of its low-latency area's
/// words (what the low-latency kernels spin on, the same way) a quarter of the u32 circle
/// ahead, from a stream of its own, so that waits for a peer that is gone end and the
/// process's GPU work behind them runs again (the aborted operations' data is garbage: the
/// communicator is gone). Where every stream shares one hardware queue
/// (`CUDA_DEVICE_MAX_CONNECTIONS=1`) the release queues behind a stuck stream wait and never
/// runs: the abort gives up after [`RELEASE_DEADLINE`] and says so.
fn release_waits(eng: &Arc<IpcEngine>) {
    let e = eng.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("ccl-release".into())
        .spawn(move || {
            let _ = tx.send(bump_flags(&e));
        });
    if let Err(err) = spawned {
        tracing::warn!(
            "rank {}: abort: no thread to release the GPU's waits: {err}",
            eng.layout.rank
        );
        return;
    }
    match rx.recv_timeout(RELEASE_DEADLINE) {
        Ok(Ok(words)) => tracing::info!(
            "rank {}: abort released the GPU's waits ({words} flag words moved on)",
            eng.layout.rank
        ),
        Ok(Err(err)) => tracing::warn!(
            "rank {}: abort: releasing the GPU's waits: {err}",
            eng.layout.rank
        ),
        Err(_) => tracing::warn!(
            "rank {}: abort: the GPU's waits were not released within {} ms (streams that share \
             one hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1, queue the release behind them)",
            eng.layout.rank,
            RELEASE_DEADLINE.as_millis()
        ),
    }
}

/// Moves on, from a stream of its own, every word a kernel or stream of this rank may spin on:
/// the flag area, and the words of its low-latency area (the low-latency kernels' flags and
/// acknowledgements, the point-to-point kernel's slot, credit and ticket lines), which the
/// kernels of small and mid-size operations wait on.
fn bump_flags(eng: &IpcEngine) -> Result<usize> {
    let s = ccl_cuda::cuda::Stream::with_flags(&eng.ctx, true).map_err(cuda_err)?;
    let ll_words = ll_spin_words_bytes(eng.layout.nranks);
    let flags = bump(&s, eng._flags.ptr(), eng._flags.len())?;
    let ll = bump(&s, eng._ll.ptr(), ll_words.min(eng._ll.len()))?;
    Ok(flags + ll)
}

/// Reads `len` bytes of device memory at `ptr`, adds 2^30 to every 32-bit word and writes them
/// back on `s`: the words it returns how many of.
fn bump(s: &ccl_cuda::cuda::Stream, ptr: u64, len: usize) -> Result<usize> {
    let len = len / 4 * 4;
    let mut words = vec![0u8; len];
    // SAFETY: the range lies in one of the engine's own buffers (the caller's contract: they
    // live as long as the engine, which the caller keeps), and `words` holds `len` bytes until
    // the synchronize returns.
    unsafe { s.memcpy_dtoh(words.as_mut_ptr(), ptr, len) }.map_err(cuda_err)?;
    s.synchronize().map_err(cuda_err)?;
    for w in words.chunks_exact_mut(4) {
        let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]).wrapping_add(1 << 30);
        w.copy_from_slice(&v.to_le_bytes());
    }
    // SAFETY: as above, `words` borrowed until the synchronize returns.
    unsafe { s.memcpy_htod(ptr, words.as_ptr(), len) }.map_err(cuda_err)?;
    s.synchronize().map_err(cuda_err)?;
    Ok(len / 4)
}
