//! The slice of the libibverbs ABI the datapath uses, declared from the public
//! `infiniband/verbs.h` of rdma-core (LP64 Linux: pointers and `size_t` are 8 bytes, `int`,
//! `unsigned int` and enums 4). Every struct we read or write by field has its offsets
//! asserted at compile time below, so a transcription error fails the build, not a NIC.
//!
//! Opaque objects (`ibv_device`, `ibv_pd`, ...) are only handled by pointer, except for the
//! few leading fields read directly:
//! * `struct ibv_context { struct ibv_device *device; /* 0 */ struct ibv_context_ops ops; /* 8 */ ... }`
//!   `ibv_context_ops` is 32 function pointers; the datapath calls three of them, because
//!   `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` in `verbs.h`
//!   (no exported symbol) and call through these slots:
//!   - slot 11 `poll_cq`   -> offset 8 + 11*8 = [`CTX_OPS_POLL_CQ`] (96)
//!   - slot 25 `post_send` -> offset 8 + 25*8 = [`CTX_OPS_POST_SEND`] (208)
//!   - slot 26 `post_recv` -> offset 8 + 26*8 = [`CTX_OPS_POST_RECV`] (216)
//!     (slots 0..=10: `_compat_query_device, _compat_query_port, _compat_alloc_pd,
//!     _compat_dealloc_pd, _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw,
//!     bind_mw, dealloc_mw, _compat_create_cq`; 12..=24: `req_notify_cq, _compat_cq_event,
//!     _compat_resize_cq, _compat_destroy_cq, _compat_create_srq, _compat_modify_srq,
//!     _compat_query_srq, _compat_destroy_srq, post_srq_recv, _compat_create_qp,
//!     _compat_query_qp, _compat_modify_qp, _compat_destroy_qp`.) These slots have been stable
//!     since libibverbs 1.0 and are what NCCL's `wrap_ibv_post_send` calls as well.
//! * `struct ibv_cq { struct ibv_context *context; /* 0 */ ... }` and
//!   `struct ibv_qp { struct ibv_context *context; /* 0 */ void *qp_context; /* 8 */
//!   struct ibv_pd *pd; /* 16 */ struct ibv_cq *send_cq; /* 24 */ struct ibv_cq *recv_cq;
//!   /* 32 */ struct ibv_srq *srq; /* 40 */ uint32_t handle; /* 48 */ uint32_t qp_num; /* 52 */ ... }`
//!   -> [`QP_NUM_OFFSET`].
//! * `struct ibv_mr { struct ibv_context *context; /* 0 */ struct ibv_pd *pd; /* 8 */
//!   void *addr; /* 16 */ size_t length; /* 24 */ uint32_t handle; /* 32 */ uint32_t lkey;
//!   /* 36 */ uint32_t rkey; /* 40 */ }` -> [`IbvMr`] is declared whole.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

/// Byte offset of `ibv_context.ops.poll_cq`.
pub const CTX_OPS_POLL_CQ: usize = 8 + 11 * 8;
/// Byte offset of `ibv_context.ops.post_send`.
pub const CTX_OPS_POST_SEND: usize = 8 + 25 * 8;
/// Byte offset of `ibv_context.ops.post_recv`.
pub const CTX_OPS_POST_RECV: usize = 8 + 26 * 8;
/// Byte offset of `ibv_qp.qp_num`.
pub const QP_NUM_OFFSET: usize = 52;

/// Opaque `struct ibv_device`.
#[repr(C)]
pub struct IbvDevice {
    _p: [u8; 0],
}
/// Opaque `struct ibv_context`.
#[repr(C)]
pub struct IbvContext {
    _p: [u8; 0],
}
/// Opaque `struct ibv_pd`.
#[repr(C)]
pub struct IbvPd {
    _p: [u8; 0],
}
/// Opaque `struct ibv_cq`.
#[repr(C)]
pub struct IbvCq {
    _p: [u8; 0],
}
/// Opaque `struct ibv_qp`.
#[repr(C)]
pub struct IbvQp {
    _p: [u8; 0],
}
/// Opaque `struct ibv_comp_channel`.
#[repr(C)]
pub struct IbvCompChannel {
    _p: [u8; 0],
}

