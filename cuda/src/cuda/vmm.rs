//! CUDA virtual memory management (VMM): device memory that another process maps through a
//! file descriptor, which is what NCCL's `ncclMemAlloc` returns.
//!
//! Legacy CUDA IPC ([`super::ipc`], `cuIpcGetMemHandle`) refuses VMM memory, and VMM memory is
//! what NCCL's allocator and PyTorch's expandable segments hand out, so sharing it needs this
//! second mechanism:
//!
//! 1. the owner creates a [`VmmAllocation`] (physical memory created shareable as a POSIX file
//!    descriptor, mapped into a reserved address range, readable and writable by its device)
//!    and [`register`]s it, which exports the descriptor once;
//! 2. a peer process receives `(pid, fd, len, alloc_id)` (from [`lookup`], through the
//!    bootstrap), copies the descriptor into itself with [`fd_from_process`] and maps the
//!    memory with [`VmmMapping::import`].
//!
//! In one process with several GPUs a peer GPU needs [`set_access`] (or
//! [`VmmAllocation::grant_peers`]): `cuCtxEnablePeerAccess` does not cover VMM memory.
//!
//! Physical memory lives until its last reference is gone: the owner's handle and mapping,
//! every importer's handle and mapping. An importer's mapping therefore stays valid, and keeps
//! the memory, after the owner frees it; a cache of imported mappings must be keyed by
//! `(pid, alloc_id)`, never by address, because addresses are reused.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_long, c_void};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::context::Context;
use super::driver::{Driver, VmmFns};
use super::error::{CudaError, Result};
use super::sys::*;

/// `bytes` rounded up to a multiple of `granularity`; `None` on overflow or a zero
/// granularity.
pub fn round_up(bytes: usize, granularity: usize) -> Option<usize> {
    if granularity == 0 {
        return None;
    }
    bytes.checked_next_multiple_of(granularity)
}

/// Properties of pinned memory on device `ordinal`, exportable as a POSIX file descriptor.
fn shareable_prop(ordinal: i32) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requested_handle_types: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal,
        },
        ..CUmemAllocationProp::default()
    }
}

fn granularity(
    drv: &Driver,
    fns: &VmmFns,
    prop: &CUmemAllocationProp,
    which: CUmemAllocationGranularity_flags,
) -> Result<usize> {
    let mut g: usize = 0;
    // SAFETY: writes one size_t; `prop` is a fully initialised struct read during the call.
    let r = unsafe { (fns.cuMemGetAllocationGranularity)(&mut g, prop, which) };
    drv.check("cuMemGetAllocationGranularity", r)?;
    if g == 0 {
        return Err(CudaError::Unsupported(
            "the driver reports an allocation granularity of 0".into(),
        ));
    }
    Ok(g)
}

fn set_access_with(
    drv: &Driver,
    fns: &VmmFns,
    ptr: CUdeviceptr,
    len: usize,
    devices: &[i32],
) -> Result<()> {
    if devices.is_empty() {
        return Ok(());
    }
    let descs: Vec<CUmemAccessDesc> = devices
        .iter()
        .map(|&id| CUmemAccessDesc {
            location: CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id,
            },
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        })
        .collect();
    // SAFETY: `descs` holds `descs.len()` initialised descriptors, read during the call; a
    // range that is not mapped VMM memory is reported as an error code.
    let r = unsafe { (fns.cuMemSetAccess)(ptr, len, descs.as_ptr(), descs.len()) };
    drv.check("cuMemSetAccess", r)
}

/// Grants devices (ordinals) read and write access to `len` bytes of VMM memory mapped at
/// `ptr` in this process. Needed for every GPU other than the one the mapping was made for:
/// peer access enabled with `cuCtxEnablePeerAccess` covers `cuMemAlloc` memory only.
pub fn set_access(ptr: CUdeviceptr, len: usize, devices: &[i32]) -> Result<()> {
    let drv = Driver::get()?;
    set_access_with(drv, drv.vmm()?, ptr, len, devices)
}

