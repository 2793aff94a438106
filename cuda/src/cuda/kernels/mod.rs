//! Launching the reduction kernels: compiled with NVRTC on first use per (type, operation),
//! cached on disk and in memory, launched on a given stream.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::cache::{cache_key, default_cache_dir, DiskCache};
use super::context::Context;
use super::error::{CudaError, Result};
use super::nvrtc::{Image, Nvrtc, Target};
use super::source::{
    batch_source, batchable, kernel_name, kernel_source, vec_elems, KernelOp, BLOCK_THREADS,
    GRAPH_AR_MAX_ELEMS, GRAPH_AR_THREADS, GRAPH_COPIES_MAX, LL_EXCHANGE_MAX_RANKS, LL_MAX_BLOCKS,
    LL_P2P_BYTES, LL_P2P_MAX_OPS, LL_THREADS, REDUCE_N_MAX, UNROLL,
};
use super::stream::Stream;
use super::sys::*;
use crate::dtype::{DataType, ReduceKind};

#[derive(Debug, Clone, Copy)]
struct Loaded {
    module: CUmodule,
    func: CUfunction,
}

/// How kernels were obtained so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Compiled by NVRTC.
    pub compiled: u64,
    /// Loaded from the disk cache.
    pub from_disk: u64,
}

/// The reduction kernels of one device.
#[derive(Debug)]
pub struct Kernels {
    ctx: Arc<Context>,
    nvrtc: &'static Nvrtc,
    target: Target,
    max_blocks: u32,
    cache: DiskCache,
    loaded: Mutex<HashMap<(DataType, KernelOp), Loaded>>,
    compiled: AtomicU64,
    from_disk: AtomicU64,
}