/// `struct ibv_mr` (whole; 48 bytes with tail padding).
#[repr(C)]
#[derive(Debug)]
pub struct IbvMr {
    /// `context`, offset 0.
    pub context: *mut IbvContext,
    /// `pd`, offset 8.
    pub pd: *mut IbvPd,
    /// `addr`, offset 16.
    pub addr: *mut c_void,
    /// `length`, offset 24.
    pub length: usize,
    /// `handle`, offset 32.
    pub handle: u32,
    /// `lkey`, offset 36.
    pub lkey: u32,
    /// `rkey`, offset 40.
    pub rkey: u32,
}

/// `union ibv_gid` (16 raw bytes; the union's `global` arm has `__be64` so it is 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvGid {
    /// `raw[16]`, network order.
    pub raw: [u8; 16],
}

/// `struct ibv_device_attr` (232 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvDeviceAttr {
    /// `char fw_ver[64]`, 0.
    pub fw_ver: [c_char; 64],
    /// `__be64 node_guid`, 64.
    pub node_guid: u64,
    /// `__be64 sys_image_guid`, 72.
    pub sys_image_guid: u64,
    /// `max_mr_size`, 80.
    pub max_mr_size: u64,
    /// `page_size_cap`, 88.
    pub page_size_cap: u64,
    /// `vendor_id`, 96.
    pub vendor_id: u32,
    /// `vendor_part_id`, 100.
    pub vendor_part_id: u32,
    /// `hw_ver`, 104.
    pub hw_ver: u32,
    /// `max_qp`, 108.
    pub max_qp: c_int,
    /// `max_qp_wr`, 112.
    pub max_qp_wr: c_int,
    /// `device_cap_flags`, 116.
    pub device_cap_flags: c_uint,
    /// `max_sge`, 120.
    pub max_sge: c_int,
    /// `max_sge_rd`, 124.
    pub max_sge_rd: c_int,
    /// `max_cq`, 128.
    pub max_cq: c_int,
    /// `max_cqe`, 132.
    pub max_cqe: c_int,
    /// `max_mr`, 136.
    pub max_mr: c_int,
    /// `max_pd`, 140.
    pub max_pd: c_int,
    /// `max_qp_rd_atom`, 144.
    pub max_qp_rd_atom: c_int,
    /// `max_ee_rd_atom`, 148.
    pub max_ee_rd_atom: c_int,
    /// `max_res_rd_atom`, 152.
    pub max_res_rd_atom: c_int,
    /// `max_qp_init_rd_atom`, 156.
    pub max_qp_init_rd_atom: c_int,
    /// `max_ee_init_rd_atom` .. `max_srq_sge` (16 ints: `max_ee_init_rd_atom` at 160,
    /// `atomic_cap` at 164, ... `max_srq_sge` at 220).
    pub rest: [c_int; 16],
    /// `max_pkeys`, 224.
    pub max_pkeys: u16,
    /// `local_ca_ack_delay`, 226.
    pub local_ca_ack_delay: u8,
    /// `phys_port_cnt`, 227.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` as of rdma-core 50 (56 bytes), plus 64 bytes of slack so a newer
/// library that appends fields cannot write past our buffer (the exported `ibv_query_port`
/// fills the struct through the provider without a size argument).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state state`, 0.
    pub state: c_uint,
    /// `enum ibv_mtu max_mtu`, 4.
    pub max_mtu: c_uint,
    /// `enum ibv_mtu active_mtu`, 8.
    pub active_mtu: c_uint,
    /// `gid_tbl_len`, 12.
    pub gid_tbl_len: c_int,
    /// `port_cap_flags`, 16.
    pub port_cap_flags: u32,
    /// `max_msg_sz`, 20.
    pub max_msg_sz: u32,
    /// `bad_pkey_cntr`, 24.
    pub bad_pkey_cntr: u32,
    /// `qkey_viol_cntr`, 28.
    pub qkey_viol_cntr: u32,
    /// `pkey_tbl_len`, 32.
    pub pkey_tbl_len: u16,
    /// `lid`, 34.
    pub lid: u16,
    /// `sm_lid`, 36.
    pub sm_lid: u16,
    /// `lmc`, 38.
    pub lmc: u8,
    /// `max_vl_num`, 39.
    pub max_vl_num: u8,
    /// `sm_sl`, 40.
    pub sm_sl: u8,
    /// `subnet_timeout`, 41.
    pub subnet_timeout: u8,
    /// `init_type_reply`, 42.
    pub init_type_reply: u8,
    /// `active_width`, 43.
    pub active_width: u8,
    /// `active_speed`, 44.
    pub active_speed: u8,
    /// `phys_state`, 45.
    pub phys_state: u8,
    /// `link_layer`, 46 ([`LINK_LAYER_ETHERNET`] for RoCE).
    pub link_layer: u8,
    /// `flags`, 47.
    pub flags: u8,
    /// `port_cap_flags2`, 48.
    pub port_cap_flags2: u16,
    /// `active_speed_ex`, 52 (rdma-core >= 45).
    pub active_speed_ex: u32,
    /// Slack for fields added later.
    pub slack: [u8; 64],
}

