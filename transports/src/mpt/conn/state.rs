//! The connection's state: its fields, the message slots and chunk ring it is built of, and
//! building one.

use std::collections::VecDeque;
use std::time::Duration;

use crate::mpt::cc::{self, CongestionControl};
use crate::mpt::config::MptConfig;
use crate::mpt::frame::Echo;
use crate::mpt::header::{CSN_SPACE, MAX_FLOW_ID, RID_SPACE};
use crate::mpt::path::{PathId, Paths};
use crate::mpt::rng::Rng;
use crate::mpt::time::Instant;
use crate::mpt::MptError;

use super::types::{ConnStats, Event};

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SendSlot {
    pub(super) active: bool,
    pub(super) done: bool,
    pub(super) id: u64,
    pub(super) tag: u64,
    pub(super) len: u64,
    pub(super) next_offset: u64,
    pub(super) cut_done: bool,
    pub(super) unacked: u32,
    pub(super) small: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum ChunkState {
    #[default]
    Free,
    Outstanding,
    Lost,
    Acked,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TxChunk {
    pub(super) seq: u64,
    pub(super) msg: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) last: bool,
    pub(super) path: PathId,
    pub(super) tx_time: Instant,
    pub(super) retransmits: u32,
    pub(super) state: ChunkState,
    /// Declared lost by the retransmission timeout (not by RACK).
    pub(super) timed_out: bool,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RecvSlot {
    pub(super) posted: bool,
    pub(super) complete: bool,
    pub(super) id: u64,
    pub(super) tag: u64,
    pub(super) capacity: u64,
    pub(super) received: u64,
    pub(super) total: Option<u64>,
    pub(super) truncated: bool,
}

/// Most acknowledgements waiting to be sent; beyond it the oldest echo is dropped (only a
/// round-trip sample is lost: every acknowledgement carries the full cumulative state).
pub(super) const ECHO_QUEUE: usize = 128;
/// Backoff shifts beyond this cannot matter (`rto_max` caps the timeout long before).
pub(super) const MAX_BACKOFF_SHIFT: u32 = 20;
/// Largest reordering window, in quarters of srtt (two round trips).
pub(super) const MAX_REO_MULT: u32 = 8;
/// A timeout floor learnt from spurious timeouts holds this many times itself, then halves
/// per such period without another.
pub(super) const SPURIOUS_FLOOR_HOLD: u32 = 64;

/// One multipath connection (see the module docs).
#[derive(Debug)]
pub struct Connection {
    pub(super) cfg: MptConfig,
    pub(super) local_fid: u16,
    pub(super) remote_fid: u16,
    pub(super) cc: Box<dyn CongestionControl>,
    pub(super) rng: Rng,
    pub(super) paths: Paths,
    pub(super) small_path: PathId,
    pub(super) srtt: Option<Duration>,
    pub(super) rttvar: Duration,
    pub(super) failed: Option<MptError>,
    pub(super) events: VecDeque<Event>,
    pub(super) stats: ConnStats,

    // Sender half.
    pub(super) send_slots: Vec<SendSlot>,
    pub(super) next_send: u64,
    pub(super) oldest_send: u64,
    pub(super) cut_msg: u64,
    pub(super) ring: Vec<TxChunk>,
    pub(super) snd_una: u64,
    pub(super) snd_nxt: u64,
    pub(super) lost: u32,
    pub(super) inflight_bytes: u64,
    pub(super) dupacks: u32,
    pub(super) rack_tx: Option<Instant>,
    pub(super) highest_acked: u64,
    pub(super) rto_deadline: Option<Instant>,
    pub(super) rto_backoff: u32,
    pub(super) consecutive_rtos: u32,
    pub(super) peer_posted: u64,
    pub(super) peer_credit: u64,
    pub(super) probe_deadline: Option<Instant>,
    pub(super) probe_backoff: u32,
    /// Rendezvous probes sent since the last acknowledgement: a sender waiting for the
    /// peer's receive with nothing in flight has no timeout to count, so unanswered probes
    /// count toward the retry budget instead (else a network that died while the sender
    /// waited left both ends waiting for ever).
    pub(super) probes_unanswered: u32,
    pub(super) probe_pending: bool,
    pub(super) pacing_deadline: Option<Instant>,
    pub(super) reorder_deadline: Option<Instant>,
    /// Reordering window in quarters of `srtt` (RFC 8985 `reo_wnd_mult`): grows by one per
    /// round trip in which the peer reports duplicates, back to one after 16 recoveries
    /// without.
    pub(super) reo_mult: u32,
    pub(super) reo_bumped: Option<Instant>,
    pub(super) recoveries_since_bump: u32,
    /// Last transmission time per CSN value, for `csn_reuse_guard`.
    pub(super) csn_tx: Vec<Option<Instant>>,

    // Receiver half.
    pub(super) recv_slots: Vec<RecvSlot>,
    pub(super) posted: u64,
    pub(super) recv_base: u64,
    pub(super) rcv_nxt: u64,
    pub(super) sack: u128,
    pub(super) rcv_highest: u64,
    pub(super) echoes: VecDeque<Echo>,
    /// The echo of a whole-message chunk whose acknowledgement waits (`ack_delay`) for the
    /// next one, and when that chunk arrived.
    pub(super) held: Option<(Echo, Instant)>,
    pub(super) ack_needed: bool,
    /// The `posted` count of the last acknowledgement built: the peer may send messages
    /// up to it.
    pub(super) announced: u64,
    /// One past the newest message a chunk of which has arrived.
    pub(super) msg_seen_end: u64,
    pub(super) dup_seen: bool,
    pub(super) last_rx_path: Option<PathId>,
    /// Paths a probe arrived on, to answer on the same path (so the prober learns that the
    /// path works both ways).
    pub(super) probe_replies: VecDeque<PathId>,
    /// Receiver-driven: when a sender with data to send, nothing in flight and no credit
    /// gives up waiting for credit (the acknowledgements carrying it may be on a dead path);
    /// then it counts a timeout and may send one chunk without credit.
    pub(super) credit_stall: Option<Instant>,
    pub(super) credit_override: bool,
    /// When the last timeout that counted toward the retry budget fired: chunks sent a few
    /// microseconds apart time out a few microseconds apart, and all of them within one
    /// timeout period are one timeout (else 50 chunks in flight on dead paths spent the whole
    /// budget in one period: a 160 ms outage failed the connection).
    pub(super) rto_counted_at: Option<Instant>,
    /// When the timeouts counted in `consecutive_rtos` began (`None`: none counted).
    pub(super) rtos_since: Option<Instant>,
    /// When the probes counted in `probes_unanswered` began.
    pub(super) probes_since: Option<Instant>,
    /// Timeout floor learnt from spurious timeouts (`Duration::ZERO`: none), and when it was
    /// last raised. A host whose threads are descheduled for milliseconds (more engine and
    /// copy threads than CPUs) stretches round trips far past the unloaded `srtt + 4 rttvar`
    /// for a moment: the estimator forgets such pauses within microseconds of samples, but
    /// they come back, and each one that fires the timeout cuts the window to one chunk for
    /// chunks that were never lost.
    pub(super) spurious_floor: Duration,
    pub(super) spurious_floor_at: Instant,
    pub(super) credit_total: u64,
    pub(super) credit_next: Option<Instant>,
    /// Whether the peer still answers while this side waits to receive.
    pub(super) watch: Watch,
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
            paths: Paths::new(config.num_paths, config.rto, &config.path_nics),
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
            rtos_since: None,
            probes_since: None,
            spurious_floor: Duration::ZERO,
            spurious_floor_at: Instant::ZERO,
            credit_total: 0,
            credit_next: None,
            watch: Watch::default(),
            cc,
            local_fid,
            remote_fid,
            cfg: config,
        })
    }
}

/// Where the peer watch stands (see `watch.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Watch {
    /// When the next probe is due; `None` while nothing is awaited (or not yet armed).
    pub(super) deadline: Option<Instant>,
    /// Probes sent since the peer was last heard from.
    pub(super) unanswered: u32,
    /// When the first of them went.
    pub(super) since: Option<Instant>,
    /// A probe is due to go out.
    pub(super) pending: bool,
    /// The path the next probe takes.
    pub(super) next_path: u16,
}

impl Watch {
    pub(super) fn is_pending(&self) -> bool {
        self.pending
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

pub(super) fn slot_of(index: u64) -> usize {
    (index % RID_SPACE) as usize
}
