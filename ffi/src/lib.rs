//! The NCCL C ABI over libccl: the `libnccl.so.2` cdylib.
//!
//! Every `nccl*` function of `include/nccl.h` is exported here together with its `pnccl*`
//! twin. Each entry point catches unwinding (a panic never crosses into C), turns the
//! library's errors into `ncclResult_t` in one place ([`result_code`]) and keeps the message
//! for `ncclGetLastError`.
//!
//! # Safety
//! All exported functions are `unsafe extern "C"`: callers must uphold the contracts of
//! `nccl.h` (pointers valid for the sizes the call implies, communicators not used after
//! destroy). Arguments that can be checked (NULL, ranges, overflow) are checked.
#![allow(clippy::missing_safety_doc)]
#![allow(non_snake_case, non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use ccl::{params, Comm, Error, ErrorKind, Reduction, Scalar, Task, TaskKind, UniqueId};
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};
use parking_lot::Mutex;

pub mod config;
pub mod ext;

pub type ncclResult_t = c_int;
pub const NCCL_SUCCESS: ncclResult_t = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: ncclResult_t = 1;
pub const NCCL_SYSTEM_ERROR: ncclResult_t = 2;
pub const NCCL_INTERNAL_ERROR: ncclResult_t = 3;
pub const NCCL_INVALID_ARGUMENT: ncclResult_t = 4;
pub const NCCL_INVALID_USAGE: ncclResult_t = 5;
pub const NCCL_REMOTE_ERROR: ncclResult_t = 6;
pub const NCCL_IN_PROGRESS: ncclResult_t = 7;
pub const NCCL_TIMEOUT: ncclResult_t = 8;
/// `ncclCommWindowRegister`'s flag: every rank registers a window of this size in the same
/// order, and collectives use buffers at one offset of it (nccl.h).
pub const NCCL_WIN_COLL_SYMMETRIC: c_int = 1;
const NUM_RESULTS: ncclResult_t = 9;

/// `ncclUniqueId`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    pub internal: [c_char; 128],
}

/// What `ncclComm_t` points at.
pub struct CommHandle {
    comm: Comm,
}
pub type ncclComm_t = *mut CommHandle;

/// The one place library errors become `ncclResult_t`.
pub fn result_code(kind: ErrorKind) -> ncclResult_t {
    match kind {
        ErrorKind::InvalidArgument => NCCL_INVALID_ARGUMENT,
        ErrorKind::InvalidUsage => NCCL_INVALID_USAGE,
        ErrorKind::System => NCCL_SYSTEM_ERROR,
        ErrorKind::Remote => NCCL_REMOTE_ERROR,
        ErrorKind::Internal => NCCL_INTERNAL_ERROR,
        ErrorKind::InProgress => NCCL_IN_PROGRESS,
        ErrorKind::Cuda => NCCL_UNHANDLED_CUDA_ERROR,
    }
}

fn last_error_global() -> &'static Mutex<String> {
    static LAST: OnceLock<Mutex<String>> = OnceLock::new();
    LAST.get_or_init(|| Mutex::new(String::new()))
}

/// Distinct texts `ncclGetLastError` keeps for the life of the process; past them it writes into
/// one buffer per thread, as NCCL writes into its one static buffer.
const KEPT_MESSAGES: usize = 4096;

thread_local! {
    /// Where `ncclGetLastError` writes once `KEPT_MESSAGES` texts are kept: its address stays
    /// valid as long as the thread, its text until the thread's next call.
    static LAST_RETURNED: RefCell<[u8; 2048]> = const { RefCell::new([0; 2048]) };
}

