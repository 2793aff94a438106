//! What limits a GPU's clocks right now, from NVML (`libnvidia-ml.so.1`, loaded at run time).
//!
//! libccl asks whether the GPU is held at its power or thermal limit: then compute kernels
//! (someone else's: libccl's copies alone stay far below the cap) run at whatever clock the
//! remaining power allows, and every watt of extra data movement comes out of their clock
//! (measured 2026-11-23 on nvidia-h200-x2: an H200 at its 700 W cap ran a bf16 GEMM at ~1500 MHz alone and ~1410
//! MHz beside 390 GB/s of copy-engine traffic). Without NVML nothing is ever reported limited.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

use libloading::Library;

type NvmlDevice = *mut c_void;
type InitFn = unsafe extern "C" fn() -> c_int;
type ByBusIdFn = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> c_int;
type ReasonsFn = unsafe extern "C" fn(NvmlDevice, *mut u64) -> c_int;

/// `nvmlClocksEventReason*` bits that mean "held down by power or heat": software power cap,
/// hardware slowdown, software and hardware thermal slowdown, hardware power brake.
pub const POWER_OR_THERMAL_LIMITED: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

struct Nvml {
    // Keeps the library mapped for the function pointers below.
    _lib: Library,
    by_bus_id: ByBusIdFn,
    reasons: ReasonsFn,
}

static NVML: OnceLock<Option<Nvml>> = OnceLock::new();

fn nvml() -> Option<&'static Nvml> {
    NVML.get_or_init(|| {
        // SAFETY: loading NVML runs its initialisers, which have no preconditions on our side.
        let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok()?;
        // SAFETY: the signatures match nvml.h (nvmlReturn_t is int-sized, nvmlDevice_t a
        // pointer, the reasons an unsigned long long). Newer drivers name the reasons call
        // "ClocksEvent", older ones "ClocksThrottle": the same function.
        let (init, by_bus_id, reasons) = unsafe {
            let init = *lib.get::<InitFn>(b"nvmlInit_v2\0").ok()?;
            let by_bus_id = *lib
                .get::<ByBusIdFn>(b"nvmlDeviceGetHandleByPciBusId_v2\0")
                .ok()?;
            let reasons = match lib.get::<ReasonsFn>(b"nvmlDeviceGetCurrentClocksEventReasons\0") {
                Ok(f) => *f,
                Err(_) => *lib
                    .get::<ReasonsFn>(b"nvmlDeviceGetCurrentClocksThrottleReasons\0")
                    .ok()?,
            };
            (init, by_bus_id, reasons)
        };
        // SAFETY: nvmlInit_v2 takes no arguments; it may be called more than once.
        if unsafe { init() } != 0 {
            return None;
        }
        Some(Nvml {
            _lib: lib,
            by_bus_id,
            reasons,
        })
    })
    .as_ref()
}

/// One GPU's clock limiters, by PCI bus id.
#[derive(Debug)]
pub struct ClockLimits {
    dev: NvmlDevice,
}

// SAFETY: an nvmlDevice_t is a process-wide handle that NVML documents as usable from any
// thread; this type only reads through it.
unsafe impl Send for ClockLimits {}
// SAFETY: as above.
unsafe impl Sync for ClockLimits {}

impl ClockLimits {
    /// The GPU at `bus_id` ("0000:3b:00.0"); Err says why not (no NVML, no such GPU).
    pub fn for_bus_id(bus_id: &str) -> Result<ClockLimits, String> {
        let nvml = nvml().ok_or("libnvidia-ml.so.1 did not load or initialise")?;
        let id = CString::new(bus_id).map_err(|e| e.to_string())?;
        let mut dev: NvmlDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated bus id and a valid out-pointer.
        let rc = unsafe { (nvml.by_bus_id)(id.as_ptr(), &mut dev) };
        if rc != 0 || dev.is_null() {
            return Err(format!(
                "nvmlDeviceGetHandleByPciBusId_v2({bus_id}) returned {rc}"
            ));
        }
        Ok(ClockLimits { dev })
    }

    /// The current `nvmlClocksEventReason*` bits, or None if NVML refuses.
    pub fn reasons(&self) -> Option<u64> {
        let nvml = nvml()?;
        let mut r = 0u64;
        // SAFETY: `dev` came from NVML for this process; `r` is a valid out-pointer.
        let rc = unsafe { (nvml.reasons)(self.dev, &mut r) };
        (rc == 0).then_some(r)
    }

    /// Whether the GPU's clocks are held down by power or heat now.
    pub fn power_or_thermal_limited(&self) -> Option<bool> {
        self.reasons().map(|r| r & POWER_OR_THERMAL_LIMITED != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without NVML (CI) or for a bus id no GPU has, the limiters are refused with a reason,
    /// never a panic; a bus id with a NUL in it is refused before NVML sees it.
    #[test]
    fn unknown_gpus_and_bad_bus_ids_are_refused_with_a_reason() {
        let e = ClockLimits::for_bus_id("ffff:ff:1f.7").expect_err("no GPU has this bus id");
        assert!(!e.is_empty());
        assert!(ClockLimits::for_bus_id("0000:00\0:00.0").is_err());
    }

    #[test]
    fn the_limited_mask_holds_power_and_thermal_reasons_only() {
        // SwPowerCap, HwSlowdown, SwThermal, HwThermal, HwPowerBrake: yes; GpuIdle (0x1),
        // ApplicationsClocksSetting (0x2), SyncBoost (0x10), DisplayClock (0x100): no.
        for bit in [0x4u64, 0x8, 0x20, 0x40, 0x80] {
            assert_ne!(bit & POWER_OR_THERMAL_LIMITED, 0, "{bit:#x}");
        }
        for bit in [0x1u64, 0x2, 0x10, 0x100] {
            assert_eq!(bit & POWER_OR_THERMAL_LIMITED, 0, "{bit:#x}");
        }
    }
}
