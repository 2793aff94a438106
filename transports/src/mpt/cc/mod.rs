//! Congestion control behind one trait, chosen at run time.
//!
//! A [`Connection`](super::Connection) owns one `Box<dyn CongestionControl>` built by
//! [`build`] from [`MptConfig::cc`] (parsed from `CCL_MPT_CC`), or supplied by the caller
//! through [`Connection::with_congestion_control`](super::Connection::with_congestion_control).
//! The same object sees both halves of the connection: sender-side hooks (window, pacing,
//! path choice, loss, acknowledgements, credit received) and receiver-side hooks (chunks
//! received, credit to grant), which is what receiver-driven schemes such as EQDS need.
//!
//! The hooks mirror UCCL's extension points:
//!
//! | UCCL            | here                                   | called when |
//! |-----------------|----------------------------------------|-------------|
//! | `onChunkSize`   | [`CongestionControl::on_chunk_size`]   | a new chunk is cut from a message |
//! | `onPacingChunk` | [`CongestionControl::on_pacing_chunk`] | a chunk is ready: send now, at a time, or wait |
//! | `onSelectPath`  | [`CongestionControl::on_select_path`]  | a path is picked among two sampled candidates |
//! | `onTxRtxChunk`  | [`CongestionControl::on_tx_rtx_chunk`] | a retransmission leaves |
//! | `onRxChunk`     | [`CongestionControl::on_rx_chunk`]     | the receiver gets a new in-order-or-later chunk |
//! | `onRxRtxChunk`  | [`CongestionControl::on_rx_rtx_chunk`] | the receiver gets a hole-filling or duplicate chunk |
//! | `onRxACK`       | [`CongestionControl::on_rx_ack`]       | the sender gets an acknowledgement |
//! | `onRxCredit`    | [`CongestionControl::on_rx_credit`]    | the sender gets credit |
//!
//! plus four of our own: [`CongestionControl::on_tx_chunk`] (a new chunk leaves),
//! [`CongestionControl::on_loss`] (once per loss detection, not per chunk),
//! [`CongestionControl::on_spurious_timeout`] (a timeout's chunks turned out not lost: undo
//! its cut) and [`CongestionControl::poll_credit`] (the receiver's credit pacer).
//!
//! # Example: a custom policy
//!
//! ```
//! use std::time::Duration;
//! use ccl_transports::mpt::{
//!     AckSample, CongestionControl, Connection, Instant, MptConfig, Pacing, PathView,
//!     SenderView,
//! };
//!
//! /// At most `limit` bytes in flight, and always the path with fewer chunks in flight.
//! #[derive(Debug)]
//! struct FixedWindow { limit: u64, acks: u64 }
//!
//! impl CongestionControl for FixedWindow {
//!     fn name(&self) -> &'static str { "fixed-window" }
//!     fn on_pacing_chunk(&mut self, _now: Instant, len: u32, v: &SenderView) -> Pacing {
//!         if v.inflight_bytes + u64::from(len) <= self.limit { Pacing::Now } else { Pacing::Blocked }
//!     }
//!     fn on_select_path(&mut self, _now: Instant, a: &PathView, b: &PathView) -> ccl_transports::mpt::PathId {
//!         if b.inflight_chunks < a.inflight_chunks { b.id } else { a.id }
//!     }
//!     fn on_rx_ack(&mut self, _now: Instant, _s: &AckSample) { self.acks += 1; }
//!     fn cwnd_bytes(&self) -> Option<u64> { Some(self.limit) }
//! }
//!
//! let cc = Box::new(FixedWindow { limit: 4 * 32 * 1024, acks: 0 });
//! let conn = Connection::with_congestion_control(MptConfig::default(), 1, 2, cc).unwrap();
//! assert_eq!(conn.congestion_control().name(), "fixed-window");
//! assert_eq!(conn.congestion_control().cwnd_bytes(), Some(131072));
//! # let _ = Duration::ZERO;
//! ```

