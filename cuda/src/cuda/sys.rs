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
pub type CUstreamCaptureMode = c_int;
/// `CUhostFn`: a host function a stream (or a graph's host node) calls.
pub type CUhostFn = unsafe extern "C" fn(*mut c_void);

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
/// Contexts on the device are shared through MPS (CUDA 12.3 and later drivers).
pub const CU_DEVICE_ATTRIBUTE_MPS_ENABLED: CUdevice_attribute = 133;
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
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x1;
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 0x2;

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

/// `CUstreamBatchMemOpType`: the operations `cuStreamBatchMemOp` takes that we use.
pub const CU_STREAM_MEM_OP_WAIT_VALUE_32: c_uint = 1;
pub const CU_STREAM_MEM_OP_WRITE_VALUE_32: c_uint = 2;

/// One entry of `cuStreamBatchMemOp`'s array: the wait-value / write-value member of the
/// `CUstreamBatchMemOpParams` union (operation, address, value, flags, alias), padded to the
/// union's 48 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUstreamMemOpValueParams {
    pub operation: c_uint,
    pub address: CUdeviceptr,
    /// The 32-bit value in the low half (the union's `value` member on little-endian).
    pub value: u64,
    pub flags: c_uint,
    pub alias: CUdeviceptr,
    pub pad: u64,
}

const _: () = assert!(std::mem::size_of::<CUstreamMemOpValueParams>() == 48);

/// `CUmemcpySrcAccessOrder`: `CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`, the source is read in
/// stream order (the only order a collective's buffers allow).
pub const CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: c_uint = 0x1;
/// `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`: the driver keeps the batch's copies on copy
/// engines rather than kernels, so they leave the SMs to the user's compute.
pub const CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE: c_uint = 0x1;

/// `CUmemcpyAttributes` (CUDA 12.8+): how `cuMemcpyBatchAsync` treats the copies an entry
/// applies to. The location hints matter only for managed or non-CUDA memory and stay invalid.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemcpyAttributes {
    pub src_access_order: c_uint,
    pub src_loc_hint: CUmemLocation,
    pub dst_loc_hint: CUmemLocation,
    pub flags: c_uint,
}

pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;

/// `CU_STREAM_CAPTURE_MODE_RELAXED`: this thread may make any call while a capture runs.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;

/// `CU_STREAM_LEGACY`: the legacy default stream, whatever the per-thread setting.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// `CU_STREAM_PER_THREAD`: the calling thread's per-thread default stream.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;

/// Opaque pointer to a `c_void`, used for argument arrays of `cuLaunchKernel`.
pub type VoidPtr = *mut c_void;

// CUDA virtual memory management (cuMemCreate and friends, driver API since CUDA 10.2).

/// `CUmemGenericAllocationHandle`: `unsigned long long`.
pub type CUmemGenericAllocationHandle = u64;
/// `CUmemAllocationType` (a C enum, int-sized).
pub type CUmemAllocationType = c_int;
/// `CUmemAllocationHandleType` (a C enum, int-sized; a bit set in `requestedHandleTypes`).
pub type CUmemAllocationHandleType = c_int;
/// `CUmemLocationType` (a C enum, int-sized).
pub type CUmemLocationType = c_int;
/// `CUmemAccess_flags` (a C enum, int-sized).
pub type CUmemAccess_flags = c_int;
/// `CUmemAllocationGranularity_flags` (a C enum, int-sized).
pub type CUmemAllocationGranularity_flags = c_int;

pub const CU_MEM_ALLOCATION_TYPE_PINNED: CUmemAllocationType = 0x1;
pub const CU_MEM_HANDLE_TYPE_NONE: CUmemAllocationHandleType = 0x0;
pub const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: CUmemAllocationHandleType = 0x1;
pub const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 0x1;
pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: CUmemAccess_flags = 0x0;
pub const CU_MEM_ACCESS_FLAGS_PROT_READ: CUmemAccess_flags = 0x1;
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: CUmemAccess_flags = 0x3;
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: CUmemAllocationGranularity_flags = 0x0;
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: CUmemAllocationGranularity_flags = 0x1;

pub const CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: CUdevice_attribute = 102;
pub const CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: CUdevice_attribute = 103;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: CUdevice_attribute = 110;

/// `CUmemLocation`: where memory lives; for `CU_MEM_LOCATION_TYPE_DEVICE`, `id` is the device
/// ordinal.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    pub type_: CUmemLocationType,
    pub id: c_int,
}

/// The anonymous `allocFlags` struct inside `CUmemAllocationProp` (8 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemAllocFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp` (32 bytes on 64-bit Linux). Unused fields must be zero, which
/// `Default` gives.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUmemAllocationProp {
    pub type_: CUmemAllocationType,
    pub requested_handle_types: CUmemAllocationHandleType,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocFlags,
}

impl Default for CUmemAllocationProp {
    fn default() -> Self {
        CUmemAllocationProp {
            type_: 0,
            requested_handle_types: CU_MEM_HANDLE_TYPE_NONE,
            location: CUmemLocation::default(),
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: CUmemAllocFlags::default(),
        }
    }
}

/// `CUmemAccessDesc`: the access one location gets to a mapped range.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: CUmemAccess_flags,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn vmm_structs_match_cuda_h() {
        // Layouts from cuda.h (CUDA 11.x - 13.x, 64-bit): the driver reads these by offset.
        assert_eq!(size_of::<CUmemLocation>(), 8);
        assert_eq!(size_of::<CUmemAllocFlags>(), 8);
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(align_of::<CUmemAllocationProp>(), 8);
        assert_eq!(offset_of!(CUmemAllocationProp, requested_handle_types), 4);
        assert_eq!(offset_of!(CUmemAllocationProp, location), 8);
        assert_eq!(offset_of!(CUmemAllocationProp, win32_handle_meta_data), 16);
        assert_eq!(offset_of!(CUmemAllocationProp, alloc_flags), 24);
        assert_eq!(offset_of!(CUmemAllocFlags, gpu_direct_rdma_capable), 1);
        assert_eq!(offset_of!(CUmemAllocFlags, usage), 2);
        assert_eq!(size_of::<CUmemAccessDesc>(), 12);
        assert_eq!(offset_of!(CUmemAccessDesc, flags), 8);
        assert_eq!(size_of::<CUmemGenericAllocationHandle>(), 8);
    }

    #[test]
    fn batch_copy_attributes_match_cuda_h() {
        // cuda.h (12.8 - 13.x): srcAccessOrder, srcLocHint, dstLocHint, flags.
        assert_eq!(size_of::<CUmemcpyAttributes>(), 24);
        assert_eq!(align_of::<CUmemcpyAttributes>(), 4);
        assert_eq!(offset_of!(CUmemcpyAttributes, src_loc_hint), 4);
        assert_eq!(offset_of!(CUmemcpyAttributes, dst_loc_hint), 12);
        assert_eq!(offset_of!(CUmemcpyAttributes, flags), 20);
    }
}
