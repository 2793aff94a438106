//! Loading kernels ahead of their first launch ([`Kernels::preload`]): the batchable kernels
//! of a type compiled as one NVRTC program, programs compiled on several threads, images
//! shared with other processes through the disk cache.

use std::sync::atomic::Ordering;

use crate::cuda::error::{CudaError, Result};
use crate::cuda::nvrtc::Image;
use crate::cuda::source::{batch_source, batchable, kernel_name, kernel_source, KernelOp};
use crate::dtype::DataType;

use super::load::Kernels;

impl Kernels {
    /// Loads every kernel of `keys` not loaded yet, compiling the ones the disk cache lacks
    /// on up to `threads` threads at once, and returns those that failed (they load on first
    /// use, as before). Why ahead of time: loading a module waits until everything queued on
    /// the device has run, and meanwhile holds up the driver calls of every other thread of
    /// the process (`tests/gpu/module_load_probe.cu`). A load while a communicator's streams
    /// wait for work another thread has yet to queue (two ranks of this process on one GPU)
    /// therefore never returns. NCCL loads all its kernels at initialisation for this reason.
    pub fn preload(&self, keys: &[(DataType, KernelOp)], threads: usize) -> Preloaded {
        let started = std::time::Instant::now();
        let mut report = Preloaded::default();
        let failed = self.preload_into(keys, threads, &mut report);
        report.failed = failed;
        report.took = started.elapsed();
        report
    }

    fn preload_into(
        &self,
        keys: &[(DataType, KernelOp)],
        threads: usize,
        report: &mut Preloaded,
    ) -> Vec<((DataType, KernelOp), CudaError)> {
        let mut failed = Vec::new();
        let mut map = match self.loaded.lock() {
            Ok(m) => m,
            Err(_) => {
                let e = CudaError::InvalidArgument("kernel table poisoned".into());
                return keys.iter().map(|k| (*k, e.clone())).collect();
            }
        };
        let mut missing: Vec<(DataType, KernelOp)> = Vec::new();
        for k in keys {
            if !map.contains_key(k) && !missing.contains(k) {
                missing.push(*k);
            }
        }
        let mut jobs = preload_jobs(&missing);
        // Images: from disk where cached, else compiled.
        let mut images: Vec<Option<(Image, bool)>> = jobs
            .iter()
            .map(|j| self.cache.load(&self.key_of(&j.source)).map(|i| (i, true)))
            .collect();
        let lacking = |images: &[Option<(Image, bool)>]| -> Vec<usize> {
            (0..jobs.len()).filter(|&i| images[i].is_none()).collect()
        };
        let mut to_compile = lacking(&images);
        // Another process may be compiling the same kernels: wait for it, then read its images.
        let waited = std::time::Instant::now();
        let fill = if to_compile.is_empty() {
            None
        } else {
            self.cache.fill_lock()
        };
        report.lock_wait = waited.elapsed();
        if fill.is_some() {
            for &i in &to_compile {
                images[i] = self
                    .cache
                    .load(&self.key_of(&jobs[i].source))
                    .map(|i| (i, true));
            }
            to_compile = lacking(&images);
        }
        let compiling = std::time::Instant::now();
        let compiled = self.compile_jobs(&jobs, &to_compile, threads);
        report.compiling = compiling.elapsed();
        report.programs = to_compile.len();
        // A compiling thread that panicked took its results with it: say so for its kernels
        // (they load at first use) rather than leave them out of the report.
        for &i in &to_compile {
            if !compiled.iter().any(|(j, _)| *j == i) {
                let e = CudaError::InvalidArgument("kernel compilation thread panicked".into());
                failed.extend(
                    jobs[i]
                        .ops
                        .iter()
                        .map(|&op| ((jobs[i].dtype, op), e.clone())),
                );
            }
        }
        let storing = std::time::Instant::now();
        let mut retry = Vec::new();
        for (i, r) in compiled {
            let job = &jobs[i];
            match r {
                Ok(image) => {
                    self.compiled
                        .fetch_add(job.ops.len() as u64, Ordering::Relaxed);
                    self.cache.store(&self.key_of(&job.source), &image);
                    images[i] = Some((image, false));
                }
                // One kernel NVRTC rejects (a type this GPU lacks) must not keep the rest of
                // its type from loading ahead: they compile one by one.
                Err(_) if job.ops.len() > 1 => retry.push(i),
                Err(e) => failed.extend(job.ops.iter().map(|&op| ((job.dtype, op), e.clone()))),
            }
        }
        for i in retry {
            let (dtype, ops) = (jobs[i].dtype, jobs[i].ops.clone());
            for op in ops {
                let source = kernel_source(dtype, op);
                match self
                    .nvrtc
                    .compile(&source, &kernel_name(dtype, op), &self.target)
                {
                    Ok(image) => {
                        self.compiled.fetch_add(1, Ordering::Relaxed);
                        self.cache.store(&self.key_of(&source), &image);
                        jobs.push(PreloadJob {
                            dtype,
                            ops: vec![op],
                            source,
                        });
                        images.push(Some((image, false)));
                    }
                    Err(e) => failed.push(((dtype, op), e)),
                }
            }
        }
        drop(fill);
        report.storing = storing.elapsed();
        let loading = std::time::Instant::now();
        let _g = match self.ctx.scope() {
            Ok(g) => g,
            Err(e) => {
                failed.extend(missing.iter().map(|k| (*k, e.clone())));
                return failed;
            }
        };
        for (job, image) in jobs.iter().zip(images) {
            let Some((image, from_disk)) = image else {
                continue;
            };
            let names: Vec<String> = job
                .ops
                .iter()
                .map(|&op| kernel_name(job.dtype, op))
                .collect();
            match self.load_functions(&image, &names) {
                Ok(loaded) => {
                    if from_disk {
                        self.from_disk
                            .fetch_add(job.ops.len() as u64, Ordering::Relaxed);
                    }
                    for (&op, l) in job.ops.iter().zip(loaded) {
                        map.insert((job.dtype, op), l);
                    }
                }
                Err(e) => failed.extend(job.ops.iter().map(|&op| ((job.dtype, op), e.clone()))),
            }
        }
        report.loading = loading.elapsed();
        failed
    }

