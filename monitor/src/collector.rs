//! The collector thread: drains every thread's ring, runs the windows, and feeds the file,
//! the snapshot and the extra subscribers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::event::Record;
use crate::export::JsonWriter;
use crate::packed::Packed;
use crate::ring::Consumer;
use crate::subscriber::Subscriber;
use crate::window::{Event, Windows};
use crate::{CollectorSched, Error, MonitorConfig, Options, Shared, Snapshot, TimeBase};

/// One producing thread's ring.
struct Source {
    ring: Consumer<Packed>,
    /// The newest timestamp it delivered.
    latest_ts: Option<u64>,
}

pub(crate) struct Collector {
    shared: Arc<Shared>,
    rings: Vec<Source>,
    windows: Windows,
    writer: Option<JsonWriter>,
    subscribers: Vec<Box<dyn Subscriber + Send>>,
    time_base: TimeBase,
    poll: Duration,
    sched: CollectorSched,
    batch: Vec<Packed>,
    events: Vec<Event>,
    transitions: u64,
    records: u64,
    /// Drops counted by rings already retired.
    retired_dropped: u64,
}

/// The collector's nice value: it needs a few percent of a core on average and its rings
/// hold many passes of records, while a transport thread it preempts for a pass stalls a
/// transfer (on a machine with few cores every pass took an engine's or executor's core).
const COLLECTOR_NICE: libc::c_int = 10;

/// Lowers this thread's scheduling priority as `how` says (best effort).
fn yield_to_data_threads(how: CollectorSched) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions and returns this thread's id.
        let tid = unsafe { libc::gettid() };
        let policy = match how {
            CollectorSched::Nice => None,
            CollectorSched::Batch => Some(libc::SCHED_BATCH),
            CollectorSched::Idle => Some(libc::SCHED_IDLE),
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the call's duration; moving this thread
        // (by its id) to a batch or idle policy needs no privilege and touches no memory of
        // ours.
        let moved = policy.map_or(0, |p| unsafe { libc::sched_setscheduler(tid, p, &param) });
        // SAFETY: setpriority with PRIO_PROCESS and a thread id changes only that thread's
        // nice value; raising it needs no privilege and touches no memory of ours. (An idle
        // thread's nice value is not used.)
        let niced =
            unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, COLLECTOR_NICE) };
        if moved != 0 || niced != 0 {
            tracing::debug!(
                "monitor collector keeps its priority ({how:?}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = how;
}

/// This thread's CPU time (user and system) in microseconds; 0 where it cannot be read.
fn thread_cpu_us() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0) / 1000
}

impl Collector {
    pub(crate) fn new(
        cfg: &MonitorConfig,
        opts: Options,
        shared: Arc<Shared>,
    ) -> Result<Self, Error> {
        let writer = match &cfg.file {
            Some(path) => Some(JsonWriter::create(path, cfg.file_max_bytes, cfg.file_keep)?),
            None => None,
        };
        Ok(Collector {
            shared,
            rings: Vec::new(),
            windows: Windows::new(cfg.window_config()),
            writer,
            subscribers: opts.subscribers,
            time_base: opts.time_base,
            poll: opts.poll.unwrap_or(cfg.poll),
            sched: cfg.collector_sched,
            batch: Vec::with_capacity(4096),
            events: Vec::with_capacity(256),
            transitions: 0,
            records: 0,
            retired_dropped: 0,
        })
    }

    pub(crate) fn spawn(self) -> Result<JoinHandle<Result<(), Error>>, Error> {
        let shared = self.shared.clone();
        let handle = std::thread::Builder::new()
            .name("ccl-monitor".into())
            .spawn(move || self.run())
            .map_err(Error::Spawn)?;
        let _ = shared.collector.set(handle.thread().clone());
        Ok(handle)
    }

    fn run(mut self) -> Result<(), Error> {
        yield_to_data_threads(self.sched);
        let mut idle_passes = 0u32;
        let mut passes = 0u64;
        loop {
            passes += 1;
            // Read before draining: whatever was pushed before a flush request is drained
            // below, so the request can be marked done after this pass.
            let requested = self.shared.flush_req.load(Ordering::Acquire);
            let stopping = self.shared.stop.load(Ordering::Acquire);
            self.adopt();
            let (n, backlog) = self.drain();
            self.process();
            let now = match self.time_base {
                TimeBase::Clock => self.shared.clock.now_ns(),
                TimeBase::Records => self.records_time(),
            };
            self.windows.tick(now, &mut self.events);
            if stopping {
                self.windows.finish(&mut self.events);
            }
            let busy = n > 0 || !self.events.is_empty();
            self.emit();
            let flushing = requested > *self.shared.flush_done.lock();
            if n == 0 || flushing || stopping {
                self.flush_file();
            }
            if busy || flushing {
                self.publish_snapshot();
            }
            self.retire();
            self.mark_flushed(requested);
            if stopping && n == 0 {
                self.report_cost(passes);
                return Ok(());
            }
            idle_passes = if n == 0 { idle_passes + 1 } else { 0 };
            if stopping || backlog {
                continue;
            }
            // A busy monitor drains every poll: passing again at once (as it did) found the
            // few records of the last microseconds and wrote the file each time, twice the
            // passes and a write per poll. Idle, the sleep doubles up to 8 polls (an idle
            // monitor wakes ~12 times a second at the default 10 ms).
            let polls = if n == 0 {
                1 << idle_passes.min(4) >> 1
            } else {
                1
            };
            std::thread::park_timeout(self.poll * polls);
        }
    }

