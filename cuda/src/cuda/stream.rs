//! Streams (owned, or the caller's `cudaStream_t`) and events.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use super::context::Context;
use super::driver::BatchCopyFn;
use super::error::Result;
use super::sys::*;

/// A CUDA stream. Either created (and destroyed) here, or a caller's handle wrapped without
/// ownership: a `cudaStream_t` from the runtime is a `CUstream`, and null is the legacy
/// default stream.
///
/// Every asynchronous method is `unsafe`: the device reads or writes raw addresses after the
/// call returns, so the caller keeps that memory valid until the stream has passed the work.
#[derive(Debug)]
pub struct Stream {
    ctx: Arc<Context>,
    raw: CUstream,
    owned: bool,
}

// SAFETY: a CUstream may be used from any thread; the driver serialises its own state.
unsafe impl Send for Stream {}
// SAFETY: as above; methods take `&self` and only call the thread-safe driver API.
unsafe impl Sync for Stream {}

/// Condition of [`Stream::wait_value32`], as `CU_STREAM_WAIT_VALUE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitCond {
    /// `(int32_t)(*addr - value) >= 0`: a counter that has reached `value` (wraps safely).
    Geq,
    /// `*addr == value`.
    Eq,
    /// `(*addr & value) != 0`.
    And,
    /// `~(*addr | value) != 0`.
    Nor,
}

impl WaitCond {
    fn flags(self) -> c_uint {
        match self {
            WaitCond::Geq => CU_STREAM_WAIT_VALUE_GEQ,
            WaitCond::Eq => CU_STREAM_WAIT_VALUE_EQ,
            WaitCond::And => CU_STREAM_WAIT_VALUE_AND,
            WaitCond::Nor => CU_STREAM_WAIT_VALUE_NOR,
        }
    }
}

/// Most operations one `cuStreamBatchMemOp` call takes (the driver wants fewer than 256).
pub const MAX_MEM_OPS_PER_CALL: usize = 255;

/// Most copies one `cuMemcpyBatchAsync` call takes here (the arrays live on the stack; a larger
/// batch is several calls, which stream order keeps apart only in time, not in result).
pub const MAX_COPIES_PER_BATCH: usize = 32;

/// A stream memory operation, for [`Stream::mem_ops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemOp {
    /// As [`Stream::wait_value32`].
    Wait {
        addr: CUdeviceptr,
        value: u32,
        cond: WaitCond,
    },
    /// As [`Stream::write_value32`].
    Write { addr: CUdeviceptr, value: u32 },
}

/// Whether a stream is being captured into a CUDA graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureStatus {
    None,
    Active,
    /// Capture was started and then broken by an illegal operation.
    Invalidated,
}