/// Best effort: a descriptor that leaks into a child the user forks keeps device memory alive
/// for as long as that child lives.
fn set_cloexec(fd: &OwnedFd) {
    // SAFETY: F_GETFD/F_SETFD on a descriptor we own; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

fn export_handle(
    drv: &Driver,
    fns: &VmmFns,
    handle: CUmemGenericAllocationHandle,
) -> Result<OwnedFd> {
    let mut fd: c_int = -1;
    // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver writes one int through
    // the pointer; `handle` is live (owned or retained by the caller).
    let r = unsafe {
        (fns.cuMemExportToShareableHandle)(
            (&mut fd as *mut c_int).cast::<c_void>(),
            handle,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    };
    drv.check("cuMemExportToShareableHandle", r)?;
    if fd < 0 {
        return Err(CudaError::Unsupported(format!(
            "cuMemExportToShareableHandle returned descriptor {fd}"
        )));
    }
    // SAFETY: the driver opened `fd` for the caller and keeps no reference to it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_cloexec(&fd);
    Ok(fd)
}

/// The shareable descriptor of whatever VMM allocation is mapped at `ptr`, ours or not
/// (PyTorch's expandable segments, another library's `cuMemCreate`). Fails for memory that is
/// not VMM memory, or that was not created with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
/// The descriptor names the whole physical allocation, which is mapped from its start
/// (`cuMemMap` offsets are always 0), so the importer needs the mapping's base and size too.
pub fn export_fd_of(ptr: CUdeviceptr) -> Result<OwnedFd> {
    let drv = Driver::get()?;
    let fns = drv.vmm()?;
    let mut handle: CUmemGenericAllocationHandle = 0;
    // SAFETY: writes one handle; the address is only looked up, never dereferenced on the host.
    let r = unsafe { (fns.cuMemRetainAllocationHandle)(&mut handle, ptr as usize as *mut c_void) };
    drv.check("cuMemRetainAllocationHandle", r)?;
    let out = export_handle(drv, fns, handle);
    // SAFETY: balances the retain above; the mapping keeps its own reference.
    let _ = unsafe { (fns.cuMemRelease)(handle) };
    out
}

/// What a mapping is made of, released in reverse order by [`Pieces::release`], or on drop,
/// which cleans up the error paths of the constructors.
struct Pieces {
    drv: &'static Driver,
    fns: &'static VmmFns,
    handle: Option<CUmemGenericAllocationHandle>,
    reserved: Option<(CUdeviceptr, usize)>,
    mapped: bool,
}

impl fmt::Debug for Pieces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pieces")
            .field("handle", &self.handle)
            .field("reserved", &self.reserved)
            .field("mapped", &self.mapped)
            .finish()
    }
}

impl Pieces {
    fn new(drv: &'static Driver) -> Result<Pieces> {
        Ok(Pieces {
            drv,
            fns: drv.vmm()?,
            handle: None,
            reserved: None,
            mapped: false,
        })
    }

    /// Reserves `len` bytes of address space aligned to `align` and maps `self.handle` there.
    fn reserve_and_map(&mut self, len: usize, align: usize) -> Result<CUdeviceptr> {
        let handle = self
            .handle
            .ok_or_else(|| CudaError::InvalidArgument("no allocation handle to map".to_string()))?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: writes one CUdeviceptr; a zero address lets the driver choose, flags are 0.
        let r = unsafe { (self.fns.cuMemAddressReserve)(&mut ptr, len, align, 0, 0) };
        self.drv.check("cuMemAddressReserve", r)?;
        self.reserved = Some((ptr, len));
        // SAFETY: maps a live handle at offset 0 into the range just reserved, of the same
        // size; the driver checks that the handle is at least `len` bytes.
        let r = unsafe { (self.fns.cuMemMap)(ptr, len, 0, handle, 0) };
        self.drv.check("cuMemMap", r)?;
        self.mapped = true;
        Ok(ptr)
    }

