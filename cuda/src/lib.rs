//! The device abstraction under libccl.
//!
//! Two backends share one interface: `host` (buffers are host memory, copies are `memcpy`,
//! reductions are the Rust code in [`host::reduce`]) and, later, `cuda` (the driver API loaded
//! at run time, NVRTC kernels). The host backend is what CI runs, so every plan, transport and
//! fault path is exercised without a GPU.

pub mod cuda;
pub mod host;

/// The element types and reductions, defined with the operations in `ccl-collectives`.
pub use ccl_collectives::dtype;
pub use dtype::{DataType, ReduceKind};
