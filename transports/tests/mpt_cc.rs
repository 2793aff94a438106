//! Each congestion control completes transfers and shows its signature behaviour in the
//! simulator; custom policies plug in through the hooks.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use ccl_transports::mpt::sim::{FabricConfig, Sim};
use ccl_transports::mpt::{
    CcKind, CongestionControl, Connection, Instant, MptConfig, Pacing, PathId, PathView,
    SenderView, CC_ENV_VAR,
};

/// Per data transmission of the sender: (time, cwnd bytes, credit held, bytes sent so far,
/// credit received so far).
type Trace = Rc<RefCell<Vec<(Instant, Option<u64>, Option<u64>, u64, u64)>>>;

fn run_traced(seed: u64, cfg: MptConfig, fabric: FabricConfig, len: usize) -> (Sim, Trace) {
    let mut sim = Sim::new(seed, 2, cfg.num_paths, fabric).unwrap();
    let (a, b) = sim.connect(0, 1, &cfg).unwrap();
    let trace: Trace = Rc::default();
    let t = trace.clone();
    sim.set_transmit_observer(Box::new(move |h, now, tx, c| {
        if h == a && tx.payload.is_some() {
            let cc = c.congestion_control();
            let s = c.stats();
            t.borrow_mut().push((
                now,
                cc.cwnd_bytes(),
                cc.credit_bytes(),
                s.data_bytes_sent,
                s.credit_received,
            ));
        }
    }));
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    sim.post_recv(b, len as u64, 0).unwrap();
    sim.send(a, data.clone(), 0).unwrap();
    sim.run(Instant::from_micros(120_000_000)).unwrap();
    assert!(sim.received(b)[0].data == data);
    (sim, trace)
}

fn decreased(trace: &Trace) -> bool {
    trace.borrow().windows(2).any(|w| w[1].1 < w[0].1)
}

#[test]
fn factory_follows_ccl_mpt_cc_values() {
    assert_eq!(CC_ENV_VAR, "CCL_MPT_CC");
    for (value, name) in [
        ("cubic", "cubic"),
        ("SWIFT", "swift"),
        (" eqds ", "eqds"),
        ("none", "none"),
    ] {
        let cfg = MptConfig {
            cc: value.parse().unwrap(),
            ..MptConfig::default()
        };
        let c = Connection::new(cfg, 0, 0).unwrap();
        assert_eq!(c.congestion_control().name(), name);
    }
    assert!("reno".parse::<CcKind>().is_err());
}

#[test]
fn cubic_window_shrinks_on_loss_and_not_without() {
    let cfg = MptConfig {
        cc: CcKind::Cubic,
        ..MptConfig::default()
    };
    let bw = FabricConfig {
        bandwidth_bps: Some(10_000_000_000),
        ..FabricConfig::default()
    };
    let (_, clean) = run_traced(1, cfg.clone(), bw.clone(), 32 << 20);
    assert!(!decreased(&clean), "no loss, no reduction");
    let lossy = FabricConfig { loss: 0.01, ..bw };
    let (sim, trace) = run_traced(2, cfg, lossy, 32 << 20);
    assert!(decreased(&trace), "the window must shrink on loss");
    let max = trace.borrow().iter().filter_map(|x| x.1).max().unwrap();
    assert!(
        sim.conn(sender()).unwrap().stats().fast_retransmits
            + sim.conn(sender()).unwrap().stats().rto_events
            > 0
    );
    assert!(
        max >= 32 * 32 * 1024,
        "slow start opened the window first: {max}"
    );
}

#[test]
fn swift_backs_off_when_delay_exceeds_target() {
    // 4 paths of 1 Gbit/s: a 128-chunk window queues far beyond the 50 us target.
    let cfg = MptConfig {
        cc: CcKind::Swift,
        num_paths: 4,
        ..MptConfig::default()
    };
    let slow = FabricConfig {
        bandwidth_bps: Some(1_000_000_000),
        ..FabricConfig::default()
    };
    let (sim, trace) = run_traced(3, cfg.clone(), slow, 8 << 20);
    assert!(decreased(&trace), "delay above target must cut the window");
    let c = sim.conn(sender()).unwrap();
    assert!(c.srtt().unwrap() > Duration::from_micros(50));
    // Far below target (fast links, 10 us round trips): the window only grows.
    let fast = FabricConfig::default();
    let (sim, trace) = run_traced(4, cfg, fast, 8 << 20);
    assert!(!decreased(&trace));
    assert!(sim.conn(sender()).unwrap().srtt().unwrap() < Duration::from_micros(50));
}

