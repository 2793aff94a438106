//! `ccl-sim`: a discrete-event simulation of a two-tier fat-tree (hosts -> leaf switches ->
//! spine switches) that runs the real multipath core ([`Connection`]) for every flow, on a
//! simulated clock, to reproduce UCCL's permutation experiment (Table 4) at scale.
//!
//! # Model
//! * Every directed link is an output queue with a rate and a propagation delay
//!   ([`Params::hop_delay_ns`] per hop). Queues are "virtual": a link keeps the time it is
//!   busy until, so its backlog in bytes is `(busy_until - now) * rate`; no per-packet queue
//!   structure exists. Store and forward at every hop.
//! * Switch ports drop a packet that would push their backlog past
//!   [`Params::queue_bytes`] (drop-tail) and, with [`Params::ecn_bytes`], mark data packets
//!   that find more than that many bytes queued.
//! * A host's NIC pulls from its connections (round robin) whenever its uplink is idle, so
//!   the host uplink never queues and a chunk's send time is its departure time.
//! * A path of a connection maps to a spine by a seeded hash of (source, destination, path
//!   index): the ECMP hash of a source port / QP. Flows inside one leaf use no spine.
//! * Packets carry no payload bytes (the core takes the chunk length from the frame, as on
//!   verbs); on the wire a data packet is its chunk plus [`Params::header_bytes`], control
//!   packets are `header_bytes`.
//! * Time runs in picoseconds inside the simulator (exact serialisation of small packets);
//!   the core sees nanoseconds.
//! * ECN: the core has no ECN bit, so the simulator carries it: a marked chunk makes the
//!   receiver's next acknowledgement carry an echo, and with CUBIC the sender's policy is
//!   wrapped ([`EcnCubic`]) so an echo is treated as a congestion signal (one CUBIC reduction
//!   per round trip, as a loss). Swift and EQDS ignore marks.
//!
//! The event loop is a binary heap of small `Copy` events; packets live in a slab with a
//! free list, so nothing is allocated per chunk after warm-up.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_transports::mpt::cc::Cubic;
use ccl_transports::mpt::rng::Rng;
use ccl_transports::mpt::{
    AckSample, CcKind, CongestionControl, Connection, CreditPoll, Event, Frame, Instant, LossEvent,
    LossKind, MptConfig, MptError, Pacing, PathId, PathView, SenderView,
};

/// Simulation parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Hosts (NICs).
    pub nics: usize,
    /// Hosts under one leaf switch.
    pub hosts_per_leaf: usize,
    /// Spine switches. Leaf-spine links run at `hosts_per_leaf * host rate / spines`
    /// (full bisection).
    pub spines: usize,
    /// Host link rate, bits per second.
    pub host_bps: u64,
    /// Bytes each flow carries (one message).
    pub bytes: u64,
    /// Paths per connection.
    pub paths: u16,
    /// Chunk size, bytes.
    pub chunk: u32,
    /// Congestion control.
    pub cc: CcKind,
    /// Seed: permutation, path hashing, connection path sampling.
    pub seed: u64,
    /// Propagation delay of every link (host-leaf, leaf-spine), nanoseconds.
    pub hop_delay_ns: u64,
    /// Drop-tail limit of every switch output port, bytes.
    pub queue_bytes: u64,
    /// ECN marking threshold of switch ports, bytes (`None`: no marking).
    pub ecn_bytes: Option<u64>,
    /// Per-packet header bytes on the wire.
    pub header_bytes: u32,
    /// Swift's target delay.
    pub swift_target: Duration,
    /// EQDS: most credit outstanding per receiver, bytes.
    pub eqds_outstanding: u64,
    /// Give up after this much simulated time.
    pub time_limit: Duration,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            nics: 1024,
            hosts_per_leaf: 32,
            spines: 32,
            host_bps: 400_000_000_000,
            bytes: 64_000_000,
            paths: 256,
            chunk: 32 * 1024,
            cc: CcKind::Swift,
            seed: 1,
            hop_delay_ns: 1_000,
            queue_bytes: 1024 * 1024,
            ecn_bytes: None,
            header_bytes: 64,
            swift_target: Duration::from_micros(25),
            eqds_outstanding: 768 * 1024,
            time_limit: Duration::from_secs(1),
        }
    }
}

