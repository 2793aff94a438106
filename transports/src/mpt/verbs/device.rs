//! Owned verbs objects over a loaded [`Verbs`]: context, protection domain, memory region,
//! completion queue, queue pair. Each holds a reference to what it was created from, so
//! drop order is always child before parent (QP before CQ/PD, MR before PD, everything
//! before the context) and the library stays loaded until the last object is gone.
//!
//! This layer cannot run on a machine without an RDMA device; it is kept thin so that the
//! decisions (queue-pair attributes, GID, immediate/wr_id encoding) live in the pure,
//! tested modules.

use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

use super::ffi::*;
use super::loader::Verbs;
use super::qp::{is_uc_refusal, LinkLayer, QpKind, QpStep};
use super::VerbsError;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

struct CtxInner {
    verbs: Verbs,
    ptr: *mut IbvContext,
}

// SAFETY: libibverbs objects may be used from any thread (the library and providers lock
// internally); the pointer is only freed in `Drop`, once.
unsafe impl Send for CtxInner {}
// SAFETY: as above; shared use only calls thread-safe verbs.
unsafe impl Sync for CtxInner {}

impl Drop for CtxInner {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `ibv_open_device`, every child object holds an `Arc` to
        // this and is gone, and it is closed exactly once.
        unsafe { (self.verbs.fns().close_device)(self.ptr) };
    }
}

/// An open device (`struct ibv_context`).
#[derive(Clone)]
pub struct Context {
    inner: Arc<CtxInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

/// Device limits the datapath sizes itself by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version text.
    pub fw_ver: String,
    /// Most work requests per queue.
    pub max_qp_wr: i32,
    /// Most scatter/gather entries per work request.
    pub max_sge: i32,
    /// Most completion-queue entries.
    pub max_cqe: i32,
    /// Most outstanding RDMA reads/atomics per QP as target.
    pub max_qp_rd_atom: i32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// Port state the datapath needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// `state == IBV_PORT_ACTIVE`.
    pub active: bool,
    /// Active MTU (`enum ibv_mtu`).
    pub active_mtu: u32,
    /// LID (IB).
    pub lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// GID table length.
    pub gid_tbl_len: i32,
}

impl Verbs {
    /// Opens device `index` of [`devices`](Verbs::devices).
    pub fn open(&self, index: usize) -> Result<Context, VerbsError> {
        let ptr = self.with_device_list(|list| {
            let dev = *list.get(index).ok_or(VerbsError::NoRdmaDevice)?;
            // SAFETY: `dev` is an element of the live device list; the context it returns
            // does not depend on the list staying allocated.
            let ctx = unsafe { (self.fns().open_device)(dev) };
            if ctx.is_null() {
                Err(VerbsError::Call {
                    call: "ibv_open_device",
                    errno: errno(),
                })
            } else {
                Ok(ctx)
            }
        })?;
        Ok(Context {
            inner: Arc::new(CtxInner {
                verbs: self.clone(),
                ptr,
            }),
        })
    }
}