/// A path whose round trip with nothing queued (300 us) is far over Swift's 50 us target, as
/// on a busy host's loopback: Swift counts its target from the best round trip seen, so it
/// still moves 8 MiB about as fast as CUBIC (with a fixed target it cut its window to the floor
/// at every sample and paced one chunk per hundred round trips); so does EQDS.
#[test]
fn swift_keeps_moving_when_the_base_round_trip_exceeds_its_target() {
    let fabric = FabricConfig {
        delay: Duration::from_micros(150),
        bandwidth_bps: Some(10_000_000_000),
        ..FabricConfig::default()
    };
    let finish = |cc| {
        let cfg = MptConfig {
            cc,
            num_paths: 4,
            ..MptConfig::default()
        };
        let (_, trace) = run_traced(9, cfg, fabric.clone(), 8 << 20);
        let last = trace.borrow().last().map(|e| e.0).unwrap();
        last.saturating_duration_since(Instant::ZERO)
    };
    let (swift, cubic) = (finish(CcKind::Swift), finish(CcKind::Cubic));
    let eqds = finish(CcKind::Eqds);
    println!("8 MiB over a 300 us round trip: swift {swift:?}, cubic {cubic:?}, eqds {eqds:?}");
    assert!(
        swift < cubic * 3,
        "swift took {swift:?} against cubic's {cubic:?}"
    );
    assert!(
        eqds < cubic * 4,
        "eqds took {eqds:?} against cubic's {cubic:?}"
    );
}

/// `run_traced` connects node 0 to node 1 first: the sender is the first handle.
fn sender() -> ccl_transports::mpt::sim::ConnHandle {
    ccl_transports::mpt::sim::ConnHandle::first()
}

#[test]
fn eqds_never_sends_without_credit() {
    let cfg = MptConfig {
        cc: CcKind::Eqds,
        ..MptConfig::default()
    };
    for (seed, loss) in [(5, 0.0), (6, 0.01), (7, 0.05)] {
        let fabric = FabricConfig {
            loss,
            jitter: Duration::from_micros(2),
            ..FabricConfig::default()
        };
        let (sim, trace) = run_traced(seed, cfg.clone(), fabric, 8 << 20);
        for &(_, _, _, sent, credit) in trace.borrow().iter() {
            assert!(
                sent <= credit,
                "sent {sent} bytes with only {credit} bytes of credit"
            );
        }
        let s = sim.conn(sender()).unwrap().stats();
        assert!(s.data_bytes_sent >= 8 << 20);
        assert!(s.credit_received >= s.data_bytes_sent);
    }
}

#[test]
fn eqds_receiver_paces_the_transfer() {
    // Credit at 1 GB/s: the first 32 KiB grant is immediate, the other 8 MiB - 32 KiB follow
    // at the credit rate (8.36 ms), however fast the links are.
    let rate = 1_000_000_000;
    let mut cfg = MptConfig {
        cc: CcKind::Eqds,
        ..MptConfig::default()
    };
    cfg.cc_params.eqds_rate_bytes_per_s = rate;
    let (sim, _) = run_traced(8, cfg.clone(), FabricConfig::default(), 8 << 20);
    let slow = sim.now();
    assert!(
        slow >= Instant::from_nanos(((8u64 << 20) - 32 * 1024) * 1_000_000_000 / rate),
        "{slow:?}"
    );
    cfg.cc_params.eqds_rate_bytes_per_s = 10 * rate;
    let (sim, _) = run_traced(8, cfg, FabricConfig::default(), 8 << 20);
    assert!(
        sim.now().as_nanos() * 5 < slow.as_nanos(),
        "10x the credit rate is much faster"
    );
}

/// A custom policy through the hooks: chunks of 4 KiB, all on path 2, one chunk in flight.
#[derive(Debug, Default)]
struct OnePathSmallChunks {
    rx_chunks: u64,
}

impl CongestionControl for OnePathSmallChunks {
    fn name(&self) -> &'static str {
        "one-path"
    }
    fn on_chunk_size(&mut self, _now: Instant, _configured: u32, _remaining: u64) -> u32 {
        4096
    }
    fn on_pacing_chunk(&mut self, _now: Instant, _len: u32, v: &SenderView) -> Pacing {
        if v.inflight_bytes == 0 {
            Pacing::Now
        } else {
            Pacing::Blocked
        }
    }
    fn on_select_path(&mut self, _now: Instant, _a: &PathView, _b: &PathView) -> PathId {
        PathId(2)
    }
    fn on_rx_chunk(&mut self, _now: Instant, _path: PathId, _len: u32) {
        self.rx_chunks += 1;
    }
}

