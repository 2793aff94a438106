//! Raw types and constants of the CUDA driver API (from `cuda.h`), declared here so that
//! nothing needs the CUDA toolkit at build time.

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_uint, c_void};

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUdevice_attribute = c_int;
pub type CUpointer_attribute = c_int;
pub type CUstreamCaptureStatus = c_int;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUipcMemHandle {
    pub reserved: [u8; 64],
}

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_INSUFFICIENT_DRIVER: CUresult = 35;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;

pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CUdevice_attribute = 16;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdevice_attribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdevice_attribute = 76;

pub const CU_POINTER_ATTRIBUTE_CONTEXT: CUpointer_attribute = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: CUpointer_attribute = 2;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: CUpointer_attribute = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: CUpointer_attribute = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: CUpointer_attribute = 9;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: CUpointer_attribute = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: CUpointer_attribute = 12;

pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;
pub const CU_MEMORYTYPE_ARRAY: c_uint = 3;
pub const CU_MEMORYTYPE_UNIFIED: c_uint = 4;

pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x2;

pub const CU_STREAM_DEFAULT: c_uint = 0x0;
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;

pub const CU_EVENT_DEFAULT: c_uint = 0x0;
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
pub const CU_EVENT_INTERPROCESS: c_uint = 0x4;

pub const CU_STREAM_WAIT_VALUE_GEQ: c_uint = 0x0;
pub const CU_STREAM_WAIT_VALUE_EQ: c_uint = 0x1;
pub const CU_STREAM_WAIT_VALUE_AND: c_uint = 0x2;
pub const CU_STREAM_WAIT_VALUE_NOR: c_uint = 0x3;
pub const CU_STREAM_WAIT_VALUE_FLUSH: c_uint = 1 << 30;
pub const CU_STREAM_WRITE_VALUE_DEFAULT: c_uint = 0x0;

pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;

pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;

/// `CU_STREAM_LEGACY`: the legacy default stream, whatever the per-thread setting.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// `CU_STREAM_PER_THREAD`: the calling thread's per-thread default stream.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;

/// Opaque pointer to a `c_void`, used for argument arrays of `cuLaunchKernel`.
pub type VoidPtr = *mut c_void;
