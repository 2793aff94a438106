//! Deterministic simulations of the multipath core over the `sim` fabric: every message
//! arrives exactly once and intact under loss, reordering, duplication and blackholed paths.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::time::Duration;

use ccl_transports::mpt::sim::{ConnHandle, FabricConfig, Sim, SimAction};
use ccl_transports::mpt::{CcKind, Instant, MptConfig, MptError, PathId, QUIET_ROUNDS};

/// Bytes of message `i` of a test: position- and message-dependent so misplacement shows.
fn pattern(len: usize, salt: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(31).wrapping_add(salt * 7919) >> 3) as u8 ^ (i as u8))
        .collect()
}

#[allow(dead_code)]
struct Outcome {
    sim: Sim,
    a: ConnHandle,
    b: ConnHandle,
}

/// Sends `sizes` from node 0 to node 1 (and, if `both_ways`, the same back), checks every
/// message arrived exactly once, in full, byte-exact.
fn transfer(
    seed: u64,
    fabric: FabricConfig,
    cfg: MptConfig,
    sizes: &[usize],
    both_ways: bool,
) -> Outcome {
    let mut sim = Sim::new(seed, 2, cfg.num_paths, fabric).unwrap();
    let (a, b) = sim.connect(0, 1, &cfg).unwrap();
    let mut expect_b = Vec::new();
    let mut expect_a = Vec::new();
    let limit = Instant::from_micros(60_000_000);
    // At most 16 messages in flight per direction: feed in waves.
    for (wave, sizes) in sizes.chunks(16).enumerate() {
        for (i, &len) in sizes.iter().enumerate() {
            let salt = (wave * 16 + i) as u64;
            sim.post_recv(b, len as u64, salt).unwrap();
            let data = pattern(len, salt);
            sim.send(a, data.clone(), salt).unwrap();
            expect_b.push(data);
            if both_ways {
                sim.post_recv(a, len as u64, salt).unwrap();
                let data = pattern(len, salt + 1000);
                sim.send(b, data.clone(), salt).unwrap();
                expect_a.push(data);
            }
        }
        sim.run(limit)
            .unwrap_or_else(|e| panic!("seed {seed}: {e} at {:?}", sim.now()));
    }
    let check = |h: ConnHandle, expect: &[Vec<u8>]| {
        let got = sim.received(h);
        assert_eq!(
            got.len(),
            expect.len(),
            "exactly one completion per message"
        );
        let mut got: Vec<_> = got.iter().collect();
        got.sort_by_key(|m| m.id);
        for (i, (m, e)) in got.iter().zip(expect).enumerate() {
            assert_eq!(m.id.0, i as u64);
            assert!(!m.truncated);
            assert!(m.data == *e, "message {i} ({} bytes) differs", e.len());
        }
    };
    check(b, &expect_b);
    check(a, &expect_a);
    assert_eq!(sim.completed_sends(a).len(), expect_b.len());
    assert_eq!(sim.completed_sends(b).len(), expect_a.len());
    assert_eq!(sim.handle_errors(a) + sim.handle_errors(b), 0);
    Outcome { sim, a, b }
}

const SIZES: &[usize] = &[
    0,
    1,
    8191,
    8192,
    32 * 1024,
    32 * 1024 + 1,
    100_000,
    1 << 20,
    4 << 20,
];

fn cfg(cc: CcKind) -> MptConfig {
    MptConfig {
        cc,
        ..MptConfig::default()
    }
}

#[test]
fn lossless_all_sizes() {
    let o = transfer(1, FabricConfig::default(), cfg(CcKind::Cubic), SIZES, true);
    let s = o.sim.conn(o.a).unwrap().stats();
    assert_eq!(s.chunks_retransmitted, 0);
    assert_eq!(s.duplicate_chunks, 0);
}

fn lossy(loss: f64) -> FabricConfig {
    FabricConfig {
        loss,
        jitter: Duration::from_micros(2),
        ..FabricConfig::default()
    }
}

