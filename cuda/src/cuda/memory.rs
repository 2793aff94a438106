//! Device memory, pinned host memory, and what the driver knows about a pointer.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

use super::context::Context;
use super::driver::Driver;
use super::error::{CudaError, Result};
use super::stream::Stream;
use super::sys::*;

/// Device memory from `cuMemAlloc`, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// `len` bytes of uninitialised device memory (at least 256-byte aligned). A zero-length
    /// buffer allocates nothing and has a null pointer.
    pub fn new(ctx: &Arc<Context>, len: usize) -> Result<DeviceBuffer> {
        let mut ptr: CUdeviceptr = 0;
        if len > 0 {
            let _g = ctx.scope()?;
            let drv = ctx.driver();
            // SAFETY: writes one CUdeviceptr; the context is current.
            let r = unsafe { (drv.fns.cuMemAlloc)(&mut ptr, len) };
            drv.check("cuMemAlloc_v2", r)?;
        }
        Ok(DeviceBuffer {
            ctx: Arc::clone(ctx),
            ptr,
            len,
        })
    }

    /// The device address.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The device address `offset` bytes in.
    pub fn at(&self, offset: usize) -> CUdeviceptr {
        self.ptr + offset as u64
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The owning context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Copies `src` to `offset` bytes into the buffer and waits for the copy (on the legacy
    /// default stream, so it is ordered after all earlier work of blocking streams).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        let s = Stream::legacy_default(&self.ctx);
        // SAFETY: the range is inside this buffer (checked) and `src` is borrowed until the
        // synchronize below returns.
        unsafe { s.memcpy_htod(self.at(offset), src.as_ptr(), src.len())? };
        s.synchronize()
    }

    /// Copies from `offset` bytes into the buffer into `dst` and waits for the copy.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        let s = Stream::legacy_default(&self.ctx);
        // SAFETY: as in `write`, with `dst` mutably borrowed until the copy is done.
        unsafe { s.memcpy_dtoh(dst.as_mut_ptr(), self.at(offset), dst.len())? };
        s.synchronize()
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(CudaError::InvalidArgument(format!(
                "range {offset}+{len} outside a buffer of {} bytes",
                self.len
            ))),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        if let Ok(_g) = self.ctx.scope() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed once.
            let _ = unsafe { (self.ctx.driver().fns.cuMemFree)(self.ptr) };
        }
    }
}

/// Page-locked host memory from `cuMemHostAlloc` (portable, device-mapped), freed on drop.
/// The device reaches it at [`PinnedBuffer::device_ptr`] (the same address under UVA).
#[derive(Debug)]
pub struct PinnedBuffer {
    ctx: Arc<Context>,
    ptr: *mut u8,
    dev: CUdeviceptr,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value; access to its bytes goes
// through raw pointers whose synchronisation is the user's (see the accessors).
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above; `&PinnedBuffer` only hands out addresses.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// `len` bytes of zeroed pinned host memory mapped into every context's address space.
    pub fn new(ctx: &Arc<Context>, len: usize) -> Result<PinnedBuffer> {
        let len = len.max(1);
        let _g = ctx.scope()?;
        let drv = ctx.driver();
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer to `len` bytes of pinned memory.
        let r = unsafe {
            (drv.fns.cuMemHostAlloc)(
                &mut p,
                len,
                CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP,
            )
        };
        drv.check("cuMemHostAlloc", r)?;
        let mut buf = PinnedBuffer {
            ctx: Arc::clone(ctx),
            ptr: p.cast(),
            dev: 0,
            len,
        };
        // SAFETY: `p` is valid for `len` bytes just allocated and not shared yet.
        unsafe { std::ptr::write_bytes(buf.ptr, 0, len) };
        let mut dev: CUdeviceptr = 0;
        // SAFETY: `p` is a mapped pinned allocation of this context; flags must be 0.
        let r = unsafe { (drv.fns.cuMemHostGetDevicePointer)(&mut dev, p, 0) };
        drv.check("cuMemHostGetDevicePointer_v2", r)?;
        buf.dev = dev;
        Ok(buf)
    }

    /// Host address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Device address of the same memory.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.dev
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a pinned buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes, for reading.
    ///
    /// # Safety
    /// No device work or other thread writes the buffer while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes for the life of `self`; no writer by contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, for writing.
    ///
    /// # Safety
    /// No device work or other thread accesses the buffer while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: valid for `len` bytes; exclusive by contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Ok(_g) = self.ctx.scope() {
            // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
            let _ = unsafe { (self.ctx.driver().fns.cuMemFreeHost)(self.ptr.cast()) };
        }
    }
}

/// Host memory this process mapped itself (a shared-memory file another process maps too),
/// page-locked and mapped for the device by `cuMemHostRegister` (portable, device-mapped);
/// unregistered on drop. The mapping must outlive this value.
#[derive(Debug)]
pub struct HostRegistration {
    ctx: Arc<Context>,
    ptr: *mut u8,
    dev: CUdeviceptr,
    len: usize,
}