/// Errors of the simulator.
#[derive(Debug, Clone, PartialEq)]
pub enum SimError {
    /// Parameters that do not describe a fabric.
    Params(&'static str),
    /// A connection failed or rejected a frame.
    Core(MptError),
    /// Nothing left to happen but flows incomplete.
    Stalled {
        /// Simulated time, ns.
        at_ns: u64,
        /// Flows completed.
        done: usize,
    },
    /// The time limit passed.
    TimeLimit {
        /// Flows completed.
        done: usize,
    },
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Params(m) => write!(f, "bad parameters: {m}"),
            SimError::Core(e) => write!(f, "core: {e}"),
            SimError::Stalled { at_ns, done } => {
                write!(f, "stalled at {at_ns} ns with {done} flows complete")
            }
            SimError::TimeLimit { done } => {
                write!(f, "time limit passed with {done} flows complete")
            }
        }
    }
}

impl std::error::Error for SimError {}

impl From<MptError> for SimError {
    fn from(e: MptError) -> Self {
        SimError::Core(e)
    }
}

/// One flow's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowResult {
    /// Source host.
    pub src: usize,
    /// Destination host.
    pub dst: usize,
    /// Receive completion time, ns (all flows start at 0).
    pub fct_ns: u64,
    /// Bytes the receiver reported.
    pub bytes: u64,
}

/// What a run produced.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Report {
    /// Every flow.
    pub flows: Vec<FlowResult>,
    /// Completion of the last flow, ns.
    pub last_ns: u64,
    /// Bytes at the host rate, ns.
    pub ideal_ns: u64,
    /// Mean flow completion, ns.
    pub mean_ns: u64,
    /// 99th percentile flow completion, ns.
    pub p99_ns: u64,
    /// Packets dropped by full switch queues.
    pub drops: u64,
    /// Data packets ECN-marked.
    pub ecn_marks: u64,
    /// Chunks retransmitted (all flows).
    pub retransmits: u64,
    /// Retransmission timeouts (all flows).
    pub rto_events: u64,
    /// Data packets sent (first transmissions and retransmissions).
    pub data_packets: u64,
    /// Events processed.
    pub events: u64,
    /// Data transmissions that found the sender's received credit smaller than its
    /// cumulative sent bytes (EQDS only; must be zero).
    pub credit_violations: u64,
    /// Largest bytes sent by a sender minus credit it received (EQDS; <= 0 is "never
    /// exceeded").
    pub max_credit_excess: i64,
    /// Frames a connection rejected.
    pub handle_errors: u64,
    /// Largest switch-port backlog seen, bytes.
    pub max_queue_bytes: u64,
}

/// CUBIC that also treats ECN echoes as congestion (one reduction per round trip).
#[derive(Debug)]
pub struct EcnCubic {
    inner: Cubic,
    marks: Arc<AtomicU32>,
}

impl EcnCubic {
    /// CUBIC for `cfg`, reading ECN echoes from `marks`.
    pub fn new(cfg: &MptConfig, marks: Arc<AtomicU32>) -> Self {
        EcnCubic {
            inner: Cubic::new(
                &cfg.cc_params,
                u64::from(cfg.chunk_size),
                f64::from(cfg.window_chunks),
            ),
            marks,
        }
    }
}

impl CongestionControl for EcnCubic {
    fn name(&self) -> &'static str {
        "cubic-ecn"
    }
    fn on_chunk_size(&mut self, now: Instant, configured: u32, remaining: u64) -> u32 {
        self.inner.on_chunk_size(now, configured, remaining)
    }
    fn on_pacing_chunk(&mut self, now: Instant, len: u32, view: &SenderView) -> Pacing {
        self.inner.on_pacing_chunk(now, len, view)
    }
    fn on_select_path(&mut self, now: Instant, a: &PathView, b: &PathView) -> PathId {
        self.inner.on_select_path(now, a, b)
    }
    fn on_tx_chunk(&mut self, now: Instant, path: PathId, len: u32) {
        self.inner.on_tx_chunk(now, path, len);
    }
    fn on_tx_rtx_chunk(&mut self, now: Instant, path: PathId, len: u32) {
        self.inner.on_tx_rtx_chunk(now, path, len);
    }
    fn on_loss(&mut self, now: Instant, event: &LossEvent) {
        self.inner.on_loss(now, event);
    }
    fn on_rx_chunk(&mut self, now: Instant, path: PathId, len: u32) {
        self.inner.on_rx_chunk(now, path, len);
    }
    fn on_rx_rtx_chunk(&mut self, now: Instant, path: PathId, len: u32) {
        self.inner.on_rx_rtx_chunk(now, path, len);
    }
    fn on_rx_ack(&mut self, now: Instant, sample: &AckSample) {
        if self.marks.swap(0, Ordering::Relaxed) > 0 {
            let ev = LossEvent {
                kind: LossKind::FastRetransmit,
                chunks: 0,
                srtt: sample.srtt,
            };
            self.inner.on_loss(now, &ev);
        }
        self.inner.on_rx_ack(now, sample);
    }
    fn on_rx_credit(&mut self, now: Instant, bytes: u64) {
        self.inner.on_rx_credit(now, bytes);
    }
    fn poll_credit(&mut self, now: Instant, demand: u64) -> CreditPoll {
        self.inner.poll_credit(now, demand)
    }
    fn receiver_driven(&self) -> bool {
        self.inner.receiver_driven()
    }
    fn cwnd_bytes(&self) -> Option<u64> {
        self.inner.cwnd_bytes()
    }
}

