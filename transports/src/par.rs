//! Large copies and reductions of frames, split over helper threads.
//!
//! One executor thread moves every byte a communicator sends to or receives from its links:
//! it copies each outgoing frame into a send slot and each received frame out (or reduces it
//! into the accumulation buffer), one memcpy at a time. Over the network path that thread, not
//! the wire, bounds a link of several engines (a profile put a third of its time in those
//! copies), and a single core copies far less than the memory system allows. Once
//! [`configure`]d with N > 0 threads (libccl: `CCL_COPY_THREADS`), work of at least the
//! configured size is cut into N + 1 element-aligned parts: N go to a process-wide pool of
//! helper threads, the caller does the first and waits for the rest. Results are the same
//! bits (each element is computed by the same function on the same inputs, only by another
//! thread).

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a helper keeps looking for the next part, and a caller for its helpers to finish,
/// before sleeping: an executor streaming frames splits a copy every few tens of
/// microseconds, and a condition variable's wake-up took longer than the parts themselves
/// (split 1 MiB copies ran at half the speed of one thread's: `examples/par_copy.rs`).
const SPIN: Duration = Duration::from_micros(50);

/// The work of one call, shared with the helpers for the length of the call.
pub type PartFn<'a> = dyn Fn(Range<usize>) + Sync + 'a;

/// Work handed to the helpers and not waited for ([`spawn_parts`]): it owns its function.
pub type OwnedPartFn = dyn Fn(Range<usize>) + Send + Sync + 'static;

/// A part handed to a helper: the caller's function (lifetime erased) and its range.
struct Job {
    f: *const PartFn<'static>,
    range: Range<usize>,
    latch: Arc<Latch>,
    /// A spawned call's function, kept alive by every part that runs it.
    _keep: Option<Arc<OwnedPartFn>>,
}

// SAFETY: `f` points at a `Sync` closure that outlives the job: `for_parts` does not return
// until the latch says every job it sent has finished running it.
unsafe impl Send for Job {}

/// Counts the helpers' parts still running.
struct Latch {
    left: AtomicUsize,
    lock: Mutex<()>,
    done: Condvar,
}

impl Latch {
    fn new(parts: usize) -> Latch {
        Latch {
            left: AtomicUsize::new(parts),
            lock: Mutex::new(()),
            done: Condvar::new(),
        }
    }

