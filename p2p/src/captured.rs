//! Groups captured into CUDA graphs between the GPUs of one host, on the direct paths: no
//! host node and no proxy at replay, copy engines and (for the arithmetic) one reduction
//! kernel, as the eager direct paths.
//!
//! The eager paths number their flag values per operation, which a graph cannot replay. A
//! captured group has words of its own instead ([`crate::layout::groups`] per communicator, in
//! every rank's flag area, so peers reach them through the mappings made at setup) whose values
//! are the same at every replay: 0 at rest, 1 when set. Every rank captures the same groups in
//! the same order (NCCL's rule for captured collectives), so they meet at capture: there they
//! agree on the group's index and exchange how each reaches the others' buffers (fixed across
//! replays), and each records on its capturing stream, with `P` its partners (every other rank
//! for a collective, the peers of its sends and receives):
//!
//! 1. `INPUTS`: set own word at every partner, wait for every partner's, reset them. From here
//!    every partner's inputs are ready to read.
//! 2. The first phase, reading partners' buffers in place: a reduction kernel over every rank's
//!    slice (all-reduce: this rank's share of the elements; reduce-scatter: its block; reduce:
//!    the root, all of it), copies of partners' inputs into own outputs (all-gather,
//!    all-to-all, gather, scatter, broadcast, receives).
//! 3. `HALFWAY` (groups with an all-reduce or a [`steps::parked`] receive): as 1; then the
//!    all-reduce's second phase copies every partner's reduced share out of the partner's
//!    output, and parked receives move from scratch memory into place.
//! 4. `DONE`: as 1. Every partner has read all it needs from this rank's buffers, so the work
//!    after the graph may change them.
//!
//! Why a reset cannot swallow the next replay's write: a word is reset right after its wait,
//! before this rank sets any later word; a partner sets it again only in its next replay,
//! after it saw this rank's `DONE`, which comes later still.
//!
//! Small groups take shorter forms: an all-reduce of at most `CCL_GRAPH_ONE_SHOT_BYTES` is
//! reduced whole by every rank (`group::one_shot`: no `HALFWAY`); and a group that is one small
//! reduction (`group::fused`) or only copies (`group::fused_copies`) runs as one kernel that
//! does the handshakes itself on the same words in the same order (`CCL_GRAPH_FUSED`, a local
//! choice: one rank's kernel meets another's parts).
//!
//! Capture costs two rounds over the bootstrap network (the agreement, then whether every rank
//! could map every buffer): each rank falls back to the staged captured path exactly when
//! every other does. PreMulSum with its scalar in device memory takes the staged captured path
//! (the communicator's graph capture).
//!
//! Here without CUDA: the agreement at capture ([`agree`]), what each rank queues ([`group`];
//! in host-only mode [`host_only`]) and the steps both share ([`steps`]). The engine captures
//! on its streams in `capture`.

pub(crate) mod agree;
pub(crate) mod group;
pub(crate) mod host_only;
pub(crate) mod steps;
#[cfg(test)]
mod tests;
