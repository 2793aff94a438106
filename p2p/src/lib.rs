//! cuda-ipc: GPUs of one host move each other's data directly, with no host thread in the
//! data path (DESIGN.md invariants 2-4).
//!
//! At init every rank allocates a receive area in its own device memory (`CCL_IPC_SLOTS` slots
//! of `CCL_IPC_CHUNK_BYTES` per peer) and a few flag words, and maps every peer's (CUDA IPC
//! handles across processes, peer access inside one). An operation is lowered into chunk
//! transfers per peer: the sender's copy engine copies a chunk from the user's buffer into the
//! receiver's slot (`cuMemcpyAsync`), then writes the receiver's `ready` flag
//! (`cuStreamWriteValue32` into peer memory); the receiver's stream waits on that flag
//! (`cuStreamWaitValue32`), copies the chunk out or reduces it into the user's buffer with a
//! kernel, and writes the sender's `credit` flag, which frees the slot. Everything is queued on
//! streams when the API call is made: the call never waits for a peer, and nothing runs in a
//! host callback.
//!
//! Deadlock freedom: streams may share hardware queues (and do, with
//! `CUDA_DEVICE_MAX_CONNECTIONS=1`), so a queued wait can hold up unrelated work queued after
//! it. Every transfer gets a logical time `t`, computed alike on both sides; each rank queues
//! its work in `(t, sends before receives)` order, and every wait depends only on work that
//! comes earlier in that order on some rank. The earliest unfinished piece of work is then
//! never stuck behind a later one, whatever the queue merging.
//!
//! The files, from the bottom up. CUDA-free, and run by the simulator in the tests (`sim`):
//! `layout` and `host_path` say where every flag word, slot and ring lies; `device` is
//! what the protocols queue on; `rendezvous` is how two ranks meet in host shared memory;
//! `lower` cuts a group into pieces per peer, `protocol` moves them through the slots;
//! `direct`, `direct_reduce` and `relay` are the direct paths between user buffers,
//! `small_p2p` the point-to-point kernel's plan, `captured` the groups captured into CUDA
//! graphs. On CUDA: `buffers` maps user buffers, `engine` is one communicator's state,
//! `cuda_device` the protocols' device on its streams; `setup` makes it ([`attach`]),
//! `paths` and `queue` run operations ([`takes`], [`submit`]), `capture` captures them
//! into graphs, `registration` learns registered buffers ahead ([`register`]) and agrees symmetric windows
//! ([`register_window`]; `windows` finds where a group's sends land in them), `health`
//! watches and ends it ([`check_health`], [`wait_idle`], [`shutdown`]).

mod buffers;
mod calls;
mod capture;
mod captured;
pub mod config;
pub mod control;
mod copy_monitor;
mod cuda_device;
mod device;
mod direct;
mod direct_reduce;
mod engine;
pub mod error;
mod health;
mod host_path;
mod layout;
mod limits;
mod ll_launch;
mod lower;
mod mail;
mod paths;
mod protocol;
mod queue;
mod registration;
mod rendezvous;
mod setup;
mod sharing;
#[cfg(test)]
mod sim;
mod small_p2p;
mod sync;
mod tuning;
mod windows;

pub use capture::capture;
pub use config::{BatchCopies, P2pConfig};
pub use control::{CommCtx, Control, PeerHealth};
pub use engine::{kernels_for, IpcEngine};
pub use error::{Error, ErrorKind, Result};
pub use health::{check_health, shutdown, wait_idle};
pub use paths::takes;
pub use queue::submit;
pub use registration::{deregister_window, register, register_window};
pub use setup::attach;

/// Has the engine time its copy-engine transfers for the throughput monitor whose handle is
/// `publisher` (records carry `comm`, the communicator's hash), at most one copy per lane per
/// `every` (the monitor's `CCL_MONITOR_SAMPLE_US`). Once per engine; later calls change nothing.
pub fn monitor_copies(
    eng: &IpcEngine,
    publisher: ccl_monitor::Publisher,
    comm: u64,
    every: std::time::Duration,
) {
    if publisher.is_on() {
        let m = copy_monitor::CopyMonitor::new(eng.ctx.clone(), publisher, comm, every);
        let _ = eng.copies.set(m);
    }
}