/// A pointer to `msg` as a C string that stays valid, text and all, for the life of the
/// process. NCCL's `ncclGetLastError` returns a static buffer, so callers keep the pointer
/// across later calls (tests/gpu/mismatch.c printed one communicator's message after asking for
/// another's, and read freed memory when each call replaced the last string). Error texts are
/// few and repeat, so each distinct one is kept once.
fn lasting_c_str(msg: &str) -> *const c_char {
    static KEPT: OnceLock<Mutex<std::collections::HashMap<String, CString>>> = OnceLock::new();
    let mut kept = KEPT.get_or_init(Default::default).lock();
    if let Some(c) = kept.get(msg) {
        return c.as_ptr();
    }
    if kept.len() < KEPT_MESSAGES {
        let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // The text lives in the CString's heap allocation, which moving it into the map leaves
        // where it is, and entries are never removed.
        let at = c.as_ptr();
        kept.insert(msg.to_string(), c);
        return at;
    }
    drop(kept);
    LAST_RETURNED.with(|buf| {
        let mut buf = buf.borrow_mut();
        let n = msg.len().min(buf.len() - 1);
        buf[..n].copy_from_slice(&msg.as_bytes()[..n]);
        buf[n] = 0;
        // Interior NULs would cut the text short; NCCL's texts have none either.
        for b in &mut buf[..n] {
            if *b == 0 {
                *b = b' ';
            }
        }
        buf.as_ptr().cast()
    })
}

fn set_last_error(msg: &str) {
    // A program's first call may be the one that fails, before anything installed the log.
    ccl::log::init();
    tracing::warn!("{msg}");
    *last_error_global().lock() = msg.to_string();
}

/// Runs `f`, never letting a panic out, and maps its outcome.
fn guard(f: impl FnOnce() -> ccl::Result<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            if e.kind != ErrorKind::InProgress {
                set_last_error(&e.to_string());
            }
            result_code(e.kind)
        }
        Err(_) => {
            set_last_error("libccl internal error: a panic was caught at the C ABI boundary");
            NCCL_INTERNAL_ERROR
        }
    }
}

/// Like [`guard`] for calls inside a group: an error also fails the group's end.
fn guard_op(f: impl FnOnce() -> ccl::Result<()>) -> ncclResult_t {
    guard(|| {
        f().inspect_err(|e| {
            if ccl::group::in_group() {
                ccl::group::record_error(e);
            }
        })
    })
}

unsafe fn comm_ref<'a>(comm: ncclComm_t) -> ccl::Result<&'a Comm> {
    if comm.is_null() {
        return Err(Error::invalid_argument("comm is NULL"));
    }
    // SAFETY: non-NULL communicators come from our own Box in init and stay valid until
    // destroy/abort (the caller's contract).
    Ok(unsafe { &(*comm).comm })
}

fn out<'a, T>(p: *mut T, what: &str) -> ccl::Result<&'a mut T> {
    // SAFETY: checked non-NULL; the caller promises it points at a writable T.
    unsafe { p.as_mut() }.ok_or_else(|| Error::invalid_argument(format!("{what} is NULL")))
}

fn dtype(dt: c_int) -> ccl::Result<DataType> {
    DataType::from_raw(dt).ok_or_else(|| Error::invalid_argument(format!("invalid datatype {dt}")))
}

fn reduction(comm: &Comm, op: c_int, dt: DataType) -> ccl::Result<Reduction> {
    Ok(match op {
        0 => Reduction::Plain(ReduceKind::Sum),
        1 => Reduction::Plain(ReduceKind::Prod),
        2 => Reduction::Plain(ReduceKind::Max),
        3 => Reduction::Plain(ReduceKind::Min),
        4 => Reduction::Avg,
        _ => match comm.premul(op) {
            Some((scalar, created_for)) if created_for == dt => Reduction::PreMulSum(scalar),
            Some((_, created_for)) => {
                return Err(Error::invalid_argument(format!(
                    "reduction op {op} was created for {} but used with {}",
                    created_for.name(),
                    dt.name()
                )))
            }
            None => {
                return Err(Error::invalid_argument(format!(
                    "invalid reduction op {op}"
                )))
            }
        },
    })
}

fn rank_arg(v: c_int, what: &str, comm: &Comm) -> ccl::Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&r| r < comm.nranks())
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{what} {v} is not a rank of this {}-rank communicator",
                comm.nranks()
            ))
        })
}

#[allow(clippy::too_many_arguments)]
unsafe fn enqueue(
    comm: ncclComm_t,
    kind: impl FnOnce(&Comm) -> ccl::Result<TaskKind>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: Option<c_int>,
    stream: *mut c_void,
) -> ncclResult_t {
    guard_op(|| {
        // SAFETY: forwarded caller contract.
        let comm = unsafe { comm_ref(comm) }?;
        let dt = dtype(dt)?;
        let red = match op {
            Some(op) => reduction(comm, op, dt)?,
            None => Reduction::Plain(ReduceKind::Sum),
        };
        let kind = kind(comm)?;
        comm.enqueue(Task {
            kind,
            send: send as usize,
            recv: recv as usize,
            count,
            dtype: dt,
            red,
            stream: stream as usize,
            fold: false,
        })
    })
}

