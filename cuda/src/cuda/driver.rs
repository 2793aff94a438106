//! The CUDA driver API, loaded from `libcuda.so.1` at run time.
//!
//! Nothing here needs the CUDA toolkit to build: every function is looked up by name with
//! `dlopen`/`dlsym` ([`libloading`]) the first time [`Driver::get`] is called. A machine
//! without an NVIDIA driver gets [`CudaError::NoDriver`], never a panic.
//!
//! Why not `cudarc`'s dynamically loaded bindings (assessed on its 0.19 line, its source as of
//! 2026-05-06): this library is loaded into other people's processes behind a C ABI, where a
//! missing driver must be an error code and an unknown return value must not be undefined
//! behaviour. cudarc panics when the library is missing (`panic_no_lib_found`) and when a
//! symbol of its chosen CUDA version is (`expect("Expected symbol in library")`: at load
//! until 0.19.4, at the first call since 0.19.5), so a `cuda-13000` build panics on a 12.x
//! driver that lacks a newer entry point we never call; its `CUresult` is a Rust enum
//! (`#[repr(u32)] cudaError_enum`), so a code a newer driver adds, returned through a
//! function pointer, is an invalid value of that type; and it tries fixed library names only,
//! where users point `CCL_CUDA_LIBRARY` at theirs. Here each entry names the symbol
//! versions it accepts (`_v2` where the ABI changed), optional groups ([`VmmFns`]) degrade
//! to an error for their callers only, and results stay plain integers.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use libloading::Library;

use super::error::{CudaError, Result};
use super::sys::*;

/// Library names tried in order when `CCL_CUDA_LIBRARY` is not set.
pub const DRIVER_LIBRARIES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

macro_rules! driver_table {
    ($(#[$meta:meta])* $name:ident { $( $field:ident [$($sym:literal),+] ($($arg:ty),*); )* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        pub struct $name {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CUresult, )*
        }

        impl $name {
            /// # Safety
            /// `lib` is a CUDA driver library: each named symbol, where present, has the
            /// signature declared in this table.
            unsafe fn load(lib: &Library, library: &str) -> Result<Self> {
                Ok(Self {
                    // SAFETY: (each field) the caller vouches that the symbol has this type.
                    $( $field: unsafe { lookup(lib, library, &[$($sym),+])? }, )*
                })
            }
        }
    };
}

