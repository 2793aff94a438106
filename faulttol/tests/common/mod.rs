//! A seeded, deterministic simulation of one connection: a sender and a receiver over two
//! links (primary, backup), each with its own delay, jitter, loss and an outage.
//!
//! Links behave like reliable-connected queue pairs: they keep order, and a lost packet is
//! re-sent by the link itself, so loss costs a retransmission delay, not a message. An
//! outage either drops everything whose flight overlaps it (silently, or with an error
//! completion to the sending end a little later, as a queue pair in error flushes its
//! work), or holds it until the outage ends (a stall). The random draws per message are
//! fixed in number, so two runs of one seed agree up to the first outage.

#![allow(dead_code)]

use std::time::Duration;

use ccl_faulttol::{
    Action, ConnState, Counters, Error, HealthConfig, LinkRole, Message, ReceiverConn, SenderConn,
    Transition,
};

/// A tiny seeded PRNG (splitmix64), so runs are reproducible without a dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[derive(Clone, Copy, Debug)]
pub struct LinkParams {
    pub delay: Duration,
    pub jitter: Duration,
    pub loss: f64,
    pub retransmit: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutageKind {
    /// Messages vanish; the ends find out by timeouts.
    Silent,
    /// Messages vanish and the sending end gets an error completion.
    Errors,
    /// Messages wait until the outage ends.
    Stall,
}

/// A link is out over `[from, until)` (`until: None`: for good).
#[derive(Clone, Copy, Debug)]
pub struct Outage {
    pub from: Duration,
    pub until: Option<Duration>,
    pub kind: OutageKind,
}

/// How long a queue pair in error takes to flush a work request with an error.
pub const ERROR_DELAY: Duration = Duration::from_millis(1);

#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub chunks: u64,
    pub chunk_size: u64,
    pub cfg: HealthConfig,
    pub links: [LinkParams; 2],
    pub outages: [Option<Outage>; 2],
    /// Chunks of buffer the receiver posts at once at the start.
    pub window: u64,
    /// Then one more chunk of buffer every `pace`.
    pub pace: Duration,
    /// When the sender gets its data (later: its upstream was stalled).
    pub sender_start: Duration,
    pub limit: Duration,
}

/// Timeouts scaled down so a whole failover and switch-back fits in a short run.
pub fn test_config() -> HealthConfig {
    HealthConfig {
        chunk_timeout: ms(10),
        probe_timeout: ms(5),
        probe_interval: ms(5),
        hold_down: ms(30),
        max_backoff_shift: 3,
        last_link_grace: ms(20),
    }
}

impl Scenario {
    pub fn new(seed: u64) -> Self {
        let link = LinkParams {
            delay: us(500),
            jitter: us(200),
            loss: 0.02,
            retransmit: ms(2),
        };
        Scenario {
            seed,
            chunks: 40,
            chunk_size: 256,
            cfg: test_config(),
            links: [link, link],
            outages: [None, None],
            window: 4,
            pace: ms(2),
            sender_start: Duration::ZERO,
            limit: ms(3000),
        }
    }

    pub fn total(&self) -> u64 {
        self.chunks * self.chunk_size
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Sender,
    Receiver,
}

#[derive(Clone, Debug)]
enum Ev {
    Deliver {
        to: End,
        link: LinkRole,
        msg: Message,
        payload: Vec<u8>,
    },
    Error {
        at: End,
        link: LinkRole,
    },
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub src: Vec<u8>,
    /// The stream as the consumer got it, in order, as `done` advanced.
    pub delivered: Vec<u8>,
    /// Bytes made done that no accepted payload had written.
    pub gaps: u64,
    pub completed_at: Option<Duration>,
    pub end_time: Duration,
    pub sender_actions: Vec<(Duration, Action)>,
    pub receiver_actions: Vec<(Duration, Action)>,
    pub transitions: Vec<Transition<Duration>>,
    pub counters: Counters,
    /// Chunks the receiver took: when, on which link, at which offset.
    pub taken: Vec<(Duration, LinkRole, u64)>,
    /// Every message send time.
    pub sends: Vec<Duration>,
    pub errors: Vec<Error>,
    pub sender_state: ConnState,
    pub receiver_state: ConnState,
}

impl Outcome {
    pub fn switches(&self, end: End, to: LinkRole) -> Vec<Duration> {
        let actions = match end {
            End::Sender => &self.sender_actions,
            End::Receiver => &self.receiver_actions,
        };
        let is_to = |a: &Action| matches!(a, Action::Switch { to: t, .. } if *t == to);
        actions
            .iter()
            .filter(|(_, a)| is_to(a))
            .map(|(t, _)| *t)
            .collect()
    }