    fn count_down(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock: a waiter that saw parts left holds it until it sleeps, so this
            // wake-up cannot fall between its look and its sleep.
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let start = Instant::now();
        let mut spins = 0u32;
        while self.left.load(Ordering::Acquire) > 0 {
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 && start.elapsed() > SPIN {
                let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                while self.left.load(Ordering::Acquire) > 0 {
                    g = self.done.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// The next part for a helper: looked for during [`SPIN`], then slept for; `None` once the
/// pool is gone.
fn next_job(rx: &crossbeam::channel::Receiver<Job>) -> Option<Job> {
    use crossbeam::channel::TryRecvError;
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if start.elapsed() > SPIN => return rx.recv().ok(),
            Err(TryRecvError::Empty) => {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Helper threads taking parts from one queue.
pub struct Pool {
    jobs: crossbeam::channel::Sender<Job>,
    threads: usize,
    min_bytes: usize,
}

impl Pool {
    /// `threads` helpers (named `ccl-copy-N`); parts only for calls of at least `min_bytes`.
    pub fn new(threads: usize, min_bytes: usize) -> std::io::Result<Pool> {
        let (tx, rx) = crossbeam::channel::unbounded::<Job>();
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("ccl-copy-{i}"))
                .spawn(move || {
                    while let Some(job) = next_job(&rx) {
                        // SAFETY: see `Job`: the closure is alive until the latch reaches 0,
                        // which happens only below, after the call.
                        let f = unsafe { &*job.f };
                        // A panic must not leave the caller waiting forever; the library's
                        // part functions (copies, reductions) do not panic.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            f(job.range.clone())
                        }));
                        job.latch.count_down();
                    }
                })?;
        }
        Ok(Pool {
            jobs: tx,
            threads,
            min_bytes,
        })
    }

    /// Runs `f` over `[0, n)` cut into parts whose bounds are multiples of `align` (the
    /// element size), the caller running the first; returns once every part has run. Below
    /// the pool's size threshold, or when a part could not be queued, the caller runs it.
    pub fn for_parts(&self, n: usize, align: usize, f: &PartFn<'_>) {
        let align = align.max(1);
        let parts = if n < self.min_bytes {
            1
        } else {
            (self.threads + 1).min(n / align).max(1)
        };
        if parts == 1 {
            f(0..n);
            return;
        }
        let latch = Arc::new(Latch::new(parts - 1));
        // SAFETY: only the lifetime is erased; `latch.wait()` below outlives every use.
        let erased: *const PartFn<'static> =
            unsafe { std::mem::transmute::<*const PartFn<'_>, *const PartFn<'static>>(f) };
        let range = cut(n, align, parts);
        // SAFETY: as above: `f` outlives the parts, which end before `latch.wait()` returns.
        unsafe { self.hand_out(erased, None, &range, 1..parts, &latch) };
        f(range(0));
        latch.wait();
    }

    /// Queues parts `which` of a call (`range(i)`: part i's range) on the helpers, each
    /// counting down `latch` when it has run (run here if no helper is left, which cannot
    /// happen while the pool lives). `keep`: a spawned call's function, kept alive by its jobs.
    ///
    /// # Safety
    /// `f` must stay valid until `latch` has counted every part down.
    unsafe fn hand_out(
        &self,
        f: *const PartFn<'static>,
        keep: Option<&Arc<OwnedPartFn>>,
        range: impl Fn(usize) -> Range<usize>,
        which: Range<usize>,
        latch: &Arc<Latch>,
    ) {
        for i in which {
            let job = Job {
                f,
                range: range(i),
                latch: Arc::clone(latch),
                _keep: keep.cloned(),
            };
            if let Err(e) = self.jobs.send(job) {
                let job = e.into_inner();
                // SAFETY: the caller keeps `f` alive until the latch is down.
                unsafe { (*job.f)(job.range.clone()) };
                job.latch.count_down();
            }
        }
    }
}

/// Part `i` of `[0, n)` cut into `parts` parts whose bounds are multiples of `align` (the last
/// part ends at `n`).
fn cut(n: usize, align: usize, parts: usize) -> impl Fn(usize) -> Range<usize> {
    let elems = n / align;
    let bound = move |i: usize| {
        if i == parts {
            n
        } else {
            elems * i / parts * align
        }
    };
    move |i| bound(i)..bound(i + 1)
}

/// Parts of a call started with [`spawn_parts`], running on the helpers.
pub struct Pending {
    latch: Arc<Latch>,
}

impl Pending {
    /// Whether every part has run.
    pub fn is_done(&self) -> bool {
        self.latch.left.load(Ordering::Acquire) == 0
    }

    /// Returns once every part has run.
    pub fn wait(&self) {
        self.latch.wait();
    }
}

impl Drop for Pending {
    /// Nothing a spawned call touches may be freed while its parts run.
    fn drop(&mut self) {
        self.latch.wait();
    }
}

impl Pool {
    /// Starts `f` over `[0, n)` cut into one part per helper (bounds multiples of `align`)
    /// and returns without waiting; `None` (nothing started) below the size threshold.
    pub fn spawn_parts(&self, n: usize, align: usize, f: Arc<OwnedPartFn>) -> Option<Pending> {
        let align = align.max(1);
        if n < self.min_bytes || n == 0 {
            return None;
        }
        let parts = self.threads.min(n / align).max(1);
        let latch = Arc::new(Latch::new(parts));
        let owned: *const OwnedPartFn = Arc::as_ptr(&f);
        // Dropping the `Send` bound only; the jobs keep the closure alive (`_keep`).
        let erased: *const PartFn<'static> = owned as *const PartFn<'static>;
        // SAFETY: every job holds a clone of `f`, so the closure lives while any part may run.
        unsafe { self.hand_out(erased, Some(&f), cut(n, align, parts), 0..parts, &latch) };
        Some(Pending { latch })
    }
}

static POOL: OnceLock<Option<Pool>> = OnceLock::new();

/// Starts the process's pool of `threads` helpers (0: none) for work of at least `min_bytes`,
/// the first time it is called; later calls keep that first configuration.
pub fn configure(threads: usize, min_bytes: usize) {
    POOL.get_or_init(|| {
        let threads = threads.min(64);
        if threads == 0 {
            return None;
        }
        let min = min_bytes.max(1);
        match Pool::new(threads, min) {
            Ok(p) => {
                tracing::info!("{threads} copy threads for frames of >= {min} bytes (CCL_COPY_THREADS)");
                Some(p)
            }
            Err(e) => {
                tracing::warn!("CCL_COPY_THREADS={threads}: could not start the copy threads ({e}); copying on the calling thread");
                None
            }
        }
    });
}

/// [`Pool::for_parts`] on the process's pool, or `f(0..n)` here when there is none.
pub fn for_parts(n: usize, align: usize, f: &PartFn<'_>) {
    match POOL.get() {
        Some(Some(p)) => p.for_parts(n, align, f),
        _ => f(0..n),
    }
}

/// Copies `n` bytes from `src` to `dst`, split over the helpers as [`for_parts`] does.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes, and the two ranges must
/// not overlap.
pub unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    let (s, d) = (src as usize, dst as usize);
    for_parts(n, 1, &|r: Range<usize>| {
        // SAFETY: r lies inside [0, n), inside both ranges (the caller's promise), which do
        // not overlap; addresses travel as integers so the parts may run on the helpers.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (s + r.start) as *const u8,
                (d + r.start) as *mut u8,
                r.len(),
            )
        }
    });
}

