//! The peer watch: a connection waiting to receive learns that its peer is gone.
//!
//! A connection that only receives sends nothing that the peer answers (acknowledgements
//! are not acknowledged), so when every path to the peer dies it has no timeout to count:
//! it used to wait until the application's own timeout. So while a receive is posted and
//! incomplete and nothing has arrived from the peer for [`QUIET_ROUNDS`] times `rto_max`,
//! the connection sends a probe, which the peer's connection answers on the same path
//! whatever its application is doing; then one every `rto_max`, on each path in turn.
//! Any frame from the peer ends the watch; `max_rto_retries` probes in a row unanswered
//! over at least `fail_after` fail the connection ([`MptError::PeerSilent`]). A healthy peer that simply has nothing
//! to send yet (a receive posted long before its send is normal) answers every probe.

use crate::mpt::path::PathId;
use crate::mpt::time::Instant;
use crate::mpt::MptError;

use super::state::{Connection, Watch};
use super::types::Transmit;

/// A connection waiting to receive probes its peer after this many `rto_max` without a
/// frame from it (512 ms at the default 64 ms): an idle healthy connection costs one probe
/// and its answer per such period.
pub const QUIET_ROUNDS: u32 = 8;

impl Connection {
    /// A frame came from the peer: it is alive, and the quiet period starts again.
    pub(super) fn watch_heard(&mut self) {
        self.watch.deadline = None;
        self.watch.unanswered = 0;
        self.watch.since = None;
        self.watch.pending = false;
    }

    /// Arms or disarms the watch: armed while a posted receive is incomplete.
    pub(super) fn update_watch(&mut self, now: Instant) {
        if self.recv_base == self.posted {
            self.watch = Watch {
                next_path: self.watch.next_path,
                ..Watch::default()
            };
        } else if self.watch.deadline.is_none() && !self.watch.pending {
            let wait = match self.watch.unanswered {
                0 => self.cfg.rto_max.saturating_mul(QUIET_ROUNDS),
                _ => self.cfg.rto_max,
            };
            self.watch.deadline = Some(now + wait);
        }
    }

    /// The watch's timer fired: the next probe goes, or past the budget the connection
    /// fails.
    pub(super) fn on_watch_timeout(&mut self, now: Instant) {
        self.watch.deadline = None;
        let since = *self.watch.since.get_or_insert(now);
        if self.budget_spent(self.watch.unanswered + 1, since, now) {
            self.fail(MptError::PeerSilent(self.watch.unanswered));
            return;
        }
        self.watch.unanswered += 1;
        self.watch.pending = true;
    }

    /// The watch's probe, if one is due.
    pub(super) fn poll_watch_probe(&mut self) -> Option<Transmit> {
        if !self.watch.pending {
            return None;
        }
        self.watch.pending = false;
        self.stats.probes_sent += 1;
        let path = PathId(self.watch.next_path % self.paths.len());
        self.watch.next_path = (path.0 + 1) % self.paths.len();
        Some(self.probe(path))
    }
}
