//! Connection configuration and the congestion-control choice.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::header::{MAX_WINDOW, RID_SPACE};
use super::MptError;

/// Environment variable that selects the congestion control (`cubic`, `swift`, `eqds`,
/// `none`). The core does not read the environment; the caller parses the value with
/// [`CcKind::from_str`].
pub const CC_ENV_VAR: &str = "CCL_MPT_CC";

/// Which congestion control a connection runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CcKind {
    /// CUBIC (RFC 8312), loss-based, sender-driven window.
    #[default]
    Cubic,
    /// Swift: delay-based AIMD on the measured round-trip time against a target delay.
    Swift,
    /// EQDS-style receiver-driven credits: the receiver paces credit, the sender sends only
    /// with credit.
    Eqds,
    /// No congestion control: only the flow window limits the sender (tests, debugging).
    None,
}

impl CcKind {
    /// The value accepted by [`FromStr`] and printed by `Display`.
    pub fn as_str(self) -> &'static str {
        match self {
            CcKind::Cubic => "cubic",
            CcKind::Swift => "swift",
            CcKind::Eqds => "eqds",
            CcKind::None => "none",
        }
    }
}

impl fmt::Display for CcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CcKind {
    type Err = MptError;

    /// Parses a `CCL_MPT_CC` value: case-insensitive, surrounding blanks ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cubic" => Ok(CcKind::Cubic),
            "swift" => Ok(CcKind::Swift),
            "eqds" => Ok(CcKind::Eqds),
            "none" | "off" => Ok(CcKind::None),
            _ => Err(MptError::UnknownCongestionControl(s.to_owned())),
        }
    }
}

/// Tunables of the congestion-control algorithms (units noted per field).
#[derive(Clone, Debug, PartialEq)]
pub struct CcParams {
    /// Initial window of window-based algorithms, in chunks.
    pub initial_cwnd_chunks: f64,
    /// Smallest window, in chunks (Swift may go below one chunk and then paces).
    pub min_cwnd_chunks: f64,
    /// CUBIC's `C` (RFC 8312: 0.4).
    pub cubic_c: f64,
    /// CUBIC's multiplicative decrease factor `beta_cubic` (RFC 8312: 0.7).
    pub cubic_beta: f64,
    /// Swift's target round-trip delay.
    pub swift_target_delay: Duration,
    /// Swift's additive increase, in chunks per round trip.
    pub swift_ai: f64,
    /// Swift's multiplicative decrease scale `beta`.
    pub swift_beta: f64,
    /// Swift's largest single decrease (fraction of the window).
    pub swift_max_mdf: f64,
    /// EQDS: rate at which the receiver hands out credit, bytes per second.
    pub eqds_rate_bytes_per_s: u64,
    /// EQDS: most credit outstanding (granted, not yet used up by arriving data), bytes.
    pub eqds_max_outstanding: u64,
    /// EQDS: credit not matched by arriving data within this time is written off (the data
    /// or the grant was lost), so the receiver can grant it again.
    pub eqds_credit_timeout: Duration,
}

impl Default for CcParams {
    fn default() -> Self {
        CcParams {
            initial_cwnd_chunks: 16.0,
            min_cwnd_chunks: 0.01,
            cubic_c: 0.4,
            cubic_beta: 0.7,
            swift_target_delay: Duration::from_micros(50),
            swift_ai: 1.0,
            swift_beta: 0.8,
            swift_max_mdf: 0.5,
            eqds_rate_bytes_per_s: 12_500_000_000,
            eqds_max_outstanding: 16 * 32 * 1024,
            eqds_credit_timeout: Duration::from_micros(500),
        }
    }
}

