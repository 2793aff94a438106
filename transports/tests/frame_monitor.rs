//! The socket, shared-memory and failover socket links report to the throughput monitor once
//! one is attached: a post per frame, a completion once the frame left this side, exactly
//! the frames' bytes under the peer; with none attached they report nothing.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccl_monitor::{Key, Monitor, MonitorConfig, Op, Options, Subscriber, Transition, Work};
use ccl_transports::shm::{ShmLink, ShmRing};
use ccl_transports::socket::SocketLink;
use ccl_transports::socket_failover::{FailoverConfig, FailoverSocketLink, FAILOVER_PATHS};
use ccl_transports::{Link, LinkMonitor, NIC_NONE, SHM_PATH, SINGLE_PATH};

/// A completion as (op, seq, path, nic, bytes).
type Done = (Op, u64, u16, u16, u64);

/// What the monitor saw: completions and transitions.
#[derive(Clone, Default)]
struct Seen {
    done: Arc<Mutex<Vec<Done>>>,
    transitions: Arc<Mutex<Vec<Transition>>>,
}

impl Subscriber for Seen {
    fn on_complete(&self, w: &Work) {
        let row = (w.coll.op, w.coll.seq, w.path, w.nic, w.bytes);
        self.done.lock().unwrap().push(row);
    }

    fn on_transition(&self, t: &Transition) {
        self.transitions.lock().unwrap().push(*t);
    }
}

fn monitor(seen: &Seen) -> Monitor {
    Monitor::with_options(
        &MonitorConfig {
            enabled: true,
            ..MonitorConfig::default()
        },
        Options {
            subscribers: vec![Box::new(seen.clone())],
            ..Options::default()
        },
    )
    .unwrap()
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn shm_pair() -> (ShmLink, ShmLink) {
    let a_rx = ShmRing::create(4, 64 * 1024).unwrap();
    let b_rx = ShmRing::create(4, 64 * 1024).unwrap();
    let a_tx = ShmRing::open(b_rx.path()).unwrap();
    let b_tx = ShmRing::open(a_rx.path()).unwrap();
    a_rx.unlink();
    b_rx.unlink();
    (ShmLink::new(a_rx, a_tx), ShmLink::new(b_rx, b_tx))
}

/// Frames of a known, uneven size each.
fn frames(n: usize, max: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| vec![i as u8; (i * 7919 + 13) % max])
        .collect()
}

/// Sends `fs` from `a` to `b` until all arrived and `a` has nothing pending.
fn send_all(a: &mut dyn Link, b: &mut dyn Link, fs: &[Vec<u8>]) {
    let (mut sent, mut got) = (0, 0);
    let t0 = Instant::now();
    while got < fs.len() || a.has_pending() || a.unconfirmed() {
        assert!(t0.elapsed() < Duration::from_secs(20), "stuck at {got}");
        if sent < fs.len() && a.try_send(&fs[sent]).unwrap() {
            sent += 1;
        }
        if let Some(f) = b.peek().unwrap() {
            assert_eq!(f.len(), fs[got].len());
            b.pop();
            got += 1;
        }
        a.flush().unwrap();
        b.flush().unwrap();
    }
}

/// Sends two operations' frames over `a` (reporting as peer 3 of communicator 9) and checks
/// the monitor saw exactly their bytes, under the peer, the operation and `route`.
fn check(mut a: Box<dyn Link>, mut b: Box<dyn Link>, max: usize, route: impl Fn(u16, u16)) {
    let seen = Seen::default();
    let m = monitor(&seen);
    a.attach_monitor(&LinkMonitor {
        publisher: m.publisher(),
        peer: 3,
        comm: 9,
    });
    let (f1, f2) = (frames(40, max), frames(7, max / 3));
    a.begin_op(Op::AllReduce, 4);
    send_all(&mut *a, &mut *b, &f1);
    a.begin_op(Op::Send, 5);
    send_all(&mut *a, &mut *b, &f2);
    m.flush().unwrap();
    let bytes = |fs: &[Vec<u8>]| fs.iter().map(|f| f.len() as u64).sum::<u64>();
    let (b1, b2) = (bytes(&f1), bytes(&f2));
    let snap = m.snapshot();
    let peer = snap.key(Key::Peer(3)).copied().unwrap();
    assert_eq!(
        (peer.bytes, peer.completions, peer.outstanding),
        (b1 + b2, (f1.len() + f2.len()) as u64, 0)
    );
    let done = seen.done.lock().unwrap().clone();
    let of = |op, seq| -> u64 {
        done.iter()
            .filter(|d| (d.0, d.1) == (op, seq))
            .map(|d| d.4)
            .sum()
    };
    assert_eq!((of(Op::AllReduce, 4), of(Op::Send, 5)), (b1, b2));
    for d in &done {
        route(d.2, d.3);
    }
    drop((a, b));
}

