//! NVLinks from NVML (`libnvidia-ml.so.1`, loaded at run time). Without the library the
//! GPUs simply have no NVLinks.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

use libloading::{Library, Symbol};

use crate::model::{class, NvLinkSpec};
use crate::types::BusId;

const NVML_NVLINK_MAX_LINKS: c_uint = 18;
const NVML_NVLINK_DEVICE_TYPE_SWITCH: c_int = 2;

/// `nvmlPciInfo_t`.
#[repr(C)]
struct NvmlPciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

type NvmlDevice = *mut c_void;
type Init = unsafe extern "C" fn() -> c_int;
type Shutdown = unsafe extern "C" fn() -> c_int;
type ByBusId = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> c_int;
type LinkState = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_int) -> c_int;
type RemotePci = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlPciInfo) -> c_int;
type RemoteType = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_int) -> c_int;

/// NVLink entries of each GPU in `gpus` (bus ids), keyed by bus id. Targets that are GPUs
/// get class 0x030200, NVSwitches 0x068000.
pub fn nvlinks(gpus: &[BusId]) -> Result<BTreeMap<BusId, Vec<NvLinkSpec>>, String> {
    // SAFETY: loading NVML runs its initialisers, which have no preconditions on our side.
    let lib = unsafe { Library::new("libnvidia-ml.so.1") }
        .map_err(|e| format!("libnvidia-ml.so.1: {e}"))?;
    // SAFETY: the symbol types match nvml.h (nvmlReturn_t and enums are int-sized,
    // nvmlDevice_t is a pointer, nvmlPciInfo_t is declared above with the same layout).
    let (init, shutdown, by_busid, state, remote) = unsafe {
        let init: Symbol<Init> = lib.get(b"nvmlInit_v2\0").map_err(|e| e.to_string())?;
        let shutdown: Symbol<Shutdown> = lib.get(b"nvmlShutdown\0").map_err(|e| e.to_string())?;
        let by_busid: Symbol<ByBusId> = lib
            .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
            .map_err(|e| e.to_string())?;
        let state: Symbol<LinkState> = lib
            .get(b"nvmlDeviceGetNvLinkState\0")
            .map_err(|e| e.to_string())?;
        let remote: Symbol<RemotePci> = lib
            .get(b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0")
            .map_err(|e| e.to_string())?;
        (init, shutdown, by_busid, state, remote)
    };
    // SAFETY: as above; this symbol is optional (older drivers lack it).
    let rtype: Option<Symbol<RemoteType>> =
        unsafe { lib.get(b"nvmlDeviceGetNvLinkRemoteDeviceType\0").ok() };
    // SAFETY: nvmlInit_v2 takes no arguments.
    let rc = unsafe { init() };
    if rc != 0 {
        return Err(format!("nvmlInit_v2 failed with {rc}"));
    }
    let mut out = BTreeMap::new();
    for &g in gpus {
        let Ok(cs) = CString::new(g.to_string()) else {
            continue;
        };
        let mut dev: NvmlDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated bus id string and a valid out-pointer.
        if unsafe { by_busid(cs.as_ptr(), &mut dev) } != 0 {
            continue;
        }
        let mut counts: BTreeMap<(BusId, bool), u32> = BTreeMap::new();
        for link in 0..NVML_NVLINK_MAX_LINKS {
            let mut active: c_int = 0;
            // SAFETY: `dev` came from NVML; `active` is a valid out-pointer. Links past
            // the device's count return an error code, which we skip.
            if unsafe { state(dev, link, &mut active) } != 0 || active == 0 {
                continue;
            }
            let mut info = NvmlPciInfo {
                bus_id_legacy: [0; 16],
                domain: 0,
                bus: 0,
                device: 0,
                pci_device_id: 0,
                pci_sub_system_id: 0,
                bus_id: [0; 32],
            };
            // SAFETY: `info` has nvmlPciInfo_t's layout and lives across the call.
            if unsafe { remote(dev, link, &mut info) } != 0 {
                continue;
            }
            if let Some(last) = info.bus_id.last_mut() {
                *last = 0;
            }
            // SAFETY: the array is NUL-terminated (last byte set above).
            let text = unsafe { CStr::from_ptr(info.bus_id.as_ptr()) }
                .to_string_lossy()
                .to_string();
            let target = text.parse::<BusId>().unwrap_or(BusId {
                domain: info.domain,
                bus: (info.bus & 0xff) as u8,
                device: (info.device & 0x1f) as u8,
                function: 0,
            });
            let is_switch = match &rtype {
                Some(f) => {
                    let mut t: c_int = -1;
                    // SAFETY: valid device handle and out-pointer.
                    let rc = unsafe { f(dev, link, &mut t) };
                    if rc == 0 {
                        t == NVML_NVLINK_DEVICE_TYPE_SWITCH
                    } else {
                        !gpus.iter().any(|x| x.device_id() == target.device_id())
                    }
                }
                None => !gpus.iter().any(|x| x.device_id() == target.device_id()),
            };
            *counts.entry((target, is_switch)).or_insert(0) += 1;
        }
        let specs: Vec<NvLinkSpec> = counts
            .into_iter()
            .map(|((target, sw), count)| NvLinkSpec {
                target,
                count,
                tclass: Some(format!(
                    "0x{:06x}",
                    if sw { class::NVSWITCH } else { class::GPU_3D }
                )),
                extra: Vec::new(),
            })
            .collect();
        out.insert(g, specs);
    }
    // SAFETY: balanced with the successful nvmlInit_v2 above.
    unsafe {
        shutdown();
    }
    Ok(out)
}
