//! A communicator's hierarchy: its two sub-communicators (this rank's host, and the ranks of
//! its index on every host), where the ranks sit, and the scratch its operations share between
//! stages; whether a communicator gains from one ([`wanted`]), decided at init.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::core::Comm;
use crate::error::Result;
use crate::params;
use ccl_collectives::hierarchy::placement::{places, ranks_by_host};

/// A communicator's two sub-communicators.
pub struct Hierarchy {
    /// The ranks of this rank's host, in rank order.
    pub local: Comm,
    /// The ranks holding this rank's place (its index among its host's ranks) on every host,
    /// in rank order.
    pub cross: Comm,
    /// Whether operations on host memory take it too (`CCL_HIERARCHY=1`).
    pub(super) host_memory: bool,
    /// Every rank's (host index, index among its host's ranks).
    pub(super) places: Vec<(usize, usize)>,
    /// This rank's host index.
    pub(super) host: usize,
    /// The number of ranks of the host with the fewest: the indices every host holds.
    pub(super) fewest: usize,
    /// Whether every host holds as many ranks (else reduce-scatters and all-to-alls stay flat).
    pub(super) even: bool,
    /// Where reduce-scatters and reduces keep their partial reductions between stages.
    pub(super) scratch: Mutex<Scratch>,
}

/// A hierarchy's scratch for partial reductions, reused group after group.
#[derive(Default)]
pub(super) struct Scratch {
    /// For host memory (`CCL_HIERARCHY=1`): the host path runs a group to completion, so it is
    /// free again once the group's stages have run. Words, for any element's alignment.
    pub(super) host: Vec<u64>,
    /// For GPU memory: the work queued on the callers' streams reads it after the call
    /// returns, so the next group's streams wait for that first.
    pub(super) gpu: crate::gpu::StreamScratch,
}

impl Drop for Hierarchy {
    fn drop(&mut self) {
        // Not freed under stream work still queued to read it (the sub-communicators were
        // destroyed or aborted first, which ends theirs).
        self.scratch.get_mut().gpu.settle();
    }
}

/// Where `comm` would gain from a hierarchy: `CCL_HIERARCHY` and the ranks' placement allow
/// one, and every rank wants it (a rank without a GPU would make the split one-sided, so all
/// agree). Collective: every rank of `comm` calls it at the end of init (the decision is the
/// same on all: the table is). `agree_all` is the communicator's agreement among its ranks.
pub(crate) fn wanted(
    comm: &Comm,
    agree_all: impl FnOnce(bool) -> Result<bool>,
) -> Result<Option<Placement>> {
    let mode = params::CCL_HIERARCHY.get_str();
    let mode = mode.trim();
    if mode == "0" {
        return Ok(None);
    }
    let forced = mode == "1";
    let hosts: Vec<u64> = {
        let g = comm.0.state.lock();
        match g.as_ref() {
            Some(st) => st.table.iter().map(|i| i.host_id).collect(),
            None => return Ok(None),
        }
    };
    let Some(places) = places(&hosts) else {
        return Ok(None);
    };
    let Some(&(host, local)) = places.get(comm.rank()) else {
        return Ok(None);
    };
    // Only GPU communicators gain (host memory moves through the same transports either way),
    // unless forced.
    let want = forced || (comm.0.cuda_dev >= 0 && crate::gpu::available());
    if !agree_all(want)? {
        return Ok(None);
    }
    Ok(Some(Placement {
        forced,
        places,
        host,
        local,
    }))
}

/// Where this rank sits among the hosts, as [`wanted`] found it.
pub(crate) struct Placement {
    forced: bool,
    places: Vec<(usize, usize)>,
    /// This rank's host index, and its index among its host's ranks: the colours of the
    /// splits that make the two sub-communicators.
    pub host: usize,
    pub local: usize,
}

impl Hierarchy {
    /// The hierarchy over `local` (this host's ranks) and `cross` (the ranks of this index on
    /// every host), split from `comm` by the colours of `at`.
    pub(crate) fn new(comm: &Comm, at: Placement, local: Comm, cross: Comm) -> Hierarchy {
        let per_host: Vec<usize> = ranks_by_host(&at.places).iter().map(Vec::len).collect();
        tracing::info!(
            "rank {}: hierarchy: {} ranks on this host (index {}), {} hosts",
            comm.rank(),
            local.nranks(),
            at.local,
            per_host.len()
        );
        let fewest = per_host.iter().copied().min().unwrap_or(0);
        Hierarchy {
            local,
            cross,
            host_memory: at.forced,
            host: at.host,
            even: per_host.iter().all(|&c| c == fewest),
            fewest,
            places: at.places,
            scratch: Mutex::new(Scratch::default()),
        }
    }
}

impl crate::engine::Engine for Hierarchy {
    /// Its stages run on the sub-communicators, whose own lifecycle waits for them.
    fn wait_idle(&self, _: &std::sync::atomic::AtomicBool) -> Result<()> {
        Ok(())
    }

    /// The sub-communicators are destroyed or aborted with their parent ([`crate::comm`]);
    /// the scratch is freed on drop, after their streams' work.
    fn shutdown(&self, _aborted: bool) {}

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
