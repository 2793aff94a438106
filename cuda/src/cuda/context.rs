//! A device's primary context: the one the CUDA runtime (and so PyTorch) uses, shared with it.

use std::ffi::c_int;
use std::sync::Arc;

use super::driver::Driver;
use super::error::Result;
use super::sys::*;

/// A retained primary context of one device. Released when the last `Arc` is dropped.
///
/// Wrappers in this module hold an `Arc<Context>` so the context outlives their resources,
/// and make it current only for the duration of a call ([`Context::scope`]), restoring what
/// the thread had before: a user thread that the runtime has bound to another device is left
/// as it was.
#[derive(Debug)]
pub struct Context {
    drv: &'static Driver,
    dev: CUdevice,
    ordinal: i32,
    raw: CUcontext,
}

// SAFETY: a CUcontext is a process-wide handle the driver lets any thread use; the struct
// holds no thread-affine state.
unsafe impl Send for Context {}
// SAFETY: as above; every method goes through the thread-safe driver API.
unsafe impl Sync for Context {}

impl Context {
    /// Retains the primary context of device `ordinal` and makes it current on the calling
    /// thread (as `cudaSetDevice` would).
    pub fn new(ordinal: i32) -> Result<Arc<Context>> {
        let drv = Driver::get()?;
        let dev = drv.device(ordinal)?;
        let mut raw: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext; `dev` came from cuDeviceGet.
        let r = unsafe { (drv.fns.cuDevicePrimaryCtxRetain)(&mut raw, dev) };
        drv.check("cuDevicePrimaryCtxRetain", r)?;
        let ctx = Arc::new(Context {
            drv,
            dev,
            ordinal,
            raw,
        });
        ctx.bind()?;
        Ok(ctx)
    }

    /// Makes this context current on the calling thread, and leaves it so.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: `raw` is a retained, live context.
        let r = unsafe { (self.drv.fns.cuCtxSetCurrent)(self.raw) };
        self.drv.check("cuCtxSetCurrent", r)
    }

    /// Makes this context current until the guard is dropped, then restores the thread's
    /// previous context (if it was another one).
    pub fn scope(&self) -> Result<CurrentGuard<'_>> {
        let mut prev: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext (null when none is current).
        let r = unsafe { (self.drv.fns.cuCtxGetCurrent)(&mut prev) };
        self.drv.check("cuCtxGetCurrent", r)?;
        if prev != self.raw {
            self.bind()?;
        }
        Ok(CurrentGuard { ctx: self, prev })
    }

    /// The raw handle.
    pub fn raw(&self) -> CUcontext {
        self.raw
    }

    /// The driver's device handle.
    pub fn device(&self) -> CUdevice {
        self.dev
    }

    /// The device ordinal this context was made for.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// The driver table.
    pub fn driver(&self) -> &'static Driver {
        self.drv
    }

    /// Compute capability `(major, minor)`.
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        self.drv.compute_capability(self.dev)
    }

    /// Whether this device's contexts run through MPS, so that processes sharing it run their
    /// kernels side by side rather than in time slices (`false` where the driver cannot say).
    pub fn mps_enabled(&self) -> bool {
        self.drv
            .attribute(self.dev, CU_DEVICE_ATTRIBUTE_MPS_ENABLED)
            .is_ok_and(|v| v == 1)
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> Result<i32> {
        self.drv
            .attribute(self.dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    }

    /// Lets kernels and copies of this context access `peer`'s memory. Enabling twice is
    /// not an error.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<()> {
        if peer.dev == self.dev {
            return Ok(());
        }
        let _g = self.scope()?;
        // SAFETY: both contexts are live; flags must be 0.
        let r = unsafe { (self.drv.fns.cuCtxEnablePeerAccess)(peer.raw, 0) };
        if r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        self.drv.check("cuCtxEnablePeerAccess", r)
    }

    /// Whether this device can access `peer`'s memory directly (NVLink or PCIe P2P).
    pub fn can_access_peer(&self, peer: &Context) -> Result<bool> {
        self.drv.can_access_peer(self.dev, peer.dev)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `new`; `dev` is valid.
        let _ = unsafe { (self.drv.fns.cuDevicePrimaryCtxRelease)(self.dev) };
    }
}

/// Restores the thread's previous context when dropped (see [`Context::scope`]).
#[derive(Debug)]
pub struct CurrentGuard<'a> {
    ctx: &'a Context,
    prev: CUcontext,
}

impl Drop for CurrentGuard<'_> {
    fn drop(&mut self) {
        if self.prev != self.ctx.raw && !self.prev.is_null() {
            // SAFETY: `prev` was current on this thread a moment ago; restoring it is what
            // the thread's owner expects. A context destroyed meanwhile yields an error code,
            // which there is nobody to report to.
            let _ = unsafe { (self.ctx.drv.fns.cuCtxSetCurrent)(self.prev) };
        }
    }
}

/// The device ordinal of the context current on the calling thread, `None` when there is
/// none (what `cudaGetDevice` answers, for a thread that has never called the runtime: none).
pub fn current_device() -> Result<Option<i32>> {
    let drv = Driver::get()?;
    let mut cur: CUcontext = std::ptr::null_mut();
    // SAFETY: writes one CUcontext.
    let r = unsafe { (drv.fns.cuCtxGetCurrent)(&mut cur) };
    drv.check("cuCtxGetCurrent", r)?;
    if cur.is_null() {
        return Ok(None);
    }
    let mut dev: c_int = 0;
    // SAFETY: writes one CUdevice of the current context.
    let r = unsafe { (drv.fns.cuCtxGetDevice)(&mut dev) };
    drv.check("cuCtxGetDevice", r)?;
    Ok(Some(dev))
}
