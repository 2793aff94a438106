//! CUBIC (RFC 8312), in units of chunks.
//!
//! * Slow start (`cwnd += acked`) below `ssthresh`.
//! * Congestion avoidance: `W_cubic(t) = C (t - K)^3 + W_max` with
//!   `K = cbrt(W_max (1 - beta) / C)` (RFC 8312 eq. 1-2; computed from the window at the
//!   start of the epoch, as Linux does, which equals eq. 2 right after a reduction). Each
//!   acknowledged chunk moves the window by `(W_cubic(t + RTT) - cwnd) / cwnd` (section 4.3),
//!   with the target capped at `1.5 cwnd`.
//! * TCP-friendly region (section 4.2): `W_est` grows by `3 (1 - beta) / (1 + beta)` chunks per
//!   window of acknowledged chunks; the window never stays below it.
//! * On loss (fast retransmit), at most once per round trip: fast convergence (section 4.6)
//!   `W_max = cwnd (1 + beta) / 2` if the window had not regained the last `W_max`, else
//!   `W_max = cwnd`; then `ssthresh = cwnd = max(beta cwnd, 2)`.
//! * On timeout (section 4.7): same `W_max` and `ssthresh`, window to one chunk. A timeout
//!   found spurious (`on_spurious_timeout`) restores the state from before the run of
//!   timeouts (RFC 4015), unless an acknowledgement came in between.
//!
//! `t` is in seconds as in the RFC, so on microsecond round trips the cubic term barely moves
//! and the TCP-friendly region governs growth, the behaviour the RFC specifies for
//! short-RTT networks.

use std::time::Duration;

use super::{window_admits, AckSample, CongestionControl, LossEvent, LossKind, Pacing, SenderView};
use crate::mpt::config::CcParams;
use crate::mpt::time::Instant;

/// CUBIC state.
#[derive(Debug, Clone)]
pub struct Cubic {
    chunk: f64,
    c: f64,
    beta: f64,
    w: Window,
    last_reduction: Option<Instant>,
    max_cwnd: f64,
    reductions: u64,
    /// The window before the first timeout since the last acknowledgement, for
    /// `on_spurious_timeout`.
    undo: Option<Window>,
    undos: u64,
}

/// What acknowledgements grow and cuts change (a plain copy: saving it for an undo runs per
/// timeout and must not allocate).
#[derive(Debug, Clone, Copy)]
struct Window {
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    k: f64,
    origin: f64,
    w_est: f64,
    epoch_start: Option<Instant>,
}

impl Cubic {
    /// CUBIC with `chunk`-byte segments and at most `max_cwnd` chunks of window.
    pub fn new(p: &CcParams, chunk: u64, max_cwnd: f64) -> Self {
        let max_cwnd = max_cwnd.max(1.0);
        Cubic {
            chunk: chunk as f64,
            c: p.cubic_c,
            beta: p.cubic_beta,
            w: Window {
                cwnd: p.initial_cwnd_chunks.clamp(1.0, max_cwnd),
                ssthresh: f64::INFINITY,
                w_max: 0.0,
                k: 0.0,
                origin: 0.0,
                w_est: 0.0,
                epoch_start: None,
            },
            last_reduction: None,
            max_cwnd,
            reductions: 0,
            undo: None,
            undos: 0,
        }
    }

    /// Window in chunks.
    pub fn cwnd_chunks(&self) -> f64 {
        self.w.cwnd
    }

    /// Slow-start threshold in chunks (infinite before the first loss).
    pub fn ssthresh_chunks(&self) -> f64 {
        self.w.ssthresh
    }

    /// Window reductions so far.
    pub fn reductions(&self) -> u64 {
        self.reductions
    }

    /// Timeout cuts undone as spurious so far.
    pub fn undos(&self) -> u64 {
        self.undos
    }

