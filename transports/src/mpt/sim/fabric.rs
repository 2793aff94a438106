//! A seeded in-memory datagram fabric on a simulated clock.
//!
//! Every (source node, destination node, path) is one unidirectional link with its own
//! serialisation queue (when `bandwidth_bps` is set) and up/down state. Each datagram is
//! independently lost, duplicated, jittered and (with probability `reorder`) held back by an
//! extra delay. All randomness comes from one seeded generator consumed in a fixed order, so
//! the same seed and the same sequence of `send` calls give the same deliveries.
//!
//! Delay (with a path's extra delay) plus jitter plus reorder delay is bounded, which is what the protocol's CSN
//! disambiguation needs (see [`header`](crate::mpt::header)).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::mpt::path::PathId;
use crate::mpt::rng::Rng;
use crate::mpt::time::{duration_nanos, Instant};
use crate::mpt::MptError;

/// Fault and performance knobs of the fabric.
#[derive(Clone, Debug, PartialEq)]
pub struct FabricConfig {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is delivered twice (the copy has its own jitter).
    pub duplicate: f64,
    /// Probability that a datagram is held back by up to `reorder_delay`.
    pub reorder: f64,
    /// Largest extra delay of a held-back datagram (uniform in `[0, reorder_delay)`).
    pub reorder_delay: Duration,
    /// One-way propagation delay of every link.
    pub delay: Duration,
    /// Uniform extra delay in `[0, jitter)` per datagram.
    pub jitter: Duration,
    /// Per-link serialisation rate in bits per second; `None` = infinitely fast.
    pub bandwidth_bps: Option<u64>,
    /// Drop-tail: a datagram is dropped if its link's queue already holds this many bytes.
    pub queue_limit_bytes: Option<u64>,
    /// Receivers that stop reading for `stall` at the start of every `stall_period` (an
    /// engine thread descheduled on a loaded host, a GC pause): a datagram that would arrive
    /// inside a stall arrives when it ends. Nothing is lost, round trips just stretch by up to
    /// `stall` -- what makes a timeout tuned to the unloaded round trip fire spuriously.
    /// Zero `stall` or `stall_period`: no stalls.
    pub stall: Duration,
    /// See `stall`.
    pub stall_period: Duration,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(20),
            delay: Duration::from_micros(5),
            jitter: Duration::ZERO,
            bandwidth_bps: None,
            queue_limit_bytes: None,
            stall: Duration::ZERO,
            stall_period: Duration::ZERO,
        }
    }
}

/// What the fabric did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Datagrams handed to `send`.
    pub sent: u64,
    /// Datagrams handed out by `pop_arrival` (copies included).
    pub delivered: u64,
    /// Dropped by random loss.
    pub lost_random: u64,
    /// Dropped because the link was down.
    pub lost_blackhole: u64,
    /// Dropped by a full link queue.
    pub lost_queue: u64,
    /// Extra copies created.
    pub duplicated: u64,
    /// Datagrams held back by the reorder knob.
    pub reordered: u64,
}

/// A datagram arriving at a node.
#[derive(Debug)]
pub struct Datagram {
    /// Sending node.
    pub src: usize,
    /// Receiving node.
    pub dst: usize,
    /// Path it travelled.
    pub path: PathId,
    /// Arrival time.
    pub at: Instant,
    /// The bytes (return the buffer with [`Fabric::recycle`] to avoid allocations).
    pub bytes: Vec<u8>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Link {
    down: bool,
    /// One-way delay on top of the fabric's `delay` (a slow or congested route).
    extra_delay: Duration,
    busy_until: Instant,
}

/// The fabric (see the module docs).
#[derive(Debug)]
pub struct Fabric {
    cfg: FabricConfig,
    rng: Rng,
    nodes: usize,
    paths: usize,
    links: Vec<Link>,
    queue: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    slots: Vec<Option<Datagram>>,
    free_slots: Vec<usize>,
    pool: Vec<Vec<u8>>,
    serial: u64,
    stats: FabricStats,
}

impl Fabric {
    /// A fabric joining `nodes` nodes with `paths` paths between every pair.
    pub fn new(cfg: FabricConfig, seed: u64, nodes: usize, paths: usize) -> Result<Self, MptError> {
        let prob = |p: f64| (0.0..=1.0).contains(&p);
        if !(prob(cfg.loss) && prob(cfg.duplicate) && prob(cfg.reorder)) {
            return Err(MptError::Sim("probabilities must be in [0, 1]"));
        }
        if nodes == 0 || paths == 0 || paths > 256 {
            return Err(MptError::Sim("need at least one node and 1..=256 paths"));
        }
        if cfg.bandwidth_bps == Some(0) {
            return Err(MptError::Sim("bandwidth must be positive"));
        }
        Ok(Fabric {
            cfg,
            rng: Rng::new(seed),
            nodes,
            paths,
            links: vec![Link::default(); nodes * nodes * paths],
            queue: BinaryHeap::with_capacity(1024),
            slots: Vec::with_capacity(1024),
            free_slots: Vec::with_capacity(1024),
            pool: Vec::with_capacity(1024),
            serial: 0,
            stats: FabricStats::default(),
        })
    }