driver_table! {
    /// Function pointers of the driver API. Field names are the CUDA names without the
    /// `_v2` suffix; the symbol actually bound is the newest listed one the library has.
    /// Every entry is required: a library lacking one is not used at all.
    DriverFns {
    cuInit ["cuInit"] (c_uint);
    cuDriverGetVersion ["cuDriverGetVersion"] (*mut c_int);
    cuDeviceGet ["cuDeviceGet"] (*mut CUdevice, c_int);
    cuDeviceGetCount ["cuDeviceGetCount"] (*mut c_int);
    cuDeviceGetAttribute ["cuDeviceGetAttribute"] (*mut c_int, CUdevice_attribute, CUdevice);
    cuDeviceGetName ["cuDeviceGetName"] (*mut c_char, c_int, CUdevice);
    cuDeviceGetPCIBusId ["cuDeviceGetPCIBusId"] (*mut c_char, c_int, CUdevice);
    cuDeviceCanAccessPeer ["cuDeviceCanAccessPeer"] (*mut c_int, CUdevice, CUdevice);
    cuDevicePrimaryCtxRetain ["cuDevicePrimaryCtxRetain"] (*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease ["cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"] (CUdevice);
    cuCtxSetCurrent ["cuCtxSetCurrent"] (CUcontext);
    cuCtxGetCurrent ["cuCtxGetCurrent"] (*mut CUcontext);
    cuCtxGetDevice ["cuCtxGetDevice"] (*mut CUdevice);
    cuCtxEnablePeerAccess ["cuCtxEnablePeerAccess"] (CUcontext, c_uint);
    cuMemAlloc ["cuMemAlloc_v2"] (*mut CUdeviceptr, usize);
    cuMemFree ["cuMemFree_v2"] (CUdeviceptr);
    cuMemAllocHost ["cuMemAllocHost_v2"] (*mut *mut c_void, usize);
    cuMemHostAlloc ["cuMemHostAlloc"] (*mut *mut c_void, usize, c_uint);
    cuMemHostGetDevicePointer ["cuMemHostGetDevicePointer_v2"] (*mut CUdeviceptr, *mut c_void, c_uint);
    cuMemFreeHost ["cuMemFreeHost"] (*mut c_void);
    cuMemHostRegister ["cuMemHostRegister_v2", "cuMemHostRegister"] (*mut c_void, usize, c_uint);
    cuMemHostUnregister ["cuMemHostUnregister"] (*mut c_void);
    cuMemcpyAsync ["cuMemcpyAsync"] (CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync ["cuMemcpyDtoDAsync_v2"] (CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpyHtoDAsync ["cuMemcpyHtoDAsync_v2"] (CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync ["cuMemcpyDtoHAsync_v2"] (*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyPeerAsync ["cuMemcpyPeerAsync"] (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize, CUstream);
    cuMemsetD8Async ["cuMemsetD8Async"] (CUdeviceptr, u8, usize, CUstream);
    cuStreamCreate ["cuStreamCreate"] (*mut CUstream, c_uint);
    cuStreamCreateWithPriority ["cuStreamCreateWithPriority"] (*mut CUstream, c_uint, c_int);
    cuCtxGetStreamPriorityRange ["cuCtxGetStreamPriorityRange"] (*mut c_int, *mut c_int);
    cuStreamDestroy ["cuStreamDestroy_v2"] (CUstream);
    cuStreamSynchronize ["cuStreamSynchronize"] (CUstream);
    cuStreamQuery ["cuStreamQuery"] (CUstream);
    cuStreamWaitEvent ["cuStreamWaitEvent"] (CUstream, CUevent, c_uint);
    cuStreamWaitValue32 ["cuStreamWaitValue32_v2", "cuStreamWaitValue32"] (CUstream, CUdeviceptr, u32, c_uint);
    cuStreamWriteValue32 ["cuStreamWriteValue32_v2", "cuStreamWriteValue32"] (CUstream, CUdeviceptr, u32, c_uint);
    cuStreamBatchMemOp ["cuStreamBatchMemOp_v2", "cuStreamBatchMemOp"] (CUstream, c_uint, *mut CUstreamMemOpValueParams, c_uint);
    cuStreamIsCapturing ["cuStreamIsCapturing"] (CUstream, *mut CUstreamCaptureStatus);
    cuThreadExchangeStreamCaptureMode ["cuThreadExchangeStreamCaptureMode"] (*mut CUstreamCaptureMode);
    cuLaunchHostFunc ["cuLaunchHostFunc"] (CUstream, CUhostFn, *mut c_void);
    cuEventCreate ["cuEventCreate"] (*mut CUevent, c_uint);
    cuEventRecord ["cuEventRecord"] (CUevent, CUstream);
    cuEventQuery ["cuEventQuery"] (CUevent);
    cuEventSynchronize ["cuEventSynchronize"] (CUevent);
    cuEventDestroy ["cuEventDestroy_v2"] (CUevent);
    cuEventElapsedTime ["cuEventElapsedTime_v2", "cuEventElapsedTime"] (*mut f32, CUevent, CUevent);
    cuIpcGetMemHandle ["cuIpcGetMemHandle"] (*mut CUipcMemHandle, CUdeviceptr);
    cuIpcOpenMemHandle ["cuIpcOpenMemHandle_v2"] (*mut CUdeviceptr, CUipcMemHandle, c_uint);
    cuIpcCloseMemHandle ["cuIpcCloseMemHandle"] (CUdeviceptr);
    cuPointerGetAttribute ["cuPointerGetAttribute"] (*mut c_void, CUpointer_attribute, CUdeviceptr);
    cuMemGetAddressRange ["cuMemGetAddressRange_v2"] (*mut CUdeviceptr, *mut usize, CUdeviceptr);
    cuModuleLoadData ["cuModuleLoadData"] (*mut CUmodule, *const c_void);
    cuModuleUnload ["cuModuleUnload"] (CUmodule);
    cuModuleGetFunction ["cuModuleGetFunction"] (*mut CUfunction, CUmodule, *const c_char);
    cuLaunchKernel ["cuLaunchKernel"] (CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    cuGetErrorName ["cuGetErrorName"] (CUresult, *mut *const c_char);
    cuGetErrorString ["cuGetErrorString"] (CUresult, *mut *const c_char);
    }
}

driver_table! {
    /// The virtual memory management entry points ([`super::vmm`]), bound separately from
    /// [`DriverFns`]: every driver since CUDA 10.2 has them, but a library (or an interposer,
    /// or a stub used in tests) without them must still serve everything else, so their
    /// absence only disables VMM ([`Driver::vmm`] returns the error).
    VmmFns {
    cuMemCreate ["cuMemCreate"] (*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64);
    cuMemRelease ["cuMemRelease"] (CUmemGenericAllocationHandle);
    cuMemAddressReserve ["cuMemAddressReserve"] (*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree ["cuMemAddressFree"] (CUdeviceptr, usize);
    cuMemMap ["cuMemMap"] (CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64);
    cuMemUnmap ["cuMemUnmap"] (CUdeviceptr, usize);
    cuMemSetAccess ["cuMemSetAccess"] (CUdeviceptr, usize, *const CUmemAccessDesc, usize);
    cuMemGetAllocationGranularity ["cuMemGetAllocationGranularity"] (*mut usize, *const CUmemAllocationProp, CUmemAllocationGranularity_flags);
    cuMemExportToShareableHandle ["cuMemExportToShareableHandle"] (*mut c_void, CUmemGenericAllocationHandle, CUmemAllocationHandleType, u64);
    cuMemImportFromShareableHandle ["cuMemImportFromShareableHandle"] (*mut CUmemGenericAllocationHandle, *mut c_void, CUmemAllocationHandleType);
    cuMemRetainAllocationHandle ["cuMemRetainAllocationHandle"] (*mut CUmemGenericAllocationHandle, *mut c_void);
    }
}

/// Binds the first of `names` that `lib` exports.
///
/// # Safety
/// `T` is the function-pointer type of every symbol in `names`.
unsafe fn lookup<T: Copy>(lib: &Library, library: &str, names: &[&str]) -> Result<T> {
    for name in names {
        // SAFETY: the caller vouches for the symbol's type; the pointer is copied out and
        // stays valid as long as `lib`, which the `Driver` owns for the program's lifetime.
        if let Ok(sym) = unsafe { lib.get::<T>(name.as_bytes()) } {
            return Ok(*sym);
        }
    }
    Err(CudaError::MissingSymbol {
        library: library.to_string(),
        symbol: names.join(" / "),
    })
}

/// `cuMemcpyBatchAsync` as CUDA 13 declares it (`_v2`): dsts, srcs, sizes, count, attrs,
/// attribute start indices, attribute count, stream.
pub type BatchCopyV2 = unsafe extern "C" fn(
    *mut CUdeviceptr,
    *mut CUdeviceptr,
    *mut usize,
    usize,
    *mut CUmemcpyAttributes,
    *mut usize,
    usize,
    CUstream,
) -> CUresult;
/// CUDA 12.8's `cuMemcpyBatchAsync`: the same with the index of a failing copy (may be null)
/// before the stream.
pub type BatchCopyV1 = unsafe extern "C" fn(
    *mut CUdeviceptr,
    *mut CUdeviceptr,
    *mut usize,
    usize,
    *mut CUmemcpyAttributes,
    *mut usize,
    usize,
    *mut usize,
    CUstream,
) -> CUresult;

/// The driver's batched copy, in whichever form it exports (none before CUDA 12.8). Optional:
/// without it callers issue one copy per call.
#[derive(Clone, Copy)]
pub enum BatchCopyFn {
    V2(BatchCopyV2),
    V1(BatchCopyV1),
}

impl BatchCopyFn {
    /// # Safety
    /// `lib` is a CUDA driver library, whose `cuMemcpyBatchAsync_v2` / `cuMemcpyBatchAsync`
    /// have the types above (CUDA 13 and 12.8 headers).
    unsafe fn load(lib: &Library, library: &str) -> Option<BatchCopyFn> {
        // SAFETY: the caller vouches for the symbol types.
        if let Ok(f) = unsafe { lookup::<BatchCopyV2>(lib, library, &["cuMemcpyBatchAsync_v2"]) } {
            return Some(BatchCopyFn::V2(f));
        }
        // SAFETY: as above.
        unsafe { lookup::<BatchCopyV1>(lib, library, &["cuMemcpyBatchAsync"]) }
            .ok()
            .map(BatchCopyFn::V1)
    }
}

/// The loaded driver library and its function table.
pub struct Driver {
    /// The function table; calling any entry is `unsafe` (raw C API).
    pub fns: DriverFns,
    vmm: Result<VmmFns>,
    batch_copy: Option<BatchCopyFn>,
    path: String,
    version: c_int,
    // Keeps the library mapped; the function pointers above point into it.
    _lib: Library,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("vmm", &self.vmm.is_ok())
            .field("batch_copy", &self.batch_copy.is_some())
            .finish()
    }
}

static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();

impl Driver {
    /// The process-wide driver, loaded and initialised (`cuInit(0)`) on first use.
    ///
    /// `CCL_CUDA_LIBRARY` names the library to load instead of [`DRIVER_LIBRARIES`]. Errors
    /// (no library, missing symbols, `cuInit` failing because there is no device) are
    /// remembered: every later call returns the same error.
    pub fn get() -> Result<&'static Driver> {
        DRIVER
            .get_or_init(|| {
                let env = std::env::var("CCL_CUDA_LIBRARY").ok();
                let candidates: Vec<&str> = match env.as_deref() {
                    Some(p) if !p.is_empty() => vec![p],
                    _ => DRIVER_LIBRARIES.to_vec(),
                };
                let drv = Driver::load(&candidates)?;
                // SAFETY: cuInit takes flags by value; 0 is the only defined value.
                let r = unsafe { (drv.fns.cuInit)(0) };
                drv.check("cuInit", r)?;
                Ok(drv)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads the first library of `candidates` that opens and binds the whole table, without
    /// calling `cuInit`. Tests use this with paths that do not exist.
    pub fn load(candidates: &[&str]) -> Result<Driver> {
        let mut reasons = Vec::new();
        for &name in candidates {
            // SAFETY: loading the NVIDIA driver library runs its initialisers, which have no
            // preconditions; a wrong library named by the user fails the symbol lookup below.
            let lib = match unsafe { Library::new(name) } {
                Ok(lib) => lib,
                Err(e) => {
                    reasons.push(format!("{name}: {e}"));
                    continue;
                }
            };
            // SAFETY: `lib` is a CUDA driver library, whose symbols have the table's types.
            let fns = unsafe { DriverFns::load(&lib, name)? };
            // SAFETY: as above, for the VMM entry points.
            let vmm = unsafe { VmmFns::load(&lib, name) };
            if let Err(e) = &vmm {
                tracing::debug!("CUDA virtual memory management unavailable: {e}");
            }
            // SAFETY: as above, for the batched copy.
            let batch_copy = unsafe { BatchCopyFn::load(&lib, name) };
            let mut version: c_int = 0;
            // SAFETY: cuDriverGetVersion writes one int (works before cuInit).
            let r = unsafe { (fns.cuDriverGetVersion)(&mut version) };
            let drv = Driver {
                fns,
                vmm,
                batch_copy,
                path: name.to_string(),
                version,
                _lib: lib,
            };
            drv.check("cuDriverGetVersion", r)?;
            return Ok(drv);
        }
        Err(CudaError::NoDriver {
            tried: candidates.join(", "),
            reason: if reasons.is_empty() {
                "no candidate library".to_string()
            } else {
                reasons.join("; ")
            },
        })
    }

    /// The virtual memory management entry points, or the [`CudaError::MissingSymbol`] that
    /// kept them from binding.
    pub fn vmm(&self) -> Result<&VmmFns> {
        self.vmm.as_ref().map_err(Clone::clone)
    }

    /// `cuMemcpyBatchAsync`, where the driver has it (CUDA 12.8 and later).
    pub fn batch_copy(&self) -> Option<BatchCopyFn> {
        self.batch_copy
    }

    /// The library that was loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `cuDriverGetVersion`: 1000 * major + 10 * minor (13000 for CUDA 13.0).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// `Ok(())` for `CUDA_SUCCESS`, otherwise the error of `call` with the driver's name and
    /// description of the code.
    pub fn check(&self, call: &'static str, r: CUresult) -> Result<()> {
        if r == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.error(call, r))
        }
    }

    /// The error for `code` returned by `call`.
    pub fn error(&self, call: &'static str, code: CUresult) -> CudaError {
        let text = |f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the function writes a pointer to a static NUL-terminated string, or
            // returns an error and leaves `p` untouched (null).
            let r = unsafe { f(code, &mut p) };
            if r != CUDA_SUCCESS || p.is_null() {
                None
            } else {
                // SAFETY: non-null and NUL-terminated, owned by the driver for the process.
                Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            }
        };
        CudaError::Driver {
            call,
            code,
            name: text(self.fns.cuGetErrorName).unwrap_or_else(|| "CUDA_ERROR_UNKNOWN".into()),
            message: text(self.fns.cuGetErrorString).unwrap_or_else(|| "unknown error".into()),
        }
    }

    /// Number of CUDA devices.
    pub fn device_count(&self) -> Result<i32> {
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { (self.fns.cuDeviceGetCount)(&mut n) };
        self.check("cuDeviceGetCount", r)?;
        Ok(n)
    }

    /// The handle of device `ordinal`.
    pub fn device(&self, ordinal: i32) -> Result<CUdevice> {
        let mut d: CUdevice = 0;
        // SAFETY: writes one CUdevice.
        let r = unsafe { (self.fns.cuDeviceGet)(&mut d, ordinal) };
        self.check("cuDeviceGet", r)?;
        Ok(d)
    }

    /// `cuDeviceGetAttribute`.
    pub fn attribute(&self, dev: CUdevice, attr: CUdevice_attribute) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int; an unknown attribute is an error code, not UB.
        let r = unsafe { (self.fns.cuDeviceGetAttribute)(&mut v, attr, dev) };
        self.check("cuDeviceGetAttribute", r)?;
        Ok(v)
    }

    /// The device's compute capability `(major, minor)`.
    pub fn compute_capability(&self, dev: CUdevice) -> Result<(i32, i32)> {
        Ok((
            self.attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// The device's marketing name.
    pub fn device_name(&self, dev: CUdevice) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes including the terminating NUL.
        let r = unsafe { (self.fns.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        self.check("cuDeviceGetName", r)?;
        Ok(c_buf_to_string(&buf))
    }

    /// The device's PCI bus id, `"0000:3b:00.0"` style.
    pub fn pci_bus_id(&self, dev: CUdevice) -> Result<String> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: the driver writes at most `len` bytes including the terminating NUL.
        let r =
            unsafe { (self.fns.cuDeviceGetPCIBusId)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        self.check("cuDeviceGetPCIBusId", r)?;
        Ok(c_buf_to_string(&buf))
    }

    /// Whether `dev` can access `peer`'s memory directly.
    pub fn can_access_peer(&self, dev: CUdevice, peer: CUdevice) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { (self.fns.cuDeviceCanAccessPeer)(&mut v, dev, peer) };
        self.check("cuDeviceCanAccessPeer", r)?;
        Ok(v != 0)
    }
}

fn c_buf_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_clean_error() {
        let err = Driver::load(&["/nonexistent/libcuda.so.1", "libccl-no-such-cuda.so"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("CUDA driver not available"), "{err}");
        assert!(err.contains("/nonexistent/libcuda.so.1"), "{err}");
        assert!(err.contains("libccl-no-such-cuda.so"), "{err}");
    }

    #[test]
    fn get_never_panics() {
        // Here (CI, no GPU) this is an "unavailable" error; on a GPU machine it succeeds.
        match Driver::get() {
            Ok(d) => assert!(d.version() > 0),
            Err(e) => {
                assert!(e.is_unavailable(), "{e}");
                // The error is remembered, not retried.
                assert_eq!(Driver::get().err(), Some(e));
            }
        }
    }

    #[test]
    fn a_library_without_the_symbols_is_rejected() {
        // libc exists everywhere and has none of the driver's symbols.
        match Driver::load(&["libc.so.6"]) {
            Err(CudaError::MissingSymbol { library, symbol }) => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(symbol, "cuInit");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn vmm_entry_points_bind_on_their_own() {
        // A library without the VMM symbols yields an error for that table alone, which
        // `Driver::load` keeps (see `Driver::vmm`) instead of rejecting the library.
        // SAFETY: loading libc runs no initialiser with preconditions.
        let lib = unsafe { Library::new("libc.so.6") }.unwrap();
        // SAFETY: no symbol is found, so none is ever called.
        match unsafe { VmmFns::load(&lib, "libc.so.6") } {
            Err(CudaError::MissingSymbol { symbol, .. }) => assert_eq!(symbol, "cuMemCreate"),
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => panic!("libc has cuMemCreate?"),
        }
    }
}