#[test]
fn loss_0_01_percent() {
    for cc in [CcKind::Cubic, CcKind::Swift, CcKind::Eqds] {
        transfer(11, lossy(0.0001), cfg(cc), SIZES, true);
    }
}

#[test]
fn loss_1_percent() {
    for (seed, cc) in [
        (21, CcKind::Cubic),
        (22, CcKind::Swift),
        (23, CcKind::Eqds),
        (24, CcKind::None),
    ] {
        let o = transfer(seed, lossy(0.01), cfg(cc), SIZES, true);
        let rtx = o.sim.conn(o.a).unwrap().stats().chunks_retransmitted
            + o.sim.conn(o.b).unwrap().stats().chunks_retransmitted;
        assert!(
            o.sim.fabric().stats().lost_random > 0 && rtx > 0,
            "{cc}: losses must have been repaired"
        );
    }
}

#[test]
fn loss_5_percent() {
    for (seed, cc) in [
        (31, CcKind::Cubic),
        (32, CcKind::Swift),
        (33, CcKind::Eqds),
        (34, CcKind::None),
    ] {
        let o = transfer(seed, lossy(0.05), cfg(cc), SIZES, true);
        let s = o.sim.conn(o.a).unwrap().stats();
        assert!(s.chunks_retransmitted > 0, "{cc}: {s:?}");
        assert!(s.fast_retransmits + s.rto_events > 0, "{cc}: {s:?}");
    }
}

#[test]
fn reordering_and_duplication() {
    let fabric = FabricConfig {
        reorder: 0.2,
        reorder_delay: Duration::from_micros(30),
        duplicate: 0.05,
        jitter: Duration::from_micros(5),
        ..FabricConfig::default()
    };
    for (seed, cc) in [(41, CcKind::Cubic), (42, CcKind::Swift), (43, CcKind::Eqds)] {
        let o = transfer(seed, fabric.clone(), cfg(cc), SIZES, true);
        let f = o.sim.fabric().stats();
        assert!(f.duplicated > 0 && f.reordered > 0, "{f:?}");
        let rx = o.sim.conn(o.b).unwrap().stats();
        assert!(
            rx.duplicate_chunks > 0,
            "duplicates must have been seen and dropped: {rx:?}"
        );
    }
}

#[test]
fn everything_at_once() {
    let fabric = FabricConfig {
        loss: 0.02,
        reorder: 0.1,
        duplicate: 0.02,
        jitter: Duration::from_micros(4),
        bandwidth_bps: Some(25_000_000_000),
        ..FabricConfig::default()
    };
    for (seed, cc) in [(51, CcKind::Cubic), (52, CcKind::Swift), (53, CcKind::Eqds)] {
        transfer(seed, fabric.clone(), cfg(cc), SIZES, true);
    }
}

/// Schedules paths `paths` down (or, `down` false, back up) at `at`, both directions.
fn paths_down(sim: &mut Sim, at: Instant, paths: impl IntoIterator<Item = u16>, down: bool) {
    for p in paths {
        sim.schedule(
            at,
            SimAction::SetPathDown {
                path: PathId(p),
                down,
            },
        );
    }
}

/// One `len`-byte message from node 0 to node 1 over 32 paths of 25 Gbit/s each with `cc`
/// (EQDS credits at that aggregate rate), already sent: the sim, both ends and the bytes.
fn one_big_message(
    seed: u64,
    cc: CcKind,
    len: usize,
    salt: u64,
) -> (Sim, ConnHandle, ConnHandle, Vec<u8>) {
    let mut c = cfg(cc);
    c.cc_params.eqds_rate_bytes_per_s = 100_000_000_000;
    let fabric = FabricConfig {
        bandwidth_bps: Some(25_000_000_000),
        ..lossy(0.0)
    };
    let mut sim = Sim::new(seed, 2, c.num_paths, fabric).unwrap();
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    let data = pattern(len, salt);
    sim.post_recv(b, len as u64, 0).unwrap();
    sim.send(a, data.clone(), 0).unwrap();
    (sim, a, b, data)
}

