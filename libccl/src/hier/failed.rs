//! When a stage fails: the error explained by the sub-communicator it ran on, and, where a
//! peer failed, the sub-communicators of its hierarchies broken so their other ranks stop
//! waiting at once.

use std::sync::Arc;

use super::hierarchy::Hierarchy;
use crate::core::Comm;
use ccl_collectives::hierarchy::placement::ranks_by_host;

impl Hierarchy {
    /// Whether `comm` is one of its sub-communicators.
    fn owns(&self, comm: &Comm) -> bool {
        Arc::ptr_eq(&comm.0, &self.local.0) || Arc::ptr_eq(&comm.0, &self.cross.0)
    }

    /// `e` from `sub`, if it is one of the sub-communicators (whose errors name ranks by their
    /// place there), with which one and what its ranks are in this communicator.
    pub(crate) fn explain(&self, e: crate::error::Error, sub: &Comm) -> crate::error::Error {
        let index = self.local.rank();
        let (which, ranks): (&str, Vec<usize>) = if Arc::ptr_eq(&sub.0, &self.local.0) {
            let ranks = ranks_by_host(&self.places).swap_remove(self.host);
            ("the host's communicator", ranks)
        } else if Arc::ptr_eq(&sub.0, &self.cross.0) {
            let ranks = (0..self.places.len())
                .filter(|&r| self.places[r].1 == index)
                .collect();
            ("the communicator across the hosts", ranks)
        } else {
            return e;
        };
        e.context(format!(
            "in a hierarchical stage on {which}, whose ranks 0.. are this communicator's {ranks:?}"
        ))
    }
}

/// `e` from a stage group that ran on `comms`: explained by the hierarchy whose
/// sub-communicator it ran on, where that is one ([`Hierarchy::explain`]); and where a peer
/// failed (it died, or went silent past the timeout), the sub-communicators of the hierarchies
/// the stage ran on (theirs, or their communicator's flat operations) are broken with it, so
/// their peers are told `e` and they are aborted, which drops their connections without
/// goodbye. Their other ranks, waiting in a stage there for this one (which will not come),
/// then fail at once instead of at `CCL_TIMEOUT_S`, and fail theirs in turn. The communicators
/// themselves keep their connections (`ncclCommShrink` builds on them); an error of the
/// caller's (a bad argument, a capture it invalidated) aborts nothing.
pub(crate) fn stage_failed(
    e: crate::error::Error,
    comms: &[Comm],
    hierarchies: &[Arc<Hierarchy>],
) -> crate::error::Error {
    let on: Vec<&Arc<Hierarchy>> = hierarchies
        .iter()
        .filter(|h| {
            comms.iter().any(|c| {
                h.owns(c)
                    || c.0
                        .hier
                        .get::<Hierarchy>()
                        .is_some_and(|x| Arc::ptr_eq(&x, h))
            })
        })
        .collect();
    let e = match comms {
        [sub] => on.iter().fold(e, |e, h| h.explain(e, sub)),
        _ => e,
    };
    if !matches!(
        e.kind,
        crate::error::ErrorKind::Remote | crate::error::ErrorKind::System
    ) {
        return e;
    }
    for h in on {
        // Why first, so that they report the cause, not only that this rank is gone.
        h.local.notify_error(&e);
        h.cross.notify_error(&e);
        tracing::warn!(
            "a hierarchical operation failed: aborting its sub-communicators (this rank is {} \
             of its host's, {} across the hosts)",
            h.local.rank(),
            h.cross.rank()
        );
        h.local.abort();
        h.cross.abort();
    }
    e
}
