//! The nccl.h API, loaded at run time from `libnccl.so.2` (libccl or NVIDIA's NCCL).

use std::ffi::{c_char, c_int, c_void, CStr};

use libloading::Library;

use crate::{Error, Result};

pub type Comm = *mut c_void;
pub type Stream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// `ncclScalarHostImmediate`.
const SCALAR_HOST_IMMEDIATE: c_int = 1;

type FnCopy = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int;
type FnRooted =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;

/// The loaded library with every entry point ccl-perf calls.
pub struct Nccl {
    _lib: Library,
    /// The file the dynamic loader actually picked.
    pub path: String,
    get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    comm_init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
    comm_finalize: Option<unsafe extern "C" fn(Comm) -> c_int>,
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    comm_abort: Option<unsafe extern "C" fn(Comm) -> c_int>,
    comm_count: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    comm_user_rank: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    comm_get_async_error: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(Comm) -> *const c_char>,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    broadcast: FnRooted,
    reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    all_gather: FnCopy,
    reduce_scatter: FnRooted,
    alltoall: Option<FnCopy>,
    gather: Option<FnRooted>,
    scatter: Option<FnRooted>,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    redop_create_premulsum:
        unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, Comm) -> c_int,
    redop_destroy: unsafe extern "C" fn(c_int, Comm) -> c_int,
}

/// Copies a function pointer of type `T` out of the library.
///
/// # Safety
/// `T` must be the symbol's true C signature.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let cname = format!("{name}\0");
    // SAFETY: the caller guarantees `T` matches the symbol; the pointer is copied out and the
    // library outlives it (it is stored next to it in `Nccl`).
    match unsafe { lib.get::<T>(cname.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(e) => Err(Error(format!("libnccl lacks {name}: {e}"))),
    }
}