/// Paths blackholed in the middle of a transfer (two for good, one coming back): the
/// transfer completes byte-exact, the dead paths are penalised and stop carrying chunks.
#[test]
fn blackholed_paths_mid_transfer() {
    for (seed, cc) in [(61, CcKind::Cubic), (62, CcKind::Swift), (63, CcKind::Eqds)] {
        let (mut sim, a, b, data) = one_big_message(seed, cc, 64 << 20, 5);
        let t_down = Instant::from_micros(100);
        paths_down(&mut sim, t_down, [3, 7, 20], true);
        paths_down(&mut sim, Instant::from_micros(400), [7], false);
        sim.run_until(t_down).unwrap();
        let before = sim.conn(a).unwrap().path(PathId(20));
        let healthy_before: Vec<u64> = [0u16, 1, 2, 4, 5]
            .iter()
            .map(|&p| sim.conn(a).unwrap().path(PathId(p)).chunks_sent)
            .collect();
        sim.run(Instant::from_micros(60_000_000)).unwrap();
        assert_eq!(sim.received(b).len(), 1);
        assert!(
            sim.received(b)[0].at > t_down,
            "{cc}: the transfer outlasts the outage start"
        );
        assert!(sim.received(b)[0].data == data, "{cc}: bytes differ");
        assert!(
            sim.fabric().stats().lost_blackhole > 0,
            "{cc}: the blackhole ate something"
        );
        let conn = sim.conn(a).unwrap();
        let dead = conn.path(PathId(20));
        assert!(
            dead.chunks_lost > 0 && dead.consecutive_losses > 0,
            "{cc}: {dead:?}"
        );
        let healthy: Vec<u64> = [0u16, 1, 2, 4, 5]
            .iter()
            .map(|&p| conn.path(PathId(p)).chunks_sent)
            .collect();
        let avg = healthy
            .iter()
            .zip(&healthy_before)
            .map(|(x, y)| x - y)
            .sum::<u64>()
            / healthy.len() as u64;
        // After the outage starts the dead path stops attracting chunks.
        let dead_after = dead.chunks_sent - before.chunks_sent;
        assert!(
            dead_after * 4 < avg,
            "{cc}: dead path got {dead_after} chunks, healthy ones {avg}"
        );
    }
}