    fn reduce(&mut self, now: Instant, timeout: bool) {
        if !timeout {
            self.undo = None;
        } else if self.undo.is_none() {
            self.undo = Some(self.w);
        }
        self.w.epoch_start = None;
        self.w.w_max = if self.w.cwnd < self.w.w_max {
            self.w.cwnd * (1.0 + self.beta) / 2.0
        } else {
            self.w.cwnd
        };
        self.w.ssthresh = (self.w.cwnd * self.beta).max(2.0);
        self.w.cwnd = if timeout {
            1.0
        } else {
            self.w.ssthresh.min(self.max_cwnd)
        };
        self.last_reduction = Some(now);
        self.reductions += 1;
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn on_pacing_chunk(&mut self, _now: Instant, len: u32, view: &SenderView) -> Pacing {
        if window_admits(self.w.cwnd * self.chunk, view.inflight_bytes, len) {
            Pacing::Now
        } else {
            Pacing::Blocked
        }
    }

    fn on_rx_ack(&mut self, now: Instant, s: &AckSample) {
        if s.acked_chunks == 0 {
            return;
        }
        // Acknowledged after the timeout and not found spurious: the cut stands.
        self.undo = None;
        let acked = f64::from(s.acked_chunks);
        if self.w.cwnd < self.w.ssthresh {
            self.w.cwnd = (self.w.cwnd + acked).min(self.max_cwnd);
            return;
        }
        let rtt = s.srtt.unwrap_or(Duration::ZERO).as_secs_f64();
        let new_epoch = self.w.epoch_start.is_none();
        let start = *self.w.epoch_start.get_or_insert(now);
        if new_epoch {
            // New epoch: anchor the cubic curve on the window it starts from.
            if self.w.cwnd < self.w.w_max {
                self.w.k = ((self.w.w_max - self.w.cwnd) / self.c).cbrt();
                self.w.origin = self.w.w_max;
            } else {
                self.w.k = 0.0;
                self.w.origin = self.w.cwnd;
            }
            self.w.w_est = self.w.cwnd;
        }
        let t = now.saturating_duration_since(start).as_secs_f64() + rtt;
        let target = (self.w.origin + self.c * (t - self.w.k).powi(3)).min(1.5 * self.w.cwnd);
        if target > self.w.cwnd {
            self.w.cwnd += (target - self.w.cwnd) / self.w.cwnd * acked;
        }
        self.w.w_est += 3.0 * (1.0 - self.beta) / (1.0 + self.beta) * acked / self.w.cwnd;
        if self.w.w_est > self.w.cwnd {
            self.w.cwnd = self.w.w_est;
        }
        self.w.cwnd = self.w.cwnd.clamp(1.0, self.max_cwnd);
    }

    fn on_loss(&mut self, now: Instant, ev: &LossEvent) {
        match ev.kind {
            LossKind::Timeout => self.reduce(now, true),
            LossKind::FastRetransmit => {
                // One reduction per round trip: a burst of losses is one congestion event.
                let rtt = ev.srtt.unwrap_or(Duration::ZERO);
                let recent = self
                    .last_reduction
                    .is_some_and(|t| now.saturating_duration_since(t) < rtt);
                if !recent {
                    self.reduce(now, false);
                }
            }
        }
    }

    fn on_spurious_timeout(&mut self, _now: Instant) {
        if let Some(w) = self.undo.take() {
            self.w = w;
            self.undos += 1;
        }
    }

    fn cwnd_bytes(&self) -> Option<u64> {
        Some((self.w.cwnd * self.chunk) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpt::path::PathId;

    fn ack(chunks: u32, srtt_us: u64) -> AckSample {
        AckSample {
            path: Some(PathId(0)),
            rtt: Some(Duration::from_micros(srtt_us)),
            acked_bytes: u64::from(chunks) * 1000,
            acked_chunks: chunks,
            inflight_bytes: 0,
            srtt: Some(Duration::from_micros(srtt_us)),
        }
    }

    fn loss(kind: LossKind) -> LossEvent {
        LossEvent {
            kind,
            chunks: 1,
            srtt: Some(Duration::from_micros(10)),
        }
    }

    #[test]
    fn slow_start_then_multiplicative_decrease() {
        let mut c = Cubic::new(&CcParams::default(), 1000, 128.0);
        assert_eq!(c.cwnd_chunks(), 16.0);
        c.on_rx_ack(Instant::ZERO, &ack(16, 10));
        assert_eq!(c.cwnd_chunks(), 32.0);
        c.on_loss(Instant::from_micros(100), &loss(LossKind::FastRetransmit));
        assert!((c.cwnd_chunks() - 32.0 * 0.7).abs() < 1e-9);
        assert_eq!(c.cwnd_bytes(), Some(22_400));
        // A second loss within one round trip is the same congestion event.
        c.on_loss(Instant::from_micros(105), &loss(LossKind::FastRetransmit));
        assert!((c.cwnd_chunks() - 22.4).abs() < 1e-9);
        // After a round trip it counts again, with fast convergence lowering W_max.
        c.on_loss(Instant::from_micros(120), &loss(LossKind::FastRetransmit));
        assert!((c.cwnd_chunks() - 22.4 * 0.7).abs() < 1e-9);
        assert!((c.w.w_max - 22.4 * 1.7 / 2.0).abs() < 1e-9);
        c.on_loss(Instant::from_micros(200), &loss(LossKind::Timeout));
        assert_eq!(c.cwnd_chunks(), 1.0);
        assert_eq!(c.reductions(), 3);
    }

    #[test]
    fn congestion_avoidance_grows_back() {
        let mut c = Cubic::new(&CcParams::default(), 1000, 128.0);
        c.on_rx_ack(Instant::ZERO, &ack(16, 10));
        c.on_loss(Instant::from_micros(10), &loss(LossKind::FastRetransmit));
        let after_loss = c.cwnd_chunks();
        let mut now = Instant::from_micros(20);
        for _ in 0..2000 {
            now = now + Duration::from_micros(10);
            c.on_rx_ack(now, &ack(1, 10));
        }
        assert!(
            c.cwnd_chunks() > after_loss,
            "{} <= {after_loss}",
            c.cwnd_chunks()
        );
        assert!(c.cwnd_chunks() <= 128.0);
    }

    #[test]
    fn pacing_follows_window() {
        let mut c = Cubic::new(
            &CcParams {
                initial_cwnd_chunks: 2.0,
                ..CcParams::default()
            },
            1000,
            128.0,
        );
        let view = |inflight| SenderView {
            inflight_bytes: inflight,
            srtt: None,
            retransmission: false,
        };
        assert_eq!(
            c.on_pacing_chunk(Instant::ZERO, 1000, &view(1000)),
            Pacing::Now
        );
        assert_eq!(
            c.on_pacing_chunk(Instant::ZERO, 1000, &view(1001)),
            Pacing::Blocked
        );
    }

    #[test]
    fn spurious_timeout_restores_the_window_until_an_ack_intervenes() {
        let mut c = Cubic::new(&CcParams::default(), 1000, 128.0);
        c.on_rx_ack(Instant::ZERO, &ack(16, 10));
        assert_eq!(c.cwnd_chunks(), 32.0);
        // Two timeouts in a row, then found spurious: back to before the first.
        c.on_loss(Instant::from_micros(600), &loss(LossKind::Timeout));
        c.on_loss(Instant::from_micros(1800), &loss(LossKind::Timeout));
        assert_eq!(c.cwnd_chunks(), 1.0);
        c.on_spurious_timeout(Instant::from_micros(2000));
        assert_eq!(
            (c.cwnd_chunks(), c.ssthresh_chunks()),
            (32.0, f64::INFINITY)
        );
        assert_eq!((c.reductions(), c.undos()), (2, 1));
        // A timeout whose cut an acknowledgement has since confirmed stays cut.
        c.on_loss(Instant::from_micros(3000), &loss(LossKind::Timeout));
        c.on_rx_ack(Instant::from_micros(3100), &ack(1, 10));
        c.on_spurious_timeout(Instant::from_micros(3200));
        assert!(c.cwnd_chunks() < 3.0);
        // So does a fast-retransmit cut (real congestion), even after a timeout.
        let mut c = Cubic::new(&CcParams::default(), 1000, 128.0);
        c.on_loss(Instant::from_micros(600), &loss(LossKind::Timeout));
        c.on_loss(Instant::from_micros(1800), &loss(LossKind::FastRetransmit));
        c.on_spurious_timeout(Instant::from_micros(2000));
        assert_eq!(c.undos(), 0);
        assert!(c.cwnd_chunks() <= 2.0);
    }
}
