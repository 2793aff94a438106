//! Acknowledgements: what an acknowledgement acknowledges (cumulatively and by SACK), the
//! round-trip samples it carries, and the losses it reveals (RACK-style fast retransmit).

use std::time::Duration;

use crate::mpt::cc::{AckSample, LossEvent, LossKind};
use crate::mpt::frame::AckFrame;
use crate::mpt::header::unwrap_u32;
use crate::mpt::time::{min_deadline, Instant};

use super::state::{slot_of, ChunkState, Connection, MAX_REO_MULT};
use super::types::{Event, SendId};

impl Connection {
    pub(super) fn on_ack(&mut self, now: Instant, a: &AckFrame) {
        self.stats.acks_received += 1;
        let posted = unwrap_u32(self.peer_posted, a.posted);
        if posted > self.peer_posted {
            self.peer_posted = posted;
        }
        if self.cc.receiver_driven() {
            let credit = unwrap_u32(self.peer_credit, a.credit);
            if credit > self.peer_credit {
                let delta = credit - self.peer_credit;
                self.peer_credit = credit;
                self.stats.credit_received += delta;
                self.cc.on_rx_credit(now, delta);
            }
        }
        if a.duplicate {
            self.on_duplicate_report(now);
        }
        let cum = unwrap_u32(self.snd_una, a.cum);
        if cum > self.snd_nxt {
            self.stats.acks_invalid += 1;
            return;
        }
        let una_before = self.snd_una;
        let mut acked = Acked::default();
        for seq in self.snd_una..cum {
            self.ack_chunk(now, seq, &mut acked);
        }
        let mut bits = a.sack;
        while bits != 0 {
            let i = u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            let seq = cum + 1 + i;
            if seq >= self.snd_una && seq < self.snd_nxt {
                self.ack_chunk(now, seq, &mut acked);
            }
        }
        self.snd_una = self.snd_una.max(cum);
        while self.snd_una < self.snd_nxt && self.chunk(self.snd_una).state == ChunkState::Acked {
            self.snd_una += 1;
        }

        let mut sample_path = None;
        let mut rtt = None;
        if let Some(e) = a.echo {
            let seq = unwrap_u32(self.snd_una, e.seq);
            let c = *self.chunk(seq);
            if c.seq == seq && c.state != ChunkState::Free && seq < self.snd_nxt {
                sample_path = Some(c.path);
                // Karn: a retransmitted chunk's echo cannot tell which copy arrived.
                if c.retransmits == 0 {
                    let sample = now
                        .saturating_duration_since(c.tx_time)
                        .saturating_sub(Duration::from_micros(u64::from(e.held_us)));
                    self.paths.on_rtt(c.path, now, sample);
                    // RFC 6298 estimators (gains 1/8 and 1/4).
                    match self.srtt {
                        None => {
                            self.srtt = Some(sample);
                            self.rttvar = sample / 2;
                        }
                        Some(old) => {
                            let err = if old > sample {
                                old - sample
                            } else {
                                sample - old
                            };
                            self.rttvar = (self.rttvar * 3 + err) / 4;
                            self.srtt = Some((old * 7 + sample) / 8);
                        }
                    }
                    self.stats.rtt_samples += 1;
                    rtt = Some(sample);
                }
            }
        }

        let (bytes, chunks) = (acked.bytes, acked.chunks);
        if let Some(delay) = acked.spurious_delay {
            self.on_spurious_timeout(now, delay);
        }
        if chunks > 0 {
            self.consecutive_rtos = 0;
            self.rto_backoff = 0;
            self.rto_counted_at = None;
            self.rtos_since = None;
        }
        if self.snd_una > una_before {
            self.dupacks = 0;
        } else if a.echo.is_some() && a.sack != 0 && self.snd_una < self.snd_nxt {
            self.dupacks += 1;
            if self.dupacks >= self.cfg.dup_ack_threshold {
                self.dupacks = 0;
                self.fast_retransmit(now);
            }
        }
        self.free_sends();
        self.rearm_rto(now);
        let sample = AckSample {
            path: sample_path,
            rtt,
            acked_bytes: bytes,
            acked_chunks: chunks,
            inflight_bytes: self.inflight_bytes,
            srtt: self.srtt,
        };
        self.cc.on_rx_ack(now, &sample);
    }

    /// The peer received something twice: likely a spurious retransmission, so the
    /// reordering window was too tight. Widen it by a quarter srtt, at most once per round
    /// trip, up to two srtt (RFC 8985 caps it at one; spraying over paths with unequal
    /// queues reorders more).
    fn on_duplicate_report(&mut self, now: Instant) {
        let srtt = self.srtt.unwrap_or(Duration::ZERO);
        if self
            .reo_bumped
            .map_or(true, |t| now.saturating_duration_since(t) >= srtt)
        {
            self.reo_mult = (self.reo_mult + 1).min(MAX_REO_MULT);
            self.reo_bumped = Some(now);
            self.recoveries_since_bump = 0;
            self.stats.duplicate_reports += 1;
        }
    }