/// A NIC port dies: the half of the paths it carries (every odd one, as `CCL_MPT_IFNAMES`
/// with two NICs lays them out) go down for good mid-transfer. The transfer completes
/// byte-exact with every congestion control. Once the dead paths have lost their first
/// chunks they carry no data, only probe frames (CUBIC: 6.9 ms against 3.5 ms with every path
/// alive -- half the paths, half the rate; 0 chunks on the dead paths after detection). With
/// power-of-two choices alone a quarter of the chunks drew two dead paths and went to the
/// better of the two, and dead paths were probed with data chunks: the same transfer took
/// 4.03 s. EQDS completes in 47 ms against its own 11.7 ms: a bound, not a target.
#[test]
fn a_dead_nic_takes_half_the_paths_and_the_rest_carry_on() {
    for (seed, cc) in [(91, CcKind::Cubic), (92, CcKind::Swift), (93, CcKind::Eqds)] {
        let (mut sim, a, b, data) = one_big_message(seed, cc, 256 << 20, 9);
        let t_down = Instant::from_micros(200);
        let paths = cfg(cc).num_paths;
        let dead: Vec<u16> = (0..paths).filter(|p| p % 2 == 1).collect();
        let live: Vec<u16> = (0..paths).filter(|p| p % 2 == 0).collect();
        paths_down(&mut sim, t_down, dead.iter().copied(), true);
        // By then every dead path has lost chunks (a few round trips and timeouts).
        let settled = Instant::from_micros(5_000);
        sim.run_until(settled).unwrap();
        let sent_on = |sim: &Sim, paths: &[u16]| -> u64 {
            let conn = sim.conn(a).unwrap();
            paths
                .iter()
                .map(|&p| conn.path(PathId(p)).chunks_sent)
                .sum()
        };
        let (dead0, live0) = (sent_on(&sim, &dead), sent_on(&sim, &live));
        sim.run(Instant::from_micros(60_000_000)).unwrap();
        let got = sim.received(b);
        assert_eq!(got.len(), 1, "{cc}");
        assert!(
            got[0].at > settled,
            "{cc}: ended at {:?}, before detection",
            got[0].at
        );
        assert!(got[0].data == data, "{cc}: bytes differ");
        let dead_after = sent_on(&sim, &dead) - dead0;
        let live_after = sent_on(&sim, &live) - live0;
        assert!(
            dead_after * 100 < live_after,
            "{cc}: dead paths got {dead_after} chunks after detection, live ones {live_after}"
        );
        let bound = if cc == CcKind::Eqds { 100_000 } else { 20_000 };
        assert!(
            got[0].at < Instant::from_micros(bound),
            "{cc}: {:?}",
            got[0].at
        );
    }
}

/// Every path of a receiver-driven (EQDS) connection dies mid-transfer: the sender, with
/// lost chunks to resend, nothing in flight and no credit coming, counts its stall timer as
/// retransmission timeouts and fails within the retry budget -- it used to wait for credit
/// forever. The other congestion controls fail the same way.
#[test]
fn a_connection_cut_off_from_every_path_fails_instead_of_waiting() {
    for (seed, cc) in [(95, CcKind::Eqds), (96, CcKind::Cubic), (97, CcKind::Swift)] {
        let (mut sim, _, _, _) = one_big_message(seed, cc, 64 << 20, 3);
        paths_down(
            &mut sim,
            Instant::from_micros(200),
            0..cfg(cc).num_paths,
            true,
        );
        let r = sim.run(Instant::from_micros(60_000_000));
        assert!(
            matches!(r, Err(MptError::RetriesExhausted(_))),
            "{cc}: {r:?} at {:?}",
            sim.now()
        );
        // 50 timeouts, backed off up to 64 ms each: a few seconds of simulated time.
        assert!(
            sim.now() < Instant::from_micros(10_000_000),
            "{cc}: {:?}",
            sim.now()
        );
    }
}

/// Every path dark for 300 ms with a window of chunks in flight, then back: the transfer
/// completes byte-exact with every congestion control. Chunks sent microseconds apart time out
/// microseconds apart; they count as one timeout per timeout period (counted one by one, 50
/// chunks in flight spent the retry budget in 160 ms and failed the connection).
#[test]
fn an_outage_of_every_path_shorter_than_the_retry_budget_is_survived() {
    for (seed, cc) in [
        (101, CcKind::Swift),
        (102, CcKind::Cubic),
        (103, CcKind::Eqds),
    ] {
        let (mut sim, _, b, data) = one_big_message(seed, cc, 64 << 20, 4);
        for (at, down) in [(200, true), (300_000, false)] {
            paths_down(
                &mut sim,
                Instant::from_micros(at),
                0..cfg(cc).num_paths,
                down,
            );
        }
        sim.run(Instant::from_micros(60_000_000))
            .unwrap_or_else(|e| panic!("{cc}: {e} at {:?}", sim.now()));
        let got = sim.received(b);
        assert_eq!(got.len(), 1, "{cc}");
        assert!(got[0].data == data, "{cc}: bytes differ");
        assert!(
            got[0].at > Instant::from_micros(300_000),
            "{cc}: {:?}",
            got[0].at
        );
        // Chunks that got through just before the outage are acknowledged only after it:
        // that is no round trip for the timeout floor to learn.
        let a = sim.conn(ConnHandle::first()).unwrap();
        let rto = a.rto(sim.now());
        assert!(
            rto < Duration::from_millis(5),
            "{cc}: timeout {rto:?} after the outage"
        );
    }
}

