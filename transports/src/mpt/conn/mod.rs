//! The sans-IO connection: one flow between two endpoints, both directions.
//!
//! Inputs are [`Connection::send`], [`Connection::post_recv`],
//! [`Connection::handle_datagram`] / [`Connection::handle_frame`] and
//! [`Connection::handle_timeout`]; outputs are [`Connection::poll_transmit`],
//! [`Connection::poll_timeout`] and [`Connection::poll_event`]. Every input takes `now`; the
//! core never reads a clock, never does IO and, after construction, never allocates: the
//! chunk ring, message slots, acknowledgement queue and event queue are sized up front.
//!
//! # Sending
//!
//! `send` queues a message of `len` bytes (the bytes stay with the caller). Message `n`
//! starts only after the peer has posted its `n`-th receive (the `posted` count in every
//! acknowledgement; a probe asks for it if the announcement was lost). Messages are cut in
//! order into chunks of `chunk_size` bytes (or what `on_chunk_size` says), each with the next
//! CSN. A chunk of a message shorter than `small_message_threshold` goes on the connection's
//! dedicated small-message path (moved to the best path if it loses chunks to a timeout);
//! others go on the better of two randomly sampled paths by [`PathView::score`] (or what
//! `on_select_path` says). A path that lost chunks gets no new chunks while a path without
//! losses is left (and scores badly) until it delivers again: once per backoff period it is
//! sent a probe frame, which the peer answers on the same path, and the answer puts it back
//! in use (so a healed link returns, and a dead NIC's paths cost no data). A healthy idle
//! path whose round-trip time is older than `rtt_refresh` takes the next chunk, and that
//! chunk's sample replaces the old time (a path measured once while the host was busy would
//! otherwise never be chosen again). Each [`Transmit`] names the path, the frame, and the
//! slice of the caller's message to append ([`PayloadRef`]).
//!
//! # Reliability
//!
//! The receiver acknowledges every new chunk with its cumulative point, a 128-bit SACK
//! bitmap and an echo of the chunk (for the round-trip time). The sender:
//! * counts an acknowledgement that echoes a chunk, selectively acknowledges something, and
//!   moves nothing cumulatively as a duplicate; at `dup_ack_threshold` duplicates, every
//!   unacknowledged chunk sent no later than the newest acknowledged chunk and out for more
//!   than `srtt` plus a reordering window is declared lost and retransmitted; younger ones
//!   get a reorder timer (RACK, RFC 8985: chunks sprayed over paths with different queues
//!   arrive out of order). The window starts at `srtt / 4` and widens when the receiver
//!   reports duplicates (its acknowledgement's `duplicate` flag, like a D-SACK);
//! * declares lost every chunk unacknowledged for one RTO (`max(rto, srtt + 4 rttvar)`,
//!   doubled per consecutive timeout up to `rto_max`, reset by any acknowledged chunk);
//!   after `max_rto_retries` consecutive timeouts the connection fails;
//! * retransmits lost chunks before new ones, on a path other than the one that lost them;
//! * credits a path with a delivery only for chunks sent once (Karn: an acknowledged
//!   retransmission may have arrived by its earlier copy on another path).
//!
//! A connection waiting to receive that hears nothing from its peer probes it, and fails
//! when the probes go unanswered (the peer watch, `watch.rs`): it has no timeout of its own
//! to count otherwise.
//!
//! # Receiving
//!
//! `post_recv` posts a receive of up to `capacity` bytes. A new chunk yields a
//! [`Placement`]: copy its payload to `offset` of that receive's buffer (on verbs the NIC has
//! already done so). Chunks land wherever they belong on arrival, so reordering costs
//! nothing. A receive completes when its last chunk has been seen and all its bytes have
//! arrived; copy every placement before polling events.

mod acks;
mod receiver;
mod sender;
mod state;
mod timers;
mod types;
mod watch;

use std::time::Duration;

use super::cc::CongestionControl;
use super::config::MptConfig;
use super::frame::{Echo, Frame};
use super::path::{PathId, PathView};
use super::time::{min_deadline, Instant};
use super::MptError;

pub use state::Connection;
pub use types::{ConnStats, Event, PayloadRef, Placement, RecvId, SendId, Transmit};
pub use watch::QUIET_ROUNDS;

use state::{slot_of, RecvSlot, SendSlot, MAX_BACKOFF_SHIFT};

impl Connection {
    // ----- application inputs -----