/// `struct ibv_qp_cap` (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvQpCap {
    /// `max_send_wr`, 0.
    pub max_send_wr: u32,
    /// `max_recv_wr`, 4.
    pub max_recv_wr: u32,
    /// `max_send_sge`, 8.
    pub max_send_sge: u32,
    /// `max_recv_sge`, 12.
    pub max_recv_sge: u32,
    /// `max_inline_data`, 16.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvQpInitAttr {
    /// `qp_context`, 0.
    pub qp_context: *mut c_void,
    /// `send_cq`, 8.
    pub send_cq: *mut IbvCq,
    /// `recv_cq`, 16.
    pub recv_cq: *mut IbvCq,
    /// `srq`, 24.
    pub srq: *mut c_void,
    /// `cap`, 32.
    pub cap: IbvQpCap,
    /// `enum ibv_qp_type qp_type`, 52.
    pub qp_type: c_uint,
    /// `sq_sig_all`, 56.
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route` (24 bytes, 8-aligned through the GID).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvGlobalRoute {
    /// `dgid`, 0.
    pub dgid: IbvGid,
    /// `flow_label`, 16.
    pub flow_label: u32,
    /// `sgid_index`, 20.
    pub sgid_index: u8,
    /// `hop_limit`, 21.
    pub hop_limit: u8,
    /// `traffic_class`, 22.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvAhAttr {
    /// `grh`, 0.
    pub grh: IbvGlobalRoute,
    /// `dlid`, 24.
    pub dlid: u16,
    /// `sl`, 26.
    pub sl: u8,
    /// `src_path_bits`, 27.
    pub src_path_bits: u8,
    /// `static_rate`, 28.
    pub static_rate: u8,
    /// `is_global`, 29.
    pub is_global: u8,
    /// `port_num`, 30.
    pub port_num: u8,
}

/// `struct ibv_qp_attr` (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvQpAttr {
    /// `enum ibv_qp_state qp_state`, 0.
    pub qp_state: c_uint,
    /// `cur_qp_state`, 4.
    pub cur_qp_state: c_uint,
    /// `enum ibv_mtu path_mtu`, 8.
    pub path_mtu: c_uint,
    /// `path_mig_state`, 12.
    pub path_mig_state: c_uint,
    /// `qkey`, 16.
    pub qkey: u32,
    /// `rq_psn`, 20.
    pub rq_psn: u32,
    /// `sq_psn`, 24.
    pub sq_psn: u32,
    /// `dest_qp_num`, 28.
    pub dest_qp_num: u32,
    /// `qp_access_flags`, 32.
    pub qp_access_flags: c_uint,
    /// `cap`, 36.
    pub cap: IbvQpCap,
    /// `ah_attr`, 56.
    pub ah_attr: IbvAhAttr,
    /// `alt_ah_attr`, 88.
    pub alt_ah_attr: IbvAhAttr,
    /// `pkey_index`, 120.
    pub pkey_index: u16,
    /// `alt_pkey_index`, 122.
    pub alt_pkey_index: u16,
    /// `en_sqd_async_notify`, 124.
    pub en_sqd_async_notify: u8,
    /// `sq_draining`, 125.
    pub sq_draining: u8,
    /// `max_rd_atomic`, 126.
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`, 127.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`, 128.
    pub min_rnr_timer: u8,
    /// `port_num`, 129.
    pub port_num: u8,
    /// `timeout`, 130.
    pub timeout: u8,
    /// `retry_cnt`, 131.
    pub retry_cnt: u8,
    /// `rnr_retry`, 132.
    pub rnr_retry: u8,
    /// `alt_port_num`, 133.
    pub alt_port_num: u8,
    /// `alt_timeout`, 134.
    pub alt_timeout: u8,
    /// `rate_limit`, 136.
    pub rate_limit: u32,
}

/// `struct ibv_sge` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvSge {
    /// `addr`, 0.
    pub addr: u64,
    /// `length`, 8.
    pub length: u32,
    /// `lkey`, 12.
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes). Only the RDMA arm of the `wr` union is named; the
/// union's largest arm (`atomic`: 8+8+8+4, padded to 32) sets its size, and the trailing
/// `qp_type` (4 at 72) and `bind_mw`/`tso` (48 at 80) unions are kept as zeroed bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvSendWr {
    /// `wr_id`, 0.
    pub wr_id: u64,
    /// `next`, 8.
    pub next: *mut IbvSendWr,
    /// `sg_list`, 16.
    pub sg_list: *mut IbvSge,
    /// `num_sge`, 24.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode opcode`, 28.
    pub opcode: c_uint,
    /// `send_flags`, 32.
    pub send_flags: c_uint,
    /// `__be32 imm_data`, 36 (network order: store `imm.to_be()`).
    pub imm_data: u32,
    /// `wr.rdma.remote_addr`, 40.
    pub remote_addr: u64,
    /// `wr.rdma.rkey`, 48.
    pub rkey: u32,
    /// Rest of the `wr` union (52..72).
    pub wr_rest: [u32; 5],
    /// `qp_type` union (72..76) and padding, then the `bind_mw`/`tso` union (80..128).
    pub tail: [u64; 7],
}