mod cubic;
mod eqds;
mod swift;

pub use cubic::Cubic;
pub use eqds::Eqds;
pub use swift::Swift;

use std::fmt;
use std::time::Duration;

use super::config::{CcKind, MptConfig};
use super::path::{PathId, PathView};
use super::time::Instant;

/// Whether a ready chunk may leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Send it now.
    Now,
    /// Not before this instant (pacing); the connection arms a timer.
    At(Instant),
    /// Not until an acknowledgement or credit arrives.
    Blocked,
}

/// The sender's state as congestion control sees it when pacing a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderView {
    /// Bytes sent and neither acknowledged nor declared lost.
    pub inflight_bytes: u64,
    /// Connection-level smoothed round-trip time.
    pub srtt: Option<Duration>,
    /// Whether the chunk is a retransmission.
    pub retransmission: bool,
}

/// What one acknowledgement told the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSample {
    /// Path the acknowledged (echoed) chunk was sent on, if the ack carried an echo.
    pub path: Option<PathId>,
    /// Round-trip time of the echoed chunk; `None` if it was retransmitted (Karn) or the ack
    /// echoes nothing.
    pub rtt: Option<Duration>,
    /// Bytes newly acknowledged (cumulatively or selectively) by this ack.
    pub acked_bytes: u64,
    /// Chunks newly acknowledged by this ack.
    pub acked_chunks: u32,
    /// Bytes still in flight after this ack.
    pub inflight_bytes: u64,
    /// Connection-level smoothed round-trip time after this ack.
    pub srtt: Option<Duration>,
}

/// How a loss was detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// Duplicate-acknowledgement threshold reached (selective acks show later chunks).
    FastRetransmit,
    /// Retransmission timeout expired.
    Timeout,
}

/// One loss detection (covering `chunks` chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossEvent {
    /// How it was detected.
    pub kind: LossKind,
    /// Chunks declared lost by this detection.
    pub chunks: u32,
    /// Connection-level smoothed round-trip time.
    pub srtt: Option<Duration>,
}

/// The receiver's credit pacer answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreditPoll {
    /// Bytes of credit to grant now (zero: none).
    pub grant: u64,
    /// When to ask again even if nothing else happens.
    pub next: Option<Instant>,
}

/// A congestion-control policy. Every hook but [`name`](Self::name) has a neutral default,
/// so a policy implements only what it uses. Hooks take `now` and never read a clock.
pub trait CongestionControl: Send + fmt::Debug {
    /// Short name for logs and statistics.
    fn name(&self) -> &'static str;

    /// `onChunkSize`: payload bytes of the next new chunk. The result is clamped to
    /// `1..=configured` and to what is left of the message.
    fn on_chunk_size(&mut self, _now: Instant, configured: u32, _remaining: u64) -> u32 {
        configured
    }

    /// `onPacingChunk`: may a chunk of `len` bytes leave now?
    fn on_pacing_chunk(&mut self, _now: Instant, _len: u32, _view: &SenderView) -> Pacing {
        Pacing::Now
    }

    /// `onSelectPath`: choose between two sampled paths. Default: the lower
    /// [`PathView::score`] (smoothed RTT scaled by the chunks already queued on the path),
    /// ties to `a`.
    fn on_select_path(&mut self, _now: Instant, a: &PathView, b: &PathView) -> PathId {
        if b.score() < a.score() {
            b.id
        } else {
            a.id
        }
    }

    /// A new chunk of `len` bytes left on `path`.
    fn on_tx_chunk(&mut self, _now: Instant, _path: PathId, _len: u32) {}

    /// `onTxRtxChunk`: a retransmitted chunk of `len` bytes left on `path`.
    fn on_tx_rtx_chunk(&mut self, _now: Instant, _path: PathId, _len: u32) {}

    /// Chunks were declared lost (once per detection).
    fn on_loss(&mut self, _now: Instant, _event: &LossEvent) {}