    /// The knobs.
    pub fn config(&self) -> &FabricConfig {
        &self.cfg
    }

    /// Changes the knobs from now on (already scheduled arrivals keep their times).
    pub fn set_config(&mut self, cfg: FabricConfig) {
        self.cfg = cfg;
    }

    /// Counters.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    fn link_index(&self, src: usize, dst: usize, path: PathId) -> Option<usize> {
        (src < self.nodes && dst < self.nodes && path.index() < self.paths)
            .then(|| (src * self.nodes + dst) * self.paths + path.index())
    }

    /// Takes one direction of one path down (a blackhole: datagrams sent on it vanish) or
    /// brings it back. Datagrams already in flight still arrive.
    pub fn set_link_down(
        &mut self,
        src: usize,
        dst: usize,
        path: PathId,
        down: bool,
    ) -> Result<(), MptError> {
        let i = self
            .link_index(src, dst, path)
            .ok_or(MptError::Sim("no such link"))?;
        self.links[i].down = down;
        Ok(())
    }

    /// Every link of `path`: both directions between every pair of nodes.
    fn path_links(&mut self, path: PathId) -> Result<impl Iterator<Item = &mut Link>, MptError> {
        if path.index() >= self.paths {
            return Err(MptError::Sim("no such path"));
        }
        let paths = self.paths;
        Ok(self.links.iter_mut().skip(path.index()).step_by(paths))
    }

    /// Takes `path` down (or up) in both directions between every pair of nodes.
    pub fn set_path_down(&mut self, path: PathId, down: bool) -> Result<(), MptError> {
        self.path_links(path)?.for_each(|l| l.down = down);
        Ok(())
    }

    /// Adds `extra` one-way delay to `path` in both directions between every pair of nodes
    /// (zero: back to the fabric's own delay). Datagrams already in flight keep their times.
    pub fn set_path_delay(&mut self, path: PathId, extra: Duration) -> Result<(), MptError> {
        self.path_links(path)?.for_each(|l| l.extra_delay = extra);
        Ok(())
    }

