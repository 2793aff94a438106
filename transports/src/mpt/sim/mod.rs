//! The `sim` datapath: connections of the real core run over an in-memory [`Fabric`] on a
//! simulated clock, deterministically (same seed, same events, same outcome).
//!
//! [`Sim`] owns nodes, the connections between them (each side a real [`Connection`]), the
//! application buffers, and a schedule of fabric changes (links going down and up). `run`
//! moves time from event to event — datagram arrivals, connection timers, scheduled changes
//! — until every send and receive has completed, a connection fails, nothing is left to
//! happen, or the time limit passes.
//!
//! ```
//! use ccl_transports::mpt::sim::{FabricConfig, Sim};
//! use ccl_transports::mpt::{Instant, MptConfig};
//!
//! let mut sim = Sim::new(7, 2, 32, FabricConfig { loss: 0.01, ..FabricConfig::default() }).unwrap();
//! let (a, b) = sim.connect(0, 1, &MptConfig::default()).unwrap();
//! let data: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
//! sim.post_recv(b, data.len() as u64, 0).unwrap();
//! sim.send(a, data.clone(), 0).unwrap();
//! sim.run(Instant::from_micros(1_000_000)).unwrap();
//! assert_eq!(sim.received(b)[0].data, data);
//! ```

mod fabric;

pub use fabric::{Datagram, Fabric, FabricConfig, FabricStats};

use std::collections::BTreeMap;
use std::time::Duration;

use super::config::MptConfig;
use super::conn::{Connection, Event, RecvId, SendId, Transmit};
use super::frame::Frame;
use super::header::MAX_FLOW_ID;
use super::path::PathId;
use super::time::{min_deadline, Instant};
use super::MptError;

/// One side of a simulated connection (handles count up from [`ConnHandle::first`] in the
/// order `connect` creates them: the first side of the first connection, its peer, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnHandle(usize);

impl ConnHandle {
    /// The first handle a `Sim` hands out (node `a` of the first `connect`).
    pub fn first() -> Self {
        ConnHandle(0)
    }
}

/// A change of the fabric at a scheduled time.
#[derive(Clone, Debug, PartialEq)]
pub enum SimAction {
    /// One path down (blackhole) or up, both directions, all node pairs.
    SetPathDown {
        /// The path.
        path: PathId,
        /// Down (`true`) or up.
        down: bool,
    },
    /// One direction of one path between two nodes down or up.
    SetLinkDown {
        /// Sending node.
        src: usize,
        /// Receiving node.
        dst: usize,
        /// The path.
        path: PathId,
        /// Down (`true`) or up.
        down: bool,
    },
    /// One path's extra one-way delay, both directions, all node pairs.
    SetPathDelay {
        /// The path.
        path: PathId,
        /// Delay on top of the fabric's (zero: none).
        extra: Duration,
    },
    /// New knobs (loss, delay, ...) from then on.
    SetFabric(FabricConfig),
}

/// A completed receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The receive.
    pub id: RecvId,
    /// The tag given to `post_recv`.
    pub tag: u64,
    /// The bytes (at most the capacity).
    pub data: Vec<u8>,
    /// The message was longer than the capacity.
    pub truncated: bool,
    /// Simulated completion time.
    pub at: Instant,
}

/// Called with every datagram a connection emits, after the connection produced it.
pub type TransmitObserver = Box<dyn FnMut(ConnHandle, Instant, &Transmit, &Connection)>;

struct SimConn {
    conn: Connection,
    node: usize,
    peer_node: usize,
    send_bufs: BTreeMap<u64, Vec<u8>>,
    recv_bufs: BTreeMap<u64, Vec<u8>>,
    received: Vec<ReceivedMessage>,
    sends_done: Vec<(SendId, Instant)>,
    handle_errors: u64,
}

/// Nodes, connections and fabric on one simulated clock (see the module docs).
pub struct Sim {
    fabric: Fabric,
    now: Instant,
    nodes: usize,
    num_paths: u16,
    conns: Vec<SimConn>,
    by_flow: Vec<Vec<Option<usize>>>,
    actions: BTreeMap<(Instant, u64), SimAction>,
    action_serial: u64,
    scratch: Vec<u8>,
    observer: Option<TransmitObserver>,
    undeliverable: u64,
    imm_only: bool,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("nodes", &self.nodes)
            .field("connections", &self.conns.len())
            .field("fabric", &self.fabric.stats())
            .finish()
    }
}