impl Context {
    fn fns(&self) -> &super::loader::Fns {
        self.inner.verbs.fns()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr, VerbsError> {
        // SAFETY: `IbvDeviceAttr` is plain integers; all-zero is a valid value.
        let mut a: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context, and `a` is a full `struct ibv_device_attr` (232 bytes).
        let rc = unsafe { (self.fns().query_device)(self.inner.ptr, &mut a) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_query_device",
                errno: rc,
            });
        }
        let mut fw = a.fw_ver;
        fw[63] = 0;
        // SAFETY: `fw` is NUL-terminated (last byte forced to 0) and lives across the call.
        let fw_ver = unsafe { CStr::from_ptr(fw.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(DeviceAttr {
            fw_ver,
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_cqe: a.max_cqe,
            max_qp_rd_atom: a.max_qp_rd_atom,
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    /// `ibv_query_port` (the exported `IBVERBS_1.1` symbol; see [`loader`](super::loader)).
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        // SAFETY: `IbvPortAttr` is plain integers; all-zero is a valid value.
        let mut a: IbvPortAttr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; `a` is at least as large as any `ibv_port_attr` the library
        // may fill (the known 56 bytes plus 64 of slack).
        let rc = unsafe { (self.fns().query_port)(self.inner.ptr, port, &mut a) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_query_port",
                errno: rc,
            });
        }
        Ok(PortAttr {
            active: a.state == PORT_ACTIVE,
            active_mtu: a.active_mtu,
            lid: a.lid,
            link_layer: if a.link_layer == LINK_LAYER_ETHERNET {
                LinkLayer::Ethernet
            } else {
                LinkLayer::Infiniband
            },
            gid_tbl_len: a.gid_tbl_len,
        })
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16], VerbsError> {
        let idx = c_int::try_from(index).map_err(|_| VerbsError::InvalidParam {
            name: "gid index",
            value: index.to_string(),
        })?;
        let mut gid = IbvGid::default();
        // SAFETY: valid context; `gid` is a 16-byte `union ibv_gid`.
        let rc = unsafe { (self.fns().query_gid)(self.inner.ptr, port, idx, &mut gid) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_query_gid",
                errno: errno(),
            });
        }
        Ok(gid.raw)
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: valid context.
        let ptr = unsafe { (self.fns().alloc_pd)(self.inner.ptr) };
        if ptr.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_alloc_pd",
                errno: errno(),
            });
        }
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.inner.clone(),
                ptr,
            }),
        })
    }

    /// `ibv_create_cq` with `cqe` entries, no completion channel (the engines poll).
    pub fn create_cq(&self, cqe: u32) -> Result<Cq, VerbsError> {
        let n = c_int::try_from(cqe).map_err(|_| VerbsError::InvalidParam {
            name: "cqe",
            value: cqe.to_string(),
        })?;
        // SAFETY: valid context; NULL channel and context are allowed.
        let ptr = unsafe {
            (self.fns().create_cq)(
                self.inner.ptr,
                n,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if ptr.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_create_cq",
                errno: errno(),
            });
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: self.inner.clone(),
                ptr,
            }),
        })
    }
}

struct PdInner {
    ctx: Arc<CtxInner>,
    ptr: *mut IbvPd,
}
// SAFETY: see `CtxInner`.
unsafe impl Send for PdInner {}
// SAFETY: see `CtxInner`.
unsafe impl Sync for PdInner {}
impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: from `ibv_alloc_pd`; every MR/QP on it holds an `Arc` to this and is gone.
        unsafe { (self.ctx.verbs.fns().dealloc_pd)(self.ptr) };
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").finish_non_exhaustive()
    }
}

/// A registered memory region.
pub struct Mr {
    pd: Arc<PdInner>,
    ptr: *mut IbvMr,
}
// SAFETY: see `CtxInner`.
unsafe impl Send for Mr {}
// SAFETY: see `CtxInner`.
unsafe impl Sync for Mr {}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: `ptr` is a live `struct ibv_mr` (lkey at offset 36) until `Drop`.
        unsafe { (*self.ptr).lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above (rkey at offset 40).
        unsafe { (*self.ptr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: from `ibv_reg_mr*`, deregistered once, before its PD (held by `self.pd`).
        unsafe { (self.pd.ctx.verbs.fns().dereg_mr)(self.ptr) };
    }
}

struct CqInner {
    ctx: Arc<CtxInner>,
    ptr: *mut IbvCq,
}
// SAFETY: see `CtxInner`.
unsafe impl Send for CqInner {}
// SAFETY: see `CtxInner`.
unsafe impl Sync for CqInner {}
impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: from `ibv_create_cq`; every QP using it holds an `Arc` to this and is gone.
        unsafe { (self.ctx.verbs.fns().destroy_cq)(self.ptr) };
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").finish_non_exhaustive()
    }
}

/// A completion, as the engine needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` posted (see [`WrId`](super::WrId)).
    pub wr_id: u64,
    /// `IBV_WC_SUCCESS` (0) or an error status.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// Immediate, network order, when `with_imm`.
    pub imm_raw: u32,
    /// The completion carries an immediate.
    pub with_imm: bool,
    /// Local QP number (identifies the path).
    pub qp_num: u32,
}

/// Reads a function pointer from `ibv_context.ops` at byte offset `off`.
///
/// # Safety
/// `ctx` must be a live `struct ibv_context` and `off` one of the `CTX_OPS_*` offsets, with
/// `F` the matching fn-pointer type of [`ffi`](super::ffi).
unsafe fn ctx_op<F: Copy>(ctx: *mut IbvContext, off: usize) -> Option<F> {
    // SAFETY: per the contract, `ctx + off` is an aligned, initialised pointer-sized slot
    // holding a (possibly NULL) function pointer of type `F`; `Option<F>` has the same
    // layout as a nullable fn pointer.
    unsafe { *(ctx.cast::<u8>().add(off).cast::<Option<F>>()) }
}