impl Stream {
    /// A new blocking stream (synchronises with the legacy default stream).
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        Self::with_flags(ctx, false)
    }

    /// A new stream; `non_blocking` streams do not synchronise with the legacy default one.
    pub fn with_flags(ctx: &Arc<Context>, non_blocking: bool) -> Result<Stream> {
        let _g = ctx.scope()?;
        let drv = ctx.driver();
        let mut raw: CUstream = std::ptr::null_mut();
        let flags = if non_blocking {
            CU_STREAM_NON_BLOCKING
        } else {
            CU_STREAM_DEFAULT
        };
        // SAFETY: writes one CUstream; the context is current.
        let r = unsafe { (drv.fns.cuStreamCreate)(&mut raw, flags) };
        drv.check("cuStreamCreate", r)?;
        Ok(Stream {
            ctx: Arc::clone(ctx),
            raw,
            owned: true,
        })
    }

    /// A new non-blocking stream at the context's highest priority when `highest` (else as
    /// [`Stream::with_flags`]). Priority decides which pending thread blocks get SMs first, so
    /// a high-priority stream's kernels (the driver's own same-GPU copy kernels among them)
    /// start as soon as blocks of a running low-priority kernel retire, instead of after the
    /// whole kernel; copy-engine work is not affected.
    pub fn non_blocking_with_priority(ctx: &Arc<Context>, highest: bool) -> Result<Stream> {
        if !highest {
            return Self::with_flags(ctx, true);
        }
        let _g = ctx.scope()?;
        let drv = ctx.driver();
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: writes two ints; the context is current.
        let r = unsafe { (drv.fns.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest) };
        drv.check("cuCtxGetStreamPriorityRange", r)?;
        let mut raw: CUstream = std::ptr::null_mut();
        // SAFETY: writes one CUstream; the context is current; `greatest` is in the range the
        // driver just reported.
        let r = unsafe {
            (drv.fns.cuStreamCreateWithPriority)(&mut raw, CU_STREAM_NON_BLOCKING, greatest)
        };
        drv.check("cuStreamCreateWithPriority", r)?;
        Ok(Stream {
            ctx: Arc::clone(ctx),
            raw,
            owned: true,
        })
    }

    /// Wraps a caller's stream (a `cudaStream_t` or `CUstream` of `ctx`'s device) without
    /// taking ownership. Null means the legacy default stream; `CU_STREAM_LEGACY` (1) and
    /// `CU_STREAM_PER_THREAD` (2) are accepted too.
    ///
    /// # Safety
    /// `raw` is null, one of the two special handles, or a live stream of `ctx`'s device that
    /// outlives the returned value.
    pub unsafe fn from_raw(ctx: &Arc<Context>, raw: CUstream) -> Stream {
        Stream {
            ctx: Arc::clone(ctx),
            raw,
            owned: false,
        }
    }

    /// The legacy default stream of `ctx`'s device.
    pub fn legacy_default(ctx: &Arc<Context>) -> Stream {
        Stream {
            ctx: Arc::clone(ctx),
            raw: std::ptr::null_mut(),
            owned: false,
        }
    }

    /// The raw handle.
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// The context the stream's work runs in.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn check(&self, call: &'static str, r: CUresult) -> Result<()> {
        self.ctx.driver().check(call, r)
    }

    /// Blocks until all work queued so far has finished.
    pub fn synchronize(&self) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: `raw` is a live stream (or a special handle) of the current context.
        let r = unsafe { (self.ctx.driver().fns.cuStreamSynchronize)(self.raw) };
        self.check("cuStreamSynchronize", r)
    }

    /// True when all work queued so far has finished.
    pub fn query(&self) -> Result<bool> {
        let _g = self.ctx.scope()?;
        // SAFETY: as in `synchronize`.
        let r = unsafe { (self.ctx.driver().fns.cuStreamQuery)(self.raw) };
        if r == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("cuStreamQuery", r).map(|()| true)
    }

    /// Whether the stream is being captured into a graph (work queued now would be recorded
    /// into the graph instead of running).
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let _g = self.ctx.scope()?;
        stream_capture_status(self.ctx.driver(), self.raw)
    }

    /// Later work on this stream waits for `event`'s last recorded point.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: both handles are live; flags must be 0.
        let r = unsafe { (self.ctx.driver().fns.cuStreamWaitEvent)(self.raw, event.raw, 0) };
        self.check("cuStreamWaitEvent", r)
    }

    /// Records `event` at the current end of the stream.
    pub fn record(&self, event: &Event) -> Result<()> {
        event.record(self)
    }

    /// Copies `bytes` from `src` to `dst` (any memory kind, unified addressing).
    ///
    /// # Safety
    /// Both ranges are valid for the whole copy, until the stream has passed it.
    pub unsafe fn memcpy(&self, dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the ranges.
        let r = unsafe { (self.ctx.driver().fns.cuMemcpyAsync)(dst, src, bytes, self.raw) };
        self.check("cuMemcpyAsync", r)
    }

    /// Device-to-device copy.
    ///
    /// # Safety
    /// As [`Stream::memcpy`].
    pub unsafe fn memcpy_dtod(
        &self,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the ranges.
        let r = unsafe { (self.ctx.driver().fns.cuMemcpyDtoDAsync)(dst, src, bytes, self.raw) };
        self.check("cuMemcpyDtoDAsync_v2", r)
    }

    /// Host-to-device copy (asynchronous only when `src` is pinned).
    ///
    /// # Safety
    /// As [`Stream::memcpy`].
    pub unsafe fn memcpy_htod(&self, dst: CUdeviceptr, src: *const u8, bytes: usize) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the ranges.
        let r =
            unsafe { (self.ctx.driver().fns.cuMemcpyHtoDAsync)(dst, src.cast(), bytes, self.raw) };
        self.check("cuMemcpyHtoDAsync_v2", r)
    }

    /// Device-to-host copy (asynchronous only when `dst` is pinned).
    ///
    /// # Safety
    /// As [`Stream::memcpy`].
    pub unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: CUdeviceptr, bytes: usize) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the ranges.
        let r =
            unsafe { (self.ctx.driver().fns.cuMemcpyDtoHAsync)(dst.cast(), src, bytes, self.raw) };
        self.check("cuMemcpyDtoHAsync_v2", r)
    }

    /// Whether [`Stream::memcpy_batch`] may be used here: the driver has the batched copy,
    /// and this is not the legacy default stream, which it refuses. (Nor may a capturing
    /// stream take it; callers know whether they capture.)
    pub fn batches_copies(&self) -> bool {
        let legacy = self.raw.is_null() || self.raw == CU_STREAM_LEGACY;
        !legacy && self.ctx.driver().batch_copy().is_some()
    }

    /// Queues `copies` (dst, src, bytes) with one `cuMemcpyBatchAsync` call per
    /// [`MAX_COPIES_PER_BATCH`] non-empty copies (empty ones are left out): the batch as a
    /// whole runs in stream order, its copies in any order and on as many copy engines as the
    /// driver likes. On four H200s one batch per GPU moved an all-gather's blocks at 351-384
    /// GB/s where one stream per peer reached 190-208 (a probe with no library, 2026-11-28,
    /// `../shared/DEVICE.md`), and it is one driver call instead of one per copy. Sources are
    /// read in stream order; the copies are asked to stay off the SMs
    /// (`PREFER_OVERLAP_WITH_COMPUTE`).
    ///
    /// # Safety
    /// As [`Stream::memcpy`] for every copy; no copy's destination overlaps another copy's
    /// source or destination (the batch has no order within).
    pub unsafe fn memcpy_batch(&self, copies: &[(CUdeviceptr, CUdeviceptr, usize)]) -> Result<()> {
        let Some(f) = self.ctx.driver().batch_copy() else {
            return Err(super::error::CudaError::MissingSymbol {
                library: self.ctx.driver().path().to_string(),
                symbol: "cuMemcpyBatchAsync_v2 / cuMemcpyBatchAsync".into(),
            });
        };
        let _g = self.ctx.scope()?;
        let mut batch = [(0, 0, 0); MAX_COPIES_PER_BATCH];
        let mut count = 0;
        for &c in copies.iter().filter(|c| c.2 > 0) {
            if count == MAX_COPIES_PER_BATCH {
                // SAFETY: as this function's.
                unsafe { self.batch_call(f, &batch[..count]) }?;
                count = 0;
            }
            batch[count] = c;
            count += 1;
        }
        if count == 0 {
            return Ok(());
        }
        // SAFETY: as this function's.
        unsafe { self.batch_call(f, &batch[..count]) }
    }

    /// One `cuMemcpyBatchAsync` call over `copies` (1 to [`MAX_COPIES_PER_BATCH`] of them).
    ///
    /// # Safety
    /// As [`Stream::memcpy_batch`].
    unsafe fn batch_call(
        &self,
        f: BatchCopyFn,
        copies: &[(CUdeviceptr, CUdeviceptr, usize)],
    ) -> Result<()> {
        let (mut dsts, mut srcs, mut sizes) = (
            [0; MAX_COPIES_PER_BATCH],
            [0; MAX_COPIES_PER_BATCH],
            [0; MAX_COPIES_PER_BATCH],
        );
        for (i, &(d, s, n)) in copies.iter().enumerate() {
            (dsts[i], srcs[i], sizes[i]) = (d, s, n);
        }
        let mut attrs = CUmemcpyAttributes {
            src_access_order: CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            flags: CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE,
            ..Default::default()
        };
        let mut first = 0usize;
        let (d, s, n, count) = (
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            copies.len(),
        );
        // SAFETY: the three arrays hold `count` entries; one attribute entry applies from copy
        // 0 on (laid out as cuda.h's, checked in `sys`); a null failure index is allowed; the
        // caller vouches for the ranges.
        let r = unsafe {
            match f {
                BatchCopyFn::V2(f) => f(d, s, n, count, &mut attrs, &mut first, 1, self.raw),
                BatchCopyFn::V1(f) => f(
                    d,
                    s,
                    n,
                    count,
                    &mut attrs,
                    &mut first,
                    1,
                    std::ptr::null_mut(),
                    self.raw,
                ),
            }
        };
        self.check("cuMemcpyBatchAsync", r)
    }

    /// Copy between the memories of two contexts (a copy engine moves it over NVLink/PCIe).
    ///
    /// # Safety
    /// As [`Stream::memcpy`].
    pub unsafe fn memcpy_peer(
        &self,
        dst: CUdeviceptr,
        dst_ctx: &Context,
        src: CUdeviceptr,
        src_ctx: &Context,
        bytes: usize,
    ) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the ranges; both contexts are live.
        let r = unsafe {
            (self.ctx.driver().fns.cuMemcpyPeerAsync)(
                dst,
                dst_ctx.raw(),
                src,
                src_ctx.raw(),
                bytes,
                self.raw,
            )
        };
        self.check("cuMemcpyPeerAsync", r)
    }

    /// Sets `bytes` bytes at `dst` to `value`.
    ///
    /// # Safety
    /// The range is valid device memory until the stream has passed the memset.
    pub unsafe fn memset_d8(&self, dst: CUdeviceptr, value: u8, bytes: usize) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the range.
        let r = unsafe { (self.ctx.driver().fns.cuMemsetD8Async)(dst, value, bytes, self.raw) };
        self.check("cuMemsetD8Async", r)
    }

    /// Later work waits until the u32 at `addr` satisfies `cond` against `value`
    /// (`cuStreamWaitValue32`). `addr` may be pinned host memory (its device address),
    /// local device memory, or a peer's memory.
    ///
    /// # Safety
    /// `addr` is 4-byte aligned and stays valid until the wait has passed. Someone must
    /// eventually satisfy the condition, or the stream blocks forever.
    pub unsafe fn wait_value32(&self, addr: CUdeviceptr, value: u32, cond: WaitCond) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the address.
        let r = unsafe {
            (self.ctx.driver().fns.cuStreamWaitValue32)(self.raw, addr, value, cond.flags())
        };
        self.check("cuStreamWaitValue32_v2", r)
    }

    /// Queues `ops` in order with one driver call (`cuStreamBatchMemOp`) per
    /// [`MAX_MEM_OPS_PER_CALL`]: on the GPU machine a write and a wait batched cost 1.13 us of
    /// host time against 2.0 as two calls (`tests/gpu/host_costs.cu`), and a zero-SM 8-byte
    /// operation is host-bound. Takes an iterator so callers convert their own operations
    /// without a list of their own.
    ///
    /// # Safety
    /// As [`Stream::wait_value32`] for every address.
    pub unsafe fn mem_ops(&self, ops: impl IntoIterator<Item = MemOp>) -> Result<()> {
        let mut params: Vec<CUstreamMemOpValueParams> = Vec::new();
        for op in ops {
            params.push(match op {
                MemOp::Wait { addr, value, cond } => CUstreamMemOpValueParams {
                    operation: CU_STREAM_MEM_OP_WAIT_VALUE_32,
                    address: addr,
                    value: u64::from(value),
                    flags: cond.flags(),
                    ..Default::default()
                },
                MemOp::Write { addr, value } => CUstreamMemOpValueParams {
                    operation: CU_STREAM_MEM_OP_WRITE_VALUE_32,
                    address: addr,
                    value: u64::from(value),
                    flags: CU_STREAM_WRITE_VALUE_DEFAULT,
                    ..Default::default()
                },
            });
            if params.len() == MAX_MEM_OPS_PER_CALL {
                // SAFETY: the caller vouches for every address.
                unsafe { self.mem_ops_call(&mut params) }?;
                params.clear();
            }
        }
        if params.is_empty() {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { self.mem_ops_call(&mut params) }
    }

    /// One `cuStreamBatchMemOp` call over `params` (at most [`MAX_MEM_OPS_PER_CALL`]).
    ///
    /// # Safety
    /// As [`Stream::mem_ops`].
    unsafe fn mem_ops_call(&self, params: &mut [CUstreamMemOpValueParams]) -> Result<()> {
        let count = c_uint::try_from(params.len()).map_err(|_| {
            super::error::CudaError::InvalidArgument("too many stream memory operations".into())
        })?;
        let _g = self.ctx.scope()?;
        // SAFETY: `params` holds `count` entries laid out as the driver's union (checked size);
        // the caller vouches for the addresses.
        let r = unsafe {
            (self.ctx.driver().fns.cuStreamBatchMemOp)(self.raw, count, params.as_mut_ptr(), 0)
        };
        self.check("cuStreamBatchMemOp", r)
    }

    /// Writes `value` to the u32 at `addr` once earlier work has finished, with a memory
    /// barrier so the earlier work's writes are visible first (`cuStreamWriteValue32`).
    ///
    /// # Safety
    /// As [`Stream::wait_value32`].
    pub unsafe fn write_value32(&self, addr: CUdeviceptr, value: u32) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: the caller vouches for the address.
        let r = unsafe {
            (self.ctx.driver().fns.cuStreamWriteValue32)(
                self.raw,
                addr,
                value,
                CU_STREAM_WRITE_VALUE_DEFAULT,
            )
        };
        self.check("cuStreamWriteValue32_v2", r)
    }

    /// Queues a call of `f(data)` on a driver thread once earlier work is done; later work
    /// waits for it to return. Captured into a graph it becomes a host node, called at every
    /// replay.
    ///
    /// # Safety
    /// `f` makes no CUDA call and returns promptly, and `data` stays valid for every call
    /// (every replay of a graph it is captured into).
    pub unsafe fn launch_host_func(
        &self,
        f: unsafe extern "C" fn(*mut std::ffi::c_void),
        data: *mut std::ffi::c_void,
    ) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: per this function's contract.
        let r = unsafe { (self.ctx.driver().fns.cuLaunchHostFunc)(self.raw, f, data) };
        self.check("cuLaunchHostFunc", r)
    }
}