/// Everything a [`Connection`](super::Connection) needs to know. Both ends of a connection
/// must agree on `chunk_size`-independent fields `num_paths` and `window_chunks` (they
/// define the wire interpretation); the rest is local policy.
#[derive(Clone, Debug, PartialEq)]
pub struct MptConfig {
    /// Largest chunk payload, bytes (default 32 KiB, UCCL's control-coalescing unit).
    pub chunk_size: u32,
    /// Paths per connection (default 32, 1..=256). On UDP a path is a source port, on verbs
    /// a queue pair.
    pub num_paths: u16,
    /// Messages shorter than this travel on one dedicated path (default 8 KiB): a small
    /// message gains nothing from spraying and would only risk reordering.
    pub small_message_threshold: u64,
    /// Most chunks outstanding past the oldest unacknowledged one (default and maximum 128:
    /// half the 8-bit CSN space, so CSNs stay unambiguous).
    pub window_chunks: u32,
    /// Most messages in flight per direction (default and maximum 16: the 4-bit RID).
    pub max_messages: u32,
    /// Acknowledgements that show later chunks received but no cumulative progress needed
    /// before presumed-lost chunks are retransmitted (default 32, UCCL's RoCE value: large
    /// because spraying over paths of different delay reorders chunks).
    pub dup_ack_threshold: u32,
    /// Retransmission timeout floor (default 500 us, UCCL's constant RTO). The timeout in use
    /// is `max(rto, srtt + 4 rttvar)` (RFC 6298), which on fabrics with round trips well
    /// below 500 us is exactly this constant.
    pub rto: Duration,
    /// Upper bound of the exponentially backed-off timeout.
    pub rto_max: Duration,
    /// How long the acknowledgement of a chunk that is a whole message may wait for the next
    /// such chunk, so one acknowledgement covers both (default 100 us; zero: every chunk is
    /// acknowledged at once). Each small message cost a datagram each way -- its chunk and
    /// the acknowledgement -- and the acknowledgements were half a small operation's system
    /// calls; a sender's copied frames complete without them. The receiver reports how long
    /// it held each one (the sender's round-trip samples leave it out) and the sender's
    /// timeout adds this delay, so both ends should use the same value.
    pub ack_delay: Duration,
    /// Consecutive timeouts without any acknowledged chunk before the connection fails
    /// (default 50, UCCL's abort threshold), and as many unanswered probes.
    pub max_rto_retries: u32,
    /// And at least this long since the first of them (default 6 s): at the capped backoff
    /// 50 timeouts pass in about 3 s, shorter than a stall of a peer that is alive (an
    /// overloaded host left three test ranks' processes without a core for about 4 s,
    /// 2026-11-29, and the connection gave up on a working network).
    pub fail_after: Duration,
    /// For datapaths that carry only the 8-bit CSN (verbs): a new chunk waits until this long
    /// after the last transmission of the chunk `256 - window` before it, so no stale copy of
    /// that chunk can still be in flight when its CSN becomes ambiguous (see
    /// [`header`](super::header)). Set it to the fabric's worst-case datagram lifetime.
    /// Zero (default) disables the guard: datagram datapaths carry 32 sequence bits.
    pub csn_reuse_guard: Duration,
    /// A path that has carried no measured chunk for this long gets the next chunk, so its
    /// round-trip time is measured again (default 100 ms; zero: never). Chunks go where the
    /// measured time is short, and a path whose one sample came while the host was busy
    /// (milliseconds, against tens of microseconds on the other) would carry nothing again.
    pub rtt_refresh: Duration,
    /// Congestion control built for the connection.
    pub cc: CcKind,
    /// Congestion-control tunables.
    pub cc_params: CcParams,
    /// Seed of the path sampler (power-of-two choice), so runs are reproducible.
    pub seed: u64,
    /// The NIC of each path as the host numbers its NICs (path `i` on `path_nics[i % len]`),
    /// named in the log lines of path health so that a NIC's return can be read off them;
    /// empty (the default): not known, not named.
    pub path_nics: Vec<u16>,
}