    /// Queues a message of `len` bytes; the caller keeps the bytes until
    /// [`Event::SendComplete`] and supplies them for each [`PayloadRef`].
    pub fn send(&mut self, _now: Instant, len: u64, tag: u64) -> Result<SendId, MptError> {
        self.check_open()?;
        if self.next_send - self.oldest_send >= u64::from(self.cfg.max_messages) {
            return Err(MptError::SendQueueFull(self.cfg.max_messages));
        }
        let id = self.next_send;
        self.next_send += 1;
        self.send_slots[slot_of(id)] = SendSlot {
            active: true,
            done: false,
            id,
            tag,
            len,
            next_offset: 0,
            cut_done: false,
            unacked: 0,
            small: len < self.cfg.small_message_threshold,
        };
        Ok(SendId(id))
    }

    /// Posts a receive of up to `capacity` bytes (receives match sends in order).
    pub fn post_recv(
        &mut self,
        _now: Instant,
        capacity: u64,
        tag: u64,
    ) -> Result<RecvId, MptError> {
        self.check_open()?;
        if self.posted - self.recv_base >= u64::from(self.cfg.max_messages) {
            return Err(MptError::RecvQueueFull(self.cfg.max_messages));
        }
        let id = self.posted;
        self.posted += 1;
        self.recv_slots[slot_of(id)] = RecvSlot {
            posted: true,
            complete: false,
            id,
            tag,
            capacity,
            received: 0,
            total: None,
            truncated: false,
        };
        // Announce the receive at once only if the sender may be waiting for it: it has
        // started the last message announced (or nothing was announced yet). Otherwise the
        // sender still has a posted receive to fill, and the acknowledgement of that
        // message's first chunk carries the new count -- a standalone announcement per
        // message was a third of the datagrams of small operations.
        if self.msg_seen_end >= self.announced {
            self.ack_needed = true;
        }
        Ok(RecvId(id))
    }

    // ----- network inputs -----