impl Sim {
    /// `nodes` nodes joined by `num_paths` paths per pair; `seed` fixes the fabric's
    /// randomness (connections take theirs from their configs).
    pub fn new(
        seed: u64,
        nodes: usize,
        num_paths: u16,
        fabric: FabricConfig,
    ) -> Result<Self, MptError> {
        Ok(Sim {
            fabric: Fabric::new(fabric, seed, nodes, usize::from(num_paths))?,
            now: Instant::ZERO,
            nodes,
            num_paths,
            conns: Vec::new(),
            by_flow: vec![Vec::new(); nodes],
            actions: BTreeMap::new(),
            action_serial: 0,
            scratch: Vec::with_capacity(64 * 1024),
            observer: None,
            undeliverable: 0,
            imm_only: false,
        })
    }

    /// Connects node `a` to node `b` with `config` on both sides.
    pub fn connect(
        &mut self,
        a: usize,
        b: usize,
        config: &MptConfig,
    ) -> Result<(ConnHandle, ConnHandle), MptError> {
        self.connect_with(a, b, config.clone(), config.clone())
    }

    /// Connects node `a` to node `b` with a configuration per side (`num_paths` and
    /// `window_chunks` must match).
    pub fn connect_with(
        &mut self,
        a: usize,
        b: usize,
        config_a: MptConfig,
        config_b: MptConfig,
    ) -> Result<(ConnHandle, ConnHandle), MptError> {
        if a >= self.nodes || b >= self.nodes || a == b {
            return Err(MptError::Sim("connect needs two distinct existing nodes"));
        }
        if config_a.num_paths > self.num_paths || config_a.num_paths != config_b.num_paths {
            return Err(MptError::Sim(
                "both sides need the same path count, at most the fabric's",
            ));
        }
        if config_a.window_chunks != config_b.window_chunks {
            return Err(MptError::Sim("both sides need the same window"));
        }
        let fid_a = self.by_flow[a].len();
        let fid_b = self.by_flow[b].len();
        if fid_a > usize::from(MAX_FLOW_ID) || fid_b > usize::from(MAX_FLOW_ID) {
            return Err(MptError::Sim("too many connections on a node"));
        }
        let ca = Connection::new(config_a, fid_a as u16, fid_b as u16)?;
        let cb = Connection::new(config_b, fid_b as u16, fid_a as u16)?;
        let ha = self.add(ca, a, b);
        let hb = self.add(cb, b, a);
        Ok((ha, hb))
    }

    /// Like [`connect`](Self::connect) with caller-built connections (custom congestion
    /// control); their flow ids must be the next free ones on each node.
    pub fn connect_prebuilt(
        &mut self,
        a: usize,
        b: usize,
        ca: Connection,
        cb: Connection,
    ) -> Result<(ConnHandle, ConnHandle), MptError> {
        if a >= self.nodes || b >= self.nodes || a == b {
            return Err(MptError::Sim("connect needs two distinct existing nodes"));
        }
        if usize::from(ca.local_flow_id()) != self.by_flow[a].len()
            || usize::from(cb.local_flow_id()) != self.by_flow[b].len()
            || ca.remote_flow_id() != cb.local_flow_id()
            || cb.remote_flow_id() != ca.local_flow_id()
        {
            return Err(MptError::Sim(
                "flow ids must be the next free ones and match each other",
            ));
        }
        let ha = self.add(ca, a, b);
        let hb = self.add(cb, b, a);
        Ok((ha, hb))
    }

    /// The next flow id `connect_prebuilt` expects on `node`.
    pub fn next_flow_id(&self, node: usize) -> u16 {
        self.by_flow.get(node).map_or(0, |v| v.len() as u16)
    }

    fn add(&mut self, conn: Connection, node: usize, peer_node: usize) -> ConnHandle {
        let i = self.conns.len();
        self.conns.push(SimConn {
            conn,
            node,
            peer_node,
            send_bufs: BTreeMap::new(),
            recv_bufs: BTreeMap::new(),
            received: Vec::new(),
            sends_done: Vec::new(),
            handle_errors: 0,
        });
        self.by_flow[node].push(Some(i));
        ConnHandle(i)
    }

    fn sc_mut(&mut self, h: ConnHandle) -> Result<&mut SimConn, MptError> {
        self.conns
            .get_mut(h.0)
            .ok_or(MptError::Sim("unknown connection handle"))
    }

