//! The UDP datapath: a path is one UDP socket with its own source port, connected to the
//! peer's socket of the same index, so the kernel's (and any ECMP fabric's) flow hashing sees
//! N distinct 5-tuples. A failed path's socket may be *loose* for a while (unconnected, so
//! that a peer whose NIC was renumbered can come back from another address: `follow.rs`).
//!
//! Sockets are non-blocking. Datagrams go out in batches with `sendmmsg` (one syscall per
//! path per batch) and come in with `recvmmsg`. Where the kernel supports it, runs of
//! equal-sized datagrams of one path that fit the path MTU leave as one UDP GSO send
//! (`UDP_SEGMENT`: the stack, veth and bridges handle one 64 KB buffer instead of 40
//! packets) and arrive coalesced (`UDP_GRO`), split here again into datagrams.
//!
//! A datagram larger than the path MTU would be cut into IP fragments, which the kernel
//! builds, routes, bridges and reassembles one by one (on a veth pair with MTU 1500 that cost
//! 4-8x in throughput). Instead it leaves as one GSO send of MTU-sized *datapath fragments*,
//! each with a 12-byte header (type `0xF7`, index, count, stride, datagram id); the receiver
//! joins them again (in one copy when they arrive coalesced, as on veth, otherwise through a
//! per-path reassembly buffer). A lost fragment loses the datagram, as with IP fragments, and
//! the protocol retransmits the chunk. `drop_rate` discards that fraction of
//! outgoing datagrams before they reach the kernel (`CCL_MPT_DROP`), so loss recovery can be
//! exercised on a loss-free loopback. The datapath keeps no per-datagram allocations: the
//! batches are preallocated slabs of `MAX_DATAGRAM`-byte slots.

mod batch;
mod follow;
mod frag;
mod limits;
mod paths;
mod poll;
mod recv;
mod send;
#[cfg(test)]
mod tests;

pub use batch::{RxBatch, TxBatch};
pub use follow::{verdict, Verdict};
pub use limits::{BATCH, DEFAULT_UDP_PATHS, MAX_DATAGRAM, TX_MAX};
pub use paths::{UdpPaths, UdpStats};
pub use poll::wait_readable;