/// A sender whose next message waits for the peer's receive (nothing in flight, so no
/// retransmission timer) when every path dies: its unanswered rendezvous probes count toward
/// the retry budget and it fails -- it used to probe for ever.
#[test]
fn a_sender_waiting_for_the_peers_receive_fails_when_every_path_dies() {
    let c = cfg(CcKind::Cubic);
    let mut sim = Sim::new(111, 2, c.num_paths, lossy(0.0)).unwrap();
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    sim.post_recv(b, 100_000, 0).unwrap();
    for i in 0..2 {
        sim.send(a, pattern(100_000, i), i).unwrap();
    }
    sim.run_until(Instant::from_micros(5_000)).unwrap();
    assert_eq!(
        sim.received(b).len(),
        1,
        "the first message arrived; the second waits"
    );
    paths_down(&mut sim, Instant::from_micros(5_000), 0..c.num_paths, true);
    let r = sim.run(Instant::from_micros(600_000_000));
    assert!(
        matches!(r, Err(MptError::RetriesExhausted(_))),
        "{r:?} at {:?}",
        sim.now()
    );
}

/// A connection that only receives (its peer has nothing to send, so nothing is in flight
/// either way) when every path dies: its probes of the peer go unanswered and it fails with
/// `PeerSilent` within the quiet period and the retry budget of probes (their count and
/// `fail_after`) -- it used to wait until the application's timeout.
#[test]
fn a_receiver_waiting_on_a_peer_cut_off_from_every_path_fails_within_the_budget() {
    let c = cfg(CcKind::Cubic);
    let mut sim = Sim::new(121, 2, c.num_paths, lossy(0.0)).unwrap();
    let (_, b) = sim.connect(0, 1, &c).unwrap();
    sim.post_recv(b, 100_000, 0).unwrap();
    let cut = Instant::from_micros(5_000);
    paths_down(&mut sim, cut, 0..c.num_paths, true);
    let r = sim.run(Instant::from_micros(60_000_000));
    // As many probes as go out over `fail_after`, at least the count.
    let Err(MptError::PeerSilent(probes)) = r else {
        panic!("{r:?}")
    };
    assert!(probes >= c.max_rto_retries, "{probes}");
    assert_eq!(
        sim.conn(b).unwrap().error(),
        Some(&MptError::PeerSilent(probes))
    );
    // Quiet period, then one probe per rto_max, until both 50 probes and `fail_after` since
    // the first have passed: 0.5 + 6 s after the cut, within a probe interval.
    let quiet = c.rto_max * QUIET_ROUNDS;
    let bound = quiet + c.fail_after.max(c.rto_max * c.max_rto_retries) + c.rto_max * 2;
    assert!(
        sim.now() < cut + bound,
        "failed at {:?}, bound {bound:?}",
        sim.now()
    );
    assert!(sim.now() >= cut + quiet + c.fail_after, "{:?}", sim.now());
}