    /// Sends `data` on `h` now.
    pub fn send(&mut self, h: ConnHandle, data: Vec<u8>, tag: u64) -> Result<SendId, MptError> {
        let now = self.now;
        let sc = self.sc_mut(h)?;
        let id = sc.conn.send(now, data.len() as u64, tag)?;
        sc.send_bufs.insert(id.0, data);
        Ok(id)
    }

    /// Posts a receive of `capacity` bytes on `h` now.
    pub fn post_recv(
        &mut self,
        h: ConnHandle,
        capacity: u64,
        tag: u64,
    ) -> Result<RecvId, MptError> {
        let now = self.now;
        let len = usize::try_from(capacity).map_err(|_| MptError::Sim("capacity too large"))?;
        let sc = self.sc_mut(h)?;
        let id = sc.conn.post_recv(now, capacity, tag)?;
        sc.recv_bufs.insert(id.0, vec![0u8; len]);
        Ok(id)
    }

    /// Schedules a fabric change.
    pub fn schedule(&mut self, at: Instant, action: SimAction) {
        self.action_serial += 1;
        self.actions.insert((at, self.action_serial), action);
    }

    /// Installs a callback that sees every transmitted datagram.
    pub fn set_transmit_observer(&mut self, observer: TransmitObserver) {
        self.observer = Some(observer);
    }

    /// Delivers data frames as a verbs datapath would: only the 32-bit immediate (8-bit
    /// CSN), without the datagram prefix's upper sequence bits. Connections then need
    /// `csn_reuse_guard` set above the fabric's worst-case delay.
    pub fn set_imm_only(&mut self, imm_only: bool) {
        self.imm_only = imm_only;
    }

    /// Simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The fabric.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The fabric, to change knobs or links directly.
    pub fn fabric_mut(&mut self) -> &mut Fabric {
        &mut self.fabric
    }

    /// One side's connection.
    pub fn conn(&self, h: ConnHandle) -> Option<&Connection> {
        self.conns.get(h.0).map(|s| &s.conn)
    }

    /// Receives completed on `h`, in completion order.
    pub fn received(&self, h: ConnHandle) -> &[ReceivedMessage] {
        self.conns.get(h.0).map_or(&[], |s| &s.received)
    }

    /// Sends completed on `h`, with completion times.
    pub fn completed_sends(&self, h: ConnHandle) -> &[(SendId, Instant)] {
        self.conns.get(h.0).map_or(&[], |s| &s.sends_done)
    }

    /// Datagrams a connection rejected (malformed, protocol violations).
    pub fn handle_errors(&self, h: ConnHandle) -> u64 {
        self.conns.get(h.0).map_or(0, |s| s.handle_errors)
    }

    /// Datagrams addressed to no connection.
    pub fn undeliverable(&self) -> u64 {
        self.undeliverable
    }

    fn all_done(&self) -> bool {
        self.conns
            .iter()
            .all(|s| s.send_bufs.is_empty() && s.recv_bufs.is_empty())
    }

    fn first_failure(&self) -> Option<MptError> {
        self.conns.iter().find_map(|s| s.conn.error().cloned())
    }

    /// Runs until every send and receive completed (`Ok`), a connection failed (its error),
    /// nothing is left to happen ([`MptError::SimStalled`]) or simulated time would pass
    /// `limit` ([`MptError::SimTimeLimit`]).
    pub fn run(&mut self, limit: Instant) -> Result<(), MptError> {
        loop {
            self.transmit_all()?;
            if let Some(e) = self.first_failure() {
                return Err(e);
            }
            if self.all_done() {
                return Ok(());
            }
            let next = self.next_event().ok_or(MptError::SimStalled {
                at_ns: self.now.as_nanos(),
            })?;
            if next > limit {
                return Err(MptError::SimTimeLimit {
                    limit_ns: limit.as_nanos(),
                });
            }
            self.step_to(next)?;
        }
    }

    /// Processes everything up to and including `until`, whatever completes, then leaves
    /// the clock at `until`.
    pub fn run_until(&mut self, until: Instant) -> Result<(), MptError> {
        loop {
            self.transmit_all()?;
            match self.next_event() {
                Some(t) if t <= until => self.step_to(t)?,
                _ => break,
            }
        }
        self.now = self.now.max(until);
        Ok(())
    }

