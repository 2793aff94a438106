//! Failover over real loopback TCP: connections cut (shut down) or silenced (a proxy that
//! stops forwarding) mid-transfer.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

const MAX: usize = 64 * 1024;

fn fast() -> HealthConfig {
    HealthConfig {
        chunk_timeout: Duration::from_millis(30),
        probe_timeout: Duration::from_millis(20),
        probe_interval: Duration::from_millis(20),
        hold_down: Duration::from_millis(150),
        max_backoff_shift: 1,
        last_link_grace: Duration::from_millis(100),
    }
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// Two linked ends, and clones of end a's primary and backup streams to cut them with.
fn links(
    primary: (TcpStream, TcpStream),
) -> (FailoverSocketLink, FailoverSocketLink, [TcpStream; 2]) {
    let (bp0, bp1) = tcp_pair();
    let cuts = [primary.0.try_clone().unwrap(), bp0.try_clone().unwrap()];
    let cfg = |id| FailoverConfig {
        max_frame: MAX,
        health: fast(),
        id,
    };
    let a = FailoverSocketLink::new(primary.0, bp0, cfg(1)).unwrap();
    let b = FailoverSocketLink::new(primary.1, bp1, cfg(2)).unwrap();
    (a, b, cuts)
}

fn frames(n: usize, salt: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = (i * 7919 + 13) % MAX;
            (0..len).map(|j| (i + j) as u8 ^ salt).collect()
        })
        .collect()
}

/// Sends `want` both ways, calling `cut` once `cut_at` frames of a's have been queued;
/// asserts every frame arrives once, in order, intact, within `limit`.
fn exchange(
    a: &mut FailoverSocketLink,
    b: &mut FailoverSocketLink,
    n: usize,
    cut_at: usize,
    cut: &mut dyn FnMut(),
    limit: Duration,
) {
    let (fa, fb) = (frames(n, 0), frames(n, 0x5a));
    let (mut sa, mut sb, mut ga, mut gb) = (0, 0, 0, 0);
    let mut cut_done = false;
    let t0 = Instant::now();
    while ga < n || gb < n || a.has_pending() || b.has_pending() {
        assert!(t0.elapsed() < limit, "stuck: sent {sa}/{sb}, got {gb}/{ga}");
        if !cut_done && sa >= cut_at {
            cut();
            cut_done = true;
        }
        if sa < n && a.try_send(&fa[sa]).unwrap() {
            sa += 1;
        }
        if sb < n && b.try_send(&fb[sb]).unwrap() {
            sb += 1;
        }
        if let Some(f) = b.peek().unwrap() {
            assert_eq!(f, &fa[gb][..], "frame {gb} a -> b");
            b.pop();
            gb += 1;
        }
        if let Some(f) = a.peek().unwrap() {
            assert_eq!(f, &fb[ga][..], "frame {ga} b -> a");
            a.pop();
            ga += 1;
        }
        a.flush().unwrap();
        b.flush().unwrap();
    }
    assert!(
        a.peek().unwrap().is_none() && b.peek().unwrap().is_none(),
        "nothing twice"
    );
}

#[test]
fn primary_cut_at_several_points_loses_and_repeats_nothing() {
    for cut_at in [0, 1, 9, 40, 79] {
        let (mut a, mut b, cuts) = links(tcp_pair());
        let mut cut = || cuts[0].shutdown(Shutdown::Both).unwrap();
        exchange(&mut a, &mut b, 80, cut_at, &mut cut, Duration::from_secs(5));
        for s in [a.status(), b.status()] {
            assert_eq!(
                (s.send_on, s.receive_on),
                (LinkRole::Backup, LinkRole::Backup),
                "{cut_at}: {s:?}"
            );
            assert_eq!(s.open, [false, true]);
        }
    }
}

#[test]
fn frames_wrapping_the_receive_ring_many_times_survive_a_cut() {
    // About 19 MiB each way through 2 MiB windows: frames cross the ring's end and the
    // rollback resends into bytes the ring already reused.
    let (mut a, mut b, cuts) = links(tcp_pair());
    let mut cut = || cuts[0].shutdown(Shutdown::Both).unwrap();
    exchange(&mut a, &mut b, 600, 300, &mut cut, Duration::from_secs(20));
    assert_eq!(a.status().send_on, LinkRole::Backup);
}

