//! GPUs from the CUDA driver (`libcuda.so.1`, loaded at run time). Without the library or
//! a device the list is empty.

use std::ffi::{c_char, c_int, CStr};

use libloading::{Library, Symbol};

use super::sysfs::CudaGpu;
use crate::types::BusId;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

type CuInit = unsafe extern "C" fn(u32) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// The CUDA devices this process sees, or an empty list (with the reason) when the driver
/// is absent or fails.
pub fn gpus() -> Result<Vec<CudaGpu>, String> {
    // SAFETY: loading the CUDA driver runs its initialisers, which have no preconditions
    // on our side; the library stays loaded for the duration of this function.
    let lib = unsafe { Library::new("libcuda.so.1") }.map_err(|e| format!("libcuda.so.1: {e}"))?;
    // SAFETY: the symbol types match the CUDA driver API declarations in cuda.h
    // (CUresult is an int-sized enum, CUdevice an int).
    let (init, count, get, busid, attr) = unsafe {
        let init: Symbol<CuInit> = lib.get(b"cuInit\0").map_err(|e| e.to_string())?;
        let count: Symbol<CuDeviceGetCount> =
            lib.get(b"cuDeviceGetCount\0").map_err(|e| e.to_string())?;
        let get: Symbol<CuDeviceGet> = lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let busid: Symbol<CuDeviceGetPciBusId> = lib
            .get(b"cuDeviceGetPCIBusId\0")
            .map_err(|e| e.to_string())?;
        let attr: Symbol<CuDeviceGetAttribute> = lib
            .get(b"cuDeviceGetAttribute\0")
            .map_err(|e| e.to_string())?;
        (init, count, get, busid, attr)
    };
    // SAFETY: cuInit takes a flags word that must be 0.
    let rc = unsafe { init(0) };
    if rc != 0 {
        return Err(format!("cuInit failed with {rc}"));
    }
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer for the duration of the call.
    let rc = unsafe { count(&mut n) };
    if rc != 0 {
        return Err(format!("cuDeviceGetCount failed with {rc}"));
    }
    let mut out = Vec::new();
    for ordinal in 0..n.max(0) {
        let mut dev: c_int = 0;
        // SAFETY: `dev` is a valid out-pointer; `ordinal` is below the device count.
        if unsafe { get(&mut dev, ordinal) } != 0 {
            continue;
        }
        let mut buf = [0 as c_char; 64];
        // SAFETY: the buffer is 64 bytes and we pass its length; the driver writes a
        // NUL-terminated string of at most that length.
        if unsafe { busid(buf.as_mut_ptr(), buf.len() as c_int, dev) } != 0 {
            continue;
        }
        if let Some(last) = buf.last_mut() {
            *last = 0;
        }
        // SAFETY: the buffer is NUL-terminated (its last byte was just set to 0).
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .to_string();
        let Ok(b) = text.parse::<BusId>() else {
            continue;
        };
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: valid out-pointers and a device handle obtained from cuDeviceGet.
        unsafe {
            attr(
                &mut major,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                dev,
            );
            attr(
                &mut minor,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                dev,
            );
        }
        out.push(CudaGpu {
            dev: ordinal as u32,
            busid: b,
            sm: (major.max(0) * 10 + minor.max(0)) as u32,
        });
    }
    Ok(out)
}
