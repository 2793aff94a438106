//! EQDS-style receiver-driven credits (NSDI 2022), in bytes.
//!
//! *Receiver half.* Posted-but-unreceived receive bytes are the demand. A pacer hands out
//! credit in chunk-sized grants spaced `grant / rate` apart, keeping at most
//! `max_outstanding` bytes granted and not yet matched by arriving data. Arriving data
//! (new or duplicate: both used credit) consumes the oldest grants first; a grant still
//! unmatched after `credit_timeout` is written off, because either it or the data it paid
//! for was lost, and the demand it covered is granted again.
//!
//! *Sender half.* Sends only with credit: a chunk of `len` bytes leaves only when the
//! sender holds at least `len` bytes of credit, and every transmission (including
//! retransmissions) spends its length. Held credit is capped at `max_outstanding` so a
//! sender that did not use its grants cannot burst later.
//!
//! Grants travel as a cumulative byte count in acknowledgements, so a lost or duplicated
//! acknowledgement neither loses nor doubles credit.

use std::collections::VecDeque;
use std::time::Duration;

use super::{CongestionControl, CreditPoll, Pacing, SenderView};
use crate::mpt::config::CcParams;
use crate::mpt::path::PathId;
use crate::mpt::time::{min_deadline, Instant};

/// Most grant records kept; older ones are merged, so memory stays fixed.
const GRANT_RING: usize = 64;

/// EQDS state (both halves).
#[derive(Debug, Clone)]
pub struct Eqds {
    // Sender half.
    credit: u64,
    credit_cap: u64,
    spent: u64,
    // Receiver half.
    chunk: u64,
    rate: u64,
    max_outstanding: u64,
    timeout: Duration,
    next_grant: Instant,
    grants: VecDeque<(Instant, u64)>,
    outstanding: u64,
    granted_total: u64,
    written_off: u64,
}

impl Eqds {
    /// EQDS granting `chunk`-byte credits.
    pub fn new(p: &CcParams, chunk: u64) -> Self {
        Eqds {
            credit: 0,
            credit_cap: p.eqds_max_outstanding,
            spent: 0,
            chunk: chunk.max(1),
            rate: p.eqds_rate_bytes_per_s,
            max_outstanding: p.eqds_max_outstanding,
            timeout: p.eqds_credit_timeout,
            next_grant: Instant::ZERO,
            grants: VecDeque::with_capacity(GRANT_RING),
            outstanding: 0,
            granted_total: 0,
            written_off: 0,
        }
    }

    /// Bytes spent on transmissions by the sender half.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Bytes granted by the receiver half.
    pub fn granted_total(&self) -> u64 {
        self.granted_total
    }

    /// Granted bytes written off as lost by the receiver half.
    pub fn written_off(&self) -> u64 {
        self.written_off
    }

    fn consume(&mut self, len: u32) {
        let mut left = u64::from(len);
        while left > 0 {
            let Some(front) = self.grants.front_mut() else {
                break;
            };
            let take = front.1.min(left);
            front.1 -= take;
            left -= take;
            self.outstanding -= take;
            if front.1 == 0 {
                self.grants.pop_front();
            }
        }
    }

    fn spend(&mut self, len: u32) {
        self.credit = self.credit.saturating_sub(u64::from(len));
        self.spent += u64::from(len);
    }
}

