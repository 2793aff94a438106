//! Swift (SIGCOMM 2020): delay-based AIMD, in units of chunks.
//!
//! Per acknowledgement with a round-trip sample `delay`, against `target = base + target_delay`:
//! * `delay < target`: additive increase, `cwnd += ai * acked / cwnd` (window of at least
//!   one chunk) or `cwnd += ai * acked` (below one chunk);
//! * otherwise, at most once per round trip: multiplicative decrease
//!   `cwnd *= max(1 - beta (delay - target) / delay, 1 - max_mdf)`.
//!
//! Loss (fast retransmit or timeout) decreases by `max_mdf`, again at most once per round
//! trip. Below one chunk of window the sender paces: one chunk per `srtt / cwnd`.
//!
//! `base` is the smallest round trip seen: what the path and both endpoints take with nothing
//! queued. Swift adds its target to a fabric base delay it knows and keeps endpoint delay
//! apart; a software datapath measures both in one round trip, so the queueing allowed is
//! measured from the best round trip seen. With a fixed target a path whose unloaded round
//! trip alone exceeded it (a loaded host's loopback, a long link) cut its window to the floor
//! at every sample: 0.05 GB/s where CUBIC moved 6 (8 engines on the GPU machine). Swift's
//! flow- and hop-scaling of the target are not modelled.

use std::time::Duration;

use super::{window_admits, AckSample, CongestionControl, LossEvent, LossKind, Pacing, SenderView};
use crate::mpt::config::CcParams;
use crate::mpt::path::PathId;
use crate::mpt::time::Instant;

/// Swift state.
#[derive(Debug, Clone)]
pub struct Swift {
    chunk: f64,
    cwnd: f64,
    target: Duration,
    ai: f64,
    beta: f64,
    max_mdf: f64,
    min_cwnd: f64,
    max_cwnd: f64,
    srtt: Duration,
    /// Smallest round-trip sample so far (see the module documentation).
    base: Option<Duration>,
    last_decrease: Option<Instant>,
    last_tx: Option<Instant>,
    decreases: u64,
    /// The window before the first timeout since the last acknowledgement, for
    /// `on_spurious_timeout`.
    undo_cwnd: Option<f64>,
}

impl Swift {
    /// Swift with `chunk`-byte segments and at most `max_cwnd` chunks of window.
    pub fn new(p: &CcParams, chunk: u64, max_cwnd: f64) -> Self {
        let max_cwnd = max_cwnd.max(p.min_cwnd_chunks);
        Swift {
            chunk: chunk as f64,
            cwnd: p.initial_cwnd_chunks.clamp(p.min_cwnd_chunks, max_cwnd),
            target: p.swift_target_delay,
            ai: p.swift_ai,
            beta: p.swift_beta,
            max_mdf: p.swift_max_mdf,
            min_cwnd: p.min_cwnd_chunks,
            max_cwnd,
            srtt: p.swift_target_delay,
            base: None,
            last_decrease: None,
            last_tx: None,
            decreases: 0,
            undo_cwnd: None,
        }
    }

    /// Window in chunks.
    pub fn cwnd_chunks(&self) -> f64 {
        self.cwnd
    }

    /// Multiplicative decreases so far.
    pub fn decreases(&self) -> u64 {
        self.decreases
    }

    fn can_decrease(&self, now: Instant) -> bool {
        self.last_decrease
            .map_or(true, |t| now.saturating_duration_since(t) >= self.srtt)
    }

    fn decrease(&mut self, now: Instant, factor: f64) {
        self.cwnd = (self.cwnd * factor).clamp(self.min_cwnd, self.max_cwnd);
        self.last_decrease = Some(now);
        self.decreases += 1;
    }
}