/// Whether the caller's stream (a `CUstream` handle) is being captured into a graph. Needs no
/// context of ours (the driver knows the stream's); the legacy default stream is never
/// captured.
pub fn capture_status_of(stream: usize) -> Result<CaptureStatus> {
    if stream == 0 || stream == 1 {
        return Ok(CaptureStatus::None);
    }
    stream_capture_status(super::driver::Driver::get()?, stream as CUstream)
}

fn stream_capture_status(drv: &super::driver::Driver, raw: CUstream) -> Result<CaptureStatus> {
    let mut s: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: writes one status value; `raw` is a stream handle of the caller's.
    let r = unsafe { (drv.fns.cuStreamIsCapturing)(raw, &mut s) };
    drv.check("cuStreamIsCapturing", r)?;
    Ok(match s {
        CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
        CU_STREAM_CAPTURE_STATUS_INVALIDATED => CaptureStatus::Invalidated,
        _ => CaptureStatus::None,
    })
}

/// While alive, the calling thread may make calls a running stream capture in global mode
/// would refuse (allocations, queries); dropping it restores the thread's previous mode.
/// Libraries that allocate while their caller captures do this, as CUDA's guide says.
pub struct RelaxedCapture {
    drv: &'static super::driver::Driver,
    previous: CUstreamCaptureMode,
}