impl Default for MptConfig {
    fn default() -> Self {
        MptConfig {
            chunk_size: 32 * 1024,
            num_paths: 32,
            small_message_threshold: 8 * 1024,
            window_chunks: MAX_WINDOW,
            max_messages: RID_SPACE as u32,
            dup_ack_threshold: 32,
            rto: Duration::from_micros(500),
            rto_max: Duration::from_millis(64),
            ack_delay: Duration::from_micros(100),
            max_rto_retries: 50,
            fail_after: Duration::from_secs(6),
            csn_reuse_guard: Duration::ZERO,
            rtt_refresh: Duration::from_millis(100),
            cc: CcKind::Cubic,
            cc_params: CcParams::default(),
            seed: 0x5EED,
            path_nics: Vec::new(),
        }
    }
}

impl MptConfig {
    /// Checks every field against the protocol's limits.
    pub fn validate(&self) -> Result<(), MptError> {
        let bad = |msg: &'static str| Err(MptError::InvalidConfig(msg));
        if self.chunk_size == 0 {
            return bad("chunk_size must be at least 1 byte");
        }
        if self.num_paths == 0 || self.num_paths > 256 {
            return bad("num_paths must be in 1..=256");
        }
        if self.window_chunks == 0 || self.window_chunks > MAX_WINDOW {
            return bad("window_chunks must be in 1..=128");
        }
        if self.max_messages == 0 || u64::from(self.max_messages) > RID_SPACE {
            return bad("max_messages must be in 1..=16");
        }
        if self.dup_ack_threshold == 0 {
            return bad("dup_ack_threshold must be at least 1");
        }
        if self.rto.is_zero() || self.rto_max < self.rto {
            return bad("rto must be positive and rto_max at least rto");
        }
        let p = &self.cc_params;
        if !(p.initial_cwnd_chunks > 0.0 && p.min_cwnd_chunks > 0.0) {
            return bad("congestion windows must be positive");
        }
        if !(p.cubic_beta > 0.0 && p.cubic_beta < 1.0 && p.cubic_c > 0.0) {
            return bad("cubic_beta must be in (0, 1) and cubic_c positive");
        }
        if !(p.swift_max_mdf > 0.0
            && p.swift_max_mdf < 1.0
            && p.swift_beta > 0.0
            && p.swift_ai > 0.0)
        {
            return bad("swift parameters out of range");
        }
        if p.eqds_rate_bytes_per_s == 0 || p.eqds_max_outstanding == 0 {
            return bad("eqds rate and outstanding credit must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_kind_parses_env_values() {
        assert_eq!("cubic".parse::<CcKind>().unwrap(), CcKind::Cubic);
        assert_eq!(" Swift\n".parse::<CcKind>().unwrap(), CcKind::Swift);
        assert_eq!("EQDS".parse::<CcKind>().unwrap(), CcKind::Eqds);
        assert_eq!("none".parse::<CcKind>().unwrap(), CcKind::None);
        assert!(
            matches!("bbr".parse::<CcKind>(), Err(MptError::UnknownCongestionControl(s)) if s == "bbr")
        );
        for k in [CcKind::Cubic, CcKind::Swift, CcKind::Eqds, CcKind::None] {
            assert_eq!(k.to_string().parse::<CcKind>().unwrap(), k);
        }
    }

    #[test]
    fn defaults_are_valid_and_limits_enforced() {
        MptConfig::default().validate().unwrap();
        let with = |f: fn(&mut MptConfig)| {
            let mut c = MptConfig::default();
            f(&mut c);
            c.validate()
        };
        assert!(with(|c| c.num_paths = 257).is_err());
        assert!(with(|c| c.num_paths = 256).is_ok());
        assert!(with(|c| c.window_chunks = 129).is_err());
        assert!(with(|c| c.max_messages = 17).is_err());
        assert!(with(|c| c.chunk_size = 0).is_err());
        assert!(with(|c| c.rto_max = Duration::from_micros(1)).is_err());
        assert!(with(|c| c.cc_params.cubic_beta = 1.0).is_err());
    }
}
