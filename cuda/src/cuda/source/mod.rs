//! CUDA C++ source of the reduction kernels, generated per (type, operation).
//!
//! The source includes no header (NVRTC's header availability varies between installs):
//! bit casts, conversions and rounding-mode arithmetic are inline PTX, and fp16 / bf16 / fp8
//! conversions are written out with integer bit manipulation. The numerics reproduce
//! [`crate::host::reduce`] bit for bit:
//!
//! * a single `+`, `*`, max or min of two fp16/bf16/fp8 values is computed in `float` and
//!   rounded once to the narrow type (ties to even; fp8 saturating; NaN canonical). `float`
//!   has at least 2p+2 bits for every narrow p, so the float rounding never changes the final
//!   result: this equals the exactly rounded operation the host computes in `f64`;
//! * operations whose exact result is wider (the fused `x * s + acc`, division by an integer)
//!   are done in `double`, rounded to `float` with round-to-odd, then to the narrow type:
//!   round-to-odd with 2 spare bits makes the second rounding exact;
//! * `f32` results that are NaN are the canonical `0x7fffffff`; Max/Min follow CUDA
//!   `fmaxf`/`fminf` with `max(-0, +0) = +0`, spelled out as the host does;
//! * integers wrap (arithmetic on the unsigned type of the same width).
//!
//! Kernels are compiled with `--fmad=false --ftz=false --prec-div=true` (see
//! [`super::nvrtc::Nvrtc::compile`]).

mod format;
mod graph;
mod ll;
mod op;
mod prelude;
mod program;
mod reduce;
mod wait;

pub use graph::{GRAPH_AR_HELD, GRAPH_AR_MAX_ELEMS, GRAPH_AR_THREADS, GRAPH_COPIES_MAX};
pub use ll::{
    ll_area_bytes, ll_data_offset, ll_p2p_offset, ll_p2p_pack_offset, ll_p2p_words_bytes,
    ll_pack_offset, ll_seq_offset, ll_spin_words_bytes, LL_DEFAULT_BLOCKS, LL_EVERY_RANK,
    LL_EXCHANGE_MAX_RANKS, LL_MAX_BLOCKS, LL_P2P_BLOCKS, LL_P2P_BYTES, LL_P2P_MAX_OPS,
    LL_P2P_PACK_SLOT, LL_P2P_SLOTS, LL_PACK_MAX, LL_THREADS,
};
pub use op::{dtype_tag, kernel_name, vec_elems, KernelOp, ReduceKindKey, BLOCK_THREADS, UNROLL};
pub use prelude::DEVICE_PRIMITIVES;
pub use program::{batch_source, batch_source_with, batchable, kernel_source, kernel_source_with};
pub use reduce::REDUCE_N_MAX;
pub use wait::{
    MAIL_ALSO, MAIL_BYTES, MAIL_DST, MAIL_MAX_BLOCKS, MAIL_SEEN, MAIL_SLOT_WORDS, MAIL_SRCS,
    MAIL_TAG,
};