#[test]
fn socket_frames_are_recorded_with_their_bytes() {
    let (x, y) = tcp_pair();
    let max = 64 * 1024;
    let lo = ccl_transports::socket::interface_index("127.0.0.1".parse().unwrap()).unwrap();
    let a = Box::new(SocketLink::new(x, max).unwrap());
    let b = Box::new(SocketLink::new(y, max).unwrap());
    check(a, b, max, |path, nic| {
        assert_eq!((path, nic), (SINGLE_PATH, lo))
    });
}

#[test]
fn shm_frames_are_recorded_with_their_bytes() {
    let (a, b) = shm_pair();
    check(Box::new(a), Box::new(b), 64 * 1024, |path, nic| {
        assert_eq!((path, nic), (SHM_PATH, NIC_NONE))
    });
}

fn failover_pair(max: usize) -> (FailoverSocketLink, FailoverSocketLink, TcpStream) {
    let (p0, p1) = tcp_pair();
    let (b0, b1) = tcp_pair();
    let cut = p0.try_clone().unwrap();
    let cfg = |id| FailoverConfig {
        max_frame: max,
        health: ccl_faulttol::HealthConfig {
            chunk_timeout: Duration::from_millis(30),
            probe_timeout: Duration::from_millis(20),
            probe_interval: Duration::from_millis(20),
            hold_down: Duration::from_millis(150),
            max_backoff_shift: 1,
            last_link_grace: Duration::from_millis(100),
        },
        id,
    };
    let a = FailoverSocketLink::new(p0, b0, cfg(1)).unwrap();
    let b = FailoverSocketLink::new(p1, b1, cfg(2)).unwrap();
    (a, b, cut)
}

#[test]
fn failover_frames_are_recorded_with_their_bytes() {
    let max = 64 * 1024;
    let lo = ccl_transports::socket::interface_index("127.0.0.1".parse().unwrap()).unwrap();
    let (a, b, _cut) = failover_pair(max);
    check(Box::new(a), Box::new(b), max, |path, nic| {
        assert_eq!((path, nic), (FAILOVER_PATHS[0], lo))
    });
}

#[test]
fn a_failover_is_a_monitor_transition_and_no_byte_is_counted_twice() {
    let max = 64 * 1024;
    let (mut a, mut b, cut) = failover_pair(max);
    let seen = Seen::default();
    let m = monitor(&seen);
    a.attach_monitor(&LinkMonitor {
        publisher: m.publisher(),
        peer: 3,
        comm: 9,
    });
    let (f1, f2) = (frames(20, max), frames(20, max));
    send_all(&mut a, &mut b, &f1);
    cut.shutdown(std::net::Shutdown::Both).unwrap();
    send_all(&mut a, &mut b, &f2);
    m.flush().unwrap();
    let sent: u64 = f1.iter().chain(&f2).map(|f| f.len() as u64).sum();
    let peer = m.snapshot().key(Key::Peer(3)).copied().unwrap();
    assert_eq!((peer.bytes, peer.outstanding), (sent, 0));
    let ts = seen.transitions.lock().unwrap().clone();
    let moved = ts.iter().any(|t| {
        t.scope == ccl_monitor::Scope::Peer(3) && t.to == "on_backup" && t.reason == "failover"
    });
    assert!(moved, "{ts:?}");
    let primary_failed = ts
        .iter()
        .any(|t| t.scope == ccl_monitor::Scope::Path(FAILOVER_PATHS[0]) && t.to == "failed");
    assert!(primary_failed, "{ts:?}");
    // Frames queued after the move go on the backup.
    let done = seen.done.lock().unwrap().clone();
    assert!(done.iter().any(|d| d.2 == FAILOVER_PATHS[1]), "{done:?}");
}

#[test]
fn links_without_a_monitor_report_nothing() {
    let seen = Seen::default();
    let m = monitor(&seen);
    let (x, y) = tcp_pair();
    let mut a = SocketLink::new(x, 1024).unwrap();
    let mut b = SocketLink::new(y, 1024).unwrap();
    send_all(&mut a, &mut b, &frames(5, 1024));
    let (mut c, mut d) = shm_pair();
    send_all(&mut c, &mut d, &frames(5, 1024));
    m.flush().unwrap();
    assert_eq!(m.snapshot().records, 0);
}