    /// An acknowledgement showed that chunks a [`LossKind::Timeout`] declared lost arrived
    /// from their first copy: the round trip outgrew the timeout (a receiver descheduled
    /// for milliseconds, say) and nothing was lost. Called before that acknowledgement's
    /// [`on_rx_ack`](Self::on_rx_ack). A window policy should return to where it was before
    /// the timeouts since its last acknowledgement cut it (RFC 4015's response).
    fn on_spurious_timeout(&mut self, _now: Instant) {}

    /// `onRxChunk` (receiver): a chunk at or beyond the highest sequence seen arrived.
    fn on_rx_chunk(&mut self, _now: Instant, _path: PathId, _len: u32) {}

    /// `onRxRtxChunk` (receiver): a chunk that fills a hole (a retransmission or a reordered
    /// chunk) or a duplicate arrived.
    fn on_rx_rtx_chunk(&mut self, _now: Instant, _path: PathId, _len: u32) {}

    /// `onRxACK` (sender): an acknowledgement was processed.
    fn on_rx_ack(&mut self, _now: Instant, _sample: &AckSample) {}

    /// `onRxCredit` (sender): the receiver granted `bytes` more credit.
    fn on_rx_credit(&mut self, _now: Instant, _bytes: u64) {}

    /// Receiver-driven policies: `demand` bytes of posted receives are not yet received;
    /// how much credit to grant now. Default: none (sender-driven).
    fn poll_credit(&mut self, _now: Instant, _demand: u64) -> CreditPoll {
        CreditPoll::default()
    }

    /// Whether the sender needs credit to send (the connection then tracks credit grants).
    fn receiver_driven(&self) -> bool {
        false
    }

    /// Current congestion window in bytes, if the policy has one (observability).
    fn cwnd_bytes(&self) -> Option<u64> {
        None
    }

    /// Credit the sender holds, in bytes, if the policy is credit-based (observability).
    fn credit_bytes(&self) -> Option<u64> {
        None
    }
}

/// No congestion control: only the flow window limits the sender.
#[derive(Debug, Default)]
pub struct NoCc;

impl CongestionControl for NoCc {
    fn name(&self) -> &'static str {
        "none"
    }
}

/// Builds the policy `config.cc` names (the `CCL_MPT_CC` factory).
pub fn build(config: &MptConfig) -> Box<dyn CongestionControl> {
    let p = &config.cc_params;
    let chunk = u64::from(config.chunk_size);
    let max_chunks = f64::from(config.window_chunks);
    match config.cc {
        CcKind::Cubic => Box::new(Cubic::new(p, chunk, max_chunks)),
        CcKind::Swift => Box::new(Swift::new(p, chunk, max_chunks)),
        CcKind::Eqds => Box::new(Eqds::new(p, chunk)),
        CcKind::None => Box::new(NoCc),
    }
}

/// Window admission shared by the window-based policies: a chunk may leave if it fits, and
/// always when nothing is in flight (a window below one chunk must still make progress).
fn window_admits(cwnd_bytes: f64, inflight: u64, len: u32) -> bool {
    inflight == 0 || (inflight + u64::from(len)) as f64 <= cwnd_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_builds_each_kind() {
        for (kind, name) in [
            (CcKind::Cubic, "cubic"),
            (CcKind::Swift, "swift"),
            (CcKind::Eqds, "eqds"),
            (CcKind::None, "none"),
        ] {
            let cfg = MptConfig {
                cc: kind,
                ..MptConfig::default()
            };
            let cc = build(&cfg);
            assert_eq!(cc.name(), name);
            assert_eq!(cc.receiver_driven(), kind == CcKind::Eqds);
        }
    }

    #[test]
    fn window_admission() {
        assert!(window_admits(0.5, 0, 100));
        assert!(window_admits(200.0, 100, 100));
        assert!(!window_admits(199.0, 100, 100));
    }
}