    /// Decodes and handles one datagram that arrived on `path`.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        path: PathId,
        datagram: &'a [u8],
    ) -> Result<Option<Placement<'a>>, MptError> {
        let (frame, payload) = Frame::decode(datagram)?;
        self.handle_frame(now, path, frame, payload)
    }

    /// Handles one frame that arrived on `path`. For data, `payload` is the chunk's bytes,
    /// or empty when the datapath placed them already (verbs); then `len` comes from the
    /// frame.
    pub fn handle_frame<'a>(
        &mut self,
        now: Instant,
        path: PathId,
        frame: Frame,
        payload: &'a [u8],
    ) -> Result<Option<Placement<'a>>, MptError> {
        self.check_open()?;
        if !self.paths.contains(path) {
            return Err(MptError::PathOutOfRange {
                path: path.0,
                paths: self.paths.len(),
            });
        }
        let flow = frame.destination_flow();
        if flow != self.local_fid {
            return Err(MptError::WrongFlow {
                got: flow,
                expected: self.local_fid,
            });
        }
        self.watch_heard();
        match frame {
            Frame::Data(d) => self.on_data(now, path, d, payload),
            Frame::Ack(a) => {
                self.probes_unanswered = 0;
                self.probes_since = None;
                // An acknowledgement on a path that lost chunks, while a probe of it is out:
                // the path works again (both ways: the probe got there, the answer back).
                if self.paths.revive_if_probed(path, now) {
                    self.stats.paths_revived += 1;
                }
                self.on_ack(now, &a);
                Ok(None)
            }
            Frame::Probe(_) => {
                self.last_rx_path = Some(path);
                if self.probe_replies.len() < usize::from(self.paths.len()) {
                    self.probe_replies.push_back(path);
                }
                Ok(None)
            }
        }
    }

    /// Handles every timer due at `now` (call when `poll_timeout` is reached; calling it
    /// early is harmless).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.failed.is_some() {
            return;
        }
        if self.rto_deadline.is_some_and(|t| t <= now) {
            self.on_rto(now);
        }
        if self.credit_stall.is_some_and(|t| t <= now) {
            self.credit_stall = None;
            self.on_credit_stall(now);
        }
        if self.reorder_deadline.is_some_and(|t| t <= now) {
            self.reorder_deadline = None;
            self.fast_retransmit(now);
        }
        if self.probe_deadline.is_some_and(|t| t <= now) {
            self.probe_deadline = None;
            let since = *self.probes_since.get_or_insert(now);
            if self.budget_spent(self.probes_unanswered, since, now) {
                self.fail(MptError::RetriesExhausted(self.cfg.max_rto_retries));
                return;
            }
            self.probes_unanswered += 1;
            self.probe_pending = true;
            self.probe_backoff = (self.probe_backoff + 1).min(MAX_BACKOFF_SHIFT);
        }
        if self.watch.deadline().is_some_and(|t| t <= now) {
            self.on_watch_timeout(now);
            if self.failed.is_some() {
                return;
            }
        }
        if self.pacing_deadline.is_some_and(|t| t <= now) {
            self.pacing_deadline = None;
        }
        if self.credit_next.is_some_and(|t| t <= now) {
            self.credit_next = None;
        }
    }

    // ----- outputs -----

    /// The next datagram to send, if any may leave now. Call until `None`, then sleep until
    /// [`poll_timeout`](Self::poll_timeout) or the next input.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if self.failed.is_some() {
            return None;
        }
        if self.cc.receiver_driven() {
            let demand = self.recv_demand();
            let poll = self.cc.poll_credit(now, demand);
            if poll.grant > 0 {
                self.credit_total += poll.grant;
                self.stats.credit_granted += poll.grant;
                self.ack_needed = true;
            }
            self.credit_next = poll.next.filter(|t| *t > now);
        }
        if let Some(path) = self.probe_replies.pop_front() {
            let mut t = self.build_ack(None);
            t.path = path;
            return Some(t);
        }
        if let Some(echo) = self.echoes.pop_front() {
            return Some(self.build_ack(Some(echo)));
        }
        if let Some((echo, at)) = self.held {
            let waited = now.saturating_duration_since(at);
            // Anything else to say (a receive announced, a duplicate reported, credit) goes
            // with it.
            if waited >= self.cfg.ack_delay || self.ack_needed {
                self.held = None;
                let held_us = u16::try_from(waited.as_micros()).unwrap_or(u16::MAX);
                return Some(self.build_ack(Some(Echo { held_us, ..echo })));
            }
        }
        if self.ack_needed {
            return Some(self.build_ack(None));
        }
        if self.probe_pending {
            self.probe_pending = false;
            self.stats.probes_sent += 1;
            let path = PathId(self.rng.below(u64::from(self.paths.len())) as u16);
            return Some(self.probe(path));
        }
        if let Some(t) = self.poll_watch_probe() {
            return Some(t);
        }
        // A path that lost chunks is tested with a probe (no data: a lost probe costs no
        // retransmission, which a credit-paced sender would only find by timeout), once per
        // backoff period; the answer brings it back into use.
        if let Some(path) = self.paths.take_probe(now) {
            self.stats.probes_sent += 1;
            return Some(self.probe(path));
        }
        if let Some(t) = self.next_data(now) {
            return Some(t);
        }
        self.update_probe(now);
        self.update_credit_stall(now);
        self.update_watch(now);
        None
    }

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        let mut t = min_deadline(self.rto_deadline, self.probe_deadline);
        t = min_deadline(t, self.pacing_deadline);
        t = min_deadline(t, self.reorder_deadline);
        t = min_deadline(t, self.credit_stall);
        t = min_deadline(t, self.watch.deadline());
        t = min_deadline(t, self.held.map(|(_, at)| at + self.cfg.ack_delay));
        min_deadline(t, self.credit_next)
    }

    /// The next application event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ----- observation -----

    /// This side's flow id.
    pub fn local_flow_id(&self) -> u16 {
        self.local_fid
    }

    /// The peer's flow id.
    pub fn remote_flow_id(&self) -> u16 {
        self.remote_fid
    }

    /// The configuration.
    pub fn config(&self) -> &MptConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    /// The congestion-control policy (to read its window or credit).
    pub fn congestion_control(&self) -> &dyn CongestionControl {
        self.cc.as_ref()
    }

    /// One path's state.
    pub fn path(&self, id: PathId) -> PathView {
        self.paths.view(id)
    }

    /// Every path's state.
    pub fn paths(&self) -> impl Iterator<Item = PathView> + '_ {
        (0..self.paths.len()).map(|i| self.paths.view(PathId(i)))
    }

    /// The path small messages use now.
    pub fn small_message_path(&self) -> PathId {
        self.small_path
    }

    /// The retransmission timeout a chunk sent at `now` would get (backoff and the floor
    /// learnt from spurious timeouts included).
    pub fn rto(&self, now: Instant) -> Duration {
        self.rto_current(now)
    }

    /// Connection-level smoothed round-trip time.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Payload bytes in flight (sent, neither acknowledged nor declared lost).
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight_bytes
    }

    /// The failure, if the connection failed.
    pub fn error(&self) -> Option<&MptError> {
        self.failed.as_ref()
    }

    /// Every chunk of every queued message has left at least once (some may still wait
    /// for their acknowledgement, or be resent).
    pub fn all_sent(&self) -> bool {
        self.cut_msg == self.next_send
    }

    /// No message in flight either way and nothing waiting to be sent.
    pub fn is_idle(&self) -> bool {
        self.oldest_send == self.next_send
            && self.recv_base == self.posted
            && self.echoes.is_empty()
            && self.held.is_none()
            && !self.ack_needed
            && !self.probe_pending
            && !self.watch.is_pending()
            && self.probe_replies.is_empty()
    }
}