impl RelaxedCapture {
    pub fn new() -> Result<RelaxedCapture> {
        let drv = super::driver::Driver::get()?;
        let mut mode: CUstreamCaptureMode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges one mode value of the calling thread.
        let r = unsafe { (drv.fns.cuThreadExchangeStreamCaptureMode)(&mut mode) };
        drv.check("cuThreadExchangeStreamCaptureMode", r)?;
        Ok(RelaxedCapture {
            drv,
            previous: mode,
        })
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: as in `new`; restores what `new` replaced.
        let _ = unsafe { (self.drv.fns.cuThreadExchangeStreamCaptureMode)(&mut mode) };
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Ok(_g) = self.ctx.scope() {
            // SAFETY: created by cuStreamCreate here and destroyed once; queued work still
            // completes (the driver defers the release).
            let _ = unsafe { (self.ctx.driver().fns.cuStreamDestroy)(self.raw) };
        }
    }
}

/// How an event is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventFlags {
    /// Record timestamps (for [`Event::elapsed_ms`]); costs a little per record.
    pub timing: bool,
    /// Usable from another process through an IPC event handle (implies no timing).
    pub interprocess: bool,
    /// `synchronize` sleeps instead of spinning.
    pub blocking_sync: bool,
}

/// A CUDA event, destroyed on drop.
#[derive(Debug)]
pub struct Event {
    ctx: Arc<Context>,
    raw: CUevent,
}