    pub fn failed_at(&self, end: End) -> Option<Duration> {
        let actions = match end {
            End::Sender => &self.sender_actions,
            End::Receiver => &self.receiver_actions,
        };
        actions
            .iter()
            .find(|(_, a)| *a == Action::Failed)
            .map(|(t, _)| *t)
    }
}

pub struct Sim {
    sc: Scenario,
    rng: Rng,
    now: Duration,
    s: SenderConn<Duration>,
    r: ReceiverConn<Duration>,
    pending: Vec<(Duration, u64, Ev)>,
    seq: u64,
    /// Latest arrival per link and direction, so each link keeps order.
    fifo: [[Duration; 2]; 2],
    dst: Vec<Option<u8>>,
    epoch: u32,
    buffers_posted: u64,
    next_post: Duration,
    sender_posted: bool,
    out: Outcome,
}

pub fn run(sc: &Scenario) -> Outcome {
    Sim::new(sc.clone()).run()
}

impl Sim {
    pub fn new(sc: Scenario) -> Self {
        let mut rng = Rng::new(sc.seed);
        let src: Vec<u8> = (0..sc.total()).map(|_| rng.next_u64() as u8).collect();
        let s = SenderConn::new(1, (10, 11), sc.cfg, sc.chunk_size).unwrap();
        let r = ReceiverConn::new(1, (20, 21), sc.cfg).unwrap();
        let out = Outcome {
            src,
            delivered: Vec::new(),
            gaps: 0,
            completed_at: None,
            end_time: Duration::ZERO,
            sender_actions: Vec::new(),
            receiver_actions: Vec::new(),
            transitions: Vec::new(),
            counters: Counters::default(),
            taken: Vec::new(),
            sends: Vec::new(),
            errors: Vec::new(),
            sender_state: ConnState::OnPrimary,
            receiver_state: ConnState::OnPrimary,
        };
        Sim {
            dst: vec![None; sc.total() as usize],
            sc,
            rng,
            now: Duration::ZERO,
            s,
            r,
            pending: Vec::new(),
            seq: 0,
            fifo: [[Duration::ZERO; 2]; 2],
            epoch: 0,
            buffers_posted: 0,
            next_post: Duration::ZERO,
            sender_posted: false,
            out,
        }
    }

    pub fn run(mut self) -> Outcome {
        let mut steps = 0u64;
        while let Some(next) = self.next_time() {
            if next > self.sc.limit || self.finished() {
                break;
            }
            self.now = self.now.max(next);
            self.step();
            steps += 1;
            assert!(steps < 1_000_000, "simulation does not make progress");
        }
        let mut counters = self.s.counters();
        counters.add(&self.r.counters());
        self.out.counters = counters;
        self.out.end_time = self.now;
        self.out.sender_state = self.s.failover().state();
        self.out.receiver_state = self.r.failover().state();
        self.out
    }

    /// Complete and back on the primary, or given up on both ends.
    fn finished(&self) -> bool {
        let failed = |s: ConnState| s == ConnState::Failed;
        let (ss, rs) = (self.s.failover().state(), self.r.failover().state());
        (self.out.completed_at.is_some() && ss == ConnState::OnPrimary)
            || (failed(ss) && failed(rs))
    }

    fn next_time(&self) -> Option<Duration> {
        let event = self.pending.iter().map(|(t, _, _)| *t).min();
        let post = (self.buffers_posted < self.sc.chunks).then_some(self.next_post);
        let start = (!self.sender_posted).then_some(self.sc.sender_start);
        [
            event,
            post,
            start,
            self.s.poll_timeout(),
            self.r.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn step(&mut self) {
        while let Some(ev) = self.pop_due() {
            self.apply(ev);
        }
        self.s.handle_timeout(self.now);
        self.r.handle_timeout(self.now);
        self.post_buffers();
        if !self.sender_posted && self.now >= self.sc.sender_start {
            self.sender_posted = true;
            self.s.post(self.now, self.sc.total());
        }
        self.drain();
        self.observe();
    }

    fn pop_due(&mut self) -> Option<Ev> {
        let (i, _) = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, (t, _, _))| *t <= self.now)
            .min_by_key(|(_, (t, seq, _))| (*t, *seq))?;
        Some(self.pending.swap_remove(i).2)
    }

    fn post_buffers(&mut self) {
        while self.buffers_posted < self.sc.chunks && self.next_post <= self.now {
            let n = if self.buffers_posted == 0 {
                self.sc.window
            } else {
                1
            };
            let n = n.min(self.sc.chunks - self.buffers_posted);
            self.r.post(self.now, n * self.sc.chunk_size);
            self.buffers_posted += n;
            self.next_post += self.sc.pace;
        }
    }