fn coll(c: Collective) -> impl FnOnce(&Comm) -> ccl::Result<TaskKind> {
    move |_| Ok(TaskKind::Coll(c))
}

fn rooted(root: c_int, f: fn(usize) -> Collective) -> impl FnOnce(&Comm) -> ccl::Result<TaskKind> {
    move |comm| Ok(TaskKind::Coll(f(rank_arg(root, "root", comm)?)))
}

#[macro_export]
macro_rules! api {
    ($(fn $name:ident / $pname:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty $body:block)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body
            #[no_mangle]
            pub unsafe extern "C" fn $pname($($arg: $ty),*) -> $ret {
                // SAFETY: same contract as the function it forwards to.
                unsafe { $name($($arg),*) }
            }
        )*
    };
}

fn new_handle(comm: Comm) -> ncclComm_t {
    Box::into_raw(Box::new(CommHandle { comm }))
}

unsafe fn free_handle(comm: ncclComm_t) {
    // SAFETY: `comm` came from `new_handle` and the caller gives it up (destroy/abort).
    drop(unsafe { Box::from_raw(comm) });
}

fn to_id(id: &ncclUniqueId) -> UniqueId {
    let mut b = [0u8; 128];
    for (d, s) in b.iter_mut().zip(id.internal.iter()) {
        *d = *s as u8;
    }
    UniqueId(b)
}

fn from_id(id: &UniqueId) -> ncclUniqueId {
    let mut out = ncclUniqueId { internal: [0; 128] };
    for (d, s) in out.internal.iter_mut().zip(id.0.iter()) {
        *d = *s as c_char;
    }
    out
}

unsafe fn init_rank_config(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    id: &ncclUniqueId,
    rank: c_int,
    config: *const config::ncclConfig_t,
) -> ncclResult_t {
    let mut in_progress = false;
    let r = guard(|| {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        // SAFETY: forwarded caller contract on `config`.
        let cfg = unsafe { config::read(config) }?;
        let blocking = cfg.blocking;
        let (comm, uid) = Comm::prepare(nranks, &to_id(id), rank, cfg)?;
        in_progress = start_init(slot, comm, uid, blocking)?;
        Ok(())
    });
    still_running(r, in_progress)
}

/// A split's, shrink's or grow's configuration: the caller's, or its parent's when NULL.
///
/// # Safety
/// `config` is NULL or points at a readable `ncclConfig_t` (as `config::read`).
unsafe fn child_config(
    parent: &Comm,
    config: *const config::ncclConfig_t,
) -> ccl::Result<ccl::CommConfig> {
    if config.is_null() {
        return Ok(parent.0.config.clone());
    }
    // SAFETY: the caller's contract.
    unsafe { config::read(config) }
}

/// `ncclInProgress` for a call that succeeded while its init still runs, else its result.
fn still_running(r: ncclResult_t, in_progress: bool) -> ncclResult_t {
    if r == NCCL_SUCCESS && in_progress {
        NCCL_IN_PROGRESS
    } else {
        r
    }
}

/// Runs a prepared communicator's init (at the group's end inside a group, on a thread of its
/// own when non-blocking) and hands it out through `slot`; true while it is still running.
fn start_init(
    slot: &mut ncclComm_t,
    comm: Comm,
    uid: ccl::UniqueId,
    blocking: bool,
) -> ccl::Result<bool> {
    let mut in_progress = false;
    if !ccl::group::defer_init(&comm, uid) {
        if blocking {
            comm.run_init(uid)?;
        } else {
            comm.spawn_init(uid)?;
            in_progress = true;
        }
    }
    *slot = new_handle(comm);
    Ok(in_progress)
}

fn unsupported(what: &str) -> ncclResult_t {
    guard(|| {
        Err(Error::invalid_usage(format!(
            "{what} is not supported by libccl {} yet",
            ccl::VERSION_STRING
        )))
    })
}