    /// Unmaps, frees the address range and releases the handle; reports the first failure but
    /// always attempts every step.
    fn release(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        let mut keep = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        if let Some((ptr, len)) = self.reserved {
            if self.mapped {
                self.mapped = false;
                // SAFETY: the range was mapped by `reserve_and_map` and is unmapped once.
                let r = unsafe { (self.fns.cuMemUnmap)(ptr, len) };
                keep(self.drv.check("cuMemUnmap", r));
            }
        }
        if let Some((ptr, len)) = self.reserved.take() {
            // SAFETY: the range came from cuMemAddressReserve with this size; freed once.
            let r = unsafe { (self.fns.cuMemAddressFree)(ptr, len) };
            keep(self.drv.check("cuMemAddressFree", r));
        }
        if let Some(h) = self.handle.take() {
            // SAFETY: the handle came from cuMemCreate or an import and is released once.
            let r = unsafe { (self.fns.cuMemRelease)(h) };
            keep(self.drv.check("cuMemRelease", r));
        }
        first
    }
}

impl Drop for Pieces {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// Device memory from `cuMemCreate`, shareable with other processes as a file descriptor,
/// mapped read-write for its device. Unmapped and released on drop (or by [`Self::free`]).
#[derive(Debug)]
pub struct VmmAllocation {
    // Declared first so that it is released while `ctx` still holds the context.
    pieces: Pieces,
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
}

impl VmmAllocation {
    /// At least `bytes` (at least 1) of device memory on `ctx`'s device; the size is rounded
    /// up to the driver's recommended granularity (2 MiB on current GPUs). Memory is marked
    /// GPUDirect RDMA capable where the device supports that for VMM memory, so a NIC can
    /// register it.
    ///
    /// Fails with [`CudaError::Unsupported`] on a device without VMM or POSIX descriptor
    /// export, and with [`CudaError::MissingSymbol`] on a driver without the VMM entry points.
    pub fn new(ctx: &Arc<Context>, bytes: usize) -> Result<VmmAllocation> {
        let drv = ctx.driver();
        let _g = ctx.scope()?;
        let mut pieces = Pieces::new(drv)?;
        let dev = ctx.device();
        let attr = |a| drv.attribute(dev, a).unwrap_or(0) != 0;
        if !attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) {
            return Err(CudaError::Unsupported(format!(
                "device {} has no virtual memory management",
                ctx.ordinal()
            )));
        }
        if !attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) {
            return Err(CudaError::Unsupported(format!(
                "device {} cannot export memory as a file descriptor",
                ctx.ordinal()
            )));
        }
        let mut prop = shareable_prop(ctx.ordinal());
        if attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) {
            prop.alloc_flags.gpu_direct_rdma_capable = 1;
        }
        let gran = granularity(drv, pieces.fns, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)?;
        let len = round_up(bytes.max(1), gran).ok_or_else(|| {
            CudaError::InvalidArgument(format!("{bytes} bytes cannot be rounded up to {gran}"))
        })?;
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: writes one handle; `prop` is fully initialised; flags must be 0.
        let r = unsafe { (pieces.fns.cuMemCreate)(&mut handle, len, &prop, 0) };
        drv.check("cuMemCreate", r)?;
        pieces.handle = Some(handle);
        let ptr = pieces.reserve_and_map(len, gran)?;
        set_access_with(drv, pieces.fns, ptr, len, &[ctx.ordinal()])?;
        Ok(VmmAllocation {
            pieces,
            ctx: Arc::clone(ctx),
            ptr,
            len,
        })
    }

    /// The device address.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The mapped size: the requested size rounded up to the granularity.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an allocation has at least one granule.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The owning context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// A new descriptor naming the physical memory (`cuMemExportToShareableHandle`),
    /// close-on-exec. Another process imports it with [`VmmMapping::import`] after receiving
    /// it ([`fd_from_process`], or `SCM_RIGHTS`). Every call opens another descriptor.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let _g = self.ctx.scope()?;
        let handle = self.pieces.handle.ok_or_else(|| {
            CudaError::InvalidArgument("allocation was already released".to_string())
        })?;
        export_handle(self.pieces.drv, self.pieces.fns, handle)
    }

    /// Grants read and write access to `devices` (ordinals) in this process.
    pub fn grant(&self, devices: &[i32]) -> Result<()> {
        set_access_with(
            self.pieces.drv,
            self.pieces.fns,
            self.ptr,
            self.len,
            devices,
        )
    }

    /// Grants access to every other device of this process that can reach the owner's device
    /// peer to peer, as NCCL's `ncclMemAlloc` does; devices without P2P are skipped. Returns
    /// the ordinals granted.
    pub fn grant_peers(&self) -> Result<Vec<i32>> {
        let drv = self.pieces.drv;
        let own = self.ctx.device();
        let mut granted = Vec::new();
        for ordinal in 0..drv.device_count()? {
            if ordinal == self.ctx.ordinal() {
                continue;
            }
            let dev = drv.device(ordinal)?;
            if !drv.can_access_peer(dev, own).unwrap_or(false) {
                tracing::debug!(
                    "VMM allocation on device {}: device {ordinal} has no P2P to it",
                    self.ctx.ordinal()
                );
                continue;
            }
            self.grant(&[ordinal])?;
            granted.push(ordinal);
        }
        Ok(granted)
    }

    /// Releases the memory now, reporting what the driver says (drop ignores it).
    pub fn free(mut self) -> Result<()> {
        let _g = self.ctx.scope()?;
        self.pieces.release()
    }
}