    fn apply(&mut self, ev: Ev) {
        match ev {
            Ev::Error {
                at: End::Sender,
                link,
            } => self.s.handle_error(self.now, link),
            Ev::Error {
                at: End::Receiver,
                link,
            } => self.r.handle_error(self.now, link),
            Ev::Deliver {
                to: End::Sender,
                link,
                msg,
                ..
            } => {
                if let Err(e) = self.s.handle_message(self.now, link, msg) {
                    self.out.errors.push(e);
                }
            }
            Ev::Deliver {
                to: End::Receiver,
                link,
                msg,
                payload,
            } => self.at_receiver(link, msg, &payload),
        }
        self.observe();
    }

    fn at_receiver(&mut self, link: LinkRole, msg: Message, payload: &[u8]) {
        match self.r.handle_message(self.now, link, msg) {
            Ok(true) => {
                if let Message::Data { offset, .. } = msg {
                    let at = offset as usize;
                    for (d, b) in self.dst[at..at + payload.len()].iter_mut().zip(payload) {
                        *d = Some(*b);
                    }
                    self.out.taken.push((self.now, link, offset));
                }
            }
            Ok(false) => {}
            Err(e) => self.out.errors.push(e),
        }
    }

    fn drain(&mut self) {
        loop {
            let mut any = false;
            while let Some((link, msg)) = self.s.poll_transmit(self.now) {
                self.send(End::Sender, link, msg);
                any = true;
            }
            while let Some((link, msg)) = self.r.poll_transmit(self.now) {
                self.send(End::Receiver, link, msg);
                any = true;
            }
            self.observe();
            if !any {
                break;
            }
        }
    }

    fn send(&mut self, from: End, link: LinkRole, msg: Message) {
        self.out.sends.push(self.now);
        let payload = match msg {
            Message::Data { offset, len, .. } => {
                self.out.src[offset as usize..(offset + len) as usize].to_vec()
            }
            _ => Vec::new(),
        };
        let to = match from {
            End::Sender => End::Receiver,
            End::Receiver => End::Sender,
        };
        let ev = match self.flight(link, from) {
            Ok(at) => (
                at,
                Ev::Deliver {
                    to,
                    link,
                    msg,
                    payload,
                },
            ),
            Err(Some(at)) => (at, Ev::Error { at: from, link }),
            Err(None) => return,
        };
        self.seq += 1;
        self.pending.push((ev.0, self.seq, ev.1));
    }

    /// When a message sent now on `link` arrives, or `Err` with when the sender learns of
    /// its loss (never, for a silent outage).
    fn flight(&mut self, link: LinkRole, from: End) -> Result<Duration, Option<Duration>> {
        let (l, dir) = (link as usize, from as usize);
        let p = self.sc.links[l];
        let jitter = p.jitter.mul_f64(self.rng.unit());
        let lost = self.rng.unit() < p.loss;
        let mut at = self.now + p.delay + jitter;
        if lost {
            at += p.retransmit;
        }
        // A dropped message still holds back those behind it: a link never delivers a later
        // message without the earlier ones.
        at = at.max(self.fifo[l][dir]);
        self.fifo[l][dir] = at;
        if let Some(o) = self.sc.outages[l] {
            let overlaps = at >= o.from && o.until.map_or(true, |u| self.now < u);
            match (overlaps, o.kind, o.until) {
                (false, _, _) => {}
                (true, OutageKind::Stall, Some(u)) => at = at.max(u),
                (true, OutageKind::Errors, _) => {
                    return Err(Some(self.now.max(o.from) + ERROR_DELAY))
                }
                (true, _, _) => return Err(None),
            }
        }
        self.fifo[l][dir] = at;
        Ok(at)
    }

    /// Records actions, transitions and what the consumer now sees.
    fn observe(&mut self) {
        let now = self.now;
        while let Some(a) = self.s.poll_action() {
            self.out.sender_actions.push((now, a));
        }
        while let Some(a) = self.r.poll_action() {
            self.out.receiver_actions.push((now, a));
        }
        while let Some(t) = self.s.poll_transition() {
            self.out.transitions.push(t);
        }
        while let Some(t) = self.r.poll_transition() {
            self.out.transitions.push(t);
        }
        self.consume();
    }

    fn consume(&mut self) {
        let done = self.r.ledger().done() as usize;
        if self.r.ledger().epoch() != self.epoch {
            // A rollback: whatever landed beyond `done` is not to be trusted.
            self.epoch = self.r.ledger().epoch();
            self.dst[done..].iter_mut().for_each(|b| *b = None);
        }
        let from = self.out.delivered.len();
        for b in &self.dst[from.min(done)..done] {
            match b {
                Some(b) => self.out.delivered.push(*b),
                None => {
                    self.out.gaps += 1;
                    self.out.delivered.push(0);
                }
            }
        }
        let complete = done as u64 == self.sc.total() && self.s.is_complete();
        if complete && self.out.completed_at.is_none() {
            self.out.completed_at = Some(self.now);
        }
    }
}