// SAFETY: a CUevent may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// A new event.
    pub fn new(ctx: &Arc<Context>, flags: EventFlags) -> Result<Event> {
        let _g = ctx.scope()?;
        let drv = ctx.driver();
        let mut f = CU_EVENT_DEFAULT;
        if !flags.timing || flags.interprocess {
            f |= CU_EVENT_DISABLE_TIMING;
        }
        if flags.interprocess {
            f |= CU_EVENT_INTERPROCESS;
        }
        if flags.blocking_sync {
            f |= CU_EVENT_BLOCKING_SYNC;
        }
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: writes one CUevent; the context is current.
        let r = unsafe { (drv.fns.cuEventCreate)(&mut raw, f) };
        drv.check("cuEventCreate", r)?;
        Ok(Event {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    /// An event that records timestamps.
    pub fn timing(ctx: &Arc<Context>) -> Result<Event> {
        Self::new(
            ctx,
            EventFlags {
                timing: true,
                ..EventFlags::default()
            },
        )
    }

    /// The raw handle.
    pub fn raw(&self) -> CUevent {
        self.raw
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: both handles are live.
        let r = unsafe { (self.ctx.driver().fns.cuEventRecord)(self.raw, stream.raw()) };
        self.ctx.driver().check("cuEventRecord", r)
    }

    /// True when the recorded work has finished (or the event was never recorded).
    pub fn query(&self) -> Result<bool> {
        let _g = self.ctx.scope()?;
        // SAFETY: live handle.
        let r = unsafe { (self.ctx.driver().fns.cuEventQuery)(self.raw) };
        if r == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.ctx.driver().check("cuEventQuery", r).map(|()| true)
    }

    /// Blocks until the recorded work has finished.
    pub fn synchronize(&self) -> Result<()> {
        let _g = self.ctx.scope()?;
        // SAFETY: live handle.
        let r = unsafe { (self.ctx.driver().fns.cuEventSynchronize)(self.raw) };
        self.ctx.driver().check("cuEventSynchronize", r)
    }

    /// Milliseconds between two completed timing events.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        let _g = start.ctx.scope()?;
        let mut ms = 0f32;
        // SAFETY: writes one float; both handles are live.
        let r = unsafe { (start.ctx.driver().fns.cuEventElapsedTime)(&mut ms, start.raw, end.raw) };
        start.ctx.driver().check("cuEventElapsedTime", r)?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Ok(_g) = self.ctx.scope() {
            // SAFETY: created here, destroyed once.
            let _ = unsafe { (self.ctx.driver().fns.cuEventDestroy)(self.raw) };
        }
    }
}