impl Drop for VmmAllocation {
    fn drop(&mut self) {
        // Released here rather than by `Pieces`' own drop so that the owning context is
        // current, as the driver expects of calls that touch its address space.
        if let Ok(_g) = self.ctx.scope() {
            let _ = self.pieces.release();
        }
    }
}

/// Another process's [`VmmAllocation`] mapped into this one from its file descriptor.
/// Unmapped and its imported handle released on drop; the physical memory stays until the
/// owner has released it too.
#[derive(Debug)]
pub struct VmmMapping {
    pieces: Pieces,
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
}

impl VmmMapping {
    /// Maps the allocation behind `fd` (from [`VmmAllocation::export_fd`] in some process,
    /// brought here with [`fd_from_process`]) read-write for `ctx`'s device. `bytes` is the
    /// exporter's [`VmmAllocation::len`] (rounded up to the minimum granularity here). The
    /// descriptor stays the caller's: the driver does not take it over, so it may be closed
    /// once this returns.
    pub fn import(ctx: &Arc<Context>, fd: BorrowedFd<'_>, bytes: usize) -> Result<VmmMapping> {
        Self::import_with_peers(ctx, fd, bytes, &[])
    }

    /// As [`Self::import`], also granting access to the devices (ordinals) in `peers`.
    pub fn import_with_peers(
        ctx: &Arc<Context>,
        fd: BorrowedFd<'_>,
        bytes: usize,
        peers: &[i32],
    ) -> Result<VmmMapping> {
        if bytes == 0 {
            return Err(CudaError::InvalidArgument(
                "cannot map a zero-length VMM allocation".to_string(),
            ));
        }
        let drv = ctx.driver();
        let _g = ctx.scope()?;
        let mut pieces = Pieces::new(drv)?;
        let raw = fd.as_raw_fd();
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: writes one handle. For POSIX descriptors the "OS handle" argument is the
        // descriptor number itself cast to a pointer (not a pointer to it); it is open for
        // the call because `fd` is borrowed, and the driver does not keep or close it.
        let r = unsafe {
            (pieces.fns.cuMemImportFromShareableHandle)(
                &mut handle,
                raw as usize as *mut c_void,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        };
        drv.check("cuMemImportFromShareableHandle", r)?;
        pieces.handle = Some(handle);
        // The minimum granularity, not the recommended one: the exporter rounded to its own
        // device's recommendation, which a different GPU model here could exceed.
        let gran = granularity(
            drv,
            pieces.fns,
            &shareable_prop(ctx.ordinal()),
            CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )?;
        let len = round_up(bytes, gran).ok_or_else(|| {
            CudaError::InvalidArgument(format!("{bytes} bytes cannot be rounded up to {gran}"))
        })?;
        let ptr = pieces.reserve_and_map(len, gran)?;
        let mut devices = vec![ctx.ordinal()];
        devices.extend(peers.iter().copied().filter(|&p| p != ctx.ordinal()));
        set_access_with(drv, pieces.fns, ptr, len, &devices)?;
        Ok(VmmMapping {
            pieces,
            ctx: Arc::clone(ctx),
            ptr,
            len,
        })
    }

    /// The mapped base address (the start of the exporter's allocation).
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The mapped size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one granule.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grants read and write access to more devices (ordinals) of this process.
    pub fn grant(&self, devices: &[i32]) -> Result<()> {
        set_access_with(
            self.pieces.drv,
            self.pieces.fns,
            self.ptr,
            self.len,
            devices,
        )
    }
}

impl Drop for VmmMapping {
    fn drop(&mut self) {
        // As for VmmAllocation: released with the importing context current.
        if let Ok(_g) = self.ctx.scope() {
            let _ = self.pieces.release();
        }
    }
}

/// What the registry knows about one registered allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmmInfo {
    /// Start of the allocation (what `ncclMemAlloc` returned).
    pub base: CUdeviceptr,
    /// Mapped size in bytes (rounded up to the granularity): what an importer maps.
    pub len: usize,
    /// A descriptor exported once at registration and owned by the registry: valid in this
    /// process only while the allocation stays registered (closed by [`take`]; the number may
    /// then be reused). A peer copies it with [`fd_from_process`] while the allocation is in
    /// use by the operation that sent it.
    pub fd: RawFd,
    /// Unique per registered allocation for the life of the process (never reused, unlike
    /// addresses and descriptor numbers); with the pid it names the allocation across
    /// processes, e.g. as the key of an importer's mapping cache.
    pub alloc_id: u64,
    /// Ordinal of the device that holds the memory.
    pub device: i32,
}