/// As [`sym`], `None` when the symbol is absent (functions of newer NCCL versions).
///
/// # Safety
/// As [`sym`].
unsafe fn opt_sym<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: forwarded from the caller.
    unsafe { sym(lib, name) }.ok()
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: nccl returns NUL-terminated strings that live at least until the next call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The path of the object that holds `addr`, from the dynamic loader.
fn object_path(addr: *const c_void) -> Option<String> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads `addr` as a number and fills `info`.
    let ok = unsafe { libc::dladdr(addr, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    Some(cstr(info.dli_fname))
}

impl Nccl {
    /// Loads `name` (a plain soname such as `libnccl.so.2` follows `LD_LIBRARY_PATH`).
    pub fn load(name: &str) -> Result<Nccl> {
        // SAFETY: loading a library runs its initialisers; libnccl's are trusted like any
        // linked dependency.
        let lib =
            unsafe { Library::new(name) }.map_err(|e| Error(format!("cannot load {name}: {e}")))?;
        // SAFETY: every signature below is the one nccl.h declares (NCCL_ABI.md).
        let n = unsafe {
            Nccl {
                path: String::new(),
                get_version: sym(&lib, "ncclGetVersion")?,
                get_unique_id: sym(&lib, "ncclGetUniqueId")?,
                comm_init_rank: sym(&lib, "ncclCommInitRank")?,
                comm_init_all: sym(&lib, "ncclCommInitAll")?,
                comm_finalize: opt_sym(&lib, "ncclCommFinalize"),
                comm_destroy: sym(&lib, "ncclCommDestroy")?,
                comm_abort: opt_sym(&lib, "ncclCommAbort"),
                comm_count: sym(&lib, "ncclCommCount")?,
                comm_user_rank: sym(&lib, "ncclCommUserRank")?,
                comm_get_async_error: sym(&lib, "ncclCommGetAsyncError")?,
                get_error_string: sym(&lib, "ncclGetErrorString")?,
                get_last_error: opt_sym(&lib, "ncclGetLastError"),
                group_start: sym(&lib, "ncclGroupStart")?,
                group_end: sym(&lib, "ncclGroupEnd")?,
                all_reduce: sym(&lib, "ncclAllReduce")?,
                broadcast: sym(&lib, "ncclBroadcast")?,
                reduce: sym(&lib, "ncclReduce")?,
                all_gather: sym(&lib, "ncclAllGather")?,
                reduce_scatter: sym(&lib, "ncclReduceScatter")?,
                alltoall: opt_sym(&lib, "ncclAlltoAll"),
                gather: opt_sym(&lib, "ncclGather"),
                scatter: opt_sym(&lib, "ncclScatter"),
                send: sym(&lib, "ncclSend")?,
                recv: sym(&lib, "ncclRecv")?,
                redop_create_premulsum: sym(&lib, "ncclRedOpCreatePreMulSum")?,
                redop_destroy: sym(&lib, "ncclRedOpDestroy")?,
                _lib: lib,
            }
        };
        let path = object_path(n.get_version as *const c_void).unwrap_or_else(|| name.to_string());
        Ok(Nccl { path, ..n })
    }

    /// Turns a non-zero `ncclResult_t` into the error ccl-perf reports.
    pub fn check(&self, call: &str, rc: c_int, comm: Comm) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: both functions take any value / comm (NULL allowed) and return static or
        // thread-local strings.
        let what = cstr(unsafe { (self.get_error_string)(rc) });
        let last = match self.get_last_error {
            // SAFETY: as above.
            Some(f) => cstr(unsafe { f(comm) }),
            None => String::new(),
        };
        Err(Error(format!("{call} failed: {what} ({last})")))
    }

    pub fn version(&self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid out pointer.
        let rc = unsafe { (self.get_version)(&mut v) };
        self.check("ncclGetVersion", rc, std::ptr::null_mut())?;
        Ok(v)
    }

    pub fn unique_id(&self) -> Result<UniqueId> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid 128-byte out buffer.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", rc, std::ptr::null_mut())?;
        Ok(id)
    }

    pub fn init_rank(&self, nranks: usize, id: UniqueId, rank: usize) -> Result<Comm> {
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: `comm` is a valid out pointer; the id is passed by value as nccl.h declares.
        let rc = unsafe { (self.comm_init_rank)(&mut comm, int(nranks)?, id, int(rank)?) };
        self.check("ncclCommInitRank", rc, std::ptr::null_mut())?;
        Ok(comm)
    }

    pub fn init_all(&self, ndev: usize) -> Result<Vec<Comm>> {
        let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); ndev];
        // SAFETY: `comms` has room for `ndev` handles; a NULL devlist means devices 0..ndev-1.
        let rc = unsafe { (self.comm_init_all)(comms.as_mut_ptr(), int(ndev)?, std::ptr::null()) };
        self.check("ncclCommInitAll", rc, std::ptr::null_mut())?;
        Ok(comms)
    }

    /// Finalizes (where the library has it) and destroys a communicator.
    pub fn destroy(&self, comm: Comm) -> Result<()> {
        if let Some(f) = self.comm_finalize {
            // SAFETY: `comm` is a live communicator created by this library.
            let rc = unsafe { f(comm) };
            self.check("ncclCommFinalize", rc, comm)?;
        }
        // SAFETY: as above; it is not used after this call.
        let rc = unsafe { (self.comm_destroy)(comm) };
        self.check("ncclCommDestroy", rc, std::ptr::null_mut())
    }

    /// Aborts a communicator (after a failed operation: nothing may wait on its peers).
    pub fn abort(&self, comm: Comm) -> Result<()> {
        let f = self
            .comm_abort
            .ok_or_else(|| Error("the library has no ncclCommAbort".into()))?;
        // SAFETY: `comm` is a live communicator created by this library, not used after this.
        let rc = unsafe { f(comm) };
        self.check("ncclCommAbort", rc, std::ptr::null_mut())
    }

    pub fn count(&self, comm: Comm) -> Result<usize> {
        let mut v: c_int = 0;
        // SAFETY: live comm, valid out pointer.
        let rc = unsafe { (self.comm_count)(comm, &mut v) };
        self.check("ncclCommCount", rc, comm)?;
        Ok(v.max(0) as usize)
    }

    pub fn user_rank(&self, comm: Comm) -> Result<usize> {
        let mut v: c_int = 0;
        // SAFETY: live comm, valid out pointer.
        let rc = unsafe { (self.comm_user_rank)(comm, &mut v) };
        self.check("ncclCommUserRank", rc, comm)?;
        Ok(v.max(0) as usize)
    }

    /// Fails when the communicator holds an asynchronous error.
    pub fn async_error(&self, comm: Comm) -> Result<()> {
        let mut v: c_int = 0;
        // SAFETY: live comm, valid out pointer.
        let rc = unsafe { (self.comm_get_async_error)(comm, &mut v) };
        self.check("ncclCommGetAsyncError", rc, comm)?;
        self.check("communicator (asynchronous error)", v, comm)
    }

    pub fn group_start(&self) -> Result<()> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.group_start)() };
        self.check("ncclGroupStart", rc, std::ptr::null_mut())
    }

    pub fn group_end(&self) -> Result<()> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.group_end)() };
        self.check("ncclGroupEnd", rc, std::ptr::null_mut())
    }

    /// Creates a PreMulSum op with the host-immediate scalar held in `scalar` (one element of
    /// `dtype`).
    pub fn create_premulsum(&self, scalar: &mut [u8; 8], dtype: i32, comm: Comm) -> Result<i32> {
        let mut op: c_int = 0;
        // SAFETY: `scalar` holds one element of `dtype`, read during the call only.
        let rc = unsafe {
            (self.redop_create_premulsum)(
                &mut op,
                scalar.as_mut_ptr().cast(),
                dtype,
                SCALAR_HOST_IMMEDIATE,
                comm,
            )
        };
        self.check("ncclRedOpCreatePreMulSum", rc, comm)?;
        Ok(op)
    }

    pub fn destroy_redop(&self, op: i32, comm: Comm) -> Result<()> {
        // SAFETY: `op` was created on `comm` by this library.
        let rc = unsafe { (self.redop_destroy)(op, comm) };
        self.check("ncclRedOpDestroy", rc, comm)
    }

    /// Whether the library has the collective form of alltoall / gather / scatter
    /// (NCCL 2.28+); without it ccl-perf issues them as grouped send/recv.
    pub fn has_native(&self, name: &str) -> bool {
        match name {
            "alltoall" => self.alltoall.is_some(),
            "gather" => self.gather.is_some(),
            "scatter" => self.scatter.is_some(),
            _ => true,
        }
    }
}