/// `struct ibv_recv_wr` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvRecvWr {
    /// `wr_id`, 0.
    pub wr_id: u64,
    /// `next`, 8.
    pub next: *mut IbvRecvWr,
    /// `sg_list`, 16.
    pub sg_list: *mut IbvSge,
    /// `num_sge`, 24.
    pub num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvWc {
    /// `wr_id`, 0.
    pub wr_id: u64,
    /// `enum ibv_wc_status status`, 8.
    pub status: c_uint,
    /// `enum ibv_wc_opcode opcode`, 12.
    pub opcode: c_uint,
    /// `vendor_err`, 16.
    pub vendor_err: u32,
    /// `byte_len`, 20.
    pub byte_len: u32,
    /// `__be32 imm_data`, 24.
    pub imm_data: u32,
    /// `qp_num`, 28.
    pub qp_num: u32,
    /// `src_qp`, 32.
    pub src_qp: u32,
    /// `wc_flags`, 36.
    pub wc_flags: c_uint,
    /// `pkey_index`, 40.
    pub pkey_index: u16,
    /// `slid`, 42.
    pub slid: u16,
    /// `sl`, 44.
    pub sl: u8,
    /// `dlid_path_bits`, 45.
    pub dlid_path_bits: u8,
}

// ---- enums and flags (verbs.h) ----

/// `IBV_QPT_RC`.
pub const QPT_RC: c_uint = 2;
/// `IBV_QPT_UC`.
pub const QPT_UC: c_uint = 3;

/// `IBV_QP_STATE`.
pub const QP_STATE: c_int = 1 << 0;
/// `IBV_QP_ACCESS_FLAGS`.
pub const QP_ACCESS_FLAGS: c_int = 1 << 3;
/// `IBV_QP_PKEY_INDEX`.
pub const QP_PKEY_INDEX: c_int = 1 << 4;
/// `IBV_QP_PORT`.
pub const QP_PORT: c_int = 1 << 5;
/// `IBV_QP_QKEY`.
pub const QP_QKEY: c_int = 1 << 6;
/// `IBV_QP_AV`.
pub const QP_AV: c_int = 1 << 7;
/// `IBV_QP_PATH_MTU`.
pub const QP_PATH_MTU: c_int = 1 << 8;
/// `IBV_QP_TIMEOUT`.
pub const QP_TIMEOUT: c_int = 1 << 9;
/// `IBV_QP_RETRY_CNT`.
pub const QP_RETRY_CNT: c_int = 1 << 10;
/// `IBV_QP_RNR_RETRY`.
pub const QP_RNR_RETRY: c_int = 1 << 11;
/// `IBV_QP_RQ_PSN`.
pub const QP_RQ_PSN: c_int = 1 << 12;
/// `IBV_QP_MAX_QP_RD_ATOMIC`.
pub const QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
/// `IBV_QP_MIN_RNR_TIMER`.
pub const QP_MIN_RNR_TIMER: c_int = 1 << 15;
/// `IBV_QP_SQ_PSN`.
pub const QP_SQ_PSN: c_int = 1 << 16;
/// `IBV_QP_MAX_DEST_RD_ATOMIC`.
pub const QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
/// `IBV_QP_DEST_QPN`.
pub const QP_DEST_QPN: c_int = 1 << 20;

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: c_uint = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: c_uint = 2;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: c_uint = 4;

