//! Run-time loading of `libibverbs.so.1` and the table of functions the datapath calls.
//!
//! Symbol notes (rdma-core's `verbs.h` turns some calls into inline wrappers):
//! * `ibv_query_port` is a macro over the inline `___ibv_query_port`, which calls
//!   `verbs_context->query_port` with a size when the provider has it and otherwise the
//!   exported `ibv_query_port@IBVERBS_1.1`. Only the latter is a symbol (there is no exported
//!   `ibv_query_port_ex`), so we load `ibv_query_port` (as NCCL does) and hand it an
//!   [`IbvPortAttr`] with slack after the last known field.
//! * `ibv_reg_mr` is a macro over the inline `__ibv_reg_mr`, which calls the exported
//!   `ibv_reg_mr` for ordinary access flags and `ibv_reg_mr_iova2` (`IBVERBS_1.8`) for
//!   `IBV_ACCESS_OPTIONAL_RANGE`. Both are exported; `ibv_reg_mr` is required and
//!   `ibv_reg_mr_iova2` is loaded when present.
//! * `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline calls through
//!   `ibv_context.ops`; see [`ffi`](super::ffi) for the offsets.

use std::ffi::{c_int, CStr};
use std::sync::Arc;

use super::ffi::*;
use super::VerbsError;

/// Sonames tried in order.
pub const LIBRARY_NAMES: [&str; 2] = ["libibverbs.so.1", "libibverbs.so"];

/// The exported functions the datapath calls.
#[derive(Clone, Copy)]
pub(crate) struct Fns {
    pub get_device_list: GetDeviceListFn,
    pub free_device_list: FreeDeviceListFn,
    pub get_device_name: GetDeviceNameFn,
    pub open_device: OpenDeviceFn,
    pub close_device: CloseDeviceFn,
    pub query_device: QueryDeviceFn,
    pub query_port: QueryPortFn,
    pub query_gid: QueryGidFn,
    pub alloc_pd: AllocPdFn,
    pub dealloc_pd: DeallocPdFn,
    pub reg_mr: RegMrFn,
    pub reg_mr_iova2: Option<RegMrIova2Fn>,
    pub dereg_mr: DeregMrFn,
    pub create_cq: CreateCqFn,
    pub destroy_cq: DestroyCqFn,
    pub create_qp: CreateQpFn,
    pub destroy_qp: DestroyQpFn,
    pub modify_qp: ModifyQpFn,
}

struct Inner {
    fns: Fns,
    // Kept alive for as long as any function pointer from it can be called.
    _lib: libloading::Library,
}

/// A loaded libibverbs. Cheap to clone; the library stays loaded while any clone (or any
/// object opened through it) lives.
#[derive(Clone)]
pub struct Verbs {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verbs").finish_non_exhaustive()
    }
}

/// One RDMA device as listed by `ibv_get_device_list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Position in the device list (what [`Verbs::open`] takes).
    pub index: usize,
    /// Kernel name, e.g. `mlx5_0`.
    pub name: String,
}

fn sym<T: Copy>(lib: &libloading::Library, name: &'static str) -> Result<T, VerbsError> {
    let mut cname = Vec::with_capacity(name.len() + 1);
    cname.extend_from_slice(name.as_bytes());
    cname.push(0);
    // SAFETY: `T` is one of the `extern "C"` fn-pointer types of `ffi`, each transcribing
    // the C prototype of `name` from verbs.h; the symbol is only looked up here, and the
    // copied pointer is used only while `Inner` keeps the library loaded.
    let s = unsafe { lib.get::<T>(&cname) };
    s.map(|s| *s).map_err(|_| VerbsError::MissingSymbol(name))
}