api! {
fn ncclGetVersion / pncclGetVersion(version: *mut c_int) -> ncclResult_t {
    guard(|| {
        *out(version, "version")? = ccl::NCCL_VERSION_CODE;
        Ok(())
    })
}

fn ncclGetUniqueId / pncclGetUniqueId(unique_id: *mut ncclUniqueId) -> ncclResult_t {
    guard(|| {
        let slot = out(unique_id, "uniqueId")?;
        *slot = from_id(&ccl::get_unique_id()?);
        Ok(())
    })
}

fn ncclCommInitRank / pncclCommInitRank(newcomm: *mut ncclComm_t, nranks: c_int, comm_id: ncclUniqueId, rank: c_int) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { init_rank_config(newcomm, nranks, &comm_id, rank, std::ptr::null()) }
}

fn ncclCommInitRankConfig / pncclCommInitRankConfig(newcomm: *mut ncclComm_t, nranks: c_int, comm_id: ncclUniqueId, rank: c_int, config: *mut config::ncclConfig_t) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { init_rank_config(newcomm, nranks, &comm_id, rank, config) }
}

fn ncclCommInitRankScalable / pncclCommInitRankScalable(newcomm: *mut ncclComm_t, nranks: c_int, myrank: c_int, n_id: c_int, comm_ids: *mut ncclUniqueId, config: *mut config::ncclConfig_t) -> ncclResult_t {
    if n_id < 1 || comm_ids.is_null() {
        return guard(|| Err(Error::invalid_argument(format!("ncclCommInitRankScalable: {n_id} ids at {comm_ids:?}"))));
    }
    // Every rank holds all ids, so the first one is a root every rank can reach; the other
    // roots exit unused after the bootstrap timeout.
    // SAFETY: checked non-NULL; the caller passes n_id >= 1 ids.
    let first = unsafe { *comm_ids };
    // SAFETY: forwarded caller contract.
    unsafe { init_rank_config(newcomm, nranks, &first, myrank, config) }
}

fn ncclCommInitAll / pncclCommInitAll(comms: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    guard(|| {
        if comms.is_null() {
            return Err(Error::invalid_argument("comms is NULL"));
        }
        let n = usize::try_from(ndev).ok().filter(|&n| n > 0).ok_or_else(|| Error::invalid_argument(format!("ndev {ndev} must be positive")))?;
        let devs = if devlist.is_null() {
            None
        } else {
            // SAFETY: a non-NULL devlist holds ndev device ordinals (caller contract).
            Some(unsafe { std::slice::from_raw_parts(devlist, n) })
        };
        let all = ccl::init_all(n, devs)?;
        for (i, c) in all.into_iter().enumerate() {
            // SAFETY: the caller provides an array of ndev communicators.
            unsafe { *comms.add(i) = new_handle(c) };
        }
        Ok(())
    })
}

fn ncclCommSplit / pncclCommSplit(comm: ncclComm_t, color: c_int, key: c_int, newcomm: *mut ncclComm_t, config: *mut config::ncclConfig_t) -> ncclResult_t {
    guard(|| {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        // SAFETY: forwarded caller contract.
        let parent = unsafe { comm_ref(comm) }?;
        // SAFETY: forwarded caller contract on `config`.
        let cfg = unsafe { child_config(parent, config) }?;
        if let Some(child) = parent.split(color, key, cfg)? {
            *slot = new_handle(child);
        }
        Ok(())
    })
}

fn ncclCommFinalize / pncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { comm_ref(comm) }?.finalize())
}

fn ncclCommDestroy / pncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    if comm.is_null() {
        return NCCL_SUCCESS;
    }
    let r = guard(|| {
        // SAFETY: forwarded caller contract.
        unsafe { comm_ref(comm) }?.destroy();
        Ok(())
    });
    // SAFETY: the caller gives the handle up.
    unsafe { free_handle(comm) };
    r
}

fn ncclCommAbort / pncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    if comm.is_null() {
        return NCCL_SUCCESS;
    }
    let r = guard(|| {
        // SAFETY: forwarded caller contract.
        unsafe { comm_ref(comm) }?.abort();
        Ok(())
    });
    // SAFETY: the caller gives the handle up.
    unsafe { free_handle(comm) };
    r
}