/// [`Pool::spawn_parts`] on the process's pool; `None` (nothing started: the caller does
/// the work) when there is no pool or the work is below its threshold.
pub fn spawn_parts(n: usize, align: usize, f: Arc<OwnedPartFn>) -> Option<Pending> {
    match POOL.get() {
        Some(Some(p)) => p.spawn_parts(n, align, f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Every byte of every size is covered exactly once, in parts aligned to the element,
    /// with several callers sharing the helpers at once.
    #[test]
    fn parts_cover_the_range_once_aligned_from_many_callers() {
        let pool = Pool::new(3, 64).unwrap();
        std::thread::scope(|s| {
            for caller in 0..4usize {
                let pool = &pool;
                s.spawn(move || {
                    for n in [0usize, 1, 8, 63, 64, 65, 4096, 100_003 * 4] {
                        for align in [1usize, 4, 8] {
                            let n = n / align * align;
                            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                            let parts = AtomicU64::new(0);
                            pool.for_parts(n, align, &|r: Range<usize>| {
                                assert_eq!(r.start % align, 0, "caller {caller} n {n}");
                                parts.fetch_add(1, Ordering::Relaxed);
                                for h in &hits[r] {
                                    h.fetch_add(1, Ordering::Relaxed);
                                }
                            });
                            assert!(
                                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                                "n {n} align {align}"
                            );
                            let p = parts.load(Ordering::Relaxed);
                            if n >= 64 && n / align >= 4 {
                                assert_eq!(p, 4, "n {n} align {align}: parts");
                            } else {
                                assert_eq!(p, 1, "n {n} align {align}: parts");
                            }
                        }
                    }
                });
            }
        });
    }

    /// Spawned work runs every part exactly once on the helpers while the caller goes on;
    /// `is_done` turns true only after all have run, and dropping the handle waits.
    #[test]
    fn spawned_parts_run_once_and_report_done() {
        let pool = Pool::new(3, 16).unwrap();
        assert!(
            pool.spawn_parts(8, 1, Arc::new(|_| {})).is_none(),
            "under the threshold"
        );
        for n in [16usize, 17, 1000, 100_003] {
            let hits: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
            let gate = Arc::new(AtomicU64::new(0));
            let (h, g) = (Arc::clone(&hits), Arc::clone(&gate));
            let p = pool
                .spawn_parts(
                    n,
                    1,
                    Arc::new(move |r: Range<usize>| {
                        while g.load(Ordering::Acquire) == 0 {
                            std::hint::spin_loop();
                        }
                        for x in &h[r] {
                            x.fetch_add(1, Ordering::Relaxed);
                        }
                    }),
                )
                .unwrap();
            // Held back by the gate: the call returned before any part finished.
            assert!(!p.is_done(), "n {n}");
            gate.store(1, Ordering::Release);
            p.wait();
            assert!(p.is_done());
            assert!(hits.iter().all(|x| x.load(Ordering::Relaxed) == 1), "n {n}");
        }
        // Dropping without waiting waits.
        let done = Arc::new(AtomicU64::new(0));
        let d = Arc::clone(&done);
        drop(pool.spawn_parts(
            64,
            8,
            Arc::new(move |r: Range<usize>| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                d.fetch_add(r.len() as u64, Ordering::Relaxed);
            }),
        ));
        assert_eq!(done.load(Ordering::Relaxed), 64);
    }

    /// A copy split over the helpers gives the same bytes as one memcpy.
    #[test]
    fn a_split_copy_is_the_same_copy() {
        let pool = Pool::new(2, 1).unwrap();
        let src: Vec<u8> = (0..1_000_003u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let d = dst.as_mut_ptr() as usize;
        pool.for_parts(src.len(), 1, &|r: Range<usize>| {
            // SAFETY: disjoint ranges of two buffers of src.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr().add(r.start),
                    (d as *mut u8).add(r.start),
                    r.len(),
                )
            }
        });
        assert!(dst == src);
    }
}
