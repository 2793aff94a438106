//! A link's settings ([`MptLinkConfig`]), their limits, and what they come to once the
//! engine count is settled with the peer.

use std::net::IpAddr;
use std::time::Duration;

use crate::mpt::udp;
use crate::mpt::{CcKind, MptConfig};
#[cfg(doc)]
use crate::Link;

/// Most engines per link.
pub const MAX_ENGINES: usize = 16;
/// Most messages in flight per direction and engine (the header's request-id space).
pub(super) const MAX_SLOTS: usize = 16;
/// Most local addresses (NICs) a link spreads its paths over.
pub const MAX_NICS: usize = 8;

/// Settings of one link.
#[derive(Clone, Debug)]
pub struct MptLinkConfig {
    /// Paths (UDP sockets) per engine, 1..=256; both sides must agree.
    pub paths: u16,
    /// Largest frame of a link that runs one engine.
    pub max_frame: usize,
    /// Messages in flight per direction and engine, 1..=16 (the header's request-id space),
    /// on a link that runs one engine.
    pub slots: u32,
    /// Largest frame and messages in flight per engine of a link that runs several engines,
    /// if not `max_frame` and `slots`: the engine count is settled with the peer (the smaller
    /// of the two), so a link knows which pair applies only then, and both sides pick alike.
    /// Several engines split large frames, so they want larger ones than one engine (which
    /// copies and sends alone).
    pub engines_max_frame: Option<usize>,
    /// See `engines_max_frame`.
    pub engines_slots: Option<u32>,
    /// Injected loss of outgoing datagrams, `[0, 1]`, on every engine.
    pub drop_rate: f64,
    /// Congestion control.
    pub cc: CcKind,
    /// Chunk size (capped so a chunk fits one UDP datagram).
    pub chunk_size: u32,
    /// See `MptConfig::ack_delay`.
    pub ack_delay: Duration,
    /// See `MptConfig::fail_after`.
    pub fail_after: Duration,
    /// Seed of loss injection and path sampling.
    pub seed: u64,
    /// Engines (sub-links, each with its own connection, paths and thread), 1..=16; a link
    /// runs the smaller of its two sides' counts.
    pub engines: usize,
    /// With several engines, frames longer than this are split into one part per engine.
    pub split_bytes: usize,
    /// With several engines, each engine's thread copies its own part of a split frame into
    /// its send slot while `try_send` waits, instead of the sender copying every part: pays
    /// where parts are large (MiB frames) and cores many; a local choice.
    pub engine_copy: bool,
    /// With several engines, frames handed over with [`Link::try_send_deferred`] are copied
    /// into their send slots by the copy threads (crate::par) while the user goes on (to
    /// receive, say), and queued once copied, in order: the user's thread no longer waits for
    /// its sends' copies. Off by default (not yet measured on a many-core host).
    pub async_copy: bool,
    /// Frames handed over with [`Link::try_send_deferred`] are not copied at all: the engines
    /// send (and resend) them from the caller's memory, which the caller keeps unchanged until
    /// the link has nothing pending (every message acknowledged); [`Link::quiesce`] copies what
    /// is still unacknowledged into the send slots. Takes precedence over `async_copy`.
    pub zero_copy: bool,
    /// Local addresses (one per NIC, in the same NIC order on both sides) to spread every
    /// engine's paths over: path `i` binds `local_ips[i % len]` and talks to the peer's path
    /// `i` on the peer's address of the same index. A NIC port that dies takes its paths
    /// with it; the connection's loss recovery moves their chunks to the others and keeps
    /// probing the dead ones, which come back when the port does. Empty: every path on the
    /// address the link was bound to. At most [`MAX_NICS`].
    pub local_ips: Vec<IpAddr>,
    /// The host-wide number of each entry of `local_ips` (its place in the host's list of
    /// NICs), which the monitor reports as a path's NIC: a link may order its NICs its own
    /// way (its primary first) and NIC 1 must still be the same port on every link. Empty
    /// (or shorter): an entry's place in `local_ips`.
    pub nic_ids: Vec<u16>,
    /// How long an engine thread that found nothing to do keeps polling before it parks in
    /// `poll` (zero: it parks at once). Spinning saves the wake-up of a parked thread on
    /// every burst, at the price of a core per engine while traffic flows.
    pub spin: Duration,
    /// The link takes the destinations its user lends ([`Link::lend`]) and its engines write
    /// arriving frames (or, on several engines, their parts of split frames) straight there,
    /// instead of into their receive slots for the user to copy out. Either side may choose
    /// alone (nothing changes on the wire).
    pub place_receives: bool,
    /// With several engines, frames of at most this many bytes go whole on the lead engine
    /// and the user's thread runs that engine's progress while it sends and waits for them
    /// (0: never; every frame to the least-loaded engine, moved by the engine threads alone).
    /// At most `split_bytes` apply (longer frames are split). A local choice (the receiver
    /// finds a frame on whichever engine carries it).
    pub inline_bytes: usize,
}

impl Default for MptLinkConfig {
    fn default() -> Self {
        MptLinkConfig {
            paths: udp::DEFAULT_UDP_PATHS,
            max_frame: 512 * 1024,
            slots: 16,
            engines_max_frame: None,
            engines_slots: None,
            drop_rate: 0.0,
            cc: CcKind::Cubic,
            chunk_size: 32 * 1024,
            ack_delay: MptConfig::default().ack_delay,
            fail_after: MptConfig::default().fail_after,
            seed: 0x5EED,
            engines: 1,
            split_bytes: 256 * 1024,
            engine_copy: false,
            async_copy: false,
            zero_copy: false,
            local_ips: Vec::new(),
            nic_ids: Vec::new(),
            spin: Duration::ZERO,
            place_receives: false,
            inline_bytes: 0,
        }
    }
}

/// `cfg` as a link of `engines` engines runs it: the frame size and slots for several
/// engines in place of one engine's.
pub(super) fn for_engines(cfg: &MptLinkConfig, engines: usize) -> MptLinkConfig {
    let mut c = cfg.clone();
    if engines > 1 {
        c.max_frame = cfg.engines_max_frame.unwrap_or(cfg.max_frame);
        c.slots = cfg.engines_slots.unwrap_or(cfg.slots);
    }
    c
}

/// The largest frame and the size above which several engines split a frame (never above
/// the largest frame, so `split == max_frame` means "never split").
pub(super) fn layout(cfg: &MptLinkConfig) -> (usize, usize) {
    (
        cfg.max_frame,
        cfg.split_bytes.clamp(1, cfg.max_frame.max(1)),
    )
}