fn ncclCommGetAsyncError / pncclCommGetAsyncError(comm: ncclComm_t, async_error: *mut ncclResult_t) -> ncclResult_t {
    guard(|| {
        let slot = out(async_error, "asyncError")?;
        // SAFETY: forwarded caller contract.
        let c = unsafe { comm_ref(comm) }?;
        *slot = match c.async_error() {
            Ok(()) => NCCL_SUCCESS,
            Err(e) => result_code(e.kind),
        };
        Ok(())
    })
}

fn ncclCommCount / pncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    guard(|| {
        let slot = out(count, "count")?;
        // SAFETY: forwarded caller contract.
        *slot = unsafe { comm_ref(comm) }?.nranks() as c_int;
        Ok(())
    })
}

fn ncclCommCuDevice / pncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    guard(|| {
        let slot = out(device, "device")?;
        // SAFETY: forwarded caller contract.
        *slot = unsafe { comm_ref(comm) }?.0.cuda_dev;
        Ok(())
    })
}

fn ncclCommUserRank / pncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    guard(|| {
        let slot = out(rank, "rank")?;
        // SAFETY: forwarded caller contract.
        *slot = unsafe { comm_ref(comm) }?.rank() as c_int;
        Ok(())
    })
}

fn ncclGetErrorString / pncclGetErrorString(result: ncclResult_t) -> *const c_char {
    let s: &'static CStr = match result {
        NCCL_SUCCESS => c"no error",
        NCCL_UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        NCCL_SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        NCCL_INTERNAL_ERROR => c"internal error - please report this issue to the libccl developers",
        NCCL_INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        NCCL_INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        NCCL_REMOTE_ERROR => c"remote process exited or there was a network error",
        NCCL_IN_PROGRESS => c"NCCL operation in progress",
        NCCL_TIMEOUT => c"operation timed out",
        _ => c"unknown result code",
    };
    let _ = NUM_RESULTS;
    s.as_ptr()
}

fn ncclGetLastError / pncclGetLastError(comm: ncclComm_t) -> *const c_char {
    let msg = catch_unwind(AssertUnwindSafe(|| {
        // A communicator's own failure is the most useful answer for it.
        // SAFETY: forwarded caller contract.
        let from_comm = unsafe { comm_ref(comm) }.ok().and_then(|c| c.async_error().err()).filter(|e| e.kind != ErrorKind::InProgress);
        match from_comm {
            Some(e) => e.to_string(),
            None => last_error_global().lock().clone(),
        }
    }))
    .unwrap_or_default();
    lasting_c_str(&msg)
}

fn ncclResetDebugInit / pncclResetDebugInit() -> () {
    let _ = catch_unwind(params::reset_cache);
}

fn ncclGroupStart / pncclGroupStart() -> ncclResult_t {
    guard(|| {
        ccl::group::start();
        Ok(())
    })
}

fn ncclGroupEnd / pncclGroupEnd() -> ncclResult_t {
    guard(ccl::group::end)
}

fn ncclGroupSimulateEnd / pncclGroupSimulateEnd(sim_info: *mut config::ncclSimInfo_t) -> ncclResult_t {
    guard(|| {
        let est = ccl::group::simulate_end()?;
        // SAFETY: forwarded caller contract.
        if let Some(info) = unsafe { config::sim_info(sim_info) }? {
            info.estimatedTime = est as f32;
        }
        Ok(())
    })
}

fn ncclAllReduce / pncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, coll(Collective::AllReduce), sendbuff, recvbuff, count, datatype, Some(op), stream) }
}

fn ncclBroadcast / pncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, rooted(root, |root| Collective::Broadcast { root }), sendbuff, recvbuff, count, datatype, None, stream) }
}

fn ncclBcast / pncclBcast(buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, rooted(root, |root| Collective::Broadcast { root }), buff, buff, count, datatype, None, stream) }
}

fn ncclReduce / pncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, rooted(root, |root| Collective::Reduce { root }), sendbuff, recvbuff, count, datatype, Some(op), stream) }
}

fn ncclAllGather / pncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, coll(Collective::AllGather), sendbuff, recvbuff, sendcount, datatype, None, stream) }
}