/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub const WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
/// `IBV_WR_SEND`.
pub const WR_SEND: c_uint = 2;
/// `IBV_SEND_SIGNALED`.
pub const SEND_SIGNALED: c_uint = 2;
/// `IBV_SEND_INLINE`.
pub const SEND_INLINE: c_uint = 8;

/// `IBV_WC_SUCCESS`.
pub const WC_SUCCESS: c_uint = 0;
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
pub const WC_RECV_RDMA_WITH_IMM: c_uint = 129;
/// `IBV_WC_WITH_IMM` (in `wc_flags`).
pub const WC_WITH_IMM: c_uint = 2;

/// `IBV_PORT_ACTIVE`.
pub const PORT_ACTIVE: c_uint = 4;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

// ---- function pointer types ----

/// `struct ibv_device **ibv_get_device_list(int *num_devices)`.
pub type GetDeviceListFn = unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice;
/// `void ibv_free_device_list(struct ibv_device **list)`.
pub type FreeDeviceListFn = unsafe extern "C" fn(*mut *mut IbvDevice);
/// `const char *ibv_get_device_name(struct ibv_device *device)`.
pub type GetDeviceNameFn = unsafe extern "C" fn(*mut IbvDevice) -> *const c_char;
/// `struct ibv_context *ibv_open_device(struct ibv_device *device)`.
pub type OpenDeviceFn = unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext;
/// `int ibv_close_device(struct ibv_context *context)`.
pub type CloseDeviceFn = unsafe extern "C" fn(*mut IbvContext) -> c_int;
/// `int ibv_query_device(struct ibv_context *, struct ibv_device_attr *)`.
pub type QueryDeviceFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int;
/// `int ibv_query_port(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *)` (the
/// exported `IBVERBS_1.1` symbol behind the `verbs.h` macro of the same name).
pub type QueryPortFn = unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int;
/// `int ibv_query_gid(struct ibv_context *, uint8_t port_num, int index, union ibv_gid *)`.
pub type QueryGidFn = unsafe extern "C" fn(*mut IbvContext, u8, c_int, *mut IbvGid) -> c_int;
/// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`.
pub type AllocPdFn = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd;
/// `int ibv_dealloc_pd(struct ibv_pd *)`.
pub type DeallocPdFn = unsafe extern "C" fn(*mut IbvPd) -> c_int;
/// `struct ibv_mr *ibv_reg_mr(struct ibv_pd *, void *addr, size_t length, int access)`.
pub type RegMrFn = unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr;
/// `struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *, void *addr, size_t length,
/// uint64_t iova, unsigned int access)` (`IBVERBS_1.8`, rdma-core >= 22).
pub type RegMrIova2Fn =
    unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, u64, c_uint) -> *mut IbvMr;
/// `int ibv_dereg_mr(struct ibv_mr *)`.
pub type DeregMrFn = unsafe extern "C" fn(*mut IbvMr) -> c_int;
/// `struct ibv_cq *ibv_create_cq(struct ibv_context *, int cqe, void *cq_context,
/// struct ibv_comp_channel *channel, int comp_vector)`.
pub type CreateCqFn = unsafe extern "C" fn(
    *mut IbvContext,
    c_int,
    *mut c_void,
    *mut IbvCompChannel,
    c_int,
) -> *mut IbvCq;
/// `int ibv_destroy_cq(struct ibv_cq *)`.
pub type DestroyCqFn = unsafe extern "C" fn(*mut IbvCq) -> c_int;
/// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)`.
pub type CreateQpFn = unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
/// `int ibv_destroy_qp(struct ibv_qp *)`.
pub type DestroyQpFn = unsafe extern "C" fn(*mut IbvQp) -> c_int;
/// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)`.
pub type ModifyQpFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int;
/// `ops.poll_cq`: `int (*)(struct ibv_cq *, int num_entries, struct ibv_wc *)`.
pub type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
/// `ops.post_send`: `int (*)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **)`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
/// `ops.post_recv`: `int (*)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **)`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