// SAFETY: module and function handles are process-wide driver objects usable from any
// thread; the map of them is behind a mutex.
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Kernels for `ctx`'s device, cached in the directory the environment selects
    /// ([`default_cache_dir`]).
    pub fn new(ctx: &Arc<Context>) -> Result<Kernels> {
        Self::with_cache_dir(ctx, default_cache_dir())
    }

    /// Kernels cached in `dir` (`None`: no disk cache).
    pub fn with_cache_dir(ctx: &Arc<Context>, dir: Option<PathBuf>) -> Result<Kernels> {
        let nvrtc = Nvrtc::get()?;
        let target = nvrtc.target(ctx.compute_capability()?);
        let sms = u32::try_from(ctx.sm_count()?).unwrap_or(1).max(1);
        Ok(Kernels {
            ctx: Arc::clone(ctx),
            nvrtc,
            target,
            max_blocks: sms * 8,
            cache: DiskCache::new(dir),
            loaded: Mutex::new(HashMap::new()),
            compiled: AtomicU64::new(0),
            from_disk: AtomicU64::new(0),
        })
    }

    /// The device ordinal these kernels run on.
    pub fn ordinal(&self) -> i32 {
        self.ctx.ordinal()
    }

    /// What NVRTC compiles for.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The NVRTC in use.
    pub fn nvrtc(&self) -> &'static Nvrtc {
        self.nvrtc
    }

    /// The disk cache.
    pub fn cache(&self) -> &DiskCache {
        &self.cache
    }

    /// How many kernels were compiled and how many came from disk.
    pub fn stats(&self) -> KernelStats {
        KernelStats {
            compiled: self.compiled.load(Ordering::Relaxed),
            from_disk: self.from_disk.load(Ordering::Relaxed),
        }
    }

    /// Compiles (or loads) the kernel for `(dt, op)` now rather than at its first launch.
    pub fn prepare(&self, dt: DataType, op: KernelOp) -> Result<()> {
        self.function(dt, op).map(|_| ())
    }

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

    /// The disk cache's key of an image compiled from `source` for this device.
    fn key_of(&self, source: &str) -> String {
        cache_key(
            source,
            &self.target.arch,
            self.nvrtc.version(),
            self.target.kind,
        )
    }

    fn function(&self, dt: DataType, op: KernelOp) -> Result<CUfunction> {
        let mut map = self
            .loaded
            .lock()
            .map_err(|_| CudaError::InvalidArgument("kernel table poisoned".into()))?;
        if let Some(l) = map.get(&(dt, op)) {
            return Ok(l.func);
        }
        let name = kernel_name(dt, op);
        let source = kernel_source(dt, op);
        let key = self.key_of(&source);
        let _g = self.ctx.scope()?;
        let mut loaded = None;
        if let Some(image) = self.cache.load(&key) {
            match self.load_module(&image, &name) {
                Ok(l) => {
                    self.from_disk.fetch_add(1, Ordering::Relaxed);
                    loaded = Some(l);
                }
                Err(e) => {
                    tracing::debug!(kernel = %name, error = %e, "cached kernel unusable; recompiling");
                }
            }
        }
        let l = match loaded {
            Some(l) => l,
            None => {
                let image = self.nvrtc.compile(&source, &name, &self.target)?;
                self.compiled.fetch_add(1, Ordering::Relaxed);
                let l = self.load_module(&image, &name)?;
                self.cache.store(&key, &image);
                l
            }
        };
        map.insert((dt, op), l);
        Ok(l.func)
    }

    /// Loads a module image and finds each of `names` in it (one module, shared by the
    /// entries). The context is current.
    fn load_functions(&self, image: &Image, names: &[String]) -> Result<Vec<Loaded>> {
        let Some((first, rest)) = names.split_first() else {
            return Ok(Vec::new());
        };
        let l = self.load_module(image, first)?;
        let mut loaded = vec![l];
        for name in rest {
            match self.function_of(l.module, name) {
                Ok(func) => loaded.push(Loaded {
                    module: l.module,
                    func,
                }),
                Err(e) => {
                    // SAFETY: the module was just loaded and nothing uses it yet.
                    let _ = unsafe { (self.ctx.driver().fns.cuModuleUnload)(l.module) };
                    return Err(e);
                }
            }
        }
        Ok(loaded)
    }

    /// `name`'s function in `module`.
    fn function_of(&self, module: CUmodule, name: &str) -> Result<CUfunction> {
        let drv = self.ctx.driver();
        let cname = CString::new(name)
            .map_err(|_| CudaError::InvalidArgument(format!("kernel name {name:?}")))?;
        let mut func: CUfunction = std::ptr::null_mut();
        // SAFETY: `module` is loaded; `cname` is NUL-terminated.
        let r = unsafe { (drv.fns.cuModuleGetFunction)(&mut func, module, cname.as_ptr()) };
        drv.check("cuModuleGetFunction", r)?;
        Ok(func)
    }

    /// Loads a module image and finds `name` in it. The context is current.
    fn load_module(&self, image: &Image, name: &str) -> Result<Loaded> {
        let drv = self.ctx.driver();
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `image.data` is a CUBIN or NUL-terminated PTX image (checked when read
        // from disk); the driver copies what it needs.
        let r = unsafe { (drv.fns.cuModuleLoadData)(&mut module, image.data.as_ptr().cast()) };
        drv.check("cuModuleLoadData", r)?;
        let cname = CString::new(name)
            .map_err(|_| CudaError::InvalidArgument(format!("kernel name {name:?}")))?;
        let mut func: CUfunction = std::ptr::null_mut();
        // SAFETY: `module` was just loaded; `cname` is NUL-terminated.
        let r = unsafe { (drv.fns.cuModuleGetFunction)(&mut func, module, cname.as_ptr()) };
        if let Err(e) = drv.check("cuModuleGetFunction", r) {
            // SAFETY: unloading the module loaded above, used by nothing.
            let _ = unsafe { (drv.fns.cuModuleUnload)(module) };
            return Err(e);
        }
        Ok(Loaded { module, func })
    }

    /// Launches `(dt, op)` over `n` elements.
    ///
    /// # Safety
    /// As the public wrappers.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        stream: &Stream,
        dt: DataType,
        op: KernelOp,
        dst: CUdeviceptr,
        a: CUdeviceptr,
        b: Option<CUdeviceptr>,
        n: usize,
        raw: u64,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.check_args(
            stream,
            dt,
            [("dst", dst), ("a", a)]
                .into_iter()
                .chain(b.map(|b| ("b", b))),
        )?;
        let func = self.function(dt, op)?;
        let per_block = (BLOCK_THREADS as usize) * vec_elems(dt) * UNROLL;
        let blocks = n.div_ceil(per_block).clamp(1, self.max_blocks as usize) as u32;
        let mut dst = dst;
        let mut a = a;
        let mut b = b.unwrap_or(0);
        let mut n64 = n as u64;
        let mut raw = raw;
        let mut params: Vec<*mut c_void> =
            vec![(&mut dst as *mut u64).cast(), (&mut a as *mut u64).cast()];
        if op.is_binary() {
            params.push((&mut b as *mut u64).cast());
        }
        params.push((&mut n64 as *mut u64).cast());
        params.push((&mut raw as *mut u64).cast());
        // SAFETY: the parameters are exactly the kernel's (pointers as u64, n, raw) and live
        // until the call returns; the memory the kernel touches is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, BLOCK_THREADS, &mut params) }
    }

    /// The stream is of this device and every pointer is aligned to its element.
    /// [`Self::check_args`] for a destination and several sources.
    fn check_sources(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        srcs: &[CUdeviceptr],
    ) -> Result<()> {
        self.check_args(
            stream,
            dt,
            std::iter::once(("dst", dst)).chain(srcs.iter().map(|&p| ("source", p))),
        )
    }

    fn check_args<'a>(
        &self,
        stream: &Stream,
        dt: DataType,
        ptrs: impl IntoIterator<Item = (&'a str, CUdeviceptr)>,
    ) -> Result<()> {
        if stream.context().device() != self.ctx.device() {
            return Err(CudaError::InvalidArgument(format!(
                "stream of device {} used with kernels of device {}",
                stream.context().ordinal(),
                self.ctx.ordinal()
            )));
        }
        let size = dt.size() as u64;
        for (what, p) in ptrs {
            if p % size != 0 {
                return Err(CudaError::InvalidArgument(format!(
                    "{what} = {p:#x} is not aligned to {} ({size} bytes)",
                    dt.name()
                )));
            }
        }
        Ok(())
    }

    /// `dst[i] = ((srcs[0][i] (op) srcs[1][i]) (op) srcs[2][i]) ...` for `n` elements of `dt`
    /// in one kernel ([`KernelOp::ReduceN`]), bit for bit a chain of [`Kernels::reduce`]
    /// launches in source order. Three to [`REDUCE_N_MAX`] sources.
    ///
    /// # Safety
    /// Every source (readable) and `dst` (writable) is a device-accessible range of `n`
    /// elements valid until the stream has run the kernel; `dst` is disjoint from every source
    /// or equal to it.
    pub unsafe fn reduce_n(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        srcs: &[CUdeviceptr],
        n: usize,
    ) -> Result<()> {
        let k = srcs.len();
        if !(3..=REDUCE_N_MAX).contains(&k) {
            return Err(CudaError::InvalidArgument(format!(
                "reduce_n takes 3 to {REDUCE_N_MAX} sources, not {k}"
            )));
        }
        if n == 0 {
            return Ok(());
        }
        self.check_sources(stream, dt, dst, srcs)?;
        let func = self.function(dt, KernelOp::ReduceN(op.into(), k as u8))?;
        let mut arr = SourceArray::new(srcs);
        let unroll = (2 * UNROLL / k).max(1);
        let per_block = (BLOCK_THREADS as usize) * vec_elems(dt) * unroll;
        let blocks = n.div_ceil(per_block).clamp(1, self.max_blocks as usize) as u32;
        let mut dst = dst;
        let mut n64 = n as u64;
        let mut raw = 0u64;
        let mut params: Vec<*mut c_void> = vec![
            (&mut dst as *mut u64).cast(),
            (&mut arr as *mut SourceArray).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut raw as *mut u64).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (dst, the pointer array by value, n,
        // raw) and live until the call returns; the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, BLOCK_THREADS, &mut params) }
    }

    /// `cuLaunchKernel` of `func` on `stream` with a 1-D grid.
    ///
    /// # Safety
    /// `func` is a kernel of this context and `params` point, in order, at values of exactly
    /// its parameter types that live until this returns (the driver copies them); the memory
    /// the kernel touches is valid until the stream has run it.
    unsafe fn launch_raw(
        &self,
        func: CUfunction,
        stream: &Stream,
        blocks: u32,
        threads: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let _g = self.ctx.scope()?;
        let drv = self.ctx.driver();
        // SAFETY: the caller's contract.
        let r = unsafe {
            (drv.fns.cuLaunchKernel)(
                func,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream.raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        drv.check("cuLaunchKernel", r)
    }

    /// `dst[i] = a[i] (op) b[i]` for `n` elements of `dt`, queued on `stream`. Numerics are
    /// those of [`crate::host::reduce::reduce`], bit for bit.
    ///
    /// # Safety
    /// `a`, `b` (readable) and `dst` (writable) are device-accessible ranges of `n` elements
    /// that stay valid until the stream has run the kernel; `dst` is disjoint from or equal
    /// to each input.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        a: CUdeviceptr,
        b: CUdeviceptr,
        n: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::reduce(op), dst, a, Some(b), n, 0) }
    }

    /// `dst[i] = src[i] * scalar` where `scalar` holds one element of `dt` in its first
    /// bytes (little-endian), as [`crate::host::reduce::premul`].
    ///
    /// # Safety
    /// As [`Kernels::reduce`].
    pub unsafe fn premul(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        n: usize,
        scalar: [u8; 8],
    ) -> Result<()> {
        let raw = u64::from_le_bytes(scalar);
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::PreMul, dst, src, None, n, raw) }
    }

    /// `dst[i] = src[i] * scalar + acc[i]` rounded once, as
    /// [`crate::host::reduce::premul_add`].
    ///
    /// # Safety
    /// As [`Kernels::reduce`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn premul_add(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        acc: CUdeviceptr,
        n: usize,
        scalar: [u8; 8],
    ) -> Result<()> {
        let raw = u64::from_le_bytes(scalar);
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::PreMulAdd, dst, src, Some(acc), n, raw) }
    }

    /// `dst[i] /= divisor` in place, as [`crate::host::reduce::div_int`] (`divisor == 0`
    /// leaves `dst` unchanged).
    ///
    /// # Safety
    /// `dst` is a device-accessible range of `n` elements, valid until the kernel has run.
    pub unsafe fn div_int(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        n: usize,
        divisor: u64,
    ) -> Result<()> {
        if divisor == 0 {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::DivInt, dst, dst, None, n, divisor) }
    }
}

