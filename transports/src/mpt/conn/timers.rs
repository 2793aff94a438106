//! Timers: the retransmission timeout (its estimate, backoff and the floor learnt from
//! spurious timeouts), the retry budget and failure, the receiver-driven sender's stall
//! timer, and the rendezvous probe.

use std::time::Duration;

use crate::mpt::cc::{LossEvent, LossKind};
use crate::mpt::time::{min_deadline, Instant};
use crate::mpt::MptError;

use super::state::{ChunkState, Connection, TxChunk, MAX_BACKOFF_SHIFT, SPURIOUS_FLOOR_HOLD};
use super::types::Event;

impl Connection {
    /// The timeout for chunks sent at `now`: `max(rto, srtt + 4 rttvar)` (RFC 6298, with the
    /// configured RTO as the floor, raised by spurious timeouts: `spurious_floor`), doubled
    /// per consecutive timeout, capped at `rto_max`. On fast fabrics round trips are far
    /// below 500 us and this is UCCL's constant RTO; on slow links, where a few queued 32 KiB
    /// chunks exceed it, it prevents spurious timeouts.
    pub(super) fn rto_current(&self, now: Instant) -> Duration {
        let estimate = self.srtt.map_or(Duration::ZERO, |s| s + self.rttvar * 4);
        self.cfg
            .rto
            .max(self.learnt_floor(now))
            .max(estimate)
            .saturating_mul(1 << self.rto_backoff.min(MAX_BACKOFF_SHIFT))
            .min(self.cfg.rto_max)
    }

    /// `spurious_floor` as it stands at `now`: held for `SPURIOUS_FLOOR_HOLD` times itself
    /// after it was last raised, then halved per such period.
    fn learnt_floor(&self, now: Instant) -> Duration {
        let hold = self.spurious_floor.saturating_mul(SPURIOUS_FLOOR_HOLD);
        if hold.is_zero() {
            return Duration::ZERO;
        }
        let periods = now
            .saturating_duration_since(self.spurious_floor_at)
            .as_nanos()
            / hold.as_nanos();
        match u32::try_from(periods) {
            Ok(p) if p < 32 => self.spurious_floor / (1u32 << p),
            _ => Duration::ZERO,
        }
    }

    /// An acknowledgement showed chunks declared lost by a timeout arriving from their only
    /// copy, the oldest sent `delay` ago: the round trip outgrew the timeout without a loss
    /// (RFC 4015's Eifel detection, from acknowledgement state instead of timestamps). The
    /// congestion control undoes the cut, and the timeout floor rises to a quarter above
    /// that delay -- unless the timeouts had backed off more than once: then the network
    /// was out (every path down, say) and these are chunks that got through just before,
    /// whose acknowledgements waited for it to heal; an outage is no round trip to learn.
    pub(super) fn on_spurious_timeout(&mut self, now: Instant, delay: Duration) {
        self.stats.spurious_timeouts += 1;
        if self.consecutive_rtos <= 1 {
            let floor = (delay + delay / 4).min(self.cfg.rto_max);
            self.spurious_floor = self.learnt_floor(now).max(floor);
            self.spurious_floor_at = now;
        }
        self.cc.on_spurious_timeout(now);
    }

    pub(super) fn rearm_rto(&mut self, now: Instant) {
        let rto = self.rto_current(now);
        self.rto_deadline = (self.snd_una..self.snd_nxt)
            .map(|s| self.chunk(s))
            .filter(|c| c.state == ChunkState::Outstanding)
            .map(|c| c.tx_time + self.timeout_of(c, rto))
            .min();
    }

    /// The timeout of chunk `c` given the connection's `rto`: the acknowledgement of a chunk
    /// that is a whole message may be held back for `ack_delay` (RFC 9002's max_ack_delay).
    fn timeout_of(&self, c: &TxChunk, rto: Duration) -> Duration {
        if c.offset == 0 && c.last {
            rto + self.cfg.ack_delay
        } else {
            rto
        }
    }

