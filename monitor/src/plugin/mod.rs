//! The monitor's bridge to NVIDIA's tools: the C ABI of NCCL's profiler plugins (interface versions 4, 5 and 6, as NCCL 2.28-2.30
//! load them) and the loading of a plugin library by NCCL's name rules. Layouts and offsets
//! are in `docs/PROFILER.md`; the unit tests below pin them.
//!
//! Everything that crosses into plugin code is here: the `#[repr(C)]` descriptor types, the
//! function tables, `dlopen`/`dlsym`, and the logger handed to `init`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use crate::Error;

type Result<T> = std::result::Result<T, Error>;

/// Event type bits (`ncclProfile*`), also the bits of the activation mask.
pub mod kind {
    pub const GROUP: u64 = 1 << 0;
    pub const COLL: u64 = 1 << 1;
    pub const P2P: u64 = 1 << 2;
    pub const PROXY_OP: u64 = 1 << 3;
    pub const PROXY_STEP: u64 = 1 << 4;
    pub const PROXY_CTRL: u64 = 1 << 5;
    pub const KERNEL_CH: u64 = 1 << 6;
    pub const NET_PLUGIN: u64 = 1 << 7;
    pub const GROUP_API: u64 = 1 << 8;
    pub const COLL_API: u64 = 1 << 9;
    pub const P2P_API: u64 = 1 << 10;
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
}

/// `ncclProfilerKernelChStop`: the state that carries a kernel channel's end timestamp.
pub const STATE_KERNEL_CH_STOP: c_int = 22;
/// `ncclProfilerGroupStartApiStop` / `ncclProfilerGroupEndApiStart`.
pub const STATE_GROUP_START_API_STOP: c_int = 23;
pub const STATE_GROUP_END_API_START: c_int = 24;

/// `groupApi` member of the descriptor union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApiDescr {
    pub graph_captured: bool,
    pub group_depth: c_int,
}

/// `collApi` and `p2pApi` members (the p2p one has no `root`: see [`P2pApiDescr`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiDescr {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiDescr {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

/// `coll` member: one collective of a group.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollDescr {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    /// Absent in version 4, where the descriptor ends before it.
    pub parent_group: *mut c_void,
}

/// `p2p` member: one send or receive of a group.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pDescr {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    /// Absent in version 4.
    pub parent_group: *mut c_void,
}

/// `kernelCh` member: one channel of the operation's device work, `p_timer` its start in
/// nanoseconds.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChDescr {
    pub channel_id: u8,
    pub p_timer: u64,
}

/// The descriptor union. Version 6 adds CE members, the largest of which is 88 bytes; the
/// padding member makes ours that size so a version-6 plugin may read any member.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnion {
    pub group_api: GroupApiDescr,
    pub coll_api: CollApiDescr,
    pub p2p_api: P2pApiDescr,
    pub coll: CollDescr,
    pub p2p: P2pDescr,
    pub kernel_ch: KernelChDescr,
    pad: [u64; 11],
}

/// `ncclProfilerEventDescr_v6_t` (and `_v5_t`, whose members are a prefix of it). Version 4
/// has a `uint8_t` type at offset 0: on a little-endian machine the low byte of our `u64` is
/// that byte, and every other member sits at the same offset.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescr {
    pub kind: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnion,
}

impl EventDescr {
    /// A descriptor of `kind` with every other byte zero, as NCCL builds them.
    pub fn new(kind: u64, parent_obj: *mut c_void, rank: c_int) -> EventDescr {
        EventDescr {
            kind,
            parent_obj,
            rank,
            u: DescrUnion { pad: [0; 11] },
        }
    }
}

/// `ncclProfilerEventStateArgs_v5_t` (also v6's): an 8-byte union; libccl only sends
/// `kernelCh.pTimer`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateArgs {
    pub p_timer: u64,
}

/// `ncclDebugLogger_t`; the function behind it is C (variadic), in `logger.c`.
pub type Logger =
    unsafe extern "C" fn(c_int, std::ffi::c_ulong, *const c_char, c_int, *const c_char, ...);

type Sink = extern "C" fn(c_int, std::ffi::c_ulong, *const c_char, c_int, *const c_char);

extern "C" {
    fn ccl_profiler_logger(
        level: c_int,
        flags: std::ffi::c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    );
    fn ccl_profiler_set_sink(sink: Sink);
}