fn ncclReduceScatter / pncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, coll(Collective::ReduceScatter), sendbuff, recvbuff, recvcount, datatype, Some(op), stream) }
}

fn ncclAlltoAll / pncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, coll(Collective::AlltoAll), sendbuff, recvbuff, count, datatype, None, stream) }
}

fn ncclGather / pncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, rooted(root, |root| Collective::Gather { root }), sendbuff, recvbuff, count, datatype, None, stream) }
}

fn ncclScatter / pncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, rooted(root, |root| Collective::Scatter { root }), sendbuff, recvbuff, count, datatype, None, stream) }
}

fn ncclSend / pncclSend(sendbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, move |c| Ok(TaskKind::Send { peer: rank_arg(peer, "peer", c)? }), sendbuff, std::ptr::null_mut(), count, datatype, None, stream) }
}

fn ncclRecv / pncclRecv(recvbuff: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe { enqueue(comm, move |c| Ok(TaskKind::Recv { peer: rank_arg(peer, "peer", c)? }), std::ptr::null(), recvbuff, count, datatype, None, stream) }
}

fn ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(op: *mut c_int, scalar: *mut c_void, datatype: c_int, residence: c_int, comm: ncclComm_t) -> ncclResult_t {
    guard(|| {
        let slot = out(op, "op")?;
        // SAFETY: forwarded caller contract.
        let c = unsafe { comm_ref(comm) }?;
        let dt = dtype(datatype)?;
        if scalar.is_null() {
            return Err(Error::invalid_argument("scalar is NULL"));
        }
        let s = match residence {
            0 => Scalar::Device(scalar as usize),
            1 => {
                let mut b = [0u8; 8];
                // SAFETY: a host-immediate scalar points at one element of `dt`.
                unsafe { std::ptr::copy_nonoverlapping(scalar as *const u8, b.as_mut_ptr(), dt.size()) };
                Scalar::Immediate(b)
            }
            r => return Err(Error::invalid_argument(format!("invalid scalar residence {r}"))),
        };
        *slot = c.create_premul(s, dt)?;
        Ok(())
    })
}

fn ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: ncclComm_t) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { comm_ref(comm) }?.destroy_premul(op))
}

fn ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    guard(|| {
        let slot = out(ptr, "ptr")?;
        if let Some(dev) = ccl::gpu::mem_alloc(size)? {
            *slot = dev as *mut c_void;
            return Ok(());
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign writes an allocation of `size` bytes (at least 1) into `p`.
        let rc = unsafe { libc::posix_memalign(&mut p, 4096, size.max(1)) };
        if rc != 0 || p.is_null() {
            return Err(Error::system(format!("ncclMemAlloc of {size} bytes failed (errno {rc})")));
        }
        *slot = p;
        Ok(())
    })
}

fn ncclMemFree / pncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    guard(|| {
        if ptr.is_null() {
            return Err(Error::invalid_argument("ptr is NULL"));
        }
        if ccl::gpu::mem_free(ptr as usize)? {
            return Ok(());
        }
        // SAFETY: without a GPU ncclMemAlloc returns posix_memalign memory.
        unsafe { libc::free(ptr) };
        Ok(())
    })
}

fn ncclCommRegister / pncclCommRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t {
    guard(|| {
        let slot = out(handle, "handle")?;
        // SAFETY: forwarded caller contract.
        let c = unsafe { comm_ref(comm) }?;
        if buff.is_null() && size > 0 {
            return Err(Error::invalid_argument("buff is NULL"));
        }
        c.register(buff as usize, size)?;
        *slot = Box::into_raw(Box::new(Registration { base: buff as usize, size })).cast();
        Ok(())
    })
}

fn ncclCommDeregister / pncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    guard(|| {
        // SAFETY: forwarded caller contract.
        unsafe { comm_ref(comm) }?;
        if handle.is_null() {
            return Err(Error::invalid_argument("handle is NULL"));
        }
        // SAFETY: handles come from ncclCommRegister's Box.
        drop(unsafe { Box::from_raw(handle.cast::<Registration>()) });
        Ok(())
    })
}