/// A seeded derangement of `0..n` (nobody sends to itself); `n >= 2`.
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed ^ 0x9E12_7A70_5EED);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    // Remove fixed points by swapping with the next position (keeps it a permutation).
    for i in 0..n {
        if p[i] == i && n > 1 {
            let j = (i + 1) % n;
            p.swap(i, j);
        }
    }
    p
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const PS_PER_NS: u64 = 1_000;
const PS_PER_S: u128 = 1_000_000_000_000;

#[derive(Clone, Copy, Debug, Default)]
struct Link {
    busy_until: u64,
    bps: u64,
}

#[derive(Clone, Copy, Debug)]
struct Pkt {
    frame: Frame,
    to_conn: u32,
    path: PathId,
    wire: u32,
    links: [u32; 3],
    nlinks: u8,
    hop: u8,
    ecn: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    NicFree(u32),
    Timer(u32),
    Hop(u32),
}

struct SimConn {
    conn: Connection,
    host: usize,
    peer: u32,
    flow: usize,
    receiver: bool,
    armed: Option<u64>,
    ece_pending: bool,
    marks: Option<Arc<AtomicU32>>,
}

#[derive(Clone, Debug, Default)]
struct Host {
    conns: Vec<u32>,
    rr: usize,
    busy: bool,
}

/// The simulator (build with [`Simulator::new`], run with [`Simulator::run`]).
pub struct Simulator {
    p: Params,
    leaves: usize,
    links: Vec<Link>,
    hosts: Vec<Host>,
    conns: Vec<SimConn>,
    flows: Vec<(usize, usize)>,
    fct: Vec<Option<(u64, u64)>>,
    done: usize,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    serial: u64,
    pkts: Vec<Pkt>,
    free_pkts: Vec<u32>,
    prop_ps: u64,
    report: Report,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("params", &self.p)
            .field("flows", &self.flows.len())
            .finish()
    }
}

