//! Execution time of a group's GPU work, for the kernel-channel events.
//!
//! An operation on the GPU paths finishes on the caller's stream (everything after it there
//! waits for it: the execution model's stream order), whichever engine moved its bytes. So a
//! timing event recorded on each of the part's streams before the group is queued and one
//! recorded after it bracket the operation's execution on the GPU, waits for late peers
//! included, as NCCL's kernel timestamps do. The events are read by one thread per process,
//! which sleeps in `cuEventSynchronize` (blocking-sync events, no spinning) and then reports the
//! part; the API thread never waits. Timestamps are host `CLOCK_MONOTONIC` nanoseconds at the
//! group's start plus the events' elapsed time: plugins use only the difference.

use std::sync::{Arc, OnceLock};

use ccl_cuda::cuda::{Context, Event, EventFlags, Stream};
use crossbeam::channel::{unbounded, Sender};

use crate::core::Comm;
use crate::task::Task;

/// `CLOCK_MONOTONIC` in nanoseconds (never 0: plugins read 0 as "no timestamp").
pub(super) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .max(1)
}

/// The start events of a part's streams, recorded before its work was queued.
pub(super) struct Starts {
    ctx: Arc<Context>,
    t0: u64,
    streams: Vec<(usize, Event)>,
}

impl Starts {
    /// Records a timing event on every stream of `tasks`; `None` if CUDA refuses.
    pub(super) fn record(comm: &Comm, tasks: &[Task]) -> Option<Starts> {
        let ctx = crate::gpu::device_context(comm.0.cuda_dev).ok()?;
        let mut streams: Vec<(usize, Event)> = Vec::new();
        for t in tasks {
            if streams.iter().any(|(s, _)| *s == t.stream) {
                continue;
            }
            let ev = Event::timing(&ctx).ok()?;
            // SAFETY: the caller's stream handle, live for the call (the API contract); the
            // wrapper does not own it.
            let stream = unsafe { Stream::from_raw(&ctx, t.stream as _) };
            ev.record(&stream).ok()?;
            streams.push((t.stream, ev));
        }
        Some(Starts {
            ctx,
            t0: now_ns(),
            streams,
        })
    }

    /// Records the end events (on the calling thread, before the caller queues more work).
    fn record_ends(&self) -> Option<Vec<Event>> {
        let flags = EventFlags {
            timing: true,
            blocking_sync: true,
            ..EventFlags::default()
        };
        self.streams
            .iter()
            .map(|(raw, _)| {
                let ev = Event::new(&self.ctx, flags).ok()?;
                // SAFETY: as in `record`.
                let stream = unsafe { Stream::from_raw(&self.ctx, *raw as _) };
                ev.record(&stream).ok()?;
                Some(ev)
            })
            .collect()
    }
}

/// What the timing thread calls with a part's spans: per stream, its start and end (ns).
pub(super) type Report = Box<dyn FnOnce(&dyn Fn(usize) -> Option<(u64, u64)>) + Send>;

struct Pending {
    starts: Starts,
    ends: Vec<Event>,
    report: Report,
}

fn queue() -> Option<&'static Sender<Pending>> {
    static QUEUE: OnceLock<Option<Sender<Pending>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = unbounded::<Pending>();
            std::thread::Builder::new()
                .name("ccl-profiler".into())
                .spawn(move || {
                    for p in rx {
                        wait_and_report(p);
                    }
                })
                .map_err(|e| tracing::warn!("PROFILER: no timing thread: {e}"))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Records the end events here (before the caller queues more work on its streams) and
/// hands them to the timing thread, which calls `report` once they have passed. If that
/// cannot be done, `report` runs now, untimed.
pub(super) fn submit(starts: Starts, report: Report) {
    let (Some(ends), Some(q)) = (starts.record_ends(), queue()) else {
        report(&|_| None);
        return;
    };
    if let Err(e) = q.send(Pending {
        starts,
        ends,
        report,
    }) {
        // The thread is gone: report here rather than leave events open.
        (e.into_inner().report)(&|_| None);
    }
}

/// Waits for a part's end events and reports its streams' execution spans.
fn wait_and_report(p: Pending) {
    let t0 = p.starts.t0;
    let spans: Vec<(usize, Option<(u64, u64)>)> = p
        .starts
        .streams
        .iter()
        .zip(&p.ends)
        .map(|((raw, start), end)| {
            let ms = end
                .synchronize()
                .and_then(|()| Event::elapsed_ms(start, end))
                .ok();
            let span = ms.map(|ms| (t0, t0 + (f64::from(ms.max(0.0)) * 1e6) as u64));
            (*raw, span)
        })
        .collect();
    let lookup = |stream: usize| {
        spans
            .iter()
            .find(|(s, _)| *s == stream)
            .and_then(|(_, span)| *span)
    };
    (p.report)(&lookup);
}
