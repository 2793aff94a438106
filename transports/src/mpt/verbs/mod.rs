//! `ibverbs` datapath of the multipath transport: UC write-with-immediate, falling back to RC.
//!
//! Nothing here needs rdma-core at build time: `libibverbs.so.1` is opened at run time
//! ([`Verbs::load`]) and every struct the datapath touches is declared from the public
//! `verbs.h` ABI in [`ffi`], with its field offsets checked at compile time. A machine
//! without the library or without an RDMA device gets [`VerbsError::NoLibrary`] or
//! [`VerbsError::NoRdmaDevice`], never a panic.
//!
//! The parts that decide things are pure and unit-tested without hardware:
//! * [`qp`]: the queue-pair state machine (RESET -> INIT -> RTR -> RTS, ERR) as data, with the
//!   attribute mask each transition needs for UC and RC, and the UC -> RC fallback;
//! * [`gid`]: GID choice (RoCEv2 with a routable address, never link-local unless nothing
//!   else, `NCCL_IB_GID_INDEX`) and its re-resolution after a port comes back, plus the
//!   sysfs reader that builds the table;
//! * [`imm`]: the 32-bit immediate (the mpt [`ChunkHeader`](super::ChunkHeader)) and the
//!   64-bit work-request id packing.
//!
//! [`loader`] and [`device`] are the thin unsafe layer over the library.

/// The environment variables the verbs datapath reads (queue-pair attributes, GID choice).
pub const ENV_VARS: &[&str] = &[
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_IB_PKEY",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
];

pub mod device;
pub mod ffi;
pub mod gid;
pub mod imm;
pub mod loader;
pub mod qp;

pub use device::{Context, Cq, DeviceAttr, Mr, Pd, PortAttr, Qp, WorkCompletion};
pub use gid::{GidChoice, GidEntry, GidPolicy, GidType, NetdevState, Reresolved};
pub use imm::{WrId, WrKind};
pub use loader::Verbs;
pub use qp::{IbParams, QpEndpoint, QpKind, QpPlan, QpState, QpStep};

/// Everything that can go wrong in the verbs datapath.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// `libibverbs.so.1` could not be opened (rdma-core is not installed).
    #[error("libibverbs not available: {0}")]
    NoLibrary(String),
    /// The library lacks a symbol the datapath needs.
    #[error("libibverbs lacks symbol {0}")]
    MissingSymbol(&'static str),
    /// The library loaded but there is no RDMA device (or no kernel support).
    #[error("no RDMA device")]
    NoRdmaDevice,
    /// A verbs call failed.
    #[error("{call} failed: errno {errno}")]
    Call {
        /// The function.
        call: &'static str,
        /// `errno` (or the returned error code).
        errno: i32,
    },
    /// A parameter is outside what the verbs ABI allows.
    #[error("invalid verbs parameter {name}: {value}")]
    InvalidParam {
        /// The parameter.
        name: &'static str,
        /// Its value, as text.
        value: String,
    },
    /// A queue-pair transition was asked for that the state machine does not allow.
    #[error("invalid queue-pair transition {from:?} -> {to:?}")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// No GID in the table can be used.
    #[error("no usable GID on this port")]
    NoUsableGid,
    /// `NCCL_IB_GID_INDEX` names an entry that is absent or empty.
    #[error("NCCL_IB_GID_INDEX={0} names no populated GID")]
    GidIndexNotFound(u32),
    /// The sysfs GID table could not be read or parsed.
    #[error("sysfs GID table: {0}")]
    Sysfs(String),
    /// A packed work-request id field does not fit.
    #[error("work-request id field {field} out of range: {value}")]
    WrIdOutOfRange {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// The multipath core rejected a header.
    #[error(transparent)]
    Mpt(#[from] super::MptError),
}