impl Verbs {
    /// Opens libibverbs and resolves every function the datapath needs.
    /// `Err(NoLibrary)` when rdma-core is not installed.
    pub fn load() -> Result<Verbs, VerbsError> {
        let mut last = String::new();
        for name in LIBRARY_NAMES {
            // SAFETY: loading libibverbs runs its ELF constructors, which only register
            // providers and read configuration; it has no other load-time side effects.
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => return Self::from_library(lib),
                Err(e) => last = format!("{name}: {e}"),
            }
        }
        Err(VerbsError::NoLibrary(last))
    }

    fn from_library(lib: libloading::Library) -> Result<Verbs, VerbsError> {
        let fns = Fns {
            get_device_list: sym(&lib, "ibv_get_device_list")?,
            free_device_list: sym(&lib, "ibv_free_device_list")?,
            get_device_name: sym(&lib, "ibv_get_device_name")?,
            open_device: sym(&lib, "ibv_open_device")?,
            close_device: sym(&lib, "ibv_close_device")?,
            query_device: sym(&lib, "ibv_query_device")?,
            query_port: sym(&lib, "ibv_query_port")?,
            query_gid: sym(&lib, "ibv_query_gid")?,
            alloc_pd: sym(&lib, "ibv_alloc_pd")?,
            dealloc_pd: sym(&lib, "ibv_dealloc_pd")?,
            reg_mr: sym(&lib, "ibv_reg_mr")?,
            reg_mr_iova2: sym(&lib, "ibv_reg_mr_iova2").ok(),
            dereg_mr: sym(&lib, "ibv_dereg_mr")?,
            create_cq: sym(&lib, "ibv_create_cq")?,
            destroy_cq: sym(&lib, "ibv_destroy_cq")?,
            create_qp: sym(&lib, "ibv_create_qp")?,
            destroy_qp: sym(&lib, "ibv_destroy_qp")?,
            modify_qp: sym(&lib, "ibv_modify_qp")?,
        };
        Ok(Verbs {
            inner: Arc::new(Inner { fns, _lib: lib }),
        })
    }

    /// Loads the library and lists its devices: the one-call probe for "can this host use
    /// the verbs datapath". `Err(NoLibrary)` or `Err(NoRdmaDevice)` otherwise.
    pub fn probe() -> Result<(Verbs, Vec<DeviceInfo>), VerbsError> {
        let v = Verbs::load()?;
        let devs = v.devices()?;
        Ok((v, devs))
    }

    pub(crate) fn fns(&self) -> &Fns {
        &self.inner.fns
    }

    /// Lists the RDMA devices; `Err(NoRdmaDevice)` when there is none (or the kernel has no
    /// RDMA support).
    pub fn devices(&self) -> Result<Vec<DeviceInfo>, VerbsError> {
        self.with_device_list(|list| {
            Ok(list
                .iter()
                .enumerate()
                .map(|(index, &d)| DeviceInfo {
                    index,
                    name: self.device_name(d),
                })
                .collect())
        })
    }

    /// Calls `f` with the device list, freeing the list afterwards.
    pub(crate) fn with_device_list<R>(
        &self,
        f: impl FnOnce(&[*mut IbvDevice]) -> Result<R, VerbsError>,
    ) -> Result<R, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `ibv_get_device_list(int *)` writes the count through a valid pointer and
        // returns a NULL-terminated array (or NULL with errno set).
        let list = unsafe { (self.fns().get_device_list)(&mut n) };
        if list.is_null() {
            // ENOSYS: no kernel support; anything else also means nothing usable.
            return Err(VerbsError::NoRdmaDevice);
        }
        let count = usize::try_from(n).unwrap_or(0);
        let result = if count == 0 {
            Err(VerbsError::NoRdmaDevice)
        } else {
            // SAFETY: the library returned `count` valid device pointers at `list`; the slice
            // does not outlive the list, which is freed below after `f` returns.
            let devs = unsafe { std::slice::from_raw_parts(list, count) };
            f(devs)
        };
        // SAFETY: `list` came from `ibv_get_device_list` and is freed exactly once.
        unsafe { (self.fns().free_device_list)(list) };
        result
    }

    fn device_name(&self, dev: *mut IbvDevice) -> String {
        // SAFETY: `dev` is an element of a live device list; the returned string belongs to
        // the device and is copied before the list is freed.
        let p = unsafe { (self.fns().get_device_name)(dev) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-NULL `ibv_get_device_name` results are NUL-terminated C strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