#[test]
fn custom_policy_drives_chunking_pacing_and_paths() {
    let cfg = MptConfig::default();
    let mut sim = Sim::new(9, 2, cfg.num_paths, FabricConfig::default()).unwrap();
    let ca = Connection::with_congestion_control(
        cfg.clone(),
        sim.next_flow_id(0),
        sim.next_flow_id(1),
        Box::new(OnePathSmallChunks::default()),
    )
    .unwrap();
    let cb = Connection::with_congestion_control(
        cfg,
        sim.next_flow_id(1),
        sim.next_flow_id(0),
        Box::new(OnePathSmallChunks::default()),
    )
    .unwrap();
    let (a, b) = sim.connect_prebuilt(0, 1, ca, cb).unwrap();
    let seen: Rc<RefCell<Vec<(PathId, u32, u64)>>> = Rc::default();
    let s = seen.clone();
    sim.set_transmit_observer(Box::new(move |h, _, t, c| {
        if h == a {
            if let Some(p) = t.payload {
                s.borrow_mut().push((t.path, p.len, c.inflight_bytes()));
            }
        }
    }));
    let data = vec![3u8; 100_000];
    sim.post_recv(b, data.len() as u64, 0).unwrap();
    sim.send(a, data.clone(), 0).unwrap();
    sim.run(Instant::from_micros(10_000_000)).unwrap();
    assert!(sim.received(b)[0].data == data);
    let seen = seen.borrow();
    assert_eq!(seen.len(), 25, "100 000 bytes in 4 KiB chunks");
    assert!(seen
        .iter()
        .all(|&(p, len, inflight)| p == PathId(2) && len <= 4096 && inflight == u64::from(len)));
}

/// Receivers that stop reading for 2 ms every 10 ms (threads descheduled on a loaded host)
/// stretch the round trip past the timeout although nothing is lost. CUBIC cut its window
/// to one chunk at every stall (154 timeouts, 376 chunks declared lost, the transfer 23%
/// slower than unstalled, and slower than no congestion control at all). Now the first
/// acknowledgement after a stall shows the timeout was spurious: the cut is undone and the
/// timeout floor learns the stall, so later stalls time nothing out.
#[test]
fn cubic_undoes_spurious_timeouts_and_learns_the_stall() {
    let run = |cc, stall_us| {
        let cfg = MptConfig {
            cc,
            num_paths: 4,
            ..MptConfig::default()
        };
        let fabric = FabricConfig {
            bandwidth_bps: Some(10_000_000_000),
            stall: Duration::from_micros(stall_us),
            stall_period: Duration::from_millis(10),
            ..FabricConfig::default()
        };
        let mut sim = Sim::new(5, 2, cfg.num_paths, fabric).unwrap();
        let (a, b) = sim.connect(0, 1, &cfg).unwrap();
        let data: Vec<u8> = (0..256 << 20).map(|i: usize| (i % 251) as u8).collect();
        sim.post_recv(b, data.len() as u64, 0).unwrap();
        sim.send(a, data.clone(), 0).unwrap();
        // Timeouts up to the end of the second stall (20..22 ms), and in all.
        sim.run_until(Instant::from_micros(25_000)).unwrap();
        let early = sim.conn(a).unwrap().stats().rto_events;
        sim.run(Instant::from_micros(10_000_000)).unwrap();
        assert!(sim.received(b)[0].data == data);
        let end = sim.completed_sends(a)[0].1;
        (end, early, sim.conn(a).unwrap().stats().clone())
    };
    let (unstalled, _, _) = run(CcKind::Cubic, 0);
    let (end, early, s) = run(CcKind::Cubic, 2000);
    let (no_cc_end, _, no_cc) = run(CcKind::None, 2000);
    eprintln!("unstalled {unstalled:?}, stalled {end:?}, no window {no_cc_end:?}; {s:?}");
    assert!(
        s.rto_events > 0 && s.rto_events == early,
        "only the first stalls time out"
    );
    assert!(s.spurious_timeouts >= 1 && s.spurious_timeout_chunks == s.rto_chunks);
    assert_eq!(
        s.chunks_retransmitted, 0,
        "nothing was lost, nothing is sent twice"
    );
    assert!(
        no_cc.rto_events > 100,
        "stalls do fire the timeout: {no_cc:?}"
    );
    assert!(end <= no_cc_end, "CUBIC keeps up with no window at all");
}