struct Entry<T> {
    info: VmmInfo,
    // Keeps `info.fd` open.
    _fd: OwnedFd,
    owner: T,
}

/// Allocations by base address; generic so that the bookkeeping is tested without a GPU.
struct Registry<T> {
    map: Mutex<BTreeMap<CUdeviceptr, Entry<T>>>,
}

static NEXT_ALLOC_ID: AtomicU64 = AtomicU64::new(1);

impl<T> Registry<T> {
    const fn new() -> Self {
        Registry {
            map: parking_lot::const_mutex(BTreeMap::new()),
        }
    }

    /// Files `owner` under `base`. A range overlapping a registered one is refused (and
    /// `owner` dropped): it can only mean memory freed behind the registry's back.
    fn insert(
        &self,
        base: CUdeviceptr,
        len: usize,
        device: i32,
        fd: OwnedFd,
        owner: T,
    ) -> Result<VmmInfo> {
        let end = base.checked_add(len as u64).filter(|_| len > 0);
        let Some(end) = end else {
            return Err(CudaError::InvalidArgument(format!(
                "bad VMM range {base:#x}+{len}"
            )));
        };
        let mut map = self.map.lock();
        if let Some((_, e)) = map.range(..end).next_back() {
            if e.info.base + e.info.len as u64 > base {
                return Err(CudaError::InvalidArgument(format!(
                    "VMM range {base:#x}+{len} overlaps registered {:#x}+{}",
                    e.info.base, e.info.len
                )));
            }
        }
        let info = VmmInfo {
            base,
            len,
            fd: fd.as_raw_fd(),
            alloc_id: NEXT_ALLOC_ID.fetch_add(1, Ordering::Relaxed),
            device,
        };
        map.insert(
            base,
            Entry {
                info,
                _fd: fd,
                owner,
            },
        );
        Ok(info)
    }