    fn next_event(&self) -> Option<Instant> {
        let mut t = self.fabric.next_arrival();
        for sc in &self.conns {
            t = min_deadline(t, sc.conn.poll_timeout());
        }
        t = min_deadline(t, self.actions.keys().next().map(|k| k.0));
        // Never move backwards (a timer already due fires now).
        t.map(|t| t.max(self.now))
    }

    fn step_to(&mut self, t: Instant) -> Result<(), MptError> {
        self.now = t;
        while let Some(entry) = self.actions.first_entry() {
            if entry.key().0 > t {
                break;
            }
            let action = entry.remove();
            match action {
                SimAction::SetPathDown { path, down } => self.fabric.set_path_down(path, down)?,
                SimAction::SetLinkDown {
                    src,
                    dst,
                    path,
                    down,
                } => self.fabric.set_link_down(src, dst, path, down)?,
                SimAction::SetPathDelay { path, extra } => {
                    self.fabric.set_path_delay(path, extra)?
                }
                SimAction::SetFabric(cfg) => self.fabric.set_config(cfg),
            }
        }
        while let Some(dg) = self.fabric.pop_arrival(t) {
            self.deliver(&dg);
            self.fabric.recycle(dg.bytes);
        }
        for sc in &mut self.conns {
            if sc.conn.poll_timeout().is_some_and(|d| d <= t) {
                sc.conn.handle_timeout(t);
            }
        }
        Ok(())
    }

    fn deliver(&mut self, dg: &Datagram) {
        let Ok((mut frame, payload)) = Frame::decode(&dg.bytes) else {
            self.undeliverable += 1;
            return;
        };
        let flow = usize::from(frame.destination_flow());
        let Some(ci) = self
            .by_flow
            .get(dg.dst)
            .and_then(|v| v.get(flow))
            .copied()
            .flatten()
        else {
            self.undeliverable += 1;
            return;
        };
        let now = self.now;
        let sc = &mut self.conns[ci];
        if self.imm_only {
            if let Frame::Data(d) = &mut frame {
                d.seq_hi = None;
            }
        }
        match sc.conn.handle_frame(now, dg.path, frame, payload) {
            Ok(Some(p)) => {
                let placed = sc.recv_bufs.get_mut(&p.recv.0).and_then(|buf| {
                    let start = usize::try_from(p.offset).ok()?;
                    buf.get_mut(start..start + p.payload.len())
                });
                match placed {
                    Some(dst) => dst.copy_from_slice(p.payload),
                    None => sc.handle_errors += 1,
                }
            }
            Ok(None) => {}
            Err(_) => sc.handle_errors += 1,
        }
        Self::drain_events(sc, now);
    }

    fn drain_events(sc: &mut SimConn, now: Instant) {
        while let Some(ev) = sc.conn.poll_event() {
            match ev {
                Event::SendComplete { id, .. } => {
                    sc.send_bufs.remove(&id.0);
                    sc.sends_done.push((id, now));
                }
                Event::RecvComplete {
                    id,
                    tag,
                    len,
                    truncated,
                } => {
                    let mut data = sc.recv_bufs.remove(&id.0).unwrap_or_default();
                    data.truncate(usize::try_from(len).unwrap_or(usize::MAX));
                    sc.received.push(ReceivedMessage {
                        id,
                        tag,
                        data,
                        truncated,
                        at: now,
                    });
                }
                Event::Failed(_) => {}
            }
        }
    }

    fn transmit_all(&mut self) -> Result<(), MptError> {
        let now = self.now;
        for ci in 0..self.conns.len() {
            loop {
                let sc = &mut self.conns[ci];
                let Some(t) = sc.conn.poll_transmit(now) else {
                    break;
                };
                if let Some(obs) = self.observer.as_mut() {
                    obs(ConnHandle(ci), now, &t, &sc.conn);
                }
                self.scratch.clear();
                self.scratch.resize(t.frame.encoded_len(), 0);
                t.frame.encode(&mut self.scratch)?;
                if let Some(p) = t.payload {
                    let bytes = sc
                        .send_bufs
                        .get(&p.send.0)
                        .and_then(|b| {
                            let start = usize::try_from(p.offset).ok()?;
                            b.get(start..start + p.len as usize)
                        })
                        .ok_or(MptError::Sim("payload refers to an unknown message range"))?;
                    self.scratch.extend_from_slice(bytes);
                }
                let (src, dst) = (sc.node, sc.peer_node);
                self.fabric.send(now, src, dst, t.path, &self.scratch)?;
            }
            Self::drain_events(&mut self.conns[ci], now);
        }
        Ok(())
    }
}
