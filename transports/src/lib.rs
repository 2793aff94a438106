//! Transports between ranks: `shm` (host shared memory between ranks of one host), `socket`
//! (TCP between hosts) and, growing in `mpt`, the multipath engine.
//!
//! The shm and socket transports expose one shape, [`Link`]: a bidirectional, framed, bounded
//! channel to one peer, driven by polling. Executors push whole frames (`try_send`), look at
//! the oldest arrived frame in place (`peek`) so a reduction can read it without another copy,
//! then release it (`pop`). Nothing here blocks: a full or empty link answers at once, which
//! lets one thread progress many operations on many links without deadlock.

mod frame_mon;
pub mod ifaddr;
pub mod mpt;
pub mod mpt_link;
pub mod par;
pub mod shm;
pub mod socket;
pub mod socket_failover;

pub use frame_mon::{NIC_NONE, SHM_PATH, SINGLE_PATH};

use std::io;

/// Errors of the shm and socket transports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("peer closed the connection ({what})")]
    PeerClosed { what: String },
    #[error("transport protocol violation: {0}")]
    Protocol(String),
    /// The network to the peer stopped carrying anything (every path silent past the
    /// retransmission budget): a dead link, NIC or host, not a bug of either side.
    #[error("network failure: {0}")]
    Unreachable(String),
}

impl Error {
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Pieces of a frame (see [`Link::peek`]) other than its last are multiples of this many
/// bytes: whole elements of every data type, and room for an executor's operation header.
pub const PIECE_ALIGN: usize = 64;

/// A framed, bounded, non-blocking channel to one peer, both directions.
pub trait Link: Send {
    /// Largest frame `try_send` accepts.
    fn max_frame(&self) -> usize;
    /// Queues `frame` whole if there is room now; `Ok(false)` when the link is full.
    fn try_send(&mut self, frame: &[u8]) -> Result<bool>;
    /// The oldest frame that has fully arrived, left in place until [`Link::pop`] -- or the
    /// next piece of it: a link may deliver a frame as consecutive pieces (its bytes in
    /// order, each piece one peek and pop), every piece but a frame's last a multiple of
    /// [`PIECE_ALIGN`] bytes long, so a frame of at least that many bytes starts with at
    /// least that many. Readers that count bytes, as executors do, see no difference.
    fn peek(&mut self) -> Result<Option<&[u8]>>;
    /// Releases the frame returned by the last successful [`Link::peek`].
    fn pop(&mut self);
    /// Moves bytes that a previous `try_send` queued but could not hand to the OS yet.
    /// Returns whether anything moved.
    fn flush(&mut self) -> Result<bool>;
    /// Whether bytes accepted by `try_send` still wait in user space for `flush`. A send is
    /// complete only once this is false: nothing else would push them out later.
    fn has_pending(&self) -> bool;
    /// `try_send` of bytes the caller keeps valid and unchanged until `has_pending` is false
    /// (or [`Link::quiesce`] has returned), so the link may copy them later or on other
    /// threads while its user goes on. By default the same as `try_send`.
    ///
    /// # Safety
    /// `frame` must stay valid for reads and unchanged until then.
    unsafe fn try_send_deferred(&mut self, frame: &[u8]) -> Result<bool> {
        self.try_send(frame)
    }
    /// Waits until the link reads none of the bytes handed to `try_send_deferred` any more,
    /// and writes none to destinations lent with [`Link::lend`]: called before a failed
    /// operation gives its buffers back.
    fn quiesce(&mut self) {}
    /// Offers `[dst, dst + len)` as the place of the frames after the last one popped: the
    /// first takes the first `max_frame` bytes, the next the following ones, and so on (how
    /// a sender cuts an operation's bytes into frames). A link may write arriving frames
    /// straight there; `peek` then shows such a frame in place (its slice starts where the
    /// frame belongs), so a caller that would copy it there has nothing to copy. Links are
    /// free to ignore the offer (the default), take part of it, or take it only for frames
    /// not yet begun; calling again as frames are consumed (with the rest of the range)
    /// extends it.
    ///
    /// # Safety
    /// The range must be valid for writes and neither read nor written by anyone else until
    /// every frame in it has been popped or [`Link::quiesce`] has returned.
    unsafe fn lend(&mut self, dst: *mut u8, len: usize) {
        let _ = (dst, len);
    }
    /// Whether bytes sent on this link may still need resending because the peer has not
    /// confirmed them (runs what progress the link's user owes first). A completed send
    /// guarantees delivery only while the link lives: a communicator being destroyed waits,
    /// for a bounded time, until no link has such bytes. By default false (the kernel owns
    /// what a stream socket accepted; shared memory is delivered once written).
    fn unconfirmed(&mut self) -> bool {
        false
    }
    /// Short name for logs ("shm", "socket").
    fn kind(&self) -> &'static str;
    /// Starts telling `m`'s monitor about the link's work (posts and completions of its
    /// chunks, path health). Links that have nothing to report ignore it (the default).
    fn attach_monitor(&mut self, m: &LinkMonitor) {
        let _ = m;
    }
    /// The frames sent from now on belong to the `seq`-th operation `op` of the
    /// communicator: links that report to the monitor name it in their records. By default
    /// ignored.
    fn begin_op(&mut self, op: ccl_monitor::Op, seq: u64) {
        let _ = (op, seq);
    }
}

/// Where a link reports to the throughput monitor, and as whom.
#[derive(Clone, Debug)]
pub struct LinkMonitor {
    pub publisher: ccl_monitor::Publisher,
    /// The peer's rank in the communicator.
    pub peer: u32,
    /// The communicator's hash, naming it in the monitor's alerts.
    pub comm: u64,
}
