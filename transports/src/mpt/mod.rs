//! `mpt`: the UCCL-style software multipath transport, as a sans-IO protocol core.
//!
//! The NIC (or the kernel's UDP stack) only moves bytes; chunking, path choice, loss
//! recovery and congestion control happen here, in software, so they can evolve. The core is
//! shaped like quinn-proto: a [`Connection`] takes inputs with the current time
//! (`handle_datagram`, `handle_timeout`, `send`, `post_recv`) and hands out outputs
//! (`poll_transmit`, `poll_timeout`, `poll_event`); datapaths (`udp`, `ibverbs`, and the
//! in-memory [`sim`] fabric) move the datagrams.
//!
//! Protocol summary (details in each module):
//! * messages are cut into chunks (default 32 KiB); each chunk carries a 32-bit header in
//!   UCCL's immediate-data layout ([`header`]) plus its byte offset, so the receiver places
//!   it directly and reordering costs nothing;
//! * a connection has N paths (default 32, up to 256); large messages spray chunks over the
//!   better of two randomly sampled paths by smoothed RTT, messages under 8 KiB stay on one
//!   dedicated path ([`path`]);
//! * the receiver acknowledges with a cumulative point and a 128-bit SACK bitmap; the sender
//!   retransmits on a duplicate-acknowledgement threshold (with a RACK reordering window)
//!   and on a 500 us RTO (floor of an RFC 6298 estimate) with exponential backoff
//!   ([`conn`]);
//! * congestion control is a trait object built from `CCL_MPT_CC` ([`cc`]): CUBIC, Swift or
//!   receiver-driven EQDS credits.

pub mod cc;
pub mod config;
pub mod conn;
pub mod frame;
pub mod header;
pub mod path;
pub mod rng;
pub mod sim;
pub mod time;
pub mod udp;
pub mod verbs;

pub use cc::{AckSample, CongestionControl, CreditPoll, LossEvent, LossKind, Pacing, SenderView};
pub use config::{CcKind, CcParams, MptConfig, CC_ENV_VAR};
pub use conn::{
    ConnStats, Connection, Event, PayloadRef, Placement, RecvId, SendId, Transmit, QUIET_ROUNDS,
};
pub use frame::{AckFrame, DataFrame, Echo, Frame, ProbeFrame};
pub use header::ChunkHeader;
pub use path::{PathId, PathView};
pub use time::Instant;

/// Everything that can go wrong in the multipath core and its simulator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MptError {
    /// A configuration field is outside the protocol's limits.
    #[error("invalid multipath configuration: {0}")]
    InvalidConfig(&'static str),
    /// `CCL_MPT_CC` named no known algorithm.
    #[error("unknown congestion control {0:?} (expected cubic, swift, eqds or none)")]
    UnknownCongestionControl(String),
    /// A flow id does not fit the header's 11 bits.
    #[error("flow id {0} does not fit in 11 bits")]
    FlowIdOutOfRange(u16),
    /// A request id does not fit the header's 4 bits.
    #[error("request id {0} does not fit in 4 bits")]
    RequestIdOutOfRange(u8),
    /// A datagram arrived on a path the connection does not have.
    #[error("path {path} out of range (connection has {paths} paths)")]
    PathOutOfRange {
        /// The path given.
        path: u16,
        /// The connection's path count.
        paths: u16,
    },
    /// A frame was handed to the wrong connection.
    #[error("frame for flow {got} delivered to flow {expected}")]
    WrongFlow {
        /// The frame's destination flow.
        got: u16,
        /// This connection's flow.
        expected: u16,
    },
    /// A datagram could not be parsed.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// An output buffer is too small.
    #[error("buffer too small: need {need} bytes")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
    },
    /// The peer sent something the protocol forbids.
    #[error("peer protocol violation: {0}")]
    ProtocolViolation(&'static str),
    /// Too many messages queued for sending.
    #[error("too many messages in flight to send ({0} max)")]
    SendQueueFull(u32),
    /// Too many receives posted.
    #[error("too many receives posted ({0} max)")]
    RecvQueueFull(u32),
    /// The connection gave up.
    #[error(
        "connection failed: more than {0} consecutive retransmission timeouts without progress"
    )]
    RetriesExhausted(u32),
    /// A connection waiting to receive heard nothing from its peer, which answered none of
    /// this many probes in a row.
    #[error("connection failed: the peer answered none of {0} probes while a receive waited")]
    PeerSilent(u32),
    /// The simulator has nothing left to do but transfers are incomplete.
    #[error("simulation stalled at {at_ns} ns with transfers incomplete")]
    SimStalled {
        /// Simulated time.
        at_ns: u64,
    },
    /// The simulation ran past its time limit.
    #[error("simulation passed its time limit of {limit_ns} ns")]
    SimTimeLimit {
        /// The limit.
        limit_ns: u64,
    },
    /// Misuse of the simulator's API.
    #[error("simulation: {0}")]
    Sim(&'static str),
}