type InitV56 = unsafe extern "C" fn(
    *mut *mut c_void,
    u64,
    *mut c_int,
    *const c_char,
    c_int,
    c_int,
    c_int,
    Logger,
) -> c_int;
type InitV4 = unsafe extern "C" fn(
    *mut *mut c_void,
    *mut c_int,
    *const c_char,
    u64,
    c_int,
    c_int,
    c_int,
    Logger,
) -> c_int;
type StartEvent = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut EventDescr) -> c_int;
type StopEvent = unsafe extern "C" fn(*mut c_void) -> c_int;
type RecordState = unsafe extern "C" fn(*mut c_void, c_int, *mut StateArgs) -> c_int;
type Finalize = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `ncclProfiler_v5_t` / `_v6_t` (the same table; only the descriptor grew).
#[repr(C)]
struct TableV56 {
    name: *const c_char,
    init: Option<InitV56>,
    start_event: Option<StartEvent>,
    stop_event: Option<StopEvent>,
    record_event_state: Option<RecordState>,
    finalize: Option<Finalize>,
}

/// `ncclProfiler_v4_t`: `init` takes its arguments in another order.
#[repr(C)]
struct TableV4 {
    name: *const c_char,
    init: Option<InitV4>,
    start_event: Option<StartEvent>,
    stop_event: Option<StopEvent>,
    record_event_state: Option<RecordState>,
    finalize: Option<Finalize>,
}

#[derive(Clone, Copy)]
enum InitFn {
    V56(InitV56),
    V4(InitV4),
}

/// A plugin's communicator context or event handle, exactly as the plugin returned it (or
/// null: none), so that only values the plugin made are handed back to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle(*mut c_void);

// SAFETY: an opaque pointer the plugin gave us, only handed back to it; plugins are called
// from any thread, as NCCL calls them from its API and proxy threads.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    pub const NULL: Handle = Handle(std::ptr::null_mut());

    /// The pointer, for a descriptor's parent fields.
    pub fn as_ptr(self) -> *mut c_void {
        self.0
    }

    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}

/// A loaded plugin: its version, name and functions. The library stays loaded for the rest
/// of the process (plugins may keep threads and pointers into themselves until exit).
pub struct Plugin {
    _lib: libloading::Library,
    pub version: u32,
    pub name: String,
    pub path: String,
    init: InitFn,
    start_event: StartEvent,
    stop_event: StopEvent,
    record_event_state: RecordState,
    finalize: Finalize,
}

// SAFETY: the table holds plain C function pointers; NCCL calls them from any thread (API
// threads, proxy threads), so a plugin must accept that.
unsafe impl Send for Plugin {}
// SAFETY: as above.
unsafe impl Sync for Plugin {}

/// The names NCCL tries for `NCCL_PROFILER_PLUGIN` (`None`: unset), in order. `none` loads
/// nothing.
pub fn candidate_names(setting: Option<&str>) -> Vec<String> {
    match setting.map(str::trim).filter(|s| !s.is_empty()) {
        None => vec!["libnccl-profiler.so".into()],
        Some(s) if s.eq_ignore_ascii_case("none") => Vec::new(),
        Some(s) => {
            let mut names = vec![s.to_string()];
            // A bare name (not a path, not already a library file name) is a suffix:
            // `inspector` -> `libnccl-profiler-inspector.so`.
            let library_name = s.starts_with("lib") && s.ends_with(".so");
            if !s.contains('/') && !library_name {
                names.push(format!("libnccl-profiler-{s}.so"));
            }
            names
        }
    }
}

