//! The kernels of one device ([`Kernels`]): each compiled by NVRTC (or read from the disk
//! cache) and loaded on first use, kept in memory, unloaded with the table.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cuda::cache::{cache_key, default_cache_dir, DiskCache};
use crate::cuda::context::Context;
use crate::cuda::error::{CudaError, Result};
use crate::cuda::nvrtc::{Image, Nvrtc, Target};
use crate::cuda::source::{kernel_name, kernel_source, KernelOp};
use crate::cuda::sys::*;
use crate::dtype::DataType;

#[derive(Debug, Clone, Copy)]
pub(super) struct Loaded {
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
    pub(super) ctx: Arc<Context>,
    pub(super) nvrtc: &'static Nvrtc,
    pub(super) target: Target,
    pub(super) max_blocks: u32,
    pub(super) cache: DiskCache,
    pub(super) loaded: Mutex<HashMap<(DataType, KernelOp), Loaded>>,
    pub(super) compiled: AtomicU64,
    pub(super) from_disk: AtomicU64,
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

    /// The disk cache's key of an image compiled from `source` for this device.
    pub(super) fn key_of(&self, source: &str) -> String {
        cache_key(
            source,
            &self.target.arch,
            self.nvrtc.version(),
            self.target.kind,
        )
    }

    pub(super) fn function(&self, dt: DataType, op: KernelOp) -> Result<CUfunction> {
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
    pub(super) fn load_functions(&self, image: &Image, names: &[String]) -> Result<Vec<Loaded>> {
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