fn int(v: usize) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| Error(format!("{v} does not fit a C int")))
}

/// One collective call with raw device (or host) pointers.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub dtype: i32,
    pub op: i32,
    pub root: i32,
    pub rank: usize,
    pub nranks: usize,
    pub comm: Comm,
    pub stream: Stream,
}

impl Nccl {
    /// Issues `coll` for one communicator (sendrecv and emulated collectives group their
    /// point-to-point calls themselves).
    ///
    /// # Safety
    /// The pointers are valid device (or host) buffers of the sizes the collective needs.
    pub unsafe fn issue(&self, coll: crate::coll::Coll, c: &Call) -> Result<()> {
        use crate::coll::Coll;
        let ts = crate::dtype::Dtype::ALL
            .get(c.dtype.max(0) as usize)
            .map(|t| t.size())
            .unwrap_or(1);
        let block = c.count * ts;
        // SAFETY: for every call below the caller guarantees the buffers; counts, types and ops
        // are those nccl.h expects.
        let rc = unsafe {
            match coll {
                Coll::AllReduce => {
                    (self.all_reduce)(c.send, c.recv, c.count, c.dtype, c.op, c.comm, c.stream)
                }
                Coll::Broadcast => {
                    (self.broadcast)(c.send, c.recv, c.count, c.dtype, c.root, c.comm, c.stream)
                }
                Coll::Reduce => (self.reduce)(
                    c.send, c.recv, c.count, c.dtype, c.op, c.root, c.comm, c.stream,
                ),
                Coll::AllGather => {
                    (self.all_gather)(c.send, c.recv, c.count, c.dtype, c.comm, c.stream)
                }
                Coll::ReduceScatter => {
                    (self.reduce_scatter)(c.send, c.recv, c.count, c.dtype, c.op, c.comm, c.stream)
                }
                Coll::AlltoAll => match self.alltoall {
                    Some(f) => f(c.send, c.recv, c.count, c.dtype, c.comm, c.stream),
                    None => return self.p2p_emulate(coll, c, block),
                },
                Coll::Gather => match self.gather {
                    Some(f) => f(c.send, c.recv, c.count, c.dtype, c.root, c.comm, c.stream),
                    None => return self.p2p_emulate(coll, c, block),
                },
                Coll::Scatter => match self.scatter {
                    Some(f) => f(c.send, c.recv, c.count, c.dtype, c.root, c.comm, c.stream),
                    None => return self.p2p_emulate(coll, c, block),
                },
                Coll::SendRecv => return self.p2p_emulate(coll, c, block),
            }
        };
        self.check(&format!("nccl{}", api_name(coll)), rc, c.comm)
    }