/// A receive posted long before its send (a pipeline stage waiting for the one before):
/// the healthy peer answers every probe, nothing fails, and the message arrives exact when
/// it is finally sent 20 s later. The probes cost one datagram each way per quiet period.
#[test]
fn a_receive_posted_long_before_its_send_on_a_healthy_connection_does_not_fail() {
    let c = cfg(CcKind::Cubic);
    let mut sim = Sim::new(122, 2, c.num_paths, lossy(0.0)).unwrap();
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    sim.post_recv(b, 100_000, 0).unwrap();
    let late = Instant::from_micros(20_000_000);
    sim.run_until(late).unwrap();
    assert!(sim.conn(b).unwrap().error().is_none());
    let probes = sim.conn(b).unwrap().stats().probes_sent;
    let quiet = c.rto_max * QUIET_ROUNDS;
    let periods = (20_000_000 / quiet.as_micros()) as u64;
    assert!(
        (periods - 2..=periods + 1).contains(&probes),
        "{probes} probes in 20 s, {periods} quiet periods"
    );
    let data = pattern(100_000, 5);
    sim.send(a, data.clone(), 0).unwrap();
    sim.run(Instant::from_micros(25_000_000)).unwrap();
    let got = sim.received(b);
    assert_eq!(got.len(), 1);
    assert!(got[0].data == data, "bytes differ");
    assert_eq!(sim.handle_errors(a) + sim.handle_errors(b), 0);
}

/// Small messages stay on their dedicated path until it dies, then move.
#[test]
fn small_message_path_moves_off_a_blackhole() {
    let c = cfg(CcKind::Cubic);
    let mut sim = Sim::new(71, 2, c.num_paths, lossy(0.0)).unwrap();
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    paths_down(&mut sim, Instant::ZERO, [0], true);
    for i in 0..8u64 {
        sim.post_recv(b, 100, i).unwrap();
        sim.send(a, pattern(100, i), i).unwrap();
    }
    sim.run(Instant::from_micros(10_000_000)).unwrap();
    assert_eq!(sim.received(b).len(), 8);
    let conn = sim.conn(a).unwrap();
    assert_ne!(conn.small_message_path(), PathId(0));
    assert!(conn.stats().small_path_moves >= 1);
}

#[test]
fn same_seed_same_outcome() {
    let run = |seed| {
        let o = transfer(
            seed,
            lossy(0.03),
            cfg(CcKind::Cubic),
            &[1 << 20, 3 << 20],
            true,
        );
        let s = o.sim.conn(o.a).unwrap().stats().clone();
        (o.sim.now(), s, o.sim.fabric().stats().clone())
    };
    let x = run(81);
    assert_eq!(x, run(81));
    assert_ne!(x.0, run(82).0);
}

#[test]
fn many_messages_wrap_rid_and_csn() {
    // 200 messages: RIDs wrap 12 times, CSNs (8 bits) wrap many times.
    let sizes: Vec<usize> = (0..200)
        .map(|i| [0, 10, 9000, 70_000, 40_000][i % 5])
        .collect();
    let c = MptConfig {
        window_chunks: 16,
        ..cfg(CcKind::Cubic)
    };
    let o = transfer(91, lossy(0.02), c, &sizes, true);
    assert!(o.sim.conn(o.a).unwrap().stats().chunks_sent > 300);
}

#[test]
fn three_nodes_share_the_fabric() {
    let c = cfg(CcKind::Swift);
    let mut sim = Sim::new(101, 3, c.num_paths, lossy(0.01)).unwrap();
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    let (b2, c2) = sim.connect(1, 2, &c).unwrap();
    let (c3, a3) = sim.connect(2, 0, &c).unwrap();
    let mut want = Vec::new();
    for (i, (s, r)) in [(a, b), (b2, c2), (c3, a3)].into_iter().enumerate() {
        let data = pattern(2 << 20, i as u64);
        sim.post_recv(r, data.len() as u64, 0).unwrap();
        sim.send(s, data.clone(), 0).unwrap();
        want.push((r, data));
    }
    sim.run(Instant::from_micros(60_000_000)).unwrap();
    for (r, data) in want {
        assert!(sim.received(r)[0].data == data);
    }
}