impl Plugin {
    /// Opens the first candidate that loads and takes its newest table (v6, v5, v4).
    pub fn load(setting: Option<&str>) -> Result<Plugin> {
        let names = candidate_names(setting);
        let mut why = Vec::new();
        for name in &names {
            // SAFETY: loading a library runs its initialisers; loading the plugin the user
            // named is exactly what NCCL_PROFILER_PLUGIN asks for.
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => return Plugin::from_library(lib, name),
                Err(e) => why.push(format!("{name}: {e}")),
            }
        }
        Err(Error::plugin(format!(
            "no profiler plugin loaded ({})",
            why.join("; ")
        )))
    }

    fn from_library(lib: libloading::Library, path: &str) -> Result<Plugin> {
        for (version, symbol) in [(6u32, &b"ncclProfiler_v6\0"[..]), (5, b"ncclProfiler_v5\0")] {
            // SAFETY: the symbol, when present, is a `ncclProfiler_v5_t`/`_v6_t` struct (the
            // plugin ABI); we read its fields once, here.
            let table = unsafe { lib.get::<*const TableV56>(symbol) };
            if let Ok(table) = table {
                // SAFETY: as above; a null symbol address is refused by `read_table`.
                let t = unsafe { read_table(*table) }?;
                let (name, init, start, stop, record, fin) = (
                    t.name,
                    t.init.map(InitFn::V56),
                    t.start_event,
                    t.stop_event,
                    t.record_event_state,
                    t.finalize,
                );
                return Plugin::assemble(lib, path, version, name, init, start, stop, record, fin);
            }
        }
        // SAFETY: as above, for the `ncclProfiler_v4_t` layout.
        if let Ok(table) = unsafe { lib.get::<*const TableV4>(b"ncclProfiler_v4\0") } {
            // SAFETY: as above.
            let t = unsafe { read_table(*table) }?;
            let (name, init, start, stop, record, fin) = (
                t.name,
                t.init.map(InitFn::V4),
                t.start_event,
                t.stop_event,
                t.record_event_state,
                t.finalize,
            );
            return Plugin::assemble(lib, path, 4, name, init, start, stop, record, fin);
        }
        Err(Error::plugin(format!(
            "{path}: exports no profiler interface libccl supports (ncclProfiler_v6, _v5, _v4)"
        )))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        lib: libloading::Library,
        path: &str,
        version: u32,
        name: *const c_char,
        init: Option<InitFn>,
        start: Option<StartEvent>,
        stop: Option<StopEvent>,
        record: Option<RecordState>,
        fin: Option<Finalize>,
    ) -> Result<Plugin> {
        let missing = || Error::plugin(format!("{path}: a profiler function is NULL"));
        let name = if name.is_null() {
            String::from("(unnamed)")
        } else {
            // SAFETY: the plugin's name is a NUL-terminated string in its data.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(Plugin {
            _lib: lib,
            version,
            name,
            path: path.to_string(),
            init: init.ok_or_else(missing)?,
            start_event: start.ok_or_else(missing)?,
            stop_event: stop.ok_or_else(missing)?,
            record_event_state: record.ok_or_else(missing)?,
            finalize: fin.ok_or_else(missing)?,
        })
    }

    /// The plugin's `init` for one communicator: its context and activation mask, or the
    /// plugin's error code.
    pub fn init(
        &self,
        comm_id: u64,
        comm_name: &CStr,
        n_nodes: i32,
        nranks: i32,
        rank: i32,
    ) -> std::result::Result<(Handle, u64), i32> {
        ccl_sink_installed();
        let mut ctx: *mut c_void = std::ptr::null_mut();
        let mut mask: c_int = 0;
        let logger: Logger = ccl_profiler_logger;
        // SAFETY: every pointer is valid for the call; the name outlives the communicator
        // (the caller keeps it); the plugin writes its context and mask.
        let r = unsafe {
            match self.init {
                InitFn::V56(f) => f(
                    &mut ctx,
                    comm_id,
                    &mut mask,
                    comm_name.as_ptr(),
                    n_nodes,
                    nranks,
                    rank,
                    logger,
                ),
                InitFn::V4(f) => f(
                    &mut ctx,
                    &mut mask,
                    comm_name.as_ptr(),
                    comm_id,
                    n_nodes,
                    nranks,
                    rank,
                    logger,
                ),
            }
        };
        if r != 0 {
            return Err(r);
        }
        // Version 4 knows only the low eight event types.
        let mask = if self.version == 4 {
            (mask as u32 as u64) & 0xff
        } else {
            mask as u32 as u64
        };
        Ok((Handle(ctx), mask))
    }

    /// `startEvent`: the plugin's handle for the event (null when it does not track it).
    pub fn start(&self, ctx: Handle, descr: &mut EventDescr) -> Handle {
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: `descr` is a complete, zero-padded descriptor of the size every version
        // reads; the context is the one `init` returned for this communicator.
        let _ = unsafe { (self.start_event)(ctx.0, &mut handle, descr) };
        Handle(handle)
    }

    /// `stopEvent` of a non-null handle.
    pub fn stop(&self, handle: Handle) {
        if !handle.is_null() {
            // SAFETY: a handle this plugin returned from `startEvent`, stopped once.
            let _ = unsafe { (self.stop_event)(handle.0) };
        }
    }

    /// `recordEventState(handle, ncclProfilerKernelChStop, {pTimer})`.
    pub fn record_kernel_stop(&self, handle: Handle, p_timer: u64) {
        self.record(handle, STATE_KERNEL_CH_STOP, p_timer);
    }

    /// `recordEventState` with a state whose arguments are `pTimer` (or ignored).
    pub fn record(&self, handle: Handle, state: c_int, p_timer: u64) {
        if !handle.is_null() {
            let mut args = StateArgs { p_timer };
            // SAFETY: a live handle of this plugin; the arguments outlive the call.
            let _ = unsafe { (self.record_event_state)(handle.0, state, &mut args) };
        }
    }

    /// `finalize` of a communicator's context.
    pub fn finalize(&self, ctx: Handle) {
        // SAFETY: the context `init` returned, finalised once after its last event.
        let _ = unsafe { (self.finalize)(ctx.0) };
    }
}