    /// Logs what the collector cost this process, for the overhead benchmark to read
    /// (`tests/bench/monitor_overhead.sh`): its thread's CPU time against the records.
    fn report_cost(&self, passes: u64) {
        tracing::info!(
            cpu_us = thread_cpu_us(),
            records = self.records,
            dropped = self.dropped(),
            passes,
            "monitor collector done"
        );
    }

    /// Takes over the rings threads registered since the last pass.
    fn adopt(&mut self) {
        let pending = std::mem::take(&mut *self.shared.pending.lock());
        self.rings.extend(pending.into_iter().map(|ring| Source {
            ring,
            latest_ts: None,
        }));
    }

    /// Moves up to one ring's worth from each ring into the batch, oldest first. Also says
    /// whether some ring was over half full: then the next pass follows at once rather than
    /// after a poll, before the ring fills and drops records.
    fn drain(&mut self) -> (usize, bool) {
        self.batch.clear();
        let mut backlog = false;
        for src in &mut self.rings {
            let from = self.batch.len();
            for _ in 0..src.ring.capacity() {
                match src.ring.pop() {
                    Some(r) => {
                        src.latest_ts = src.latest_ts.max(Some(r.ts_ns()));
                        self.batch.push(r);
                    }
                    None => break,
                }
            }
            backlog |= self.batch.len() - from > src.ring.capacity() / 2;
        }
        // Rings are drained one after another; sorting restores time order across threads
        // within a pass.
        self.batch.sort_by_key(Packed::ts_ns);
        (self.batch.len(), backlog)
    }

    /// Simulated time: the earliest of the producers' newest timestamps. A producer that is
    /// behind may still deliver records up to then, so a key it feeds is not yet stalled.
    fn records_time(&self) -> u64 {
        self.rings
            .iter()
            .filter_map(|s| s.latest_ts)
            .min()
            .unwrap_or(0)
    }

    fn process(&mut self) {
        self.records += self.batch.len() as u64;
        let batch = std::mem::take(&mut self.batch);
        for p in &batch {
            // Subscribers see a record of several posts or completions once, with their
            // total bytes.
            match p.unpack() {
                (Record::Post(w), n) => {
                    self.windows.on_post_n(&w, n);
                    self.subscribers.iter().for_each(|s| s.on_post(&w));
                }
                (Record::Complete(w), n) => {
                    self.windows.on_complete_n(&w, n, &mut self.events);
                    self.subscribers.iter().for_each(|s| s.on_complete(&w));
                }
                (Record::Transition(t), _) => {
                    self.transitions += 1;
                    self.subscribers.iter().for_each(|s| s.on_transition(&t));
                    self.write(|w| w.write_transition(&t));
                }
            }
        }
        self.batch = batch;
    }

    /// Hands the analysis events to the file and the subscribers.
    fn emit(&mut self) {
        let events = std::mem::take(&mut self.events);
        for e in &events {
            match e {
                Event::Anomaly(a) => {
                    tracing::warn!(key = ?a.key, tput_bps = a.tput_bps, baseline_bps = a.baseline_bps, culprit = ?a.culprit, "throughput anomaly")
                }
                Event::Recovered(a) => {
                    tracing::info!(key = ?a.key, tput_bps = a.tput_bps, "throughput recovered")
                }
                Event::Stall(s) => {
                    tracing::warn!(key = ?s.key, idle_ns = s.idle_ns, culprit = ?s.culprit, "stall")
                }
                Event::Sample(_) => {}
            }
            self.subscribers.iter().for_each(|s| s.on_window(e));
            self.write(|w| w.write_event(e));
        }
        self.events = events;
        self.events.clear();
    }

    /// A file that cannot be written is given up on (with a warning) rather than stopping
    /// the analysis.
    fn write(&mut self, line: impl FnOnce(&mut JsonWriter) -> Result<(), Error>) {
        if let Some(w) = &mut self.writer {
            if let Err(e) = line(w) {
                tracing::warn!(error = %e, "monitor file write failed; no more records go to it");
                self.writer = None;
            }
        }
    }

    fn flush_file(&mut self) {
        if let Some(w) = &mut self.writer {
            if let Err(e) = w.flush() {
                tracing::warn!(error = %e, "monitor file flush failed; no more records go to it");
                self.writer = None;
            }
        }
    }

    /// Records dropped so far because a ring was full.
    fn dropped(&self) -> u64 {
        self.retired_dropped + self.rings.iter().map(|s| s.ring.dropped()).sum::<u64>()
    }

    fn publish_snapshot(&mut self) {
        let snap = Snapshot {
            keys: self.windows.snapshot(),
            transitions: self.transitions,
            records: self.records,
            dropped: self.dropped(),
        };
        *self.shared.snapshot.lock() = snap;
    }

    /// Forgets the rings of threads that ended, once they are empty.
    fn retire(&mut self) {
        let mut retired = 0;
        self.rings.retain(|s| {
            let gone = s.ring.is_orphaned() && s.ring.is_empty();
            if gone {
                retired += s.ring.dropped();
            }
            !gone
        });
        self.retired_dropped += retired;
    }

    fn mark_flushed(&self, requested: u64) {
        let mut done = self.shared.flush_done.lock();
        if requested > *done {
            *done = requested;
            self.shared.flushed.notify_all();
        }
    }
}