// SAFETY: only addresses are handed out; the memory's synchronisation is the user's.
unsafe impl Send for HostRegistration {}
// SAFETY: as above.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Page-locks `len` bytes at `ptr` for every context.
    ///
    /// # Safety
    /// `ptr..ptr + len` is a page-aligned mapping of this process that stays mapped until the
    /// registration is dropped, and is not registered already.
    pub unsafe fn new(ctx: &Arc<Context>, ptr: *mut u8, len: usize) -> Result<HostRegistration> {
        let _g = ctx.scope()?;
        let drv = ctx.driver();
        // SAFETY: the caller guarantees the range is a mapping of ours that outlives the
        // registration.
        let r = unsafe {
            (drv.fns.cuMemHostRegister)(
                ptr.cast(),
                len,
                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP,
            )
        };
        drv.check("cuMemHostRegister", r)?;
        let mut reg = HostRegistration {
            ctx: Arc::clone(ctx),
            ptr,
            dev: 0,
            len,
        };
        let mut dev: CUdeviceptr = 0;
        // SAFETY: `ptr` was registered as device-mapped just above; flags must be 0.
        let r = unsafe { (drv.fns.cuMemHostGetDevicePointer)(&mut dev, ptr.cast(), 0) };
        drv.check("cuMemHostGetDevicePointer_v2", r)?;
        reg.dev = dev;
        Ok(reg)
    }

    /// Device address of the memory (the host address under UVA).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.dev
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty registration.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        if let Ok(_g) = self.ctx.scope() {
            // SAFETY: `ptr` was registered by `new` and is unregistered once.
            let _ = unsafe { (self.ctx.driver().fns.cuMemHostUnregister)(self.ptr.cast()) };
        }
    }
}

/// What kind of memory a pointer refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Memory the driver does not know (plain `malloc`, the stack, ...).
    Unregistered,
    /// Page-locked host memory known to CUDA.
    Host,
    /// Device memory (including memory mapped from a peer process).
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// The answer of [`pointer_info`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    pub kind: MemoryKind,
    /// True for device and managed memory: a kernel may use the address directly.
    pub is_device: bool,
    /// The device the memory lives on, for device memory.
    pub device: Option<i32>,
    /// Start of the allocation containing the pointer (the pointer itself if unknown).
    pub base: u64,
    /// Size of that allocation in bytes (0 if unknown).
    pub size: usize,
}

fn attribute<T: Copy + Default>(drv: &Driver, attr: CUpointer_attribute, ptr: u64) -> Result<T> {
    let mut v = T::default();
    // SAFETY: each attribute used here writes exactly one value of the type the caller picks
    // for it (unsigned int, int, CUdeviceptr, size_t) per the driver documentation.
    let r = unsafe { (drv.fns.cuPointerGetAttribute)((&mut v as *mut T).cast(), attr, ptr) };
    drv.check("cuPointerGetAttribute", r)?;
    Ok(v)
}

/// The driver's memory type of `ptr`, `None` for memory it does not know.
fn memory_type(drv: &Driver, ptr: u64) -> Result<Option<c_uint>> {
    match attribute(drv, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) {
        Ok(t) => Ok(Some(t)),
        Err(CudaError::Driver { code, .. })
            if code == CUDA_ERROR_INVALID_VALUE || code == CUDA_ERROR_INVALID_CONTEXT =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Device and array memory types; unified memory is managed.
fn on_device(mem_type: c_uint) -> bool {
    mem_type == CU_MEMORYTYPE_DEVICE || mem_type == CU_MEMORYTYPE_ARRAY
}

/// Whether `ptr` is device or managed memory ([`pointer_info`]'s `is_device`), in one driver
/// query for device memory and two otherwise, where [`pointer_info`] makes five: every
/// collective call asks this of its buffers.
pub fn is_device_memory(ptr: u64) -> Result<bool> {
    let drv = Driver::get()?;
    let Some(mem_type) = memory_type(drv, ptr)? else {
        return Ok(false);
    };
    if on_device(mem_type) || mem_type == CU_MEMORYTYPE_UNIFIED {
        return Ok(true);
    }
    let managed: c_int = attribute(drv, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr).unwrap_or(0);
    Ok(managed != 0)
}

/// What the driver knows about `ptr`: host or device, which device, and the bounds of the
/// allocation it is in. Memory the driver does not know is [`MemoryKind::Unregistered`].
pub fn pointer_info(ptr: u64) -> Result<PointerInfo> {
    let drv = Driver::get()?;
    let Some(mem_type) = memory_type(drv, ptr)? else {
        return Ok(PointerInfo {
            kind: MemoryKind::Unregistered,
            is_device: false,
            device: None,
            base: ptr,
            size: 0,
        });
    };
    let managed: c_int = attribute(drv, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr).unwrap_or(0);
    let kind = if managed != 0 || mem_type == CU_MEMORYTYPE_UNIFIED {
        MemoryKind::Managed
    } else if on_device(mem_type) {
        MemoryKind::Device
    } else {
        MemoryKind::Host
    };
    let is_device = matches!(kind, MemoryKind::Device | MemoryKind::Managed);
    let device = if is_device {
        attribute::<c_int>(drv, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr).ok()
    } else {
        None
    };
    let range =
        attribute::<u64>(drv, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr).and_then(|base| {
            Ok((
                base,
                attribute::<usize>(drv, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr)?,
            ))
        });
    let (base, size) = match range {
        Ok(r) => r,
        Err(_) => {
            let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
            // SAFETY: writes one CUdeviceptr and one size_t.
            let r = unsafe { (drv.fns.cuMemGetAddressRange)(&mut base, &mut size, ptr) };
            if r == CUDA_SUCCESS {
                (base, size)
            } else {
                (ptr, 0)
            }
        }
    };
    Ok(PointerInfo {
        kind,
        is_device,
        device,
        base,
        size,
    })
}

/// CUDA's identifier of the allocation containing `ptr`: unique within the process for its
/// lifetime, so a new allocation at a freed one's address gets a new id (mapping caches key on
/// it).
pub fn buffer_id(ptr: u64) -> Result<u64> {
    attribute::<u64>(Driver::get()?, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr)
}
