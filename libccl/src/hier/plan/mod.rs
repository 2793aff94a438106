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

pub(crate) use all_reduce::{leader_all_reduce, split_count, stages};
pub(crate) use alltoall::alltoall_blocks;
pub(crate) use broadcast::{broadcast_plan, broadcast_roots};
pub(crate) use gather::{gather_blocks, GatherPlan};
pub(crate) use parts::{p2p_task, split_reduction, P2p, Sub};
pub(crate) use reduce::{reduce_stages, reduce_via_first_ranks, scatter_stages};
pub(crate) use rooted::rooted_stages;
