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
//! in use (so a healed link returns, and a dead NIC's paths cost no data). Each [`Transmit`] names the path, the frame, and the slice of the caller's message to
//! append ([`PayloadRef`]).
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
//! # Receiving
//!
//! `post_recv` posts a receive of up to `capacity` bytes. A new chunk yields a
//! [`Placement`]: copy its payload to `offset` of that receive's buffer (on verbs the NIC has
//! already done so). Chunks land wherever they belong on arrival, so reordering costs
//! nothing. A receive completes when its last chunk has been seen and all its bytes have
//! arrived; copy every placement before polling events.

use std::collections::VecDeque;
use std::time::Duration;

use super::cc::{self, AckSample, CongestionControl, LossEvent, LossKind, Pacing, SenderView};
use super::config::MptConfig;
use super::frame::{AckFrame, DataFrame, Echo, Frame, ProbeFrame};
use super::header::{
    unwrap_csn, unwrap_rid, unwrap_u32, ChunkHeader, CsnPosition, CSN_SPACE, MAX_FLOW_ID, RID_SPACE,
};
use super::path::{PathId, PathView, Paths};
use super::rng::Rng;
use super::time::{min_deadline, Instant};
use super::MptError;

/// Identifies a message queued with [`Connection::send`] (its index on the connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SendId(pub u64);

/// Identifies a receive posted with [`Connection::post_recv`] (its index on the connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecvId(pub u64);

/// Something the application should know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Every chunk of the message was acknowledged by the peer.
    SendComplete {
        /// The message.
        id: SendId,
        /// The caller's tag.
        tag: u64,
        /// Its length.
        len: u64,
    },
    /// Every byte of the message arrived.
    RecvComplete {
        /// The receive.
        id: RecvId,
        /// The caller's tag.
        tag: u64,
        /// The message length (which may exceed the capacity if `truncated`).
        len: u64,
        /// The message was longer than the receive's capacity; bytes past it were dropped.
        truncated: bool,
    },
    /// The connection failed; no further progress is possible.
    Failed(MptError),
}

/// The bytes of a data frame's payload: `len` bytes at `offset` of message `send`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadRef {
    /// The message.
    pub send: SendId,
    /// Byte offset inside the message.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
}

/// A datagram to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The path to send it on.
    pub path: PathId,
    /// The frame (encode with [`Frame::encode`] on datagram datapaths).
    pub frame: Frame,
    /// For data frames, the payload to append.
    pub payload: Option<PayloadRef>,
}

/// Where a received chunk's payload goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement<'a> {
    /// The receive it belongs to.
    pub recv: RecvId,
    /// Byte offset inside the receive's buffer.
    pub offset: u64,
    /// The payload (empty if the datapath placed it already).
    pub payload: &'a [u8],
}

/// Counters of one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// New chunks sent.
    pub chunks_sent: u64,
    /// Chunks retransmitted.
    pub chunks_retransmitted: u64,
    /// Payload bytes sent, retransmissions included.
    pub data_bytes_sent: u64,
    /// Fast-retransmit detections.
    pub fast_retransmits: u64,
    /// Chunks declared lost by fast retransmit.
    pub fast_retransmit_chunks: u64,
    /// Retransmission timeouts that declared chunks lost.
    pub rto_events: u64,
    /// Chunks declared lost by timeout.
    pub rto_chunks: u64,
    /// Acknowledgements sent.
    pub acks_sent: u64,
    /// Acknowledgements received.
    pub acks_received: u64,
    /// Acknowledgements ignored (acknowledging chunks never sent).
    pub acks_invalid: u64,
    /// Probes sent (a sender asking for the peer's receive, or testing a path that lost
    /// chunks).
    pub probes_sent: u64,
    /// Paths that lost chunks and were back in use after answering a probe.
    pub paths_revived: u64,
    /// New chunks received.
    pub chunks_received: u64,
    /// Duplicate or too-old chunks received (dropped).
    pub duplicate_chunks: u64,
    /// Credit bytes granted by this side's receiver.
    pub credit_granted: u64,
    /// Credit bytes received by this side's sender.
    pub credit_received: u64,
    /// Times the small-message path moved away from a failing path.
    pub small_path_moves: u64,
    /// Round-trip samples taken.
    pub rtt_samples: u64,
    /// Duplicate reports from the peer that widened the reordering window.
    pub duplicate_reports: u64,
    /// Acknowledgements showing that a timeout fired too early: they acknowledged chunks
    /// the timeout had declared lost before any was sent again (their first and only copy
    /// arrived). Each raised the timeout floor and undid the window cut.
    pub spurious_timeouts: u64,
    /// Chunks declared lost by a timeout and then acknowledged from their first copy.
    pub spurious_timeout_chunks: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct SendSlot {
    active: bool,
    done: bool,
    id: u64,
    tag: u64,
    len: u64,
    next_offset: u64,
    cut_done: bool,
    unacked: u32,
    small: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Free,
    Outstanding,
    Lost,
    Acked,
}