#[test]
fn both_connections_cut_is_an_error_within_a_bound() {
    let (mut a, mut b, cuts) = links(tcp_pair());
    let mut none = || {};
    exchange(&mut a, &mut b, 4, 0, &mut none, Duration::from_secs(5));
    for c in &cuts {
        c.shutdown(Shutdown::Both).unwrap();
    }
    let t0 = Instant::now();
    let (mut ea, mut eb) = (None, None);
    while (ea.is_none() || eb.is_none()) && t0.elapsed() < Duration::from_secs(2) {
        if ea.is_none() {
            ea = a.try_send(&[1; 100]).and_then(|_| a.flush()).err();
        }
        if eb.is_none() {
            eb = b.peek().map(|_| ()).err();
        }
    }
    assert!(matches!(ea, Some(Error::Unreachable(_))), "{ea:?}");
    assert!(matches!(eb, Some(Error::Unreachable(_))), "{eb:?}");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(!a.has_pending());
}

/// Forwards bytes both ways between two streams until `mute` is set, then forwards
/// nothing (nor closes anything): a link gone silent, as a NIC that goes down.
fn proxy(mute: Arc<AtomicBool>) -> (TcpStream, TcpStream) {
    let (a, a_far) = tcp_pair();
    let (b_far, b) = tcp_pair();
    for (mut from, mut to) in [
        (a_far.try_clone().unwrap(), b_far.try_clone().unwrap()),
        (b_far, a_far),
    ] {
        let mute = Arc::clone(&mute);
        from.set_read_timeout(Some(Duration::from_millis(2)))
            .unwrap();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                while mute.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                match from.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => return,
                }
            }
        });
    }
    (a, b)
}

#[test]
fn silent_primary_fails_over_on_timeout_and_traffic_returns_after_hold_down() {
    let mute = Arc::new(AtomicBool::new(false));
    let (mut a, mut b, _cuts) = links(proxy(Arc::clone(&mute)));
    let mut silence = || mute.store(true, Ordering::Relaxed);
    exchange(&mut a, &mut b, 60, 20, &mut silence, Duration::from_secs(5));
    for s in [a.status(), b.status()] {
        assert_eq!(
            (s.send_on, s.receive_on),
            (LinkRole::Backup, LinkRole::Backup),
            "{s:?}"
        );
        assert_eq!(s.open, [true, true], "a silent link is not closed");
    }
    mute.store(false, Ordering::Relaxed);
    // Keep traffic going until both streams are back on the primary.
    let t0 = Instant::now();
    let mut none = || {};
    while [a.status(), b.status()]
        .iter()
        .any(|s| s.send_on != LinkRole::Primary)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:?} {:?}",
            a.status(),
            b.status()
        );
        exchange(&mut a, &mut b, 4, 0, &mut none, Duration::from_secs(5));
    }
    exchange(&mut a, &mut b, 20, 0, &mut none, Duration::from_secs(5));
}

#[test]
fn pair_connects_over_a_control_stream() {
    let (mut c0, mut c1) = tcp_pair();
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let t = Duration::from_secs(5);
    let h = std::thread::spawn(move || connect_pair(&mut c1, [lo, lo], false, t).unwrap());
    let (p0, b0, r0) = connect_pair(&mut c0, [lo, lo], true, t).unwrap();
    let (p1, b1, r1) = h.join().unwrap();
    assert!(matches!(r0, Redial::Dial(_)), "{r0:?}");
    assert!(matches!(r1, Redial::Accept { .. }), "{r1:?}");
    let cfg = |id| FailoverConfig {
        max_frame: MAX,
        health: fast(),
        id,
    };
    let mut a = FailoverSocketLink::new(p0, b0, cfg(1)).unwrap();
    let mut b = FailoverSocketLink::new(p1, b1, cfg(2)).unwrap();
    let mut none = || {};
    exchange(&mut a, &mut b, 10, 0, &mut none, Duration::from_secs(5));
}

#[test]
fn primary_silent_for_good_mid_transfer_both_ways_completes_on_the_backup() {
    for cut_at in [3, 50, 200] {
        let mute = Arc::new(AtomicBool::new(false));
        let (mut a, mut b, _cuts) = links(proxy(Arc::clone(&mute)));
        let mut silence = || mute.store(true, Ordering::Relaxed);
        exchange(
            &mut a,
            &mut b,
            400,
            cut_at,
            &mut silence,
            Duration::from_secs(20),
        );
        for s in [a.status(), b.status()] {
            assert_eq!(
                (s.send_on, s.receive_on),
                (LinkRole::Backup, LinkRole::Backup),
                "{cut_at}: {s:?}"
            );
        }
        // And it keeps going there.
        let mut none = || {};
        exchange(&mut a, &mut b, 100, 0, &mut none, Duration::from_secs(10));
    }
}

