//! The host backend: device memory is host memory, a stream is the calling thread, copies are
//! `memcpy` and reductions are Rust code.

pub(crate) use ccl_collectives::minifloat;
pub mod reduce;