    /// Removes the entry starting exactly at `base`, closing its descriptor.
    fn remove(&self, base: CUdeviceptr) -> Option<T> {
        let entry = self.map.lock().remove(&base)?;
        Some(entry.owner)
    }

    /// The entry whose range contains `addr`.
    fn find(&self, addr: CUdeviceptr) -> Option<VmmInfo> {
        let map = self.map.lock();
        let (_, e) = map.range(..=addr).next_back()?;
        (addr - e.info.base < e.info.len as u64).then_some(e.info)
    }
}

static REGISTRY: Registry<VmmAllocation> = Registry::new();

/// Keeps `alloc` in the process-wide registry under its base address, exporting its
/// descriptor once. On failure `alloc` is dropped (freed).
pub fn register(alloc: VmmAllocation) -> Result<VmmInfo> {
    let fd = alloc.export_fd()?;
    let (ptr, len, device) = (alloc.ptr(), alloc.len(), alloc.context().ordinal());
    REGISTRY.insert(ptr, len, device, fd, alloc)
}

/// Removes the allocation registered at exactly `ptr` (its base) and hands it back, for the
/// caller to free; `None` when `ptr` is not the base of a registered allocation.
pub fn take(ptr: CUdeviceptr) -> Option<VmmAllocation> {
    REGISTRY.remove(ptr)
}

/// The registered allocation containing `addr` (anywhere inside it).
pub fn lookup(addr: CUdeviceptr) -> Option<VmmInfo> {
    REGISTRY.find(addr)
}