fn ncclCommWindowRegister / pncclCommWindowRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, win: *mut *mut c_void, win_flags: c_int) -> ncclResult_t {
    guard(|| {
        let slot = out(win, "win")?;
        // SAFETY: forwarded caller contract.
        let c = unsafe { comm_ref(comm) }?;
        if buff.is_null() {
            return Err(Error::invalid_argument("buff is NULL"));
        }
        c.register_window(buff as usize, size, win_flags & NCCL_WIN_COLL_SYMMETRIC != 0)?;
        *slot = Box::into_raw(Box::new(Registration { base: buff as usize, size })).cast();
        Ok(())
    })
}

fn ncclCommWindowDeregister / pncclCommWindowDeregister(comm: ncclComm_t, win: *mut c_void) -> ncclResult_t {
    let forget = || {
        // SAFETY: forwarded caller contract; windows come from ncclCommWindowRegister's Box.
        let (c, w) = unsafe { (comm_ref(comm)?, win.cast::<Registration>().as_ref()) };
        if let Some(w) = w {
            c.deregister_window(w.base);
        }
        Ok(())
    };
    let r = guard(forget);
    if r != NCCL_SUCCESS {
        return r;
    }
    // SAFETY: forwarded caller contract.
    unsafe { ncclCommDeregister(comm, win) }
}

fn ncclWinGetUserPtr / pncclWinGetUserPtr(comm: ncclComm_t, win: *mut c_void, out_ptr: *mut *mut c_void) -> ncclResult_t {
    guard(|| {
        let slot = out(out_ptr, "outUserPtr")?;
        // SAFETY: forwarded caller contract.
        unsafe { comm_ref(comm) }?;
        // SAFETY: windows come from ncclCommWindowRegister's Box.
        let w = unsafe { win.cast::<Registration>().as_ref() }.ok_or_else(|| Error::invalid_argument("win is NULL"))?;
        *slot = w.base as *mut c_void;
        Ok(())
    })
}

fn ncclCommMemStats / pncclCommMemStats(comm: ncclComm_t, stat: c_int, value: *mut u64) -> ncclResult_t {
    guard(|| {
        let slot = out(value, "value")?;
        // SAFETY: forwarded caller contract.
        let c = unsafe { comm_ref(comm) }?;
        // Suspendable bytes and the suspended flag are 0: nothing is suspended
        // (ncclCommSuspend is not supported); every byte persists.
        *slot = match stat {
            0 | 1 => 0,
            2 | 3 => c.gpu_bytes(),
            _ => return Err(Error::invalid_argument(format!("invalid memory statistic {stat}"))),
        };
        Ok(())
    })
}

fn ncclCommGetUniqueId / pncclCommGetUniqueId(comm: ncclComm_t, unique_id: *mut ncclUniqueId) -> ncclResult_t {
    guard(|| {
        let slot = out(unique_id, "uniqueId")?;
        // SAFETY: forwarded caller contract.
        *slot = from_id(&unsafe { comm_ref(comm) }?.grow_id()?);
        Ok(())
    })
}

fn ncclCommShrink / pncclCommShrink(comm: ncclComm_t, exclude: *mut c_int, n_exclude: c_int, newcomm: *mut ncclComm_t, config: *mut config::ncclConfig_t, flags: c_int) -> ncclResult_t {
    guard(|| {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        // SAFETY: forwarded caller contract.
        let parent = unsafe { comm_ref(comm) }?;
        let n = usize::try_from(n_exclude)
            .map_err(|_| Error::invalid_argument(format!("nExclude {n_exclude} is negative")))?;
        if n > 0 && exclude.is_null() {
            return Err(Error::invalid_argument("excludeRanksList is NULL"));
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the caller passes n_exclude ranks.
            unsafe { std::slice::from_raw_parts(exclude, n) }
        };
        let abort_first = match flags {
            0 => false,
            1 => true,
            f => return Err(Error::invalid_argument(format!("invalid shrink flags {f}"))),
        };
        // SAFETY: forwarded caller contract on `config`.
        let cfg = unsafe { child_config(parent, config) }?;
        *slot = new_handle(parent.shrink(list, abort_first, cfg)?);
        Ok(())
    })
}