/// Like `links`, with a's primary going through the silencing proxy and a redialing to
/// b's primary listener directly (a fresh connection works while the old one stays
/// silent, as after a path comes back while TCP still backs off on the old connection).
fn redialing_links(mute: &Arc<AtomicBool>) -> (FailoverSocketLink, FailoverSocketLink) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (pa, pb) = proxy(Arc::clone(mute));
    let (ba, bb) = tcp_pair();
    let cfg = |id| FailoverConfig {
        max_frame: MAX,
        health: fast(),
        id,
    };
    let accept = Redial::Accept {
        listener: l,
        peer: addr.ip(),
    };
    let a = FailoverSocketLink::with_redial(pa, ba, cfg(1), Redial::Dial(addr)).unwrap();
    let b = FailoverSocketLink::with_redial(pb, bb, cfg(2), accept).unwrap();
    (a, b)
}

/// Keeps traffic going both ways until both streams of both ends are on the primary (within
/// 5 s).
fn back_on_the_primary(a: &mut FailoverSocketLink, b: &mut FailoverSocketLink) {
    let t0 = Instant::now();
    let mut none = || {};
    while [a.status(), b.status()]
        .iter()
        .any(|s| s.send_on != LinkRole::Primary || s.receive_on != LinkRole::Primary)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:?} {:?}",
            a.status(),
            b.status()
        );
        exchange(a, b, 4, 0, &mut none, Duration::from_secs(5));
    }
}

#[test]
fn silent_primary_is_redialed_and_traffic_returns_to_it() {
    let mute = Arc::new(AtomicBool::new(false));
    let (mut a, mut b) = redialing_links(&mute);
    let mut silence = || mute.store(true, Ordering::Relaxed);
    exchange(&mut a, &mut b, 60, 20, &mut silence, Duration::from_secs(5));
    // The old primary stays silent for good; a fresh connection replaces it.
    back_on_the_primary(&mut a, &mut b);
    let mut none = || {};
    for s in [a.status(), b.status()] {
        assert_eq!(s.open, [true, true], "{s:?}");
    }
    exchange(&mut a, &mut b, 40, 0, &mut none, Duration::from_secs(5));
}