    /// sendrecv, and alltoall / gather / scatter on libraries without them, as one group of
    /// ncclSend / ncclRecv.
    ///
    /// # Safety
    /// As [`Nccl::issue`].
    unsafe fn p2p_emulate(&self, coll: crate::coll::Coll, c: &Call, block: usize) -> Result<()> {
        use crate::coll::Coll;
        let n = c.nranks.max(1);
        let root = c.root.max(0) as usize;
        let mut ops: Vec<(bool, usize, usize)> = Vec::new(); // (is_send, peer, block offset)
        match coll {
            Coll::SendRecv => {
                let shift = crate::coll::sendrecv_shift(root, n);
                ops.push((true, (c.rank + shift) % n, 0));
                ops.push((false, (c.rank + n - shift) % n, 0));
            }
            Coll::AlltoAll => {
                for p in 0..n {
                    ops.push((true, p, p * block));
                    ops.push((false, p, p * block));
                }
            }
            Coll::Gather => {
                ops.push((true, root, 0));
                if c.rank == root {
                    ops.extend((0..n).map(|p| (false, p, p * block)));
                }
            }
            Coll::Scatter => {
                if c.rank == root {
                    ops.extend((0..n).map(|p| (true, p, p * block)));
                }
                ops.push((false, root, 0));
            }
            _ => {
                return Err(Error(format!(
                    "{} is not a point-to-point pattern",
                    coll.name()
                )))
            }
        }
        self.group_start()?;
        for (is_send, peer, off) in ops {
            let peer_c = int(peer)?;
            if is_send {
                // SAFETY: `off` stays inside the send buffer (block * n <= its size).
                let rc = unsafe {
                    (self.send)(
                        c.send.cast::<u8>().add(off).cast(),
                        c.count,
                        c.dtype,
                        peer_c,
                        c.comm,
                        c.stream,
                    )
                };
                self.check("ncclSend", rc, c.comm)?;
            } else {
                // SAFETY: `off` stays inside the receive buffer.
                let rc = unsafe {
                    (self.recv)(
                        c.recv.cast::<u8>().add(off).cast(),
                        c.count,
                        c.dtype,
                        peer_c,
                        c.comm,
                        c.stream,
                    )
                };
                self.check("ncclRecv", rc, c.comm)?;
            }
        }
        self.group_end()
    }
}

fn api_name(coll: crate::coll::Coll) -> &'static str {
    use crate::coll::Coll;
    match coll {
        Coll::AllReduce => "AllReduce",
        Coll::AllGather => "AllGather",
        Coll::ReduceScatter => "ReduceScatter",
        Coll::Broadcast => "Broadcast",
        Coll::Reduce => "Reduce",
        Coll::AlltoAll => "AlltoAll",
        Coll::SendRecv => "SendRecv",
        Coll::Gather => "Gather",
        Coll::Scatter => "Scatter",
    }
}