    fn ack_chunk(&mut self, now: Instant, seq: u64, acked: &mut Acked) {
        let c = *self.chunk(seq);
        if c.seq != seq {
            return;
        }
        match c.state {
            ChunkState::Outstanding => {
                self.inflight_bytes -= u64::from(c.len);
                self.paths
                    .on_acked(c.path, c.tx_time, c.retransmits == 0, c.len);
            }
            ChunkState::Lost => {
                self.lost -= 1;
                self.paths
                    .on_late_ack(c.path, c.tx_time, c.retransmits == 0);
                if c.timed_out && c.retransmits == 0 {
                    self.stats.spurious_timeout_chunks += 1;
                    let delay = now.saturating_duration_since(c.tx_time);
                    acked.spurious_delay =
                        Some(acked.spurious_delay.map_or(delay, |d| d.max(delay)));
                }
            }
            ChunkState::Acked | ChunkState::Free => return,
        }
        self.chunk_mut(seq).state = ChunkState::Acked;
        acked.bytes += u64::from(c.len);
        acked.chunks += 1;
        self.rack_tx = Some(self.rack_tx.map_or(c.tx_time, |t| t.max(c.tx_time)));
        self.highest_acked = self.highest_acked.max(seq + 1);
        let slot = &mut self.send_slots[slot_of(c.msg)];
        if slot.active && slot.id == c.msg {
            slot.unacked -= 1;
            if slot.cut_done && slot.unacked == 0 && !slot.done {
                slot.done = true;
                let ev = Event::SendComplete {
                    id: SendId(slot.id),
                    tag: slot.tag,
                    len: slot.len,
                };
                self.events.push_back(ev);
            }
        }
    }

    fn free_sends(&mut self) {
        while self.oldest_send < self.next_send && self.send_slots[slot_of(self.oldest_send)].done {
            self.send_slots[slot_of(self.oldest_send)].active = false;
            self.oldest_send += 1;
        }
    }

    pub(super) fn declare_lost(&mut self, seq: u64, now: Instant, timed_out: bool) {
        let c = *self.chunk(seq);
        let ch = self.chunk_mut(seq);
        ch.state = ChunkState::Lost;
        ch.timed_out = timed_out;
        self.inflight_bytes -= u64::from(c.len);
        self.lost += 1;
        self.paths.on_lost(c.path, now, c.tx_time);
    }

    /// RACK-style loss detection (RFC 8985), armed by the duplicate-ack threshold: a chunk
    /// is lost if a chunk sent no earlier than it was acknowledged (`rack_tx`) and it has
    /// been out for `srtt * 5/4` (a round trip plus a quarter for reordering). Chunks that
    /// are not that old yet get a reorder timer instead of a retransmission: spraying over
    /// paths with different queues reorders chunks, and a chunk still queued on a slower
    /// path must not be resent just because faster paths delivered later ones.
    pub(super) fn fast_retransmit(&mut self, now: Instant) {
        let Some(rack) = self.rack_tx else { return };
        let srtt = self.srtt.unwrap_or(Duration::ZERO);
        let wait = srtt + srtt * self.reo_mult / 4;
        let mut n = 0u32;
        let mut next = None;
        for seq in self.snd_una..self.highest_acked.min(self.snd_nxt) {
            let c = *self.chunk(seq);
            if c.state != ChunkState::Outstanding || c.tx_time > rack {
                continue;
            }
            let due = c.tx_time + wait;
            if due <= now {
                self.declare_lost(seq, now, false);
                n += 1;
            } else {
                next = min_deadline(next, Some(due));
            }
        }
        self.reorder_deadline = next;
        if n > 0 {
            self.recoveries_since_bump += 1;
            if self.recoveries_since_bump >= 16 {
                self.reo_mult = 1;
                self.recoveries_since_bump = 0;
            }
            self.stats.fast_retransmits += 1;
            self.stats.fast_retransmit_chunks += u64::from(n);
            let ev = LossEvent {
                kind: LossKind::FastRetransmit,
                chunks: n,
                srtt: self.srtt,
            };
            self.cc.on_loss(now, &ev);
        }
    }
}

/// What one acknowledgement acknowledged.
#[derive(Default)]
struct Acked {
    bytes: u64,
    chunks: u32,
    /// Longest time since the first and only copy was sent, of the chunks a timeout had
    /// declared lost: `Some` when the acknowledgement shows the timeout was spurious.
    spurious_delay: Option<Duration>,
}