/// Verbs-like delivery (only the 32-bit immediate, 8-bit CSN): with the CSN reuse guard
/// above the fabric's worst-case delay, duplicates and reordering never alias.
fn imm_only_run(seed: u64, guard: Duration) -> (bool, u64) {
    let fabric = FabricConfig {
        reorder: 0.3,
        reorder_delay: Duration::from_micros(40),
        duplicate: 0.1,
        jitter: Duration::from_micros(5),
        loss: 0.01,
        ..FabricConfig::default()
    };
    let c = MptConfig {
        csn_reuse_guard: guard,
        ..cfg(CcKind::None)
    };
    let mut sim = Sim::new(seed, 2, c.num_paths, fabric).unwrap();
    sim.set_imm_only(true);
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    let mut want = Vec::new();
    for i in 0..8u64 {
        let data = pattern(2 << 20, i);
        sim.post_recv(b, data.len() as u64, i).unwrap();
        sim.send(a, data.clone(), i).unwrap();
        want.push(data);
    }
    let ok = sim.run(Instant::from_micros(5_000_000)).is_ok()
        && sim.received(b).len() == want.len()
        && sim
            .received(b)
            .iter()
            .all(|m| m.data == want[m.id.0 as usize]);
    (ok, sim.conn(b).unwrap().stats().duplicate_chunks)
}

#[test]
fn imm_only_with_reuse_guard_is_exact() {
    // Worst case in this fabric: 5 us delay + 5 us jitter + 40 us reorder hold-back.
    for seed in [111, 112, 113] {
        let (ok, dups) = imm_only_run(seed, Duration::from_micros(60));
        assert!(ok, "seed {seed}");
        assert!(dups > 0);
    }
}

/// A path that was blackholed and comes back is probed and carries traffic again.
#[test]
fn healed_path_is_probed_back_into_use() {
    let c = cfg(CcKind::Cubic);
    // 10 Gbit/s per path: 128 MiB take about 4 ms; the outage is 100..500 us.
    let fabric = FabricConfig {
        bandwidth_bps: Some(10_000_000_000),
        ..lossy(0.0)
    };
    let mut sim = Sim::new(121, 2, c.num_paths, fabric).unwrap();
    let (a, b) = sim.connect(0, 1, &c).unwrap();
    let data = pattern(128 << 20, 9);
    sim.post_recv(b, data.len() as u64, 0).unwrap();
    sim.send(a, data.clone(), 0).unwrap();
    paths_down(&mut sim, Instant::from_micros(100), [7], true);
    paths_down(&mut sim, Instant::from_micros(500), [7], false);
    sim.run_until(Instant::from_micros(500)).unwrap();
    let acked_while_down = sim.conn(a).unwrap().path(PathId(7)).chunks_acked;
    let healthy_before = sim.conn(a).unwrap().path(PathId(1)).chunks_acked;
    assert!(sim.conn(a).unwrap().path(PathId(7)).consecutive_losses > 0);
    sim.run(Instant::from_micros(60_000_000)).unwrap();
    assert!(sim.received(b)[0].data == data);
    let conn = sim.conn(a).unwrap();
    let healed = conn.path(PathId(7));
    let healthy = conn.path(PathId(1));
    assert_eq!(healed.consecutive_losses, 0);
    // Back in use within the 2 ms probe backoff, so it carries a good share of the rest.
    let (h, n) = (
        healed.chunks_acked - acked_while_down,
        healthy.chunks_acked - healthy_before,
    );
    assert!(
        h * 2 > n,
        "healed path carried {h} chunks after healing, a healthy one {n}"
    );
}

