//! Both directions over one pair of links, as a TCP failover link carries them: each end
//! has a sender (its own stream) and a receiver (the peer's), every message on a link is
//! for one of the peer's two machines, and whatever arrives for one is a sign of life to
//! the other. The primary goes silent for good in the middle of the transfer; both streams
//! must complete exactly on the backup.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ccl_faulttol::{ConnState, LinkRole, Message, ReceiverConn, SenderConn};
use common::{ms, test_config, us, Rng};

const CHUNK: u64 = 256;
const WINDOW: u64 = 8 * CHUNK;

/// One end: its sender and the receiver of the peer's stream, with the bytes it got.
struct End {
    tx: SenderConn<Duration>,
    rx: ReceiverConn<Duration>,
    /// The peer's stream as landed (None: not landed, or dropped by a rollback).
    landed: Vec<Option<u8>>,
    epoch: u32,
}

/// A message in flight: when it arrives, on which link, for which end and machine.
struct Flight {
    at: Duration,
    seq: u64,
    link: LinkRole,
    to_end: usize,
    for_sender: bool,
    msg: Message,
}

struct Duplex {
    now: Duration,
    rng: Rng,
    ends: [End; 2],
    src: [Vec<u8>; 2],
    flights: Vec<Flight>,
    seq: u64,
    /// Latest arrival per link and direction, so each link keeps order.
    fifo: [[Duration; 2]; 2],
    cut: Duration,
}

impl Duplex {
    fn new(seed: u64, total: u64, cut: Duration) -> Self {
        let mut rng = Rng::new(seed);
        let src = [0, 1].map(|_| (0..total).map(|_| rng.next_u64() as u8).collect::<Vec<_>>());
        let end = |id: u64| {
            let cfg = test_config();
            let links = (2 * id as u32, 2 * id as u32 + 1);
            let mut rx = ReceiverConn::new(2 * id + 1, links, cfg).unwrap();
            rx.post(Duration::ZERO, WINDOW);
            let mut tx = SenderConn::new(2 * id, links, cfg, CHUNK).unwrap();
            tx.post(Duration::ZERO, total);
            End {
                tx,
                rx,
                landed: vec![None; total as usize],
                epoch: 0,
            }
        };
        Duplex {
            now: Duration::ZERO,
            rng,
            ends: [end(0), end(1)],
            src,
            flights: Vec::new(),
            seq: 0,
            fifo: [[Duration::ZERO; 2]; 2],
            cut,
        }
    }

    fn send(&mut self, from: usize, link: LinkRole, for_sender: bool, msg: Message) {
        let (l, d) = (link as usize, from);
        let mut at = self.now + us(300) + us(200).mul_f64(self.rng.unit());
        at = at.max(self.fifo[l][d]);
        self.fifo[l][d] = at;
        if link == LinkRole::Primary && at >= self.cut {
            return;
        }
        self.seq += 1;
        let to_end = 1 - from;
        self.flights.push(Flight {
            at,
            seq: self.seq,
            link,
            to_end,
            for_sender,
            msg,
        });
    }

    fn drain(&mut self) {
        for e in 0..2 {
            while let Some((link, msg)) = self.ends[e].rx.poll_transmit(self.now) {
                self.send(e, link, true, msg);
            }
            while let Some((link, msg)) = self.ends[e].tx.poll_transmit(self.now) {
                self.send(e, link, false, msg);
            }
        }
    }

    fn deliver(&mut self, f: Flight) {
        let now = self.now;
        let end = &mut self.ends[f.to_end];
        if f.for_sender {
            end.rx.handle_alive(now, f.link);
            end.tx.handle_message(now, f.link, f.msg).unwrap();
            return;
        }
        end.tx.handle_alive(now, f.link);
        if end.rx.handle_message(now, f.link, f.msg).unwrap() {
            if let Message::Data { offset, len, .. } = f.msg {
                let src = &self.src[1 - f.to_end][offset as usize..(offset + len) as usize];
                for (d, b) in end.landed[offset as usize..].iter_mut().zip(src) {
                    *d = Some(*b);
                }
            }
        }
    }

    /// Drops what a rollback took back and grants the consumed half of the window again,
    /// as the socket link does when its user pops frames.
    fn consume(&mut self) {
        for end in &mut self.ends {
            let done = end.rx.ledger().done();
            if end.rx.ledger().epoch() != end.epoch {
                end.epoch = end.rx.ledger().epoch();
                end.landed[done as usize..]
                    .iter_mut()
                    .for_each(|b| *b = None);
            }
            let posted = end.rx.ledger().posted();
            let total = end.landed.len() as u64;
            if posted < total && done + WINDOW - posted >= WINDOW / 2 {
                let grant = (done + WINDOW).min(total) - posted;
                end.rx.post(self.now, grant);
            }
        }
    }

    fn complete(&self) -> bool {
        self.ends
            .iter()
            .all(|e| e.tx.is_complete() && e.rx.ledger().done() == e.landed.len() as u64)
    }

    fn run(&mut self, limit: Duration) {
        let mut steps = 0u64;
        while !self.complete() {
            assert!(
                self.now < limit,
                "stuck at {:?}: {}",
                self.now,
                self.where_()
            );
            let next = self.flights.iter().map(|f| f.at);
            let timers = self
                .ends
                .iter()
                .flat_map(|e| [e.tx.poll_timeout(), e.rx.poll_timeout()])
                .flatten();
            let Some(t) = next.chain(timers).min() else {
                panic!("nothing left to happen: {}", self.where_());
            };
            self.now = self.now.max(t);
            while let Some(i) = (0..self.flights.len())
                .filter(|&i| self.flights[i].at <= self.now)
                .min_by_key(|&i| (self.flights[i].at, self.flights[i].seq))
            {
                let f = self.flights.swap_remove(i);
                self.deliver(f);
                self.consume();
                self.drain();
            }
            for e in &mut self.ends {
                e.tx.handle_timeout(self.now);
                e.rx.handle_timeout(self.now);
            }
            self.consume();
            self.drain();
            steps += 1;
            assert!(steps < 2_000_000, "no progress: {}", self.where_());
        }
    }

    fn where_(&self) -> String {
        let e: Vec<_> = self
            .ends
            .iter()
            .map(|e| {
                format!(
                    "tx {:?} acked {} rx {:?} done {}",
                    e.tx.failover().state(),
                    e.tx.ledger().acked(),
                    e.rx.failover().state(),
                    e.rx.ledger().done()
                )
            })
            .collect();
        e.join("; ")
    }
}

#[test]
fn primary_silent_for_good_both_ways_completes_exactly_on_the_backup() {
    let total = 200 * CHUNK;
    for seed in 0..4 {
        for cut in [ms(1), ms(3) + us(seed * 170), ms(9), ms(20)] {
            let mut d = Duplex::new(seed, total, cut);
            d.run(ms(5000));
            for (i, e) in d.ends.iter().enumerate() {
                let got: Vec<u8> = e.landed.iter().map(|b| b.unwrap()).collect();
                assert!(
                    got == d.src[1 - i],
                    "seed {seed} cut {cut:?}: end {i} bytes"
                );
                assert_eq!(e.tx.failover().state(), ConnState::OnBackup);
                assert_eq!(e.rx.failover().state(), ConnState::OnBackup);
            }
            assert!(d.now > cut, "seed {seed}: done before the cut at {cut:?}");
        }
    }
}
