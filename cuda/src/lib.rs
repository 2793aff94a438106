//! The device abstraction under libccl.
//!
//! Two backends share one interface: `host` (buffers are host memory, copies are `memcpy`,
//! reductions are the Rust code in [`host::reduce`]) and, later, `cuda` (the driver API loaded
//! at run time, NVRTC kernels). The host backend is what CI runs, so every plan, transport and
//! fault path is exercised without a GPU.

pub mod cuda;
pub mod dtype;
pub mod host;

pub use dtype::{DataType, ReduceKind};