impl Simulator {
    /// A fabric for `p` carrying `flows` (source, destination) pairs, each one message of
    /// `p.bytes` bytes starting at time zero.
    pub fn new(p: Params, flows: &[(usize, usize)]) -> Result<Self, SimError> {
        if p.nics < 2 || p.hosts_per_leaf == 0 || p.spines == 0 {
            return Err(SimError::Params(
                "need >= 2 nics, >= 1 host per leaf, >= 1 spine",
            ));
        }
        if p.nics % p.hosts_per_leaf != 0 {
            return Err(SimError::Params(
                "nics must be a multiple of hosts_per_leaf",
            ));
        }
        if p.host_bps == 0 || p.bytes == 0 || p.chunk == 0 {
            return Err(SimError::Params("rate, bytes and chunk must be positive"));
        }
        let leaves = p.nics / p.hosts_per_leaf;
        let up_bps =
            u64::try_from(u128::from(p.host_bps) * p.hosts_per_leaf as u128 / p.spines as u128)
                .map_err(|_| SimError::Params("spine rate overflow"))?
                .max(1);
        let mut links = vec![
            Link {
                busy_until: 0,
                bps: p.host_bps
            };
            p.nics
        ];
        links.extend(
            std::iter::repeat(Link {
                busy_until: 0,
                bps: up_bps,
            })
            .take(2 * leaves * p.spines),
        );
        let mut sim = Simulator {
            leaves,
            links,
            hosts: vec![Host::default(); p.nics],
            conns: Vec::with_capacity(flows.len() * 2),
            flows: flows.to_vec(),
            fct: vec![None; flows.len()],
            done: 0,
            heap: BinaryHeap::with_capacity(1 << 16),
            serial: 0,
            pkts: Vec::with_capacity(1 << 16),
            free_pkts: Vec::with_capacity(1 << 16),
            prop_ps: p.hop_delay_ns * PS_PER_NS,
            report: Report::default(),
            p,
        };
        for (fi, &(s, d)) in flows.iter().enumerate() {
            if s >= sim.p.nics || d >= sim.p.nics || s == d {
                return Err(SimError::Params("flow endpoints must be distinct hosts"));
            }
            let mut cfg = MptConfig {
                chunk_size: sim.p.chunk,
                num_paths: sim.p.paths,
                cc: sim.p.cc,
                seed: mix(sim.p.seed ^ (fi as u64).wrapping_mul(0x1_0000_0001)),
                ..MptConfig::default()
            };
            cfg.cc_params.swift_target_delay = sim.p.swift_target;
            cfg.cc_params.eqds_rate_bytes_per_s = (sim.p.host_bps / 8).max(1);
            cfg.cc_params.eqds_max_outstanding = sim.p.eqds_outstanding.max(u64::from(sim.p.chunk));
            // Flow ids only need to be consistent within the pair: the simulator routes
            // each packet to its connection directly.
            let (marks, snd) = if sim.p.cc == CcKind::Cubic && sim.p.ecn_bytes.is_some() {
                let m = Arc::new(AtomicU32::new(0));
                let cc = Box::new(EcnCubic::new(&cfg, m.clone()));
                (
                    Some(m),
                    Connection::with_congestion_control(cfg.clone(), 0, 1, cc)?,
                )
            } else {
                (None, Connection::new(cfg.clone(), 0, 1)?)
            };
            let mut rcv = Connection::new(cfg, 1, 0)?;
            rcv.post_recv(Instant::ZERO, sim.p.bytes, fi as u64)?;
            let mut snd = snd;
            snd.send(Instant::ZERO, sim.p.bytes, fi as u64)?;
            let si = sim.conns.len() as u32;
            sim.conns.push(SimConn {
                conn: snd,
                host: s,
                peer: si + 1,
                flow: fi,
                receiver: false,
                armed: None,
                ece_pending: false,
                marks,
            });
            sim.conns.push(SimConn {
                conn: rcv,
                host: d,
                peer: si,
                flow: fi,
                receiver: true,
                armed: None,
                ece_pending: false,
                marks: None,
            });
            sim.hosts[s].conns.push(si);
            sim.hosts[d].conns.push(si + 1);
        }
        Ok(sim)
    }

    fn leaf_down(&self, host: usize) -> u32 {
        host as u32
    }
    fn leaf_up(&self, leaf: usize, spine: usize) -> u32 {
        (self.p.nics + leaf * self.p.spines + spine) as u32
    }
    fn spine_down(&self, spine: usize, leaf: usize) -> u32 {
        (self.p.nics + self.leaves * self.p.spines + spine * self.leaves + leaf) as u32
    }

    /// The spine a path of (src, dst) hashes to.
    pub fn spine_of(&self, src: usize, dst: usize, path: PathId) -> usize {
        let h = mix(self.p.seed ^ ((src as u64) << 40) ^ ((dst as u64) << 20) ^ u64::from(path.0));
        (h % self.p.spines as u64) as usize
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.serial += 1;
        self.heap.push(Reverse((t, self.serial, ev)));
    }

    fn tx_ps(bytes: u32, bps: u64) -> u64 {
        let v = (u128::from(bytes) * 8 * PS_PER_S).div_ceil(u128::from(bps));
        u64::try_from(v).unwrap_or(u64::MAX)
    }

    fn rearm(&mut self, ci: u32, now: u64) {
        let sc = &mut self.conns[ci as usize];
        if let Some(d) = sc.conn.poll_timeout() {
            let dp = d.as_nanos().saturating_mul(PS_PER_NS).max(now);
            if sc.armed.map_or(true, |a| dp < a) {
                sc.armed = Some(dp);
                self.push(dp, Ev::Timer(ci));
            }
        }
    }