impl Kernels {
    /// The low-latency all-reduce of `n` elements (see [`super::source::ll_area_bytes`] for
    /// the areas' layout): blocks that each push their part of `src` into every peer's area,
    /// wait for the peers' same part and write the reduction in rank order to `dst`. With
    /// `scatter`, a reduce-scatter: `src` holds `nranks * n` elements, part `q` goes to rank
    /// `q`, and `dst` gets the reduction of this rank's part.
    ///
    /// # Safety
    /// `src`/`dst` hold `n` elements (`dst` equal to or disjoint from `src`); `areas` is a
    /// device array of `nranks` area addresses valid in this context, each area laid out for
    /// `nranks` and `ll_max`, with `n * size <= ll_max`; every rank launches the same
    /// operation with the same `seq` (one more than its previous one).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn ll_all_reduce(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        n: usize,
        areas: CUdeviceptr,
        nranks: u32,
        rank: u32,
        seq: u32,
        ll_max: usize,
        scatter: bool,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if n.saturating_mul(dt.size()) > ll_max || dst % dt.size() as u64 != 0 {
            return Err(CudaError::InvalidArgument(format!(
                "low-latency all-reduce of {n} elements at {dst:#x} does not fit {ll_max} bytes"
            )));
        }
        let func = self.function(dt, KernelOp::LlAllReduce(op.into()))?;
        let (mut dst, mut src, mut n64, mut areas) = (dst, src, n as u64, areas);
        let (mut nranks, mut rank, mut seq) = (nranks, rank, seq);
        let mut llmax = ll_max as u64;
        let mut data_off = super::source::ll_data_offset(nranks as usize) as u64;
        // Reduce-scatter: peer q's part of the input is at q * n elements, ours at rank * n.
        let part = (n * dt.size()) as u64;
        let mut push_stride = if scatter { part } else { 0 };
        let mut own_off = if scatter { rank as u64 * part } else { 0 };
        let mut params: [*mut c_void; 11] = [
            (&mut dst as *mut u64).cast(),
            (&mut src as *mut u64).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut areas as *mut u64).cast(),
            (&mut nranks as *mut u32).cast(),
            (&mut rank as *mut u32).cast(),
            (&mut seq as *mut u32).cast(),
            (&mut llmax as *mut u64).cast(),
            (&mut data_off as *mut u64).cast(),
            (&mut push_stride as *mut u64).cast(),
            (&mut own_off as *mut u64).cast(),
        ];
        let blocks = LL_MAX_BLOCKS as u32;
        // SAFETY: the parameters match the kernel's signature in order and size; the memory
        // is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, LL_THREADS, &mut params) }
    }
}