/// A NIC port dies and comes back: its half of the paths (every odd one) go down mid-transfer
/// and up again 3 ms later (the transfer, on half the paths, lasts beyond that). Once up,
/// the probes revive them and data flows on them again within a few round trips (CUBIC 150
/// us, Swift 200 us, EQDS 550 us after the port is back with a 20 ms outage and 1 GiB; the
/// bound here is 1 ms), with every congestion control: the core itself holds nothing back
/// after a revival.
#[test]
fn data_returns_to_a_revived_nic_within_a_millisecond() {
    for (seed, cc) in [(94, CcKind::Cubic), (95, CcKind::Swift), (96, CcKind::Eqds)] {
        let (mut sim, a, _b, _data) = one_big_message(seed, cc, 256 << 20, 11);
        let paths = cfg(cc).num_paths;
        let odd: Vec<u16> = (0..paths).filter(|p| p % 2 == 1).collect();
        let (t_down, t_up) = (Instant::from_micros(200), Instant::from_micros(3_200));
        paths_down(&mut sim, t_down, odd.iter().copied(), true);
        paths_down(&mut sim, t_up, odd.iter().copied(), false);
        sim.run_until(t_up).unwrap();
        let acked = |sim: &Sim| -> u64 {
            let conn = sim.conn(a).unwrap();
            odd.iter().map(|&p| conn.path(PathId(p)).chunks_acked).sum()
        };
        let at_up = acked(&sim);
        let mut t = t_up;
        let mut first = None;
        while t < Instant::from_micros(13_200) {
            t = t + Duration::from_micros(50);
            sim.run_until(t).unwrap();
            if acked(&sim) > at_up {
                first = Some(t.saturating_duration_since(t_up));
                break;
            }
        }
        assert!(
            first.is_some_and(|d| d <= Duration::from_millis(1)),
            "{cc}: {first:?}"
        );
    }
}

/// A route that was slow for a while and is fast again carries chunks again: the round-trip
/// time it measured while slow is measured afresh (`rtt_refresh`) instead of keeping every
/// chunk on the other path for good. Two paths, a 64 KiB message every millisecond (a
/// pipeline's activations: the paths never fill, so queueing never outscores the stale
/// time); path 1 runs 3 ms slower one way for the first 20 ms (a receive thread without a
/// core on a loaded host), the timeout above that so nothing counts as lost.
#[test]
fn a_path_slow_for_a_while_carries_chunks_again() {
    let share_after_heal = |refresh: Duration| {
        let c = MptConfig {
            num_paths: 2,
            rtt_refresh: refresh,
            rto: Duration::from_millis(20),
            ..cfg(CcKind::Cubic)
        };
        let mut sim = Sim::new(17, 2, c.num_paths, lossy(0.0)).unwrap();
        let (a, b) = sim.connect(0, 1, &c).unwrap();
        let slow = |extra| SimAction::SetPathDelay {
            path: PathId(1),
            extra,
        };
        sim.schedule(Instant::ZERO, slow(Duration::from_millis(3)));
        sim.schedule(Instant::from_micros(20_000), slow(Duration::ZERO));
        let acked = |sim: &Sim| {
            let conn = sim.conn(a).unwrap();
            [0, 1].map(|p| conn.path(PathId(p)).chunks_acked)
        };
        let mut before = [0; 2];
        for ms in 0..800u64 {
            sim.run_until(Instant::from_micros(ms * 1000)).unwrap();
            if ms == 300 {
                before = acked(&sim);
            }
            let data = pattern(64 * 1024, ms);
            sim.post_recv(b, data.len() as u64, ms).unwrap();
            sim.send(a, data, ms).unwrap();
        }
        sim.run(Instant::from_micros(60_000_000)).unwrap();
        assert_eq!(sim.received(b).len(), 800);
        let after = acked(&sim);
        let (p0, p1) = (after[0] - before[0], after[1] - before[1]);
        (p1 as f64 / (p0 + p1).max(1) as f64, p1)
    };
    let (fresh, chunks) = share_after_heal(MptConfig::default().rtt_refresh);
    let (stale, _) = share_after_heal(Duration::ZERO);
    // Both printed: never refreshed, path 1 carries nothing after the heal (0.000), which is
    // the bug this guards; refreshed, half (0.500).
    eprintln!("path 1's share from 280 ms after the heal: {fresh:.3} ({chunks} chunks); never refreshed: {stale:.3}");
    assert!(fresh > 0.3, "{fresh} (never refreshed: {stale})");
}