    fn drain(&mut self, ci: u32, now: u64) -> Result<(), SimError> {
        while let Some(ev) = self.conns[ci as usize].conn.poll_event() {
            match ev {
                Event::RecvComplete { len, .. } => {
                    let f = self.conns[ci as usize].flow;
                    if self.fct[f].is_none() {
                        self.fct[f] = Some((now / PS_PER_NS, len));
                        self.done += 1;
                    }
                }
                Event::SendComplete { .. } => {}
                Event::Failed(e) => return Err(SimError::Core(e)),
            }
        }
        Ok(())
    }

    /// The host's NIC takes the next datagram from its connections if its uplink is idle.
    fn pull(&mut self, host: usize, now: u64) -> Result<(), SimError> {
        if self.hosts[host].busy {
            return Ok(());
        }
        let n = self.hosts[host].conns.len();
        let inst = Instant::from_nanos(now / PS_PER_NS);
        for i in 0..n {
            let idx = (self.hosts[host].rr + i) % n;
            let ci = self.hosts[host].conns[idx];
            let Some(t) = self.conns[ci as usize].conn.poll_transmit(inst) else {
                self.rearm(ci, now);
                continue;
            };
            self.hosts[host].rr = (idx + 1) % n;
            let sc = &mut self.conns[ci as usize];
            let mut ecn = false;
            let wire = match &t.frame {
                Frame::Data(d) => {
                    self.report.data_packets += 1;
                    if sc.conn.congestion_control().receiver_driven() {
                        let st = sc.conn.stats();
                        let excess = st.data_bytes_sent as i64 - st.credit_received as i64;
                        self.report.max_credit_excess = self.report.max_credit_excess.max(excess);
                        if excess > 0 {
                            self.report.credit_violations += 1;
                        }
                    }
                    self.p.header_bytes.saturating_add(d.len)
                }
                Frame::Ack(_) => {
                    ecn = std::mem::take(&mut sc.ece_pending);
                    self.p.header_bytes
                }
                Frame::Probe(_) => self.p.header_bytes,
            };
            let (src, peer) = (sc.host, sc.peer);
            let dst = self.conns[peer as usize].host;
            let (sl, dl) = (src / self.p.hosts_per_leaf, dst / self.p.hosts_per_leaf);
            let (links, nlinks) = if sl == dl {
                ([self.leaf_down(dst), 0, 0], 1)
            } else {
                let s = self.spine_of(src, dst, t.path);
                (
                    [
                        self.leaf_up(sl, s),
                        self.spine_down(s, dl),
                        self.leaf_down(dst),
                    ],
                    3,
                )
            };
            let pkt = Pkt {
                frame: t.frame,
                to_conn: peer,
                path: t.path,
                wire,
                links,
                nlinks,
                hop: 0,
                ecn,
            };
            let pi = match self.free_pkts.pop() {
                Some(i) => {
                    self.pkts[i as usize] = pkt;
                    i
                }
                None => {
                    self.pkts.push(pkt);
                    (self.pkts.len() - 1) as u32
                }
            };
            let depart = now + Self::tx_ps(wire, self.p.host_bps);
            self.hosts[host].busy = true;
            self.push(depart, Ev::NicFree(host as u32));
            self.push(depart + self.prop_ps, Ev::Hop(pi));
            self.drain(ci, now)?;
            self.rearm(ci, now);
            return Ok(());
        }
        Ok(())
    }

