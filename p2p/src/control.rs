//! What the engine may know of its communicator, and what it may ask of it: the engine never
//! sees the communicator itself (it lives in `ccl`, above this crate), only this context.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The peers' state as the control plane last saw it.
#[derive(Debug)]
pub enum PeerHealth {
    Ok,
    /// A peer that queued work may still need has left, died or reported a failure; whether
    /// that work is lost shows only if it stays queued a while.
    NeededPeerLeft(Error),
    /// The control plane itself failed.
    Failed(Error),
}

/// The communicator's control plane and error slot, as the engine uses them.
pub trait Control: Send + Sync {
    /// Every rank's `mine`, in rank order, over the communicator's control connections.
    /// Collective: every rank calls it at the same point.
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Waits until the communicator's other engines ran what they had queued: their
    /// progress threads need the control plane that an exchange holds, and a peer's may be
    /// waiting for ours.
    fn settle_others(&self) -> Result<()>;
    /// The peers' health; `None` when the control plane is busy (another thread holds it) or
    /// gone, so a poll never waits.
    fn poll_peers(&self) -> Option<PeerHealth>;
    /// Records `e` as the communicator's asynchronous error (`ncclCommGetAsyncError`).
    fn set_async_error(&self, e: &Error);
}

/// One communicator, as the engine sees it.
#[derive(Clone)]
pub struct CommCtx {
    pub rank: usize,
    pub nranks: usize,
    /// The CUDA device of this rank (-1: none).
    pub cuda_dev: i32,
    /// Equal on every rank, different for every communicator: names shared regions.
    pub nonce: u64,
    /// Set by `ncclCommAbort`: every wait gives up.
    pub abort: Arc<AtomicBool>,
    /// Every rank of the communicator runs on this host.
    pub one_host: bool,
    /// Each rank's process id (ranks of one process share buffers without IPC handles).
    pub pids: Arc<[u32]>,
    /// Some two GPUs of this host lie farther apart than `NCCL_P2P_LEVEL` allows (from the
    /// topology search; the same on every rank).
    pub p2p_beyond_level: bool,
    pub control: Arc<dyn Control>,
}

impl CommCtx {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn set_async_error(&self, e: &Error) {
        self.control.set_async_error(e)
    }
}

impl std::fmt::Debug for CommCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommCtx(rank {} of {})", self.rank, self.nranks)
    }
}