    /// Sends `bytes` from `src` to `dst` on `path` at `now`.
    pub fn send(
        &mut self,
        now: Instant,
        src: usize,
        dst: usize,
        path: PathId,
        bytes: &[u8],
    ) -> Result<(), MptError> {
        let li = self
            .link_index(src, dst, path)
            .ok_or(MptError::Sim("no such link"))?;
        self.stats.sent += 1;
        if self.links[li].down {
            self.stats.lost_blackhole += 1;
            return Ok(());
        }
        if self.rng.chance(self.cfg.loss) {
            self.stats.lost_random += 1;
            return Ok(());
        }
        let mut depart = now;
        if let Some(bps) = self.cfg.bandwidth_bps {
            let link = &mut self.links[li];
            let start = link.busy_until.max(now);
            let backlog_ns = start.saturating_duration_since(now).as_nanos();
            let backlog_bytes = backlog_ns * u128::from(bps) / 8 / 1_000_000_000;
            if self
                .cfg
                .queue_limit_bytes
                .is_some_and(|lim| backlog_bytes > u128::from(lim))
            {
                self.stats.lost_queue += 1;
                return Ok(());
            }
            let tx_ns = (bytes.len() as u128 * 8 * 1_000_000_000).div_ceil(u128::from(bps));
            depart = start + Duration::from_nanos(u64::try_from(tx_ns).unwrap_or(u64::MAX));
            link.busy_until = depart;
        }
        let copies = if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.cfg.delay + self.links[li].extra_delay;
            let mut at = depart + delay + self.uniform(self.cfg.jitter);
            if self.rng.chance(self.cfg.reorder) {
                self.stats.reordered += 1;
                at = at + self.uniform(self.cfg.reorder_delay);
            }
            at = self.after_stall(at);
            let mut buf = self.pool.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(bytes);
            let dg = Datagram {
                src,
                dst,
                path,
                at,
                bytes: buf,
            };
            let slot = match self.free_slots.pop() {
                Some(i) => {
                    self.slots[i] = Some(dg);
                    i
                }
                None => {
                    self.slots.push(Some(dg));
                    self.slots.len() - 1
                }
            };
            self.serial += 1;
            self.queue.push(Reverse((at, self.serial, slot)));
        }
        Ok(())
    }

    /// When a datagram due at `at` is read: at the end of the stall `at` falls in, if any.
    fn after_stall(&self, at: Instant) -> Instant {
        let (stall, period) = (
            duration_nanos(self.cfg.stall),
            duration_nanos(self.cfg.stall_period),
        );
        if stall == 0 || period == 0 {
            return at;
        }
        let phase = at.as_nanos() % period;
        if phase < stall {
            at + Duration::from_nanos(stall - phase)
        } else {
            at
        }
    }

    fn uniform(&mut self, max: Duration) -> Duration {
        Duration::from_nanos(self.rng.below(duration_nanos(max)))
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The earliest datagram arriving at or before `now` (ties in send order).
    pub fn pop_arrival(&mut self, now: Instant) -> Option<Datagram> {
        let &Reverse((at, _, slot)) = self.queue.peek()?;
        if at > now {
            return None;
        }
        self.queue.pop();
        let dg = self.slots.get_mut(slot)?.take()?;
        self.free_slots.push(slot);
        self.stats.delivered += 1;
        Some(dg)
    }

    /// Returns a delivered datagram's buffer for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.push(buf);
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: FabricConfig, seed: u64) -> (Vec<(u64, u8)>, FabricStats) {
        let mut f = Fabric::new(cfg, seed, 2, 4).unwrap();
        for i in 0..200u8 {
            f.send(
                Instant::from_micros(u64::from(i)),
                0,
                1,
                PathId(u16::from(i % 4)),
                &[i],
            )
            .unwrap();
        }
        let mut out = Vec::new();
        while let Some(t) = f.next_arrival() {
            while let Some(d) = f.pop_arrival(t) {
                out.push((d.at.as_nanos(), d.bytes[0]));
                f.recycle(d.bytes);
            }
        }
        (out, f.stats().clone())
    }

    #[test]
    fn deterministic_per_seed() {
        let cfg = FabricConfig {
            loss: 0.1,
            duplicate: 0.1,
            reorder: 0.2,
            jitter: Duration::from_micros(3),
            ..FabricConfig::default()
        };
        let a = run(cfg.clone(), 42);
        assert_eq!(a, run(cfg.clone(), 42));
        assert_ne!(a.0, run(cfg, 43).0);
        let s = &a.1;
        assert!(
            s.lost_random > 5 && s.duplicated > 5 && s.reordered > 10,
            "{s:?}"
        );
        assert_eq!(s.delivered, s.sent - s.lost_random + s.duplicated);
        // Held-back datagrams really overtake: arrival order differs from send order.
        assert!(a.0.windows(2).any(|w| w[0].1 > w[1].1));
    }

    #[test]
    fn blackhole_and_bandwidth() {
        let cfg = FabricConfig {
            bandwidth_bps: Some(8_000_000_000),
            ..FabricConfig::default()
        };
        let mut f = Fabric::new(cfg, 1, 2, 2).unwrap();
        f.set_link_down(0, 1, PathId(1), true).unwrap();
        // 1000 bytes at 8 Gbit/s = 1 us each, back to back on path 0.
        for _ in 0..3 {
            f.send(Instant::ZERO, 0, 1, PathId(0), &[0u8; 1000])
                .unwrap();
            f.send(Instant::ZERO, 0, 1, PathId(1), &[0u8; 1000])
                .unwrap();
        }
        f.send(Instant::ZERO, 1, 0, PathId(1), &[0u8; 1000])
            .unwrap();
        let mut times = Vec::new();
        while let Some(d) = f.pop_arrival(Instant::from_micros(100)) {
            times.push((d.dst, d.at.as_nanos()));
        }
        assert_eq!(times, vec![(1, 6000), (0, 6000), (1, 7000), (1, 8000)]);
        assert_eq!(f.stats().lost_blackhole, 3);
        assert!(f.set_link_down(0, 2, PathId(0), true).is_err());
    }
}
