//! The stage plans of hierarchical collectives, per collective: which stages, on which
//! sub-communicator, with which counts, buffers and offsets. Pure (no communicator, no IO):
//! the ranks' places and an operation in, stages out.

mod all_reduce;
mod alltoall;
mod broadcast;
mod gather;
mod parts;
mod reduce;
mod rooted;

pub use all_reduce::{leader_all_reduce, split_count, stages};
pub use alltoall::alltoall_blocks;
pub use broadcast::{broadcast_plan, broadcast_roots};
pub use gather::{gather_blocks, GatherPlan};
pub use parts::{p2p_task, split_reduction, P2p, Sub};
pub use reduce::{reduce_stages, reduce_via_first_ranks, scatter_stages};
pub use rooted::rooted_stages;