impl Cq {
    /// Polls up to `out.len()` completions (`ops.poll_cq`, offset 96 of `ibv_context`).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        const BATCH: usize = 16;
        let mut wc = [IbvWc::default(); BATCH];
        let want = out.len().min(BATCH);
        // SAFETY: `ibv_cq.context` is the first field; the context is alive (held by `ctx`).
        let f = unsafe { ctx_op::<PollCqFn>(self.inner.ctx.ptr, CTX_OPS_POLL_CQ) }
            .ok_or(VerbsError::MissingSymbol("ibv_context.ops.poll_cq"))?;
        // SAFETY: valid CQ, and `wc` has room for `want` (<= 16) `struct ibv_wc` (48 bytes each).
        let n = unsafe { f(self.inner.ptr, want as c_int, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::Call {
                call: "ibv_poll_cq",
                errno: -n,
            });
        }
        let n = usize::try_from(n).unwrap_or(0).min(want);
        for (o, w) in out.iter_mut().zip(&wc[..n]) {
            *o = WorkCompletion {
                wr_id: w.wr_id,
                status: w.status,
                opcode: w.opcode,
                byte_len: w.byte_len,
                imm_raw: w.imm_data,
                with_imm: w.wc_flags & WC_WITH_IMM != 0,
                qp_num: w.qp_num,
            };
        }
        Ok(n)
    }
}

impl Pd {
    /// Registers `len` bytes at `addr` with `access` (`IBV_ACCESS_*`), through
    /// `ibv_reg_mr_iova2` (iova = addr) where the library has it, else `ibv_reg_mr`.
    ///
    /// # Safety
    /// The memory must stay allocated until the returned [`Mr`] is dropped.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<Mr, VerbsError> {
        let fns = self.inner.ctx.verbs.fns();
        let ptr = match fns.reg_mr_iova2 {
            // SAFETY: valid PD; the caller keeps the memory alive for the MR's lifetime.
            Some(f) => unsafe {
                f(
                    self.inner.ptr,
                    addr.cast::<c_void>(),
                    len,
                    addr as u64,
                    access,
                )
            },
            // SAFETY: as above.
            None => unsafe {
                (fns.reg_mr)(self.inner.ptr, addr.cast::<c_void>(), len, access as c_int)
            },
        };
        if ptr.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_reg_mr",
                errno: errno(),
            });
        }
        Ok(Mr {
            pd: self.inner.clone(),
            ptr,
        })
    }

    /// Creates a queue pair of `kind`; if UC is refused, retries as RC. Returns the kind
    /// obtained (advertise it to the peer; see [`QpKind::negotiate`]).
    pub fn create_qp(
        &self,
        kind: QpKind,
        send_cq: &Cq,
        recv_cq: &Cq,
        cap: IbvQpCap,
    ) -> Result<Qp, VerbsError> {
        let mut kind = kind;
        loop {
            let mut init = IbvQpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: send_cq.inner.ptr,
                recv_cq: recv_cq.inner.ptr,
                srq: std::ptr::null_mut(),
                cap,
                qp_type: kind.ibv_type(),
                sq_sig_all: 0,
            };
            // SAFETY: valid PD and CQs (kept alive by the returned `Qp`), and `init` is a
            // full `struct ibv_qp_init_attr`.
            let ptr = unsafe { (self.inner.ctx.verbs.fns().create_qp)(self.inner.ptr, &mut init) };
            if !ptr.is_null() {
                return Ok(Qp {
                    kind,
                    _pd: self.inner.clone(),
                    _cqs: [send_cq.inner.clone(), recv_cq.inner.clone()],
                    ctx: self.inner.ctx.clone(),
                    ptr,
                });
            }
            let e = errno();
            match kind.fallback() {
                Some(next) if is_uc_refusal(e) => kind = next,
                _ => {
                    return Err(VerbsError::Call {
                        call: "ibv_create_qp",
                        errno: e,
                    })
                }
            }
        }
    }
}

