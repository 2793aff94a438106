//! The sender half: the chunk ring, pacing, path choice, and the next chunk to send (a lost
//! one again, else the next piece of the oldest message whose receive is posted).

use crate::mpt::cc::{Pacing, SenderView};
use crate::mpt::frame::{DataFrame, Frame};
use crate::mpt::header::{ChunkHeader, CSN_SPACE, RID_SPACE};
use crate::mpt::path::PathId;
use crate::mpt::time::Instant;

use super::state::{slot_of, ChunkState, Connection, TxChunk};
use super::types::{PayloadRef, SendId, Transmit};

impl Connection {
    // ----- internals: sender half -----

    pub(super) fn chunk(&self, seq: u64) -> &TxChunk {
        &self.ring[(seq % self.ring.len() as u64) as usize]
    }

    pub(super) fn chunk_mut(&mut self, seq: u64) -> &mut TxChunk {
        let n = self.ring.len() as u64;
        &mut self.ring[(seq % n) as usize]
    }

    fn pace(&mut self, now: Instant, len: u32, retransmission: bool) -> bool {
        let view = SenderView {
            inflight_bytes: self.inflight_bytes,
            srtt: self.srtt,
            retransmission,
        };
        match self.cc.on_pacing_chunk(now, len, &view) {
            Pacing::Now => true,
            Pacing::At(t) if t <= now => true,
            Pacing::At(t) => {
                self.pacing_deadline = Some(t);
                false
            }
            // Out of credit past the stall timer: one chunk goes anyway (its acknowledgement
            // brings the credit that was lost on the way).
            Pacing::Blocked if self.credit_override => {
                self.credit_override = false;
                true
            }
            Pacing::Blocked => false,
        }
    }

    fn pick_path(&mut self, now: Instant, avoid: Option<PathId>) -> PathId {
        if let Some(p) = self.paths.take_stale(now, self.cfg.rtt_refresh, avoid) {
            return p;
        }
        let (a, b) = self.paths.sample_two(&mut self.rng, avoid);
        let (va, vb) = (self.paths.view(a), self.paths.view(b));
        let chosen = self.cc.on_select_path(now, &va, &vb);
        if self.paths.contains(chosen) {
            chosen
        } else {
            a
        }
    }

    fn data_transmit(&self, seq: u64) -> Option<Transmit> {
        let c = self.chunk(seq);
        let header = ChunkHeader::new(
            c.last,
            seq as u8,
            (c.msg % RID_SPACE) as u8,
            self.remote_fid,
        )
        .ok()?;
        Some(Transmit {
            path: c.path,
            frame: Frame::Data(DataFrame {
                header,
                seq_hi: Some(((seq >> 8) & 0xFF_FFFF) as u32),
                offset: c.offset,
                len: c.len,
            }),
            payload: Some(PayloadRef {
                send: SendId(c.msg),
                offset: c.offset,
                len: c.len,
            }),
        })
    }

    pub(super) fn next_data(&mut self, now: Instant) -> Option<Transmit> {
        self.pacing_deadline = None;
        if self.lost > 0 {
            let seq =
                (self.snd_una..self.snd_nxt).find(|&s| self.chunk(s).state == ChunkState::Lost)?;
            let c = *self.chunk(seq);
            if !self.pace(now, c.len, true) {
                return None;
            }
            let small = self.send_slots[slot_of(c.msg)].small;
            let path = if small && !self.paths.is_penalised(self.small_path) {
                self.small_path
            } else {
                self.pick_path(now, Some(c.path))
            };
            let ch = self.chunk_mut(seq);
            ch.path = path;
            ch.tx_time = now;
            ch.retransmits += 1;
            ch.state = ChunkState::Outstanding;
            self.lost -= 1;
            self.inflight_bytes += u64::from(c.len);
            self.paths.on_sent(path);
            self.stats.chunks_retransmitted += 1;
            self.stats.data_bytes_sent += u64::from(c.len);
            self.cc.on_tx_rtx_chunk(now, path, c.len);
            self.csn_tx[(seq % CSN_SPACE) as usize] = Some(now);
            self.arm_rto_for(now, seq);
            return self.data_transmit(seq);
        }

        if self.snd_nxt >= self.snd_una + u64::from(self.cfg.window_chunks)
            || self.cut_msg >= self.next_send
            || self.cut_msg >= self.peer_posted
        {
            return None;
        }
        if !self.cfg.csn_reuse_guard.is_zero() {
            // The chunk 256 - W before this one shares the CSN that becomes ambiguous once
            // this one is sent; wait until none of its copies can still be in flight.
            let shared = (self.snd_nxt + u64::from(self.cfg.window_chunks)) % CSN_SPACE;
            if let Some(t) = self.csn_tx[shared as usize] {
                let ok_at = t + self.cfg.csn_reuse_guard;
                if ok_at > now {
                    self.pacing_deadline = Some(ok_at);
                    return None;
                }
            }
        }
        let msg = self.cut_msg;
        let slot = self.send_slots[slot_of(msg)];
        let remaining = slot.len - slot.next_offset;
        let len = if remaining == 0 {
            0
        } else {
            let max = u64::from(self.cfg.chunk_size).min(remaining) as u32;
            self.cc
                .on_chunk_size(now, self.cfg.chunk_size, remaining)
                .clamp(1, max)
        };
        if !self.pace(now, len, false) {
            return None;
        }
        // Small messages keep to their path while it delivers; penalised (its NIC down,
        // say), they go where new chunks go.
        let path = if slot.small && !self.paths.is_penalised(self.small_path) {
            self.small_path
        } else {
            self.pick_path(now, None)
        };
        let seq = self.snd_nxt;
        self.snd_nxt += 1;
        let last = slot.next_offset + u64::from(len) == slot.len;
        *self.chunk_mut(seq) = TxChunk {
            seq,
            msg,
            offset: slot.next_offset,
            len,
            last,
            path,
            tx_time: now,
            retransmits: 0,
            state: ChunkState::Outstanding,
            timed_out: false,
        };
        let s = &mut self.send_slots[slot_of(msg)];
        s.next_offset += u64::from(len);
        s.unacked += 1;
        if last {
            s.cut_done = true;
            self.cut_msg += 1;
        }
        self.inflight_bytes += u64::from(len);
        self.paths.on_sent(path);
        self.stats.chunks_sent += 1;
        self.stats.data_bytes_sent += u64::from(len);
        self.cc.on_tx_chunk(now, path, len);
        self.csn_tx[(seq % CSN_SPACE) as usize] = Some(now);
        self.arm_rto_for(now, seq);
        self.data_transmit(seq)
    }
}