#[derive(Clone, Copy, Debug, Default)]
struct TxChunk {
    seq: u64,
    msg: u64,
    offset: u64,
    len: u32,
    last: bool,
    path: PathId,
    tx_time: Instant,
    retransmits: u32,
    state: ChunkState,
    /// Declared lost by the retransmission timeout (not by RACK).
    timed_out: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct RecvSlot {
    posted: bool,
    complete: bool,
    id: u64,
    tag: u64,
    capacity: u64,
    received: u64,
    total: Option<u64>,
    truncated: bool,
}

/// Most acknowledgements waiting to be sent; beyond it the oldest echo is dropped (only a
/// round-trip sample is lost: every acknowledgement carries the full cumulative state).
const ECHO_QUEUE: usize = 128;
/// Backoff shifts beyond this cannot matter (`rto_max` caps the timeout long before).
const MAX_BACKOFF_SHIFT: u32 = 20;
/// Largest reordering window, in quarters of srtt (two round trips).
const MAX_REO_MULT: u32 = 8;
/// A timeout floor learnt from spurious timeouts holds this many times itself, then halves
/// per such period without another.
const SPURIOUS_FLOOR_HOLD: u32 = 64;

/// One multipath connection (see the module docs).
#[derive(Debug)]
pub struct Connection {
    cfg: MptConfig,
    local_fid: u16,
    remote_fid: u16,
    cc: Box<dyn CongestionControl>,
    rng: Rng,
    paths: Paths,
    small_path: PathId,
    srtt: Option<Duration>,
    rttvar: Duration,
    failed: Option<MptError>,
    events: VecDeque<Event>,
    stats: ConnStats,

    // Sender half.
    send_slots: Vec<SendSlot>,
    next_send: u64,
    oldest_send: u64,
    cut_msg: u64,
    ring: Vec<TxChunk>,
    snd_una: u64,
    snd_nxt: u64,
    lost: u32,
    inflight_bytes: u64,
    dupacks: u32,
    rack_tx: Option<Instant>,
    highest_acked: u64,
    rto_deadline: Option<Instant>,
    rto_backoff: u32,
    consecutive_rtos: u32,
    peer_posted: u64,
    peer_credit: u64,
    probe_deadline: Option<Instant>,
    probe_backoff: u32,
    /// Rendezvous probes sent since the last acknowledgement: a sender waiting for the
    /// peer's receive with nothing in flight has no timeout to count, so unanswered probes
    /// count toward the retry budget instead (else a network that died while the sender
    /// waited left both ends waiting for ever).
    probes_unanswered: u32,
    probe_pending: bool,
    pacing_deadline: Option<Instant>,
    reorder_deadline: Option<Instant>,
    /// Reordering window in quarters of `srtt` (RFC 8985 `reo_wnd_mult`): grows by one per
    /// round trip in which the peer reports duplicates, back to one after 16 recoveries
    /// without.
    reo_mult: u32,
    reo_bumped: Option<Instant>,
    recoveries_since_bump: u32,
    /// Last transmission time per CSN value, for `csn_reuse_guard`.
    csn_tx: Vec<Option<Instant>>,

