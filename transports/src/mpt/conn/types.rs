//! What crosses the connection's interface: message and receive ids, events, datagrams to
//! send and where received payloads go, and the counters.

use crate::mpt::frame::Frame;
use crate::mpt::path::PathId;
use crate::mpt::MptError;

/// Identifies a message queued with [`Connection::send`] (its index on the connection).
///
/// [`Connection::send`]: super::Connection::send
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SendId(pub u64);

/// Identifies a receive posted with [`Connection::post_recv`] (its index on the connection).
///
/// [`Connection::post_recv`]: super::Connection::post_recv
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