/// A duplicate, in this process, of descriptor `fd` of process `pid` (`pidfd_open` +
/// `pidfd_getfd`, Linux 5.6+), close-on-exec. This is how a peer receives the descriptor of a
/// [`VmmAllocation`] without a Unix socket.
///
/// The kernel allows it where this process may ptrace `pid` (`PTRACE_MODE_ATTACH_REALCREDS`):
/// same user, and under Yama (`kernel.yama.ptrace_scope`) = 1, the Ubuntu default, only from
/// an ancestor, unless the target called [`allow_fd_fetch_by_peers`]; = 2 needs
/// `CAP_SYS_PTRACE`. Errors are the kernel's: `EPERM` for those checks, `ENOSYS` before 5.6,
/// `ESRCH` for a process that is gone, `EBADF` for a descriptor it does not have open.
pub fn fd_from_process(pid: u32, fd: RawFd) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: pidfd_open(pid, flags) takes two integers and returns a new descriptor or -1;
    // no memory is passed.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as c_long, 0 as c_long) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just created for us alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: pidfd_getfd(pidfd, targetfd, flags) takes three integers and returns a new
    // close-on-exec descriptor or -1; no memory is passed.
    let got = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd() as c_long,
            fd as c_long,
            0 as c_long,
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as for the pidfd: new and ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// Lets any process of the same user take this process's descriptors with
/// [`fd_from_process`] where Yama restricts that to ancestors (ranks are siblings). This
/// widens ptrace access to the same extent (`PR_SET_PTRACER_ANY`); nothing calls it
/// implicitly. A no-op without Yama.
pub fn allow_fd_fetch_by_peers() -> io::Result<()> {
    // SAFETY: PR_SET_PTRACER takes one integer argument; no memory is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    // Kernels without Yama reject the option itself: there is nothing to allow.
    if e.raw_os_error() == Some(libc::EINVAL) {
        Ok(())
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn memfd(contents: &[u8]) -> OwnedFd {
        // SAFETY: a NUL-terminated name and valid flags; returns a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"ccl-vmm-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: new and ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut f = File::from(fd);
        f.write_all(contents).unwrap();
        OwnedFd::from(f)
    }

    fn read_all(fd: RawFd, n: usize) -> Vec<u8> {
        // Through a duplicate, so that the File's drop leaves `fd` open.
        // SAFETY: `fd` is open for the duration of the call (the caller holds it).
        let dup = unsafe { BorrowedFd::borrow_raw(fd) }
            .try_clone_to_owned()
            .unwrap();
        let f = File::from(dup);
        let mut buf = vec![0u8; n];
        f.read_exact_at(&mut buf, 0).unwrap();
        buf
    }

    fn skip(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::EPERM) | Some(libc::ENOSYS) | Some(libc::EACCES)
        )
    }

    #[test]
    fn round_up_to_granularity() {
        let g = 2 << 20;
        assert_eq!(round_up(1, g), Some(g));
        assert_eq!(round_up(g, g), Some(g));
        assert_eq!(round_up(g + 1, g), Some(2 * g));
        assert_eq!(round_up(0, g), Some(0));
        assert_eq!(round_up(5, 0), None);
        assert_eq!(round_up(usize::MAX, g), None);
    }

    #[test]
    fn prop_is_pinned_device_memory_shareable_as_fd() {
        let p = shareable_prop(3);
        assert_eq!(p.type_, CU_MEM_ALLOCATION_TYPE_PINNED);
        assert_eq!(
            p.requested_handle_types,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        );
        assert_eq!(p.location.type_, CU_MEM_LOCATION_TYPE_DEVICE);
        assert_eq!(p.location.id, 3);
        assert!(p.win32_handle_meta_data.is_null());
        assert_eq!(p.alloc_flags, CUmemAllocFlags::default());
    }

    #[test]
    fn registry_finds_interior_addresses_and_gives_back_the_owner() {
        let reg: Registry<&'static str> = Registry::new();
        let a = reg
            .insert(0x1000_0000, 0x20_0000, 0, memfd(b"alpha"), "a")
            .unwrap();
        let b = reg
            .insert(0x1040_0000, 0x40_0000, 1, memfd(b"beta"), "b")
            .unwrap();
        assert!(b.alloc_id > a.alloc_id);
        assert_eq!((a.base, a.len, a.device), (0x1000_0000, 0x20_0000, 0));

        assert_eq!(reg.find(0x1000_0000), Some(a));
        assert_eq!(reg.find(0x101f_ffff), Some(a));
        assert_eq!(reg.find(0x1020_0000), None, "one past the end");
        assert_eq!(reg.find(0x0fff_ffff), None, "below every allocation");
        assert_eq!(reg.find(0x1050_0000), Some(b));
        assert_eq!(reg.find(u64::MAX), None);

        // The registry's descriptor is the exported one.
        assert_eq!(read_all(a.fd, 5), b"alpha");
        assert_eq!(read_all(b.fd, 4), b"beta");

        // Only the base address takes an allocation out.
        assert_eq!(reg.remove(0x1000_0001), None);
        assert_eq!(reg.remove(0x1000_0000), Some("a"));
        assert_eq!(reg.find(0x1000_0000), None);
        assert_eq!(reg.remove(0x1000_0000), None);
        assert_eq!(reg.find(0x1050_0000), Some(b));

        // Re-registering the same address gets a new id.
        let a2 = reg
            .insert(0x1000_0000, 0x20_0000, 0, memfd(b"again"), "a2")
            .unwrap();
        assert!(a2.alloc_id > b.alloc_id);
    }

    #[test]
    fn registry_refuses_overlaps_and_empty_ranges() {
        let reg: Registry<u32> = Registry::new();
        reg.insert(0x4000_0000, 0x20_0000, 0, memfd(b"x"), 1)
            .unwrap();
        for (base, len) in [
            (0x4000_0000, 0x20_0000),
            (0x3ff0_0000, 0x20_0000),
            (0x401f_ffff, 1),
            (0x3fe0_0000, 0x60_0000),
        ] {
            assert!(
                reg.insert(base, len, 0, memfd(b"y"), 2).is_err(),
                "{base:#x}+{len:#x}"
            );
        }
        assert!(reg.insert(0x5000_0000, 0, 0, memfd(b"z"), 3).is_err());
        assert!(reg.insert(u64::MAX, 2, 0, memfd(b"z"), 3).is_err());
        // Adjacent ranges on either side are fine.
        reg.insert(0x4020_0000, 0x20_0000, 0, memfd(b"after"), 4)
            .unwrap();
        reg.insert(0x3fe0_0000, 0x20_0000, 0, memfd(b"before"), 5)
            .unwrap();
    }

    #[test]
    fn fd_from_this_process() {
        let fd = memfd(b"hello from a memfd");
        let got = match fd_from_process(std::process::id(), fd.as_raw_fd()) {
            Ok(f) => f,
            Err(e) if skip(&e) => {
                eprintln!("skipping: pidfd_getfd not permitted here: {e}");
                return;
            }
            Err(e) => panic!("fd_from_process: {e}"),
        };
        assert_ne!(got.as_raw_fd(), fd.as_raw_fd());
        assert_eq!(read_all(got.as_raw_fd(), 18), b"hello from a memfd");
        // The duplicate is close-on-exec.
        // SAFETY: F_GETFD on a descriptor we own.
        let flags = unsafe { libc::fcntl(got.as_raw_fd(), libc::F_GETFD) };
        assert!(flags & libc::FD_CLOEXEC != 0);
        // A descriptor that is not open is EBADF.
        let e = fd_from_process(std::process::id(), 1 << 20).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    }

    #[test]
    fn fd_from_a_child_process() {
        use std::io::Read;
        use std::process::{Child, Command, Stdio};
        // Killed however the test ends.
        struct Reaped(Child);
        impl Drop for Reaped {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        // The child's standard input is the read end of a pipe we write into.
        let mut child = Reaped(
            Command::new("sleep")
                .arg("10")
                .stdin(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let got = match fd_from_process(child.0.id(), 0) {
            Ok(f) => f,
            Err(e) if skip(&e) => {
                eprintln!("skipping: pidfd_getfd not permitted here: {e}");
                return;
            }
            Err(e) => panic!("fd_from_process: {e}"),
        };
        let mut stdin = child.0.stdin.take().unwrap();
        stdin.write_all(b"through the child").unwrap();
        drop(stdin);
        // Our write end was the only one, so the copy of the child's read end sees the bytes
        // and then end of file.
        let mut buf = Vec::new();
        File::from(got).read_to_end(&mut buf).unwrap();
        assert_eq!(buf, b"through the child");
    }

    #[test]
    fn fd_from_a_missing_process() {
        // pid_max is at most 2^22, so this pid never exists.
        let e = fd_from_process(1 << 30, 0).unwrap_err();
        assert!(
            matches!(
                e.raw_os_error(),
                Some(libc::ESRCH) | Some(libc::ENOSYS) | Some(libc::EINVAL)
            ),
            "{e}"
        );
        assert!(fd_from_process(u32::MAX, 0).is_err());
    }

    #[test]
    fn allow_fd_fetch_by_peers_succeeds() {
        allow_fd_fetch_by_peers().unwrap();
    }

    #[test]
    fn without_a_driver_vmm_calls_fail_cleanly() {
        if Driver::get().is_ok() {
            return; // a GPU machine: tests/vmm.rs covers it
        }
        let e = set_access(0x1000, 0x1000, &[0]).unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        let e = export_fd_of(0x1000).unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        assert_eq!(lookup(0x1000), None);
        assert!(take(0x1000).is_none());
    }
}