    // Receiver half.
    recv_slots: Vec<RecvSlot>,
    posted: u64,
    recv_base: u64,
    rcv_nxt: u64,
    sack: u128,
    rcv_highest: u64,
    echoes: VecDeque<Echo>,
    /// The echo of a whole-message chunk whose acknowledgement waits (`ack_delay`) for the
    /// next one, and when that chunk arrived.
    held: Option<(Echo, Instant)>,
    ack_needed: bool,
    /// The `posted` count of the last acknowledgement built: the peer may send messages
    /// up to it.
    announced: u64,
    /// One past the newest message a chunk of which has arrived.
    msg_seen_end: u64,
    dup_seen: bool,
    last_rx_path: Option<PathId>,
    /// Paths a probe arrived on, to answer on the same path (so the prober learns that the
    /// path works both ways).
    probe_replies: VecDeque<PathId>,
    /// Receiver-driven: when a sender with data to send, nothing in flight and no credit
    /// gives up waiting for credit (the acknowledgements carrying it may be on a dead path);
    /// then it counts a timeout and may send one chunk without credit.
    credit_stall: Option<Instant>,
    credit_override: bool,
    /// When the last timeout that counted toward the retry budget fired: chunks sent a few
    /// microseconds apart time out a few microseconds apart, and all of them within one
    /// timeout period are one timeout (else 50 chunks in flight on dead paths spent the whole
    /// budget in one period: a 160 ms outage failed the connection).
    rto_counted_at: Option<Instant>,
    /// Timeout floor learnt from spurious timeouts (`Duration::ZERO`: none), and when it was
    /// last raised. A host whose threads are descheduled for milliseconds (more engine and
    /// copy threads than CPUs) stretches round trips far past the unloaded `srtt + 4 rttvar`
    /// for a moment: the estimator forgets such pauses within microseconds of samples, but
    /// they come back, and each one that fires the timeout cuts the window to one chunk for
    /// chunks that were never lost.
    spurious_floor: Duration,
    spurious_floor_at: Instant,
    credit_total: u64,
    credit_next: Option<Instant>,
}

impl Connection {
    /// A connection with the congestion control `config.cc` names. `local_fid` is this
    /// side's flow id (what the peer puts in its frames), `remote_fid` the peer's.
    pub fn new(config: MptConfig, local_fid: u16, remote_fid: u16) -> Result<Self, MptError> {
        let cc = cc::build(&config);
        Self::with_congestion_control(config, local_fid, remote_fid, cc)
    }