    pub(super) fn on_rto(&mut self, now: Instant) {
        let rto = self.rto_current(now);
        let mut n = 0u32;
        for seq in self.snd_una..self.snd_nxt {
            let c = self.chunk(seq);
            if c.state == ChunkState::Outstanding && c.tx_time + self.timeout_of(c, rto) <= now {
                self.declare_lost(seq, now, true);
                n += 1;
            }
        }
        if n > 0 {
            self.stats.rto_events += 1;
            self.stats.rto_chunks += u64::from(n);
            if self.rto_counted_at.map_or(true, |t| now >= t + rto) && !self.count_timeout(now) {
                return;
            }
            let ev = LossEvent {
                kind: LossKind::Timeout,
                chunks: n,
                srtt: self.srtt,
            };
            self.cc.on_loss(now, &ev);
            if self.paths.view(self.small_path).consecutive_losses > 0 {
                let best = self.paths.best();
                if best != self.small_path {
                    self.small_path = best;
                    self.stats.small_path_moves += 1;
                }
            }
        }
        self.rearm_rto(now);
    }

    pub(super) fn fail(&mut self, e: MptError) {
        if self.failed.is_none() {
            self.events.push_back(Event::Failed(e.clone()));
            self.failed = Some(e);
            self.rto_deadline = None;
            self.probe_deadline = None;
            self.pacing_deadline = None;
            self.reorder_deadline = None;
            self.credit_next = None;
            self.credit_stall = None;
        }
    }

    /// Arms or disarms the receiver-driven sender's stall timer: data to send (a lost chunk,
    /// or a new one whose receive is posted), nothing in flight, and no credit to send it.
    pub(super) fn update_credit_stall(&mut self, now: Instant) {
        let stalled = self.cc.receiver_driven()
            && self.inflight_bytes == 0
            && (self.lost > 0
                || (self.cut_msg < self.next_send && self.cut_msg < self.peer_posted));
        if !stalled {
            self.credit_stall = None;
        } else if self.credit_stall.is_none() {
            self.credit_stall = Some(now + self.rto_current(now));
        }
    }

    /// The stall timer ran out: counts as a retransmission timeout (so a sender cut off from
    /// every path fails within the retry budget instead of waiting forever) and lets one
    /// chunk go without credit.
    pub(super) fn on_credit_stall(&mut self, now: Instant) {
        self.stats.rto_events += 1;
        if self.count_timeout(now) {
            self.credit_override = true;
        }
    }

    /// One timeout toward the retry budget: fails the connection past the budget (returns
    /// false), else backs the timer off.
    fn count_timeout(&mut self, now: Instant) -> bool {
        self.rto_counted_at = Some(now);
        self.consecutive_rtos += 1;
        let since = *self.rtos_since.get_or_insert(now);
        if self.budget_spent(self.consecutive_rtos, since, now) {
            self.fail(MptError::RetriesExhausted(self.cfg.max_rto_retries));
            return false;
        }
        self.rto_backoff = (self.rto_backoff + 1).min(MAX_BACKOFF_SHIFT);
        true
    }

    /// Whether `count` timeouts or unanswered probes, the first at `since`, end the connection:
    /// more than `max_rto_retries` of them over at least `fail_after`.
    pub(super) fn budget_spent(&self, count: u32, since: Instant, now: Instant) -> bool {
        count > self.cfg.max_rto_retries
            && now.saturating_duration_since(since) >= self.cfg.fail_after
    }

    /// Arms the timeout for chunk `seq`, just sent.
    pub(super) fn arm_rto_for(&mut self, now: Instant, seq: u64) {
        let t = now + self.timeout_of(self.chunk(seq), self.rto_current(now));
        self.rto_deadline = min_deadline(self.rto_deadline, Some(t));
    }

    /// Arms or disarms the rendezvous probe: a sender whose next message waits for the
    /// peer's receive, with nothing in flight that would bring an acknowledgement, asks.
    pub(super) fn update_probe(&mut self, now: Instant) {
        let waiting = self.cut_msg < self.next_send
            && self.cut_msg >= self.peer_posted
            && self.snd_una == self.snd_nxt
            && self.lost == 0;
        if !waiting {
            self.probe_deadline = None;
            self.probe_backoff = 0;
        } else if self.probe_deadline.is_none() && !self.probe_pending {
            let wait = self
                .cfg
                .rto
                .saturating_mul(1 << self.probe_backoff)
                .min(self.cfg.rto_max);
            self.probe_deadline = Some(now + wait);
        }
    }
}