impl CongestionControl for Eqds {
    fn name(&self) -> &'static str {
        "eqds"
    }

    fn receiver_driven(&self) -> bool {
        true
    }

    fn on_pacing_chunk(&mut self, _now: Instant, len: u32, _view: &SenderView) -> Pacing {
        if self.credit >= u64::from(len) {
            Pacing::Now
        } else {
            Pacing::Blocked
        }
    }

    fn on_tx_chunk(&mut self, _now: Instant, _path: PathId, len: u32) {
        self.spend(len);
    }

    fn on_tx_rtx_chunk(&mut self, _now: Instant, _path: PathId, len: u32) {
        self.spend(len);
    }

    fn on_rx_credit(&mut self, _now: Instant, bytes: u64) {
        self.credit = (self.credit + bytes).min(self.credit_cap);
    }

    fn on_rx_chunk(&mut self, _now: Instant, _path: PathId, len: u32) {
        self.consume(len);
    }

    fn on_rx_rtx_chunk(&mut self, _now: Instant, _path: PathId, len: u32) {
        self.consume(len);
    }

    fn poll_credit(&mut self, now: Instant, demand: u64) -> CreditPoll {
        while let Some(&(at, bytes)) = self.grants.front() {
            if at + self.timeout > now {
                break;
            }
            self.outstanding -= bytes;
            self.written_off += bytes;
            self.grants.pop_front();
        }
        let expiry = self.grants.front().map(|&(at, _)| at + self.timeout);
        let want = demand.saturating_sub(self.outstanding);
        let room = self.max_outstanding.saturating_sub(self.outstanding);
        if want == 0 || room == 0 {
            return CreditPoll {
                grant: 0,
                next: expiry,
            };
        }
        if now < self.next_grant {
            return CreditPoll {
                grant: 0,
                next: min_deadline(Some(self.next_grant), expiry),
            };
        }
        let grant = self.chunk.min(want).min(room);
        self.outstanding += grant;
        self.granted_total += grant;
        let full = self.grants.len() == GRANT_RING;
        match self.grants.back_mut() {
            Some(back) if full => back.1 += grant,
            _ => self.grants.push_back((now, grant)),
        }
        let gap = Duration::from_nanos(
            u64::try_from(u128::from(grant) * 1_000_000_000 / u128::from(self.rate))
                .unwrap_or(u64::MAX),
        );
        self.next_grant = now + gap;
        CreditPoll {
            grant,
            next: Some(self.next_grant),
        }
    }

    fn credit_bytes(&self) -> Option<u64> {
        Some(self.credit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eqds() -> Eqds {
        let p = CcParams {
            eqds_rate_bytes_per_s: 1_000_000_000, // 1000 bytes per microsecond
            eqds_max_outstanding: 4000,
            eqds_credit_timeout: Duration::from_micros(100),
            ..CcParams::default()
        };
        Eqds::new(&p, 1000)
    }

    #[test]
    fn sender_needs_credit() {
        let mut e = eqds();
        let v = SenderView {
            inflight_bytes: 0,
            srtt: None,
            retransmission: false,
        };
        assert_eq!(e.on_pacing_chunk(Instant::ZERO, 1, &v), Pacing::Blocked);
        assert_eq!(e.on_pacing_chunk(Instant::ZERO, 0, &v), Pacing::Now);
        e.on_rx_credit(Instant::ZERO, 1500);
        assert_eq!(e.on_pacing_chunk(Instant::ZERO, 1000, &v), Pacing::Now);
        e.on_tx_chunk(Instant::ZERO, PathId(0), 1000);
        assert_eq!(e.on_pacing_chunk(Instant::ZERO, 1000, &v), Pacing::Blocked);
        assert_eq!(e.credit_bytes(), Some(500));
        e.on_rx_credit(Instant::ZERO, 1_000_000);
        assert_eq!(e.credit_bytes(), Some(4000), "held credit is capped");
    }

    #[test]
    fn receiver_paces_and_caps_grants() {
        let mut e = eqds();
        let p = e.poll_credit(Instant::ZERO, 10_000);
        assert_eq!(
            p,
            CreditPoll {
                grant: 1000,
                next: Some(Instant::from_micros(1))
            }
        );
        assert_eq!(
            e.poll_credit(Instant::from_nanos(500), 10_000).grant,
            0,
            "paced"
        );
        let mut now = Instant::from_micros(1);
        for _ in 0..3 {
            assert_eq!(e.poll_credit(now, 10_000).grant, 1000);
            now = now + Duration::from_micros(1);
        }
        assert_eq!(
            e.poll_credit(now, 10_000).grant,
            0,
            "max outstanding reached"
        );
        e.on_rx_chunk(now, PathId(0), 1000);
        assert_eq!(e.poll_credit(now, 9_000).grant, 1000);
        // Demand already covered by outstanding credit: nothing more.
        assert_eq!(e.poll_credit(now + Duration::from_micros(5), 4000).grant, 0);
    }

    #[test]
    fn unmatched_credit_expires() {
        let mut e = eqds();
        assert_eq!(e.poll_credit(Instant::ZERO, 1000).grant, 1000);
        let p = e.poll_credit(Instant::from_micros(50), 1000);
        assert_eq!(
            p,
            CreditPoll {
                grant: 0,
                next: Some(Instant::from_micros(100))
            }
        );
        assert_eq!(e.poll_credit(Instant::from_micros(100), 1000).grant, 1000);
        assert_eq!(e.written_off(), 1000);
        assert_eq!(e.granted_total(), 2000);
    }
}
