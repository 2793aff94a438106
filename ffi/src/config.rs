//! `ncclConfig_t` and `ncclSimInfo_t`, read the way NCCL reads them: by the caller's `size`
//! and `version`, so programs built against older or newer headers both work.

use std::ffi::{c_char, c_int, c_uint, CStr};

use ccl::{CommConfig, Error};

pub const NCCL_API_MAGIC: c_uint = 0xcafe_beef;
pub const UNDEF_INT: c_int = i32::MIN;
const SIM_MAGIC: c_uint = 0x7468_5283;

/// `ncclConfig_t` through NCCL 2.30 (96 bytes on x86-64).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
    pub graphUsageMode: c_int,
    pub numRmaCtx: c_int,
    pub maxP2pPeers: c_int,
    pub graphStreamOrdering: c_int,
}

impl Default for ncclConfig_t {
    fn default() -> Self {
        ncclConfig_t {
            size: std::mem::size_of::<ncclConfig_t>(),
            magic: NCCL_API_MAGIC,
            version: ccl::NCCL_VERSION_CODE as c_uint,
            blocking: UNDEF_INT,
            cgaClusterSize: UNDEF_INT,
            minCTAs: UNDEF_INT,
            maxCTAs: UNDEF_INT,
            netName: std::ptr::null(),
            splitShare: UNDEF_INT,
            trafficClass: UNDEF_INT,
            commName: std::ptr::null(),
            collnetEnable: UNDEF_INT,
            CTAPolicy: UNDEF_INT,
            shrinkShare: UNDEF_INT,
            nvlsCTAs: UNDEF_INT,
            nChannelsPerNetPeer: UNDEF_INT,
            nvlinkCentricSched: UNDEF_INT,
            graphUsageMode: UNDEF_INT,
            numRmaCtx: UNDEF_INT,
            maxP2pPeers: UNDEF_INT,
            graphStreamOrdering: UNDEF_INT,
        }
    }
}

/// `NCCL_VERSION(x, y, z)`.
pub const fn version_code(x: u32, y: u32, z: u32) -> u32 {
    if x <= 2 && y <= 8 {
        x * 1000 + y * 100 + z
    } else {
        x * 10000 + y * 100 + z
    }
}

/// Copies what the caller's struct holds and resets fields its header did not know.
///
/// # Safety
/// `cfg` is NULL or points at a config of at least `cfg->size` bytes.
pub unsafe fn read_raw(cfg: *const ncclConfig_t) -> ccl::Result<ncclConfig_t> {
    let mut c = ncclConfig_t::default();
    if cfg.is_null() {
        return Ok(c);
    }
    // SAFETY: the first field is `size`, present in every version of the struct.
    let size = unsafe { std::ptr::read_unaligned(cfg.cast::<usize>()) };
    if size < 16 {
        return Err(Error::invalid_argument(format!(
            "ncclConfig_t size {size} is too small (not initialised with NCCL_CONFIG_INITIALIZER?)"
        )));
    }
    let n = size.min(std::mem::size_of::<ncclConfig_t>());
    // SAFETY: the caller's struct has `size` bytes; we copy at most that many into ours,
    // which is at least `n` bytes and plain old data.
    unsafe {
        std::ptr::copy_nonoverlapping(
            cfg.cast::<u8>(),
            (&mut c as *mut ncclConfig_t).cast::<u8>(),
            n,
        )
    };
    if c.magic != NCCL_API_MAGIC {
        return Err(Error::invalid_argument(format!(
            "ncclConfig_t magic {:#x} is wrong (not initialised with NCCL_CONFIG_INITIALIZER?)",
            c.magic
        )));
    }
    let d = ncclConfig_t::default();
    let v = c.version;
    if v < version_code(2, 14, 0) {
        c.blocking = d.blocking;
    }
    if v < version_code(2, 17, 0) {
        c.cgaClusterSize = d.cgaClusterSize;
        c.minCTAs = d.minCTAs;
        c.maxCTAs = d.maxCTAs;
        c.netName = d.netName;
    }
    if v < version_code(2, 18, 0) {
        c.splitShare = d.splitShare;
    }
    if v < version_code(2, 25, 0) {
        c.trafficClass = d.trafficClass;
    }
    if v < version_code(2, 26, 0) {
        c.commName = d.commName;
    }
    if v < version_code(2, 27, 0) {
        c.collnetEnable = d.collnetEnable;
        c.CTAPolicy = d.CTAPolicy;
        c.shrinkShare = d.shrinkShare;
        c.nvlsCTAs = d.nvlsCTAs;
    }
    if v < version_code(2, 28, 0) {
        c.nChannelsPerNetPeer = d.nChannelsPerNetPeer;
        c.nvlinkCentricSched = d.nvlinkCentricSched;
    }
    if v < version_code(2, 29, 0) {
        c.graphUsageMode = d.graphUsageMode;
        c.numRmaCtx = d.numRmaCtx;
    }
    if v < version_code(2, 30, 0) {
        c.maxP2pPeers = d.maxP2pPeers;
    }
    if v < version_code(2, 30, 5) {
        c.graphStreamOrdering = d.graphStreamOrdering;
    }
    Ok(c)
}