    fn hop(&mut self, pi: u32, now: u64) -> Result<(), SimError> {
        let pkt = self.pkts[pi as usize];
        if pkt.hop < pkt.nlinks {
            let li = pkt.links[usize::from(pkt.hop)] as usize;
            let link = self.links[li];
            let backlog_ps = link.busy_until.saturating_sub(now);
            let backlog =
                u64::try_from(u128::from(backlog_ps) * u128::from(link.bps) / 8 / PS_PER_S)
                    .unwrap_or(u64::MAX);
            if backlog + u64::from(pkt.wire) > self.p.queue_bytes {
                self.report.drops += 1;
                self.free_pkts.push(pi);
                return Ok(());
            }
            self.report.max_queue_bytes = self.report.max_queue_bytes.max(backlog);
            let p = &mut self.pkts[pi as usize];
            if let (Some(k), Frame::Data(_)) = (self.p.ecn_bytes, &p.frame) {
                if backlog > k && !p.ecn {
                    p.ecn = true;
                    self.report.ecn_marks += 1;
                }
            }
            p.hop += 1;
            let depart = link.busy_until.max(now) + Self::tx_ps(pkt.wire, link.bps);
            self.links[li].busy_until = depart;
            self.push(depart + self.prop_ps, Ev::Hop(pi));
            return Ok(());
        }
        // Delivery.
        self.free_pkts.push(pi);
        let ci = pkt.to_conn;
        let sc = &mut self.conns[ci as usize];
        if pkt.ecn {
            match pkt.frame {
                Frame::Data(_) => sc.ece_pending = true,
                Frame::Ack(_) => {
                    if let Some(m) = &sc.marks {
                        m.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Frame::Probe(_) => {}
            }
        }
        let inst = Instant::from_nanos(now / PS_PER_NS);
        if sc
            .conn
            .handle_frame(inst, pkt.path, pkt.frame, &[])
            .is_err()
        {
            self.report.handle_errors += 1;
        }
        let host = sc.host;
        self.drain(ci, now)?;
        self.rearm(ci, now);
        self.pull(host, now)
    }

    /// Runs every flow to completion.
    pub fn run(mut self) -> Result<Report, SimError> {
        for h in 0..self.hosts.len() {
            self.pull(h, 0)?;
        }
        let limit = u64::try_from(self.p.time_limit.as_nanos())
            .unwrap_or(u64::MAX / PS_PER_NS)
            .saturating_mul(PS_PER_NS);
        let mut last = 0u64;
        while self.done < self.flows.len() {
            let Some(Reverse((t, _, ev))) = self.heap.pop() else {
                return Err(SimError::Stalled {
                    at_ns: last / PS_PER_NS,
                    done: self.done,
                });
            };
            last = t;
            if t > limit {
                return Err(SimError::TimeLimit { done: self.done });
            }
            self.report.events += 1;
            match ev {
                Ev::NicFree(h) => {
                    self.hosts[h as usize].busy = false;
                    self.pull(h as usize, t)?;
                }
                Ev::Timer(ci) => {
                    let sc = &mut self.conns[ci as usize];
                    if sc.armed == Some(t) {
                        sc.armed = None;
                        sc.conn.handle_timeout(Instant::from_nanos(t / PS_PER_NS));
                        let host = sc.host;
                        self.drain(ci, t)?;
                        self.rearm(ci, t);
                        self.pull(host, t)?;
                    }
                }
                Ev::Hop(pi) => self.hop(pi, t)?,
            }
        }
        Ok(self.finish())
    }

    fn finish(mut self) -> Report {
        let mut r = std::mem::take(&mut self.report);
        for sc in &self.conns {
            if !sc.receiver {
                r.retransmits += sc.conn.stats().chunks_retransmitted;
                r.rto_events += sc.conn.stats().rto_events;
            }
        }
        r.flows = self
            .flows
            .iter()
            .zip(&self.fct)
            .map(|(&(src, dst), f)| {
                let (fct_ns, bytes) = f.unwrap_or((0, 0));
                FlowResult {
                    src,
                    dst,
                    fct_ns,
                    bytes,
                }
            })
            .collect();
        let mut fcts: Vec<u64> = r.flows.iter().map(|f| f.fct_ns).collect();
        fcts.sort_unstable();
        r.last_ns = fcts.last().copied().unwrap_or(0);
        if !fcts.is_empty() {
            r.mean_ns = fcts.iter().sum::<u64>() / fcts.len() as u64;
            let idx = (fcts.len() * 99).div_ceil(100).saturating_sub(1);
            r.p99_ns = fcts[idx.min(fcts.len() - 1)];
        }
        r.ideal_ns = u64::try_from(
            u128::from(self.p.bytes) * 8 * 1_000_000_000 / u128::from(self.p.host_bps),
        )
        .unwrap_or(u64::MAX);
        r
    }
}

/// Runs the permutation experiment for `p`.
pub fn run_permutation(p: &Params) -> Result<Report, SimError> {
    let perm = permutation(p.nics, p.seed);
    let flows: Vec<(usize, usize)> = perm.iter().enumerate().map(|(s, &d)| (s, d)).collect();
    Simulator::new(p.clone(), &flows)?.run()
}