fn ncclCommGrow / pncclCommGrow(comm: ncclComm_t, nranks: c_int, unique_id: *const ncclUniqueId, rank: c_int, newcomm: *mut ncclComm_t, config: *mut config::ncclConfig_t) -> ncclResult_t {
    // A joining rank has no parent: it initialises with the coordinator's id, as at init.
    if comm.is_null() {
        if unique_id.is_null() {
            return guard(|| {
                Err(Error::invalid_argument(
                    "ncclCommGrow: a joining rank (comm NULL) needs the coordinator's uniqueId",
                ))
            });
        }
        // SAFETY: checked non-NULL; forwarded caller contract.
        return unsafe { init_rank_config(newcomm, nranks, &*unique_id, rank, config) };
    }
    let mut in_progress = false;
    let r = guard(|| {
        let slot = out(newcomm, "newcomm")?;
        *slot = std::ptr::null_mut();
        if rank != -1 {
            return Err(Error::invalid_argument(format!(
                "ncclCommGrow: rank {rank} on an existing rank: it must be -1 (ranks keep theirs)"
            )));
        }
        // SAFETY: forwarded caller contract.
        let parent = unsafe { comm_ref(comm) }?;
        // SAFETY: forwarded caller contract on `config`.
        let cfg = unsafe { child_config(parent, config) }?;
        // SAFETY: a non-NULL id is the caller's 128 bytes.
        let id = (!unique_id.is_null()).then(|| to_id(unsafe { &*unique_id }));
        let blocking = cfg.blocking;
        let (child, uid) = parent.grow(nranks, id, cfg)?;
        in_progress = start_init(slot, child, uid, blocking)?;
        Ok(())
    });
    still_running(r, in_progress)
}

fn ncclCommRevoke / pncclCommRevoke(comm: ncclComm_t, flags: c_int) -> ncclResult_t {
    // NCCL takes a NULL communicator as nothing to revoke.
    if comm.is_null() {
        return NCCL_SUCCESS;
    }
    guard(|| {
        if flags != 0 {
            return Err(Error::invalid_argument(format!(
                "revoke flags {flags}: only NCCL_REVOKE_DEFAULT (0) is defined"
            )));
        }
        // SAFETY: forwarded caller contract.
        unsafe { comm_ref(comm) }?.revoke()
    })
}

fn ncclCommSuspend / pncclCommSuspend(comm: ncclComm_t, flags: c_int) -> ncclResult_t {
    let _ = (comm, flags);
    unsupported("ncclCommSuspend")
}

fn ncclCommResume / pncclCommResume(comm: ncclComm_t) -> ncclResult_t {
    let _ = comm;
    unsupported("ncclCommResume")
}

fn ncclPutSignal / pncclPutSignal(localbuff: *const c_void, count: usize, datatype: c_int, peer: c_int, peer_win: *mut c_void, peer_win_offset: usize, sig_idx: c_int, ctx: c_int, flags: u32, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    let _ = (localbuff, count, datatype, peer, peer_win, peer_win_offset, sig_idx, ctx, flags, comm, stream);
    unsupported("ncclPutSignal (one-sided operations)")
}

fn ncclSignal / pncclSignal(peer: c_int, sig_idx: c_int, ctx: c_int, flags: u32, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    let _ = (peer, sig_idx, ctx, flags, comm, stream);
    unsupported("ncclSignal (one-sided operations)")
}

fn ncclWaitSignal / pncclWaitSignal(n_desc: c_int, descs: *mut c_void, comm: ncclComm_t, stream: *mut c_void) -> ncclResult_t {
    let _ = (n_desc, descs, comm, stream);
    unsupported("ncclWaitSignal (one-sided operations)")
}
}

/// The ring order and link kinds of a communicator (Rust-side, for tests; not exported).
///
/// # Safety
/// `comm` is a live communicator.
pub unsafe fn describe_comm(comm: ncclComm_t) -> (String, String) {
    // SAFETY: forwarded caller contract.
    match unsafe { comm_ref(comm) } {
        Ok(c) => c.describe(),
        Err(_) => (String::new(), String::new()),
    }
}

/// A registered buffer or window: the range, so deregistering and `ncclWinGetUserPtr` find it
/// (the copy-engine engine keeps what it learnt of the buffer in its own cache).
struct Registration {
    base: usize,
    #[allow(dead_code)]
    size: usize,
}

pub mod device_api;
pub mod param_api;
