//! The receiver half: which chunks arrived (cumulative point and SACK bitmap), where a new
//! chunk goes, and the acknowledgements and probes that answer the peer.

use crate::mpt::frame::{AckFrame, DataFrame, Echo, Frame, ProbeFrame};
use crate::mpt::header::{unwrap_csn, unwrap_rid, unwrap_u32, CsnPosition};
use crate::mpt::path::PathId;
use crate::mpt::time::Instant;
use crate::mpt::MptError;

use super::state::{slot_of, Connection, ECHO_QUEUE};
use super::types::{Event, Placement, RecvId, Transmit};

impl Connection {
    // ----- internals: receiver half -----

    pub(super) fn check_open(&self) -> Result<(), MptError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn rx_has(&self, seq: u64) -> bool {
        seq < self.rcv_nxt
            || (seq > self.rcv_nxt && (self.sack >> (seq - self.rcv_nxt - 1)) & 1 == 1)
    }

    fn mark_received(&mut self, seq: u64) {
        if seq == self.rcv_nxt {
            self.rcv_nxt += 1;
            // Bit 0 now stands for the new rcv_nxt; swallow the run of received chunks.
            while self.sack & 1 == 1 {
                self.sack >>= 1;
                self.rcv_nxt += 1;
            }
            self.sack >>= 1;
        } else {
            // seq < rcv_nxt + window <= rcv_nxt + 128, so the bit index is at most 126.
            self.sack |= 1u128 << (seq - self.rcv_nxt - 1);
        }
    }

    pub(super) fn on_data<'a>(
        &mut self,
        now: Instant,
        path: PathId,
        d: DataFrame,
        payload: &'a [u8],
    ) -> Result<Option<Placement<'a>>, MptError> {
        if !payload.is_empty() && payload.len() != d.len as usize {
            return Err(MptError::Malformed(
                "payload length differs from frame length",
            ));
        }
        self.last_rx_path = Some(path);
        let window = u64::from(self.cfg.window_chunks);
        let position = match d.seq_hi {
            Some(hi) => {
                let seq = unwrap_u32(self.rcv_nxt, (hi << 8) | u32::from(d.header.csn()));
                if seq >= self.rcv_nxt && seq < self.rcv_nxt + window {
                    CsnPosition::Ahead(seq)
                } else {
                    CsnPosition::Behind
                }
            }
            None => unwrap_csn(self.rcv_nxt, d.header.csn(), self.cfg.window_chunks),
        };
        let seq = match position {
            CsnPosition::Ahead(s) if !self.rx_has(s) => s,
            _ => {
                // Duplicate (fabric copy, spurious retransmission, or our ack was lost):
                // acknowledge again so the sender learns what we hold, place nothing.
                self.stats.duplicate_chunks += 1;
                self.dup_seen = true;
                self.cc.on_rx_rtx_chunk(now, path, d.len);
                self.ack_needed = true;
                return Ok(None);
            }
        };
        let msg = unwrap_rid(self.recv_base, d.header.rid());
        let slot = self.recv_slots[slot_of(msg)];
        if msg >= self.posted || !slot.posted || slot.id != msg || slot.complete {
            return Err(MptError::ProtocolViolation(
                "chunk for a receive that is not posted",
            ));
        }
        let end = d
            .offset
            .checked_add(u64::from(d.len))
            .ok_or(MptError::Malformed("offset overflow"))?;
        self.mark_received(seq);
        self.msg_seen_end = self.msg_seen_end.max(msg + 1);
        if seq >= self.rcv_highest {
            self.rcv_highest = seq + 1;
            self.cc.on_rx_chunk(now, path, d.len);
        } else {
            self.cc.on_rx_rtx_chunk(now, path, d.len);
        }
        self.stats.chunks_received += 1;
        if self.echoes.len() == ECHO_QUEUE {
            self.echoes.pop_front();
        }
        let echo = Echo {
            seq: seq as u32,
            path: path.0,
            held_us: 0,
        };
        // A chunk that is a whole message waits for the next such chunk (or `ack_delay`) to
        // share its acknowledgement; the second is acknowledged at once, covering both.
        // Anything else is acknowledged at once, which covers a held chunk too.
        let whole = d.offset == 0 && d.header.last();
        let held = self.held.take();
        if whole && held.is_none() && !self.cfg.ack_delay.is_zero() {
            self.held = Some((echo, now));
        } else {
            self.echoes.push_back(echo);
        }

        let fits = end <= slot.capacity;
        let s = &mut self.recv_slots[slot_of(msg)];
        s.received += u64::from(d.len);
        if d.header.last() {
            s.total = Some(end);
        }
        if !fits {
            s.truncated = true;
        }
        if let Some(total) = s.total {
            if s.received >= total {
                s.complete = true;
                let ev = Event::RecvComplete {
                    id: RecvId(msg),
                    tag: s.tag,
                    len: total,
                    truncated: s.truncated,
                };
                self.events.push_back(ev);
                while self.recv_base < self.posted
                    && self.recv_slots[slot_of(self.recv_base)].complete
                {
                    self.recv_slots[slot_of(self.recv_base)].posted = false;
                    self.recv_base += 1;
                }
            }
        }
        if fits {
            return Ok(Some(Placement {
                recv: RecvId(msg),
                offset: d.offset,
                payload,
            }));
        }
        // A message longer than the receive: place what fits, drop the rest.
        let room = slot.capacity.saturating_sub(d.offset);
        if room == 0 {
            return Ok(None);
        }
        let part = payload
            .get(
                ..usize::try_from(room)
                    .unwrap_or(usize::MAX)
                    .min(payload.len()),
            )
            .unwrap_or(&[]);
        Ok(Some(Placement {
            recv: RecvId(msg),
            offset: d.offset,
            payload: part,
        }))
    }

    /// Posted receive bytes not yet received (the receiver-driven demand).
    pub(super) fn recv_demand(&self) -> u64 {
        (self.recv_base..self.posted)
            .map(|i| &self.recv_slots[slot_of(i)])
            .filter(|s| s.posted && !s.complete)
            .map(|s| s.total.unwrap_or(s.capacity).saturating_sub(s.received))
            .sum()
    }

    pub(super) fn probe(&self, path: PathId) -> Transmit {
        Transmit {
            path,
            frame: Frame::Probe(ProbeFrame {
                flow: self.remote_fid,
            }),
            payload: None,
        }
    }

    pub(super) fn build_ack(&mut self, echo: Option<Echo>) -> Transmit {
        self.ack_needed = false;
        self.announced = self.posted;
        self.stats.acks_sent += 1;
        let path = match (echo, self.last_rx_path) {
            (Some(e), _) => PathId(e.path),
            (None, Some(p)) => p,
            (None, None) => PathId(self.rng.below(u64::from(self.paths.len())) as u16),
        };
        let frame = AckFrame {
            flow: self.remote_fid,
            cum: self.rcv_nxt as u32,
            sack: self.sack,
            echo,
            duplicate: std::mem::take(&mut self.dup_seen),
            posted: self.posted as u32,
            credit: self.credit_total as u32,
        };
        Transmit {
            path,
            frame: Frame::Ack(frame),
            payload: None,
        }
    }
}