/// The transfer table of a low-latency exchange (the kernel's `ccl_xfer`, passed by value):
/// per rank `q`, what goes to `q` (`src`, `sbytes`) and where what comes from `q` lands
/// (`dst`, `rbytes`); entry `rank` is a local copy of `sbytes` bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LlTransfers {
    pub src: [u64; LL_EXCHANGE_MAX_RANKS],
    pub dst: [u64; LL_EXCHANGE_MAX_RANKS],
    pub sbytes: [u64; LL_EXCHANGE_MAX_RANKS],
    pub rbytes: [u64; LL_EXCHANGE_MAX_RANKS],
}

impl Kernels {
    /// Queues the low-latency exchange of `xfer` (see [`LlTransfers`]).
    ///
    /// # Safety
    /// Every range in `xfer` is device-accessible and valid until the stream has run the
    /// kernel, each `sbytes`/`rbytes` at most `ll_max`; `areas` as for
    /// [`Kernels::ll_all_reduce`]; every rank launches its side of the same exchange with
    /// the same `seq`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn ll_exchange(
        &self,
        stream: &Stream,
        xfer: &LlTransfers,
        areas: CUdeviceptr,
        nranks: u32,
        rank: u32,
        seq: u32,
        ll_max: usize,
    ) -> Result<()> {
        if nranks as usize > LL_EXCHANGE_MAX_RANKS
            || xfer
                .sbytes
                .iter()
                .chain(&xfer.rbytes)
                .any(|&b| b > ll_max as u64)
        {
            return Err(CudaError::InvalidArgument(format!(
                "low-latency exchange of {nranks} ranks does not fit (at most \
                 {LL_EXCHANGE_MAX_RANKS} ranks and {ll_max} bytes per peer)"
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::LlExchange)?;
        let mut x = *xfer;
        let mut areas = areas;
        let (mut nranks, mut rank, mut seq) = (nranks, rank, seq);
        let mut llmax = ll_max as u64;
        let mut data_off = super::source::ll_data_offset(nranks as usize) as u64;
        let mut params: [*mut c_void; 7] = [
            (&mut x as *mut LlTransfers).cast(),
            (&mut areas as *mut u64).cast(),
            (&mut nranks as *mut u32).cast(),
            (&mut rank as *mut u32).cast(),
            (&mut seq as *mut u32).cast(),
            (&mut llmax as *mut u64).cast(),
            (&mut data_off as *mut u64).cast(),
        ];
        let blocks = LL_MAX_BLOCKS as u32;
        // SAFETY: the parameters match the kernel's signature (`ccl_xfer` has this struct's
        // C layout); the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, LL_THREADS, &mut params) }
    }
}

impl Kernels {
    /// Queues a one-thread kernel on `stream` that returns once the word at `flag` reaches
    /// `value` (cyclic `>=`): the stream waits as with a stream wait operation, other
    /// streams sharing its hardware queue do not ([`KernelOp::WaitFlag`]).
    ///
    /// # Safety
    /// `flag` is a 4-byte aligned device-accessible word valid until the kernel has run, and
    /// something will write `value` (or later) to it, or the kernel never ends.
    pub unsafe fn wait_flag(&self, stream: &Stream, flag: CUdeviceptr, value: u32) -> Result<()> {
        let func = self.function(DataType::Uint8, KernelOp::WaitFlag)?;
        let (mut flag, mut value) = (flag, value);
        let mut params: [*mut c_void; 2] = [
            (&mut flag as *mut CUdeviceptr).cast(),
            (&mut value as *mut u32).cast(),
        ];
        // SAFETY: the parameters match the kernel's signature; the word is the caller's
        // contract.
        unsafe { self.launch_raw(func, stream, 1, 1, &mut params) }
    }
}

impl Kernels {
    /// A small all-reduce of a CUDA graph in one kernel ([`KernelOp::GraphAllReduce`]):
    /// `dst = srcs[0] (op) srcs[1] ...` over `n` elements, between a handshake on
    /// `words.inputs` and one on `words.done` (per peer: this rank's word there, the peer's
    /// word here). `inplace`: `dst` is one of the sources (at most [`GRAPH_AR_MAX_ELEMS`]).
    ///
    /// # Safety
    /// Every source and `dst` hold `n` elements of `dt` and stay valid until the stream has
    /// passed the launch; the words are device words (ours, or peers' mapped here) that only
    /// this protocol writes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn graph_all_reduce(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        srcs: &[CUdeviceptr],
        n: usize,
        words: &GraphWords,
        inplace: bool,
    ) -> Result<()> {
        let k = srcs.len();
        let np = words.inputs.len();
        if !(2..=REDUCE_N_MAX).contains(&k)
            || np >= REDUCE_N_MAX
            || words.done.len() != np
            || (inplace && n > GRAPH_AR_MAX_ELEMS)
        {
            return Err(CudaError::InvalidArgument(format!(
                "graph_all_reduce: {k} sources, {np} peers, {n} elements (in place {inplace})"
            )));
        }
        self.check_sources(stream, dt, dst, srcs)?;
        let func = self.function(dt, KernelOp::GraphAllReduce(op.into(), k as u8))?;
        let mut arr = SourceArray::new(srcs);
        let mut w = words.by_value();
        let (mut dst, mut n64, mut raw) = (dst, n as u64, 0u64);
        let (mut np32, mut inplace32) = (np as u32, u32::from(inplace));
        let mut params: [*mut c_void; 7] = [
            (&mut dst as *mut u64).cast(),
            (&mut arr as *mut SourceArray).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut raw as *mut u64).cast(),
            (&mut w as *mut WordArrays).cast(),
            (&mut np32 as *mut u32).cast(),
            (&mut inplace32 as *mut u32).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (dst, the pointer array and the
        // word arrays by value, n, raw, np, inplace) and live until the call returns; memory
        // and words are the caller's contract.
        unsafe { self.launch_raw(func, stream, 1, GRAPH_AR_THREADS, &mut params) }
    }

    /// A small group of copies of a CUDA graph in one kernel ([`KernelOp::GraphCopies`]):
    /// `first` (dst, src, bytes) between the handshakes of [`Self::graph_all_reduce`]; with
    /// `words.halfway` (non-empty), a handshake on those words, then `second`.
    ///
    /// # Safety
    /// Each copy's ranges are device-accessible, disjoint, and valid until the stream has
    /// passed the launch; the words as [`Self::graph_all_reduce`]'s.
    pub unsafe fn graph_copies(
        &self,
        stream: &Stream,
        first: &[(CUdeviceptr, CUdeviceptr, usize)],
        second: &[(CUdeviceptr, CUdeviceptr, usize)],
        words: &GraphWords,
    ) -> Result<()> {
        let np = words.inputs.len();
        let halfway = !words.halfway.is_empty();
        if first.len() + second.len() > GRAPH_COPIES_MAX
            || np > REDUCE_N_MAX
            || words.done.len() != np
            || (halfway && words.halfway.len() != np)
            || (!halfway && !second.is_empty())
        {
            return Err(CudaError::InvalidArgument(format!(
                "graph_copies: {} + {} copies, {np} peers, {} halfway words",
                first.len(),
                second.len(),
                words.halfway.len()
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::GraphCopies)?;
        #[repr(C)]
        struct Copies([[u64; GRAPH_COPIES_MAX]; 3]);
        let mut c = Copies([[0; GRAPH_COPIES_MAX]; 3]);
        for (m, &(dst, src, bytes)) in first.iter().chain(second).enumerate() {
            c.0[0][m] = dst;
            c.0[1][m] = src;
            c.0[2][m] = bytes as u64;
        }
        let mut w = words.by_value();
        // The halfway words in the first two arrays of a second `ccl_gwords`.
        let mut h = GraphWords {
            inputs: words.halfway.clone(),
            ..GraphWords::default()
        }
        .by_value();
        let (mut ncopies, mut nfirst) = ((first.len() + second.len()) as u32, first.len() as u32);
        let (mut np32, mut half32) = (np as u32, u32::from(halfway));
        let mut params: [*mut c_void; 7] = [
            (&mut c as *mut Copies).cast(),
            (&mut ncopies as *mut u32).cast(),
            (&mut nfirst as *mut u32).cast(),
            (&mut w as *mut WordArrays).cast(),
            (&mut h as *mut WordArrays).cast(),
            (&mut np32 as *mut u32).cast(),
            (&mut half32 as *mut u32).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (the copies and two word arrays by
        // value, the counts, the halfway flag) and live until the call returns; memory and
        // words are the caller's contract.
        unsafe { self.launch_raw(func, stream, 1, GRAPH_AR_THREADS, &mut params) }
    }

    /// Queues [`KernelOp::WaitCopy`] on `stream`: once the word at `arrive` reaches `value`
    /// (cyclic `>=`), one block copies `bytes` from `src` to `dst` and then writes
    /// `done_value` to the word at `done`, all inside the kernel.
    ///
    /// # Safety
    /// `arrive` and `done` are 4-byte aligned device-accessible words and `src` / `dst`
    /// device-accessible ranges of `bytes` that do not overlap, all valid until the kernel
    /// has run; something will write `value` (or later) to `arrive`, or the kernel never ends.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn wait_copy(
        &self,
        stream: &Stream,
        arrive: CUdeviceptr,
        value: u32,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: u64,
        done: CUdeviceptr,
        done_value: u32,
    ) -> Result<()> {
        let func = self.function(DataType::Uint8, KernelOp::WaitCopy)?;
        let (mut arrive, mut value, mut dst, mut src, mut bytes, mut done, mut done_value) =
            (arrive, value, dst, src, bytes, done, done_value);
        let mut params: [*mut c_void; 7] = [
            (&mut arrive as *mut CUdeviceptr).cast(),
            (&mut value as *mut u32).cast(),
            (&mut dst as *mut CUdeviceptr).cast(),
            (&mut src as *mut CUdeviceptr).cast(),
            (&mut bytes as *mut u64).cast(),
            (&mut done as *mut CUdeviceptr).cast(),
            (&mut done_value as *mut u32).cast(),
        ];
        // SAFETY: the parameters match the kernel's signature; the ranges and words are the
        // caller's contract.
        unsafe { self.launch_raw(func, stream, 1, 512, &mut params) }
    }
}

/// The `ccl_srcs` parameter of the kernels over several sources, by value: [`REDUCE_N_MAX`]
/// pointers, the first ones used.
#[repr(C)]
struct SourceArray([u64; REDUCE_N_MAX]);

impl SourceArray {
    fn new(srcs: &[CUdeviceptr]) -> SourceArray {
        let mut a = SourceArray([0; REDUCE_N_MAX]);
        for (slot, &p) in a.0.iter_mut().zip(srcs) {
            *slot = p;
        }
        a
    }
}

/// The words of a [`Kernels::graph_all_reduce`]: per peer, (this rank's word at the peer, the
/// peer's word here), for the handshake before the reduction and the one after.
#[derive(Debug, Clone, Default)]
pub struct GraphWords {
    pub inputs: Vec<(CUdeviceptr, CUdeviceptr)>,
    pub done: Vec<(CUdeviceptr, CUdeviceptr)>,
    /// [`Kernels::graph_copies`] only: the middle handshake's words (empty: none).
    pub halfway: Vec<(CUdeviceptr, CUdeviceptr)>,
}

/// The kernels' `ccl_gwords` by value: remote and local "inputs" words, remote and local
/// "done" words, [`REDUCE_N_MAX`] each.
#[repr(C)]
struct WordArrays([[u64; REDUCE_N_MAX]; 4]);

impl GraphWords {
    fn by_value(&self) -> WordArrays {
        let mut w = WordArrays([[0; REDUCE_N_MAX]; 4]);
        for (j, &(remote, local)) in self.inputs.iter().take(REDUCE_N_MAX).enumerate() {
            w.0[0][j] = remote;
            w.0[1][j] = local;
        }
        for (j, &(remote, local)) in self.done.iter().take(REDUCE_N_MAX).enumerate() {
            w.0[2][j] = remote;
            w.0[3][j] = local;
        }
        w
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

impl Drop for Kernels {
    fn drop(&mut self) {
        let Ok(map) = self.loaded.get_mut() else {
            return;
        };
        if map.is_empty() {
            return;
        }
        // Kernels loaded ahead share one module per type.
        let mut modules: Vec<CUmodule> = map.values().map(|l| l.module).collect();
        modules.sort_by_key(|m| *m as usize);
        modules.dedup();
        if let Ok(_g) = self.ctx.scope() {
            for m in modules {
                // SAFETY: each module was loaded here and is unloaded once; launches queued
                // earlier keep their own reference inside the driver.
                let _ = unsafe { (self.ctx.driver().fns.cuModuleUnload)(m) };
            }
        }
    }
}

/// One launch of the point-to-point kernel (its `ccl_p2p`, passed by value): `nsend` sends
/// (to `speer[i]`, that pair's sequence number `sseq[i]`, counted from 1, of `sbytes[i]` from
/// `src[i]`) and `nrecv` receives (from `rpeer[j]`, sequence `rseq[j]`, at most `rbytes[j]`
/// into `dst[j]`, after the first `rafter[j]` sends of this launch when non-zero).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlP2p {
    pub src: [u64; LL_P2P_MAX_OPS],
    pub sbytes: [u64; LL_P2P_MAX_OPS],
    pub dst: [u64; LL_P2P_MAX_OPS],
    pub rbytes: [u64; LL_P2P_MAX_OPS],
    pub speer: [u32; LL_P2P_MAX_OPS],
    pub sseq: [u32; LL_P2P_MAX_OPS],
    pub rpeer: [u32; LL_P2P_MAX_OPS],
    pub rseq: [u32; LL_P2P_MAX_OPS],
    pub rafter: [u32; LL_P2P_MAX_OPS],
    pub nsend: u32,
    pub nrecv: u32,
}

impl Default for LlP2p {
    fn default() -> Self {
        LlP2p {
            src: [0; LL_P2P_MAX_OPS],
            sbytes: [0; LL_P2P_MAX_OPS],
            dst: [0; LL_P2P_MAX_OPS],
            rbytes: [0; LL_P2P_MAX_OPS],
            speer: [0; LL_P2P_MAX_OPS],
            sseq: [0; LL_P2P_MAX_OPS],
            rpeer: [0; LL_P2P_MAX_OPS],
            rseq: [0; LL_P2P_MAX_OPS],
            rafter: [0; LL_P2P_MAX_OPS],
            nsend: 0,
            nrecv: 0,
        }
    }
}

impl Kernels {
    /// Queues one launch of the point-to-point kernel (see [`LlP2p`]); `ticket_base` is the
    /// number of sends this rank's earlier launches made (the ticket word counts on from it);
    /// a receive whose size differs from its send's writes 1 + the sender's rank to the word
    /// at `err` if it holds 0.
    ///
    /// # Safety
    /// Every range in `x` is device-accessible and valid until the stream has run the kernel;
    /// `areas` is a device array of `nranks` low-latency area addresses as this device maps
    /// them, each laid out by [`super::source::ll_data_offset`] with its point-to-point words
    /// zeroed before first use; each pair's sequence numbers and this rank's ticket base count
    /// on from the previous launch on the same stream order; the peers launch the matching
    /// receives and sends, or the kernel never ends; `err` is a 4-byte-aligned word the device
    /// can write, valid until the kernel has run.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn ll_p2p(
        &self,
        stream: &Stream,
        x: &LlP2p,
        areas: CUdeviceptr,
        rank: u32,
        nranks: u32,
        ticket_base: u32,
        err: CUdeviceptr,
    ) -> Result<()> {
        let n = |k: u32| k as usize;
        let bad_peer = |p: &u32| *p >= nranks || *p == rank;
        if n(x.nsend) > LL_P2P_MAX_OPS
            || n(x.nrecv) > LL_P2P_MAX_OPS
            || rank >= nranks
            || x.speer[..n(x.nsend)].iter().any(bad_peer)
            || x.rpeer[..n(x.nrecv)].iter().any(bad_peer)
            || x.sbytes[..n(x.nsend)]
                .iter()
                .chain(&x.rbytes[..n(x.nrecv)])
                .any(|&b| b > LL_P2P_BYTES as u64)
            || x.rafter[..n(x.nrecv)].iter().any(|&a| a > x.nsend)
        {
            return Err(CudaError::InvalidArgument(format!(
                "point-to-point kernel launch out of bounds ({} sends, {} receives of at most \
                 {LL_P2P_MAX_OPS}, {LL_P2P_BYTES} bytes each, to other ranks of {nranks})",
                x.nsend, x.nrecv
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::LlP2p)?;
        let mut x = *x;
        let (mut areas, mut rank, mut nranks, mut base) = (areas, rank, nranks, ticket_base);
        let mut off = super::source::ll_p2p_offset(nranks as usize) as u64;
        let mut err = err;
        let mut params: [*mut c_void; 7] = [
            (&mut x as *mut LlP2p).cast(),
            (&mut areas as *mut u64).cast(),
            (&mut rank as *mut u32).cast(),
            (&mut nranks as *mut u32).cast(),
            (&mut off as *mut u64).cast(),
            (&mut base as *mut u32).cast(),
            (&mut err as *mut CUdeviceptr).cast(),
        ];
        // Two blocks: sends and receives side by side (see the kernel's source).
        // SAFETY: the parameters match the kernel's signature (`ccl_p2p` has this struct's C
        // layout); the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, 2, 256, &mut params) }
    }
}