/// b's primary NIC comes back with another address while the primary is silent: b listens
/// there instead (its old listener goes, as the old address would), tells a over the
/// backup, and a's redial reaches the new listener, so traffic returns to the primary. The
/// old listener's address refuses from then on: without the word a could not come back.
#[test]
fn a_primary_renumbered_while_down_is_redialed_at_its_new_address() {
    let mute = Arc::new(AtomicBool::new(false));
    let old: std::net::IpAddr = "127.0.0.3".parse().unwrap();
    let new: std::net::IpAddr = "127.0.0.4".parse().unwrap();
    let l = TcpListener::bind((old, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let (pa, pb) = proxy(Arc::clone(&mute));
    let (ba, bb) = tcp_pair();
    let cfg = |id| FailoverConfig {
        max_frame: MAX,
        health: fast(),
        id,
    };
    let b_nic = Arc::new(Mutex::new(pb.local_addr().unwrap().ip()));
    let nic = {
        let b_nic = Arc::clone(&b_nic);
        PrimaryNic::from_fn(move || Some(*b_nic.lock().unwrap()))
    };
    let accept = Redial::Accept {
        listener: l,
        peer: "127.0.0.1".parse().unwrap(),
    };
    let mut a = FailoverSocketLink::with_redial(pa, ba, cfg(1), Redial::Dial(addr)).unwrap();
    let mut b = FailoverSocketLink::with_readdress(pb, bb, cfg(2), accept, Some(nic)).unwrap();
    // The NIC is renumbered as the primary goes silent; b looks only while it is failed.
    let mut silence = || {
        *b_nic.lock().unwrap() = new;
        mute.store(true, Ordering::Relaxed)
    };
    exchange(&mut a, &mut b, 60, 20, &mut silence, Duration::from_secs(5));
    back_on_the_primary(&mut a, &mut b);
    let mut none = || {};
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err(),
        "the old listener is gone"
    );
    let g = b.shared.lock();
    assert_eq!(
        g.wires[0].local_ip(),
        Some(new),
        "b's primary is at its new address"
    );
    drop(g);
    exchange(&mut a, &mut b, 40, 0, &mut none, Duration::from_secs(5));
}

#[test]
fn frames_acknowledged_before_the_peer_closes_are_still_delivered() {
    let (mut a, mut b, cuts) = links(tcp_pair());
    // The clones would keep a's connections open.
    drop(cuts);
    let fa = frames(40, 3);
    let mut sent = 0;
    let t0 = Instant::now();
    // b's background thread lands and acknowledges the frames; b's user takes none yet.
    while sent < fa.len() || a.unconfirmed() {
        assert!(t0.elapsed() < Duration::from_secs(5), "sent {sent}");
        if sent < fa.len() && a.try_send(&fa[sent]).unwrap() {
            sent += 1;
        }
        a.flush().unwrap();
    }
    // a is done and goes away, closing both connections.
    drop(a);
    std::thread::sleep(Duration::from_millis(50));
    for (i, f) in fa.iter().enumerate() {
        assert_eq!(b.peek().unwrap(), Some(&f[..]), "frame {i}");
        b.pop();
    }
    // Then the closed link reports itself.
    let t0 = Instant::now();
    let err = loop {
        match b.peek() {
            Err(e) => break e,
            Ok(None) => assert!(t0.elapsed() < Duration::from_secs(2), "no error"),
            Ok(Some(f)) => panic!("a frame of {} bytes too many", f.len()),
        }
    };
    assert!(matches!(err, Error::Unreachable(_)), "{err:?}");
}

#[test]
fn sends_acknowledged_before_the_peer_leaves_complete_without_an_error() {
    let (mut a, mut b, cuts) = links(tcp_pair());
    drop(cuts);
    assert!(a.try_send(b"the last frame").unwrap());
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(5), "not delivered");
        if let Some(f) = b.peek().unwrap() {
            assert_eq!(f, b"the last frame");
            b.pop();
            break;
        }
    }
    // b's ack leaves b's kernel; a's background thread takes it, a's user has not
    // looked since.
    while b.unconfirmed() {
        assert!(t0.elapsed() < Duration::from_secs(5), "never acknowledged");
    }
    // b had everything and leaves; a's link fails, and only then a's user polls its send.
    drop(b);
    std::thread::sleep(Duration::from_millis(50));
    assert!(!a.flush().unwrap());
    assert!(!a.has_pending());
    // A new send has nowhere to go.
    assert!(a.try_send(b"one more").is_err());
}

/// Frames lent with `try_send_deferred` while the primary is silent (nothing sent on it is
/// acknowledged), the lender's memory overwritten as soon as each send completes: the
/// failover resends bytes whose memory is gone, so the link must have copied what was not
/// acknowledged when the send completed.
#[test]
fn lent_frames_arrive_intact_after_their_memory_is_reused_and_the_primary_fails() {
    let mute = Arc::new(AtomicBool::new(false));
    let (mut a, mut b, _cuts) = links(proxy(Arc::clone(&mute)));
    let mut none = || {};
    exchange(&mut a, &mut b, 4, 0, &mut none, Duration::from_secs(5));
    mute.store(true, Ordering::Relaxed);
    let fa = frames(8, 9);
    let mut buf = vec![0u8; MAX];
    let t0 = Instant::now();
    for (i, f) in fa.iter().enumerate() {
        buf[..f.len()].copy_from_slice(f);
        // SAFETY: `buf` is neither changed nor dropped until `has_pending` is false.
        while !unsafe { a.try_send_deferred(&buf[..f.len()]) }.unwrap() {
            assert!(t0.elapsed() < Duration::from_secs(5), "full at {i}");
        }
        while a.has_pending() {
            assert!(t0.elapsed() < Duration::from_secs(5), "stuck at {i}");
            a.flush().unwrap();
        }
        buf.fill(0xee);
    }
    assert_eq!(
        a.status().send_on,
        LinkRole::Primary,
        "sent before the failover"
    );
    let mut got = 0;
    while got < fa.len() {
        assert!(t0.elapsed() < Duration::from_secs(5), "got {got}");
        a.flush().unwrap();
        if let Some(f) = b.peek().unwrap() {
            assert_eq!(f, &fa[got][..], "frame {got}");
            b.pop();
            got += 1;
        }
    }
    assert_eq!(a.status().send_on, LinkRole::Backup);
}