/// A queue pair (one path of a connection).
pub struct Qp {
    /// Transport type actually created.
    pub kind: QpKind,
    _pd: Arc<PdInner>,
    _cqs: [Arc<CqInner>; 2],
    ctx: Arc<CtxInner>,
    ptr: *mut IbvQp,
}
// SAFETY: see `CtxInner`.
unsafe impl Send for Qp {}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("kind", &self.kind)
            .field("qpn", &self.qpn())
            .finish()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: from `ibv_create_qp`, destroyed once, before its PD, CQs and context.
        unsafe { (self.ctx.verbs.fns().destroy_qp)(self.ptr) };
    }
}

impl Qp {
    /// Queue-pair number (`ibv_qp.qp_num`, offset 52).
    pub fn qpn(&self) -> u32 {
        // SAFETY: `ptr` is a live `struct ibv_qp`; `qp_num` is a `uint32_t` at offset 52.
        unsafe { *(self.ptr.cast::<u8>().add(QP_NUM_OFFSET).cast::<u32>()) }
    }

    /// Applies one step of a [`QpPlan`](super::QpPlan).
    pub fn modify(&self, step: &QpStep) -> Result<(), VerbsError> {
        let mut attr = step.attr;
        // SAFETY: valid QP; `attr` is a full 144-byte `struct ibv_qp_attr`.
        let rc = unsafe { (self.ctx.verbs.fns().modify_qp)(self.ptr, &mut attr, step.mask) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_modify_qp",
                errno: rc,
            });
        }
        Ok(())
    }

    /// Posts one RDMA write-with-immediate (`ops.post_send`, offset 208): `sge` bytes go to
    /// `remote_addr`/`rkey`, `imm_wire` (network order, [`imm_to_wire`](super::imm::imm_to_wire))
    /// raises a receive completion at the peer.
    ///
    /// # Safety
    /// `sge` must describe memory registered under its `lkey` that stays valid until this
    /// work request's completion is polled (or the QP is in ERR and flushed).
    pub unsafe fn post_write_imm(
        &self,
        wr_id: u64,
        sge: IbvSge,
        remote_addr: u64,
        rkey: u32,
        imm_wire: u32,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let mut sge = sge;
        let mut wr = IbvSendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: WR_RDMA_WRITE_WITH_IMM,
            send_flags: if signaled { SEND_SIGNALED } else { 0 },
            imm_data: imm_wire,
            remote_addr,
            rkey,
            wr_rest: [0; 5],
            tail: [0; 7],
        };
        // SAFETY: `ibv_qp.context` (offset 0) is the live context held by `self.ctx`.
        let f = unsafe { ctx_op::<PostSendFn>(self.ctx.ptr, CTX_OPS_POST_SEND) }
            .ok_or(VerbsError::MissingSymbol("ibv_context.ops.post_send"))?;
        let mut bad: *mut IbvSendWr = std::ptr::null_mut();
        // SAFETY: valid QP; `wr` and `sge` outlive the call (the provider copies them into
        // the send queue); the caller guarantees the payload memory per this fn's contract.
        let rc = unsafe { f(self.ptr, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_post_send",
                errno: rc,
            });
        }
        Ok(())
    }

    /// Posts one receive (`ops.post_recv`, offset 216). Write-with-immediate consumes a
    /// receive without writing into it, so `sge` may be empty (`None`).
    ///
    /// # Safety
    /// Any `sge` must describe registered memory valid until the completion is polled.
    pub unsafe fn post_recv(&self, wr_id: u64, sge: Option<IbvSge>) -> Result<(), VerbsError> {
        let mut s = sge.unwrap_or_default();
        let mut wr = IbvRecvWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: if sge.is_some() {
                &mut s
            } else {
                std::ptr::null_mut()
            },
            num_sge: c_int::from(sge.is_some()),
        };
        // SAFETY: as in `post_write_imm`.
        let f = unsafe { ctx_op::<PostRecvFn>(self.ctx.ptr, CTX_OPS_POST_RECV) }
            .ok_or(VerbsError::MissingSymbol("ibv_context.ops.post_recv"))?;
        let mut bad: *mut IbvRecvWr = std::ptr::null_mut();
        // SAFETY: valid QP; `wr`/`s` outlive the call; the caller guarantees the buffer.
        let rc = unsafe { f(self.ptr, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_post_recv",
                errno: rc,
            });
        }
        Ok(())
    }
}