// ---- compile-time layout checks against verbs.h ----

const _: () = {
    assert!(size_of::<IbvGid>() == 16);
    assert!(size_of::<IbvMr>() == 48);
    assert!(offset_of!(IbvMr, lkey) == 36);
    assert!(offset_of!(IbvMr, rkey) == 40);
    assert!(size_of::<IbvDeviceAttr>() == 232);
    assert!(offset_of!(IbvDeviceAttr, max_qp_wr) == 112);
    assert!(offset_of!(IbvDeviceAttr, max_qp_init_rd_atom) == 156);
    assert!(offset_of!(IbvDeviceAttr, max_pkeys) == 224);
    assert!(offset_of!(IbvDeviceAttr, phys_port_cnt) == 227);
    assert!(offset_of!(IbvPortAttr, gid_tbl_len) == 12);
    assert!(offset_of!(IbvPortAttr, lid) == 34);
    assert!(offset_of!(IbvPortAttr, link_layer) == 46);
    assert!(offset_of!(IbvPortAttr, port_cap_flags2) == 48);
    assert!(offset_of!(IbvPortAttr, active_speed_ex) == 52);
    assert!(offset_of!(IbvPortAttr, slack) == 56);
    assert!(size_of::<IbvQpCap>() == 20);
    assert!(size_of::<IbvQpInitAttr>() == 64);
    assert!(offset_of!(IbvQpInitAttr, cap) == 32);
    assert!(offset_of!(IbvQpInitAttr, qp_type) == 52);
    assert!(offset_of!(IbvQpInitAttr, sq_sig_all) == 56);
    assert!(size_of::<IbvGlobalRoute>() == 24);
    assert!(offset_of!(IbvGlobalRoute, sgid_index) == 20);
    assert!(size_of::<IbvAhAttr>() == 32);
    assert!(offset_of!(IbvAhAttr, dlid) == 24);
    assert!(offset_of!(IbvAhAttr, is_global) == 29);
    assert!(offset_of!(IbvAhAttr, port_num) == 30);
    assert!(size_of::<IbvQpAttr>() == 144);
    assert!(offset_of!(IbvQpAttr, dest_qp_num) == 28);
    assert!(offset_of!(IbvQpAttr, cap) == 36);
    assert!(offset_of!(IbvQpAttr, ah_attr) == 56);
    assert!(offset_of!(IbvQpAttr, alt_ah_attr) == 88);
    assert!(offset_of!(IbvQpAttr, pkey_index) == 120);
    assert!(offset_of!(IbvQpAttr, max_rd_atomic) == 126);
    assert!(offset_of!(IbvQpAttr, min_rnr_timer) == 128);
    assert!(offset_of!(IbvQpAttr, timeout) == 130);
    assert!(offset_of!(IbvQpAttr, rnr_retry) == 132);
    assert!(offset_of!(IbvQpAttr, rate_limit) == 136);
    assert!(size_of::<IbvSge>() == 16);
    assert!(size_of::<IbvSendWr>() == 128);
    assert!(offset_of!(IbvSendWr, opcode) == 28);
    assert!(offset_of!(IbvSendWr, imm_data) == 36);
    assert!(offset_of!(IbvSendWr, remote_addr) == 40);
    assert!(offset_of!(IbvSendWr, rkey) == 48);
    assert!(offset_of!(IbvSendWr, tail) == 72);
    assert!(size_of::<IbvRecvWr>() == 32);
    assert!(size_of::<IbvWc>() == 48);
    assert!(offset_of!(IbvWc, imm_data) == 24);
    assert!(offset_of!(IbvWc, qp_num) == 28);
    assert!(offset_of!(IbvWc, wc_flags) == 36);
};
