//! Hierarchical collectives for communicators that span hosts with several ranks on some.
//! Flat, every byte of such a communicator is staged through host memory and the proxy, even
//! between GPUs of one host.
//!
//! Hosts of equal size. An all-reduce: a reduce-scatter among the ranks of a host (cuda-ipc:
//! copy engines and kernels over NVLink), an all-reduce of each rank's share among the ranks of
//! the other hosts that hold the same share (the network path, a host's ranks each carrying 1/L
//! of the bytes), and an all-gather among the ranks of a host. An all-gather: each rank's block
//! across the hosts to the ranks holding its index, then every block so gathered to the other
//! ranks of the host, as sends and receives straight into each block's place. A broadcast:
//! across the hosts among the ranks holding the root's index on their hosts, then on every
//! host. A reduce-scatter (each host's ranks consecutive in rank order): on every host, one
//! reduce-scatter of each host's range of blocks, partial sums into a scratch; then a
//! reduce-scatter of those across the hosts (the network carries each block's partial sums
//! only). A reduce: on every host to the rank holding the root's index, then across the hosts
//! to the root. An all-to-all (`CCL_HIERARCHY_ALLTOALL=1`, each host's ranks consecutive): on
//! every host, each rank's blocks for the ranks holding another's index gathered at that rank;
//! then across the hosts among the ranks of one index, a host's blocks in one message (NCCL's
//! PXN). A gather (each host's ranks consecutive): on every host to the rank holding the root's
//! index, then each host's blocks in one message to the root; a scatter the reverse. Sends and
//! receives between ranks of one host go on the host's communicator.
//!
//! Hosts of different sizes (after a shrink, say): an all-reduce goes as a reduce to each
//! host's first rank, an all-reduce among those, a broadcast on each host; an all-gather's
//! blocks each cross to one rank of every other host (at the block's index modulo that host's
//! ranks), on the communicator itself, then go to the host's other ranks; a broadcast whose
//! root's index some host lacks goes on the root's host first, then among the hosts' first
//! ranks, then on the other hosts; a reduce to such a root the reverse (to each host's first
//! rank, among the first ranks to the root's host's, which sends it to the root); broadcasts
//! and reduces whose root's index every host holds as above; gathers and scatters (each host's
//! ranks consecutive) as above, each host's blocks at the root's index modulo its ranks; sends
//! and receives within a host as above; reduce-scatters and all-to-alls flat.
//!
//! The two sub-communicators are made at init (`attach`) by splitting the communicator: one of
//! the ranks of each host, one of the ranks holding the same place on every host. Each
//! operation is decided on itself (its kind, count and memory, and settings every rank shares),
//! so ranks that group it differently decide alike; its stages run in its place in the
//! communicator's call order, each a group of its own on the sub-communicators, in stream
//! order, with the flat operations between them groups of their own ([`take()`]).
//!
//! The pure parts (where the ranks sit on their hosts, the stage plans of each collective) are
//! `ccl_collectives::hierarchy`. Its files: `hierarchy` (the [`Hierarchy`] and whether a
//! communicator gains from one), `eligible` (whether an operation goes
//! hierarchically), `stages` (one operation's stage groups), `take` (a group's hierarchical
//! operations taken out, their stages in rounds, their scratch claimed), `failed` (what a
//! failed stage does to the sub-communicators).

mod eligible;
mod failed;
mod hierarchy;
mod stages;
mod take;

pub(crate) use failed::stage_failed;
pub(crate) use hierarchy::wanted;
pub use hierarchy::Hierarchy;
pub(crate) use take::{take, Taken};