/// Reads a plugin's function table.
///
/// # Safety
/// `table` is null or points at a live table of type `T`.
unsafe fn read_table<T>(table: *const T) -> Result<&'static T> {
    // SAFETY: per the contract; the library is never unloaded, so the table lives as long
    // as the process.
    unsafe { table.as_ref() }.ok_or_else(|| Error::plugin("profiler symbol is NULL"))
}

/// Routes the plugin's log lines into libccl's log (`NCCL_DEBUG`), as NCCL's own logger does.
extern "C" fn sink(
    level: c_int,
    _flags: std::ffi::c_ulong,
    file: *const c_char,
    line: c_int,
    msg: *const c_char,
) {
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: the C logger passes NUL-terminated strings (its buffer, the caller's
            // file name).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let (file, msg) = (text(file), text(msg));
    // NCCL's levels: 1 VERSION, 2 WARN, 3 INFO, 4 ABORT, 5 TRACE.
    let _ = std::panic::catch_unwind(|| match level {
        2 | 4 => tracing::warn!("profiler plugin {file}:{line}: {msg}"),
        3 => tracing::info!("profiler plugin {file}:{line}: {msg}"),
        5 => tracing::trace!("profiler plugin {file}:{line}: {msg}"),
        _ => tracing::debug!("profiler plugin {file}:{line}: {msg}"),
    });
}

fn ccl_sink_installed() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: installs a plain function pointer; the C side reads it atomically enough (a
    // pointer-sized store before any plugin can log, since `init` comes after).
    ONCE.call_once(|| unsafe { ccl_profiler_set_sink(sink) });
}

/// A C string for a communicator name (interior NULs dropped).
pub fn c_name(name: &str) -> CString {
    CString::new(name.replace('\0', "")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn descriptor_layout_matches_the_c_headers() {
        assert_eq!(offset_of!(EventDescr, parent_obj), 8);
        assert_eq!(offset_of!(EventDescr, rank), 16);
        assert_eq!(offset_of!(EventDescr, u), 24);
        assert_eq!(size_of::<EventDescr>(), 112);
        assert_eq!(offset_of!(CollDescr, func), 8);
        assert_eq!(offset_of!(CollDescr, count), 32);
        assert_eq!(offset_of!(CollDescr, root), 40);
        assert_eq!(offset_of!(CollDescr, datatype), 48);
        assert_eq!(offset_of!(CollDescr, n_channels), 56);
        assert_eq!(offset_of!(CollDescr, n_warps), 57);
        assert_eq!(offset_of!(CollDescr, algo), 64);
        assert_eq!(offset_of!(CollDescr, proto), 72);
        assert_eq!(offset_of!(CollDescr, parent_group), 80);
        assert_eq!(offset_of!(P2pDescr, count), 24);
        assert_eq!(offset_of!(P2pDescr, peer), 32);
        assert_eq!(offset_of!(P2pDescr, n_channels), 36);
        assert_eq!(offset_of!(P2pDescr, parent_group), 40);
        assert_eq!(offset_of!(KernelChDescr, p_timer), 8);
        assert_eq!(offset_of!(CollApiDescr, root), 24);
        assert_eq!(offset_of!(CollApiDescr, graph_captured), 40);
        assert_eq!(offset_of!(P2pApiDescr, graph_captured), 32);
        assert_eq!(offset_of!(GroupApiDescr, group_depth), 4);
        assert_eq!(size_of::<StateArgs>(), 8);
    }

    #[test]
    fn names_follow_nccls_rules() {
        assert_eq!(candidate_names(None), vec!["libnccl-profiler.so"]);
        assert!(candidate_names(Some("none")).is_empty());
        assert!(candidate_names(Some("NONE")).is_empty());
        assert_eq!(
            candidate_names(Some("inspector")),
            vec!["inspector", "libnccl-profiler-inspector.so"]
        );
        assert_eq!(candidate_names(Some("/x/libp.so")), vec!["/x/libp.so"]);
        assert_eq!(candidate_names(Some("libp.so")), vec!["libp.so"]);
        assert_eq!(candidate_names(Some("./p.so")), vec!["./p.so"]);
    }

    #[test]
    fn a_missing_plugin_is_an_error_not_a_panic() {
        let e = Plugin::load(Some("/nonexistent/libnccl-profiler-x.so"));
        assert!(e.is_err());
    }
}