    /// Compiles `jobs[i]` for every `i` in `which` on up to `threads` threads, each taking the
    /// next job when it is done; a thread that panics loses its results (the caller reports
    /// those kernels).
    fn compile_jobs(
        &self,
        jobs: &[PreloadJob],
        which: &[usize],
        threads: usize,
    ) -> Vec<(usize, Result<Image>)> {
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.clamp(1, which.len().max(1)))
                .map(|_| {
                    s.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let j = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&i) = which.get(j) else { break };
                            let job = &jobs[i];
                            let name = kernel_name(job.dtype, job.ops[0]);
                            done.push((i, self.nvrtc.compile(&job.source, &name, &self.target)));
                        }
                        done
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        })
    }
}

/// What [`Kernels::preload`] did and where its time went.
#[derive(Debug, Default)]
pub struct Preloaded {
    /// Kernels that failed, with why (they load at first use).
    pub failed: Vec<((DataType, KernelOp), CudaError)>,
    /// NVRTC programs compiled (one per type for the typed kernels).
    pub programs: usize,
    /// Waiting for another process's compilation (the disk cache's fill lock).
    pub lock_wait: std::time::Duration,
    /// Compiling (all threads together).
    pub compiling: std::time::Duration,
    /// Writing the images to the disk cache.
    pub storing: std::time::Duration,
    /// Loading the modules into the context.
    pub loading: std::time::Duration,
    /// All of it.
    pub took: std::time::Duration,
}

/// One NVRTC program of [`Kernels::preload`]: several kernels of one type, or one kernel.
struct PreloadJob {
    dtype: DataType,
    ops: Vec<KernelOp>,
    source: String,
}

/// The programs that compile `keys`: the [`batchable`] kernels of each type together, every
/// other kernel alone.
fn preload_jobs(keys: &[(DataType, KernelOp)]) -> Vec<PreloadJob> {
    let mut jobs: Vec<PreloadJob> = Vec::new();
    for dt in DataType::ALL {
        let ops: Vec<KernelOp> = keys
            .iter()
            .filter(|&&(d, op)| d == dt && batchable(op))
            .map(|&(_, op)| op)
            .collect();
        match ops.as_slice() {
            [] => {}
            [op] => jobs.push(PreloadJob {
                dtype: dt,
                ops: vec![*op],
                source: kernel_source(dt, *op),
            }),
            _ => jobs.push(PreloadJob {
                dtype: dt,
                source: batch_source(dt, &ops),
                ops,
            }),
        }
    }
    for &(dt, op) in keys.iter().filter(|&&(_, op)| !batchable(op)) {
        jobs.push(PreloadJob {
            dtype: dt,
            ops: vec![op],
            source: kernel_source(dt, op),
        });
    }
    jobs
}