    /// A connection with a caller-supplied congestion-control policy.
    pub fn with_congestion_control(
        config: MptConfig,
        local_fid: u16,
        remote_fid: u16,
        cc: Box<dyn CongestionControl>,
    ) -> Result<Self, MptError> {
        config.validate()?;
        for fid in [local_fid, remote_fid] {
            if fid > MAX_FLOW_ID {
                return Err(MptError::FlowIdOutOfRange(fid));
            }
        }
        let window = config.window_chunks as usize;
        let seed = config.seed ^ (u64::from(local_fid) << 32) ^ u64::from(remote_fid);
        Ok(Connection {
            rng: Rng::new(seed),
            paths: Paths::new(config.num_paths, config.rto),
            small_path: PathId(0),
            srtt: None,
            rttvar: Duration::ZERO,
            failed: None,
            events: VecDeque::with_capacity(2 * RID_SPACE as usize + 2),
            stats: ConnStats::default(),
            send_slots: vec![SendSlot::default(); RID_SPACE as usize],
            next_send: 0,
            oldest_send: 0,
            cut_msg: 0,
            ring: vec![TxChunk::default(); window],
            snd_una: 0,
            snd_nxt: 0,
            lost: 0,
            inflight_bytes: 0,
            dupacks: 0,
            rack_tx: None,
            highest_acked: 0,
            rto_deadline: None,
            rto_backoff: 0,
            consecutive_rtos: 0,
            peer_posted: 0,
            peer_credit: 0,
            probe_deadline: None,
            probe_backoff: 0,
            probes_unanswered: 0,
            probe_pending: false,
            pacing_deadline: None,
            reorder_deadline: None,
            reo_mult: 1,
            reo_bumped: None,
            recoveries_since_bump: 0,
            csn_tx: vec![None; CSN_SPACE as usize],
            recv_slots: vec![RecvSlot::default(); RID_SPACE as usize],
            posted: 0,
            recv_base: 0,
            rcv_nxt: 0,
            sack: 0,
            rcv_highest: 0,
            echoes: VecDeque::with_capacity(ECHO_QUEUE),
            held: None,
            ack_needed: false,
            announced: 0,
            msg_seen_end: 0,
            dup_seen: false,
            last_rx_path: None,
            probe_replies: VecDeque::with_capacity(usize::from(config.num_paths)),
            credit_stall: None,
            credit_override: false,
            rto_counted_at: None,
            spurious_floor: Duration::ZERO,
            spurious_floor_at: Instant::ZERO,
            credit_total: 0,
            credit_next: None,
            cc,
            local_fid,
            remote_fid,
            cfg: config,
        })
    }

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
        match frame {
            Frame::Data(d) => self.on_data(now, path, d, payload),
            Frame::Ack(a) => {
                self.probes_unanswered = 0;
                // An acknowledgement on a path that lost chunks, while a probe of it is out:
                // the path works again (both ways: the probe got there, the answer back).
                if self.paths.revive_if_probed(path) {
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
            if self.probes_unanswered > self.cfg.max_rto_retries {
                self.fail(MptError::RetriesExhausted(self.cfg.max_rto_retries));
                return;
            }
            self.probes_unanswered += 1;
            self.probe_pending = true;
            self.probe_backoff = (self.probe_backoff + 1).min(MAX_BACKOFF_SHIFT);
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
            && self.probe_replies.is_empty()
    }

    // ----- internals: receiver half -----

    fn check_open(&self) -> Result<(), MptError> {
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

    fn on_data<'a>(
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
    fn recv_demand(&self) -> u64 {
        (self.recv_base..self.posted)
            .map(|i| &self.recv_slots[slot_of(i)])
            .filter(|s| s.posted && !s.complete)
            .map(|s| s.total.unwrap_or(s.capacity).saturating_sub(s.received))
            .sum()
    }

    fn probe(&self, path: PathId) -> Transmit {
        Transmit {
            path,
            frame: Frame::Probe(ProbeFrame {
                flow: self.remote_fid,
            }),
            payload: None,
        }
    }

    fn build_ack(&mut self, echo: Option<Echo>) -> Transmit {
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

    // ----- internals: sender half -----

    fn chunk(&self, seq: u64) -> &TxChunk {
        &self.ring[(seq % self.ring.len() as u64) as usize]
    }

    fn chunk_mut(&mut self, seq: u64) -> &mut TxChunk {
        let n = self.ring.len() as u64;
        &mut self.ring[(seq % n) as usize]
    }

    /// The timeout for chunks sent at `now`: `max(rto, srtt + 4 rttvar)` (RFC 6298, with the
    /// configured RTO as the floor, raised by spurious timeouts: `spurious_floor`), doubled
    /// per consecutive timeout, capped at `rto_max`. On fast fabrics round trips are far
    /// below 500 us and this is UCCL's constant RTO; on slow links, where a few queued 32 KiB
    /// chunks exceed it, it prevents spurious timeouts.
    fn rto_current(&self, now: Instant) -> Duration {
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
    fn on_spurious_timeout(&mut self, now: Instant, delay: Duration) {
        self.stats.spurious_timeouts += 1;
        if self.consecutive_rtos <= 1 {
            let floor = (delay + delay / 4).min(self.cfg.rto_max);
            self.spurious_floor = self.learnt_floor(now).max(floor);
            self.spurious_floor_at = now;
        }
        self.cc.on_spurious_timeout(now);
    }

    fn rearm_rto(&mut self, now: Instant) {
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

    fn on_ack(&mut self, now: Instant, a: &AckFrame) {
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
                    self.paths.on_rtt(c.path, sample);
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
                self.paths.on_acked(c.path, c.tx_time, c.retransmits == 0);
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

    fn declare_lost(&mut self, seq: u64, now: Instant, timed_out: bool) {
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
    fn fast_retransmit(&mut self, now: Instant) {
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

    fn on_rto(&mut self, now: Instant) {
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

    fn fail(&mut self, e: MptError) {
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

    /// Arms or disarms the receiver-driven sender's stall timer: data to send (a lost chunk,
    /// or a new one whose receive is posted), nothing in flight, and no credit to send it.
    fn update_credit_stall(&mut self, now: Instant) {
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
    fn on_credit_stall(&mut self, now: Instant) {
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
        if self.consecutive_rtos > self.cfg.max_rto_retries {
            self.fail(MptError::RetriesExhausted(self.cfg.max_rto_retries));
            return false;
        }
        self.rto_backoff = (self.rto_backoff + 1).min(MAX_BACKOFF_SHIFT);
        true
    }

    fn pick_path(&mut self, now: Instant, avoid: Option<PathId>) -> PathId {
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

    /// Arms the timeout for chunk `seq`, just sent.
    fn arm_rto_for(&mut self, now: Instant, seq: u64) {
        let t = now + self.timeout_of(self.chunk(seq), self.rto_current(now));
        self.rto_deadline = min_deadline(self.rto_deadline, Some(t));
    }

    fn next_data(&mut self, now: Instant) -> Option<Transmit> {
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

    /// Arms or disarms the rendezvous probe: a sender whose next message waits for the
    /// peer's receive, with nothing in flight that would bring an acknowledgement, asks.
    fn update_probe(&mut self, now: Instant) {
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

/// What one acknowledgement acknowledged.
#[derive(Default)]
struct Acked {
    bytes: u64,
    chunks: u32,
    /// Longest time since the first and only copy was sent, of the chunks a timeout had
    /// declared lost: `Some` when the acknowledgement shows the timeout was spurious.
    spurious_delay: Option<Duration>,
}

fn slot_of(index: u64) -> usize {
    (index % RID_SPACE) as usize
}