impl CongestionControl for Swift {
    fn name(&self) -> &'static str {
        "swift"
    }

    fn on_pacing_chunk(&mut self, now: Instant, len: u32, view: &SenderView) -> Pacing {
        if self.cwnd >= 1.0 {
            return if window_admits(self.cwnd * self.chunk, view.inflight_bytes, len) {
                Pacing::Now
            } else {
                Pacing::Blocked
            };
        }
        // Below one chunk: space chunks srtt / cwnd apart.
        let gap = self.srtt.div_f64(self.cwnd.max(1e-6));
        match self.last_tx {
            Some(t) if t + gap > now => Pacing::At(t + gap),
            _ => Pacing::Now,
        }
    }

    fn on_tx_chunk(&mut self, now: Instant, _path: PathId, _len: u32) {
        self.last_tx = Some(now);
    }

    fn on_tx_rtx_chunk(&mut self, now: Instant, _path: PathId, _len: u32) {
        self.last_tx = Some(now);
    }

    fn on_rx_ack(&mut self, now: Instant, s: &AckSample) {
        if s.acked_chunks > 0 {
            self.undo_cwnd = None;
        }
        if let Some(srtt) = s.srtt {
            self.srtt = srtt;
        }
        let Some(delay) = s.rtt else { return };
        let base = self.base.map_or(delay, |b| b.min(delay));
        self.base = Some(base);
        let target = base + self.target;
        let acked = f64::from(s.acked_chunks.max(1));
        if delay < target {
            if self.cwnd >= 1.0 {
                self.cwnd += self.ai * acked / self.cwnd;
            } else {
                self.cwnd += self.ai * acked;
            }
            self.cwnd = self.cwnd.clamp(self.min_cwnd, self.max_cwnd);
        } else if self.can_decrease(now) {
            let over = (delay - target).as_secs_f64() / delay.as_secs_f64().max(1e-12);
            let factor = (1.0 - self.beta * over).max(1.0 - self.max_mdf);
            self.decrease(now, factor);
        }
    }

    fn on_loss(&mut self, now: Instant, ev: &LossEvent) {
        if !self.can_decrease(now) {
            return;
        }
        if ev.kind != LossKind::Timeout {
            self.undo_cwnd = None;
        } else if self.undo_cwnd.is_none() {
            self.undo_cwnd = Some(self.cwnd);
        }
        self.decrease(now, 1.0 - self.max_mdf);
    }

    fn on_spurious_timeout(&mut self, _now: Instant) {
        if let Some(cwnd) = self.undo_cwnd.take() {
            self.cwnd = cwnd;
        }
    }

    fn cwnd_bytes(&self) -> Option<u64> {
        Some((self.cwnd * self.chunk) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rtt_us: u64) -> AckSample {
        AckSample {
            path: Some(PathId(1)),
            rtt: Some(Duration::from_micros(rtt_us)),
            acked_bytes: 1000,
            acked_chunks: 1,
            inflight_bytes: 0,
            srtt: Some(Duration::from_micros(rtt_us)),
        }
    }

    fn swift() -> Swift {
        let p = CcParams {
            swift_target_delay: Duration::from_micros(50),
            ..CcParams::default()
        };
        Swift::new(&p, 1000, 128.0)
    }

    #[test]
    fn grows_below_target_and_backs_off_above() {
        let mut s = swift();
        // The first sample is the base round trip (10 us): the target is 10 + 50 us.
        s.on_rx_ack(Instant::from_micros(0), &sample(10));
        let w0 = s.cwnd_chunks();
        s.on_rx_ack(Instant::from_micros(1), &sample(59));
        assert!(s.cwnd_chunks() > w0);
        let w1 = s.cwnd_chunks();
        // 120 us against a 60 us target: factor max(1 - 0.8 * 0.5, 0.5) = 0.6.
        s.on_rx_ack(Instant::from_micros(2), &sample(120));
        assert!((s.cwnd_chunks() - w1 * 0.6).abs() < 1e-9);
        // Only once per round trip.
        s.on_rx_ack(Instant::from_micros(3), &sample(120));
        assert!((s.cwnd_chunks() - w1 * 0.6).abs() < 1e-9);
        s.on_rx_ack(Instant::from_micros(1100), &sample(1000));
        assert!(
            (s.cwnd_chunks() - w1 * 0.6 * 0.5).abs() < 1e-9,
            "max_mdf caps the cut"
        );
        assert_eq!(s.decreases(), 2);
        s.on_loss(
            Instant::from_micros(3000),
            &LossEvent {
                kind: LossKind::Timeout,
                chunks: 1,
                srtt: None,
            },
        );
        assert_eq!(s.decreases(), 3);
    }

    /// A path whose unloaded round trip (400 us) alone is far over the 50 us target delay:
    /// the window still grows while nothing queues, and backs off only for queueing above it.
    #[test]
    fn the_target_counts_from_the_best_round_trip_seen() {
        let mut s = swift();
        let mut t = 0;
        let mut at = |us: u64| {
            t += 1000;
            (Instant::from_micros(t), sample(us))
        };
        let w0 = s.cwnd_chunks();
        for _ in 0..20 {
            let (now, a) = at(400);
            s.on_rx_ack(now, &a);
        }
        assert!(
            s.cwnd_chunks() > w0,
            "no queueing, no cut: {}",
            s.cwnd_chunks()
        );
        assert_eq!(s.decreases(), 0);
        let w1 = s.cwnd_chunks();
        let (now, a) = at(500);
        s.on_rx_ack(now, &a);
        assert!(
            s.cwnd_chunks() < w1,
            "100 us of queueing is over the target"
        );
        assert_eq!(s.decreases(), 1);
    }

    #[test]
    fn paces_below_one_chunk() {
        let p = CcParams {
            swift_target_delay: Duration::from_micros(50),
            initial_cwnd_chunks: 0.5,
            ..CcParams::default()
        };
        let mut s = Swift::new(&p, 1000, 128.0);
        let v = SenderView {
            inflight_bytes: 1000,
            srtt: None,
            retransmission: false,
        };
        assert_eq!(s.on_pacing_chunk(Instant::ZERO, 1000, &v), Pacing::Now);
        s.on_tx_chunk(Instant::ZERO, PathId(0), 1000);
        // srtt starts at the target: 50 us / 0.5 = 100 us between chunks.
        assert_eq!(
            s.on_pacing_chunk(Instant::from_micros(1), 1000, &v),
            Pacing::At(Instant::from_micros(100))
        );
        assert_eq!(
            s.on_pacing_chunk(Instant::from_micros(100), 1000, &v),
            Pacing::Now
        );
    }

    #[test]
    fn spurious_timeout_restores_the_window() {
        let mut s = swift();
        let before = s.cwnd_bytes();
        s.on_loss(
            Instant::from_micros(1000),
            &LossEvent {
                kind: LossKind::Timeout,
                chunks: 3,
                srtt: None,
            },
        );
        assert!(s.cwnd_bytes() < before);
        s.on_spurious_timeout(Instant::from_micros(2000));
        assert_eq!(s.cwnd_bytes(), before);
        // Once an acknowledgement came in after the cut, the cut stands.
        s.on_loss(
            Instant::from_micros(9000),
            &LossEvent {
                kind: LossKind::Timeout,
                chunks: 3,
                srtt: None,
            },
        );
        let cut = s.cwnd_bytes();
        s.on_rx_ack(Instant::from_micros(9100), &sample(10));
        s.on_spurious_timeout(Instant::from_micros(9200));
        assert!(s.cwnd_bytes() < before && s.cwnd_bytes() >= cut);
    }
}