/// The communicator settings libccl acts on.
///
/// # Safety
/// As [`read_raw`]; string fields are NULL or NUL-terminated.
pub unsafe fn read(cfg: *const ncclConfig_t) -> ccl::Result<CommConfig> {
    // SAFETY: forwarded.
    let c = unsafe { read_raw(cfg) }?;
    if c.blocking != UNDEF_INT && c.blocking != 0 && c.blocking != 1 {
        return Err(Error::invalid_argument(format!(
            "ncclConfig_t.blocking = {} (must be 0 or 1)",
            c.blocking
        )));
    }
    let comm_name = if c.commName.is_null() {
        None
    } else {
        // SAFETY: non-NULL commName is a C string (caller contract).
        Some(
            unsafe { CStr::from_ptr(c.commName) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    Ok(CommConfig {
        blocking: c.blocking != 0,
        comm_name,
        split_share: c.splitShare == 1,
    })
}

/// `ncclSimInfo_t`.
#[repr(C)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: f32,
}

/// Checks a `ncclSimInfo_t` pointer.
///
/// # Safety
/// `p` is NULL or points at a caller's `ncclSimInfo_t`.
pub unsafe fn sim_info<'a>(p: *mut ncclSimInfo_t) -> ccl::Result<Option<&'a mut ncclSimInfo_t>> {
    // SAFETY: NULL or a caller-provided struct of at least the 2.19 size (24 bytes).
    let Some(info) = (unsafe { p.as_mut() }) else {
        return Ok(None);
    };
    if info.magic != SIM_MAGIC {
        return Err(Error::invalid_argument(
            "ncclSimInfo_t magic is wrong (use NCCL_SIM_INFO_INITIALIZER)",
        ));
    }
    Ok(Some(info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_nccl_2_30() {
        assert_eq!(std::mem::size_of::<ncclConfig_t>(), 96);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, netName), 32);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, commName), 48);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, nvlinkCentricSched), 76);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, graphStreamOrdering), 92);
        assert_eq!(std::mem::size_of::<ncclSimInfo_t>(), 24);
    }

    #[test]
    fn version_codes() {
        assert_eq!(version_code(2, 28, 9), 22809);
        assert_eq!(version_code(2, 30, 7), 23007);
        assert_eq!(version_code(2, 8, 4), 2804);
    }

    #[test]
    fn old_callers_get_defaults_for_newer_fields() {
        let mut c = ncclConfig_t {
            blocking: 0,
            maxP2pPeers: 7,
            ..Default::default()
        };
        c.version = version_code(2, 28, 9);
        c.size = 80;
        // SAFETY: `c` is a full struct.
        let r = unsafe { read_raw(&c) }.unwrap();
        assert_eq!(r.blocking, 0);
        assert_eq!(r.maxP2pPeers, UNDEF_INT, "beyond the caller's size");
        c.size = 96;
        // SAFETY: as above.
        let r = unsafe { read_raw(&c) }.unwrap();
        assert_eq!(r.maxP2pPeers, UNDEF_INT, "2.30 field from a 2.28 caller");
        c.version = version_code(2, 13, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { read_raw(&c) }.unwrap().blocking, UNDEF_INT);
        c.magic = 1;
        // SAFETY: as above.
        assert!(unsafe { read_raw(&c) }.is_err());
    }
}
