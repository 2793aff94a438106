//! The host path beside NVLink, and wholly through it: exact, deadlock-free, a broken credit
//! wait caught, a size mismatch still finished.

use ccl_collectives::task::{Reduction, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use super::cases::*;
use super::device::*;
use super::harness::*;
use crate::device::Batched;
use crate::direct::{plan, posting};
use crate::host_path::HostPath;
use crate::layout::Lane;
use crate::lower::lower;
use crate::protocol::Counters;
use crate::rendezvous::{self, Words};

/// The host path's test cases (two ranks): every case at 80 KB, some below the threshold
/// between them, and broadcasts of sizes that differ, so a slot overwritten too early holds
/// other bytes.
fn host_path_cases() -> Vec<Case> {
    let mut cases = every_case(2, 20_000);
    cases.extend(every_case(2, 3000).into_iter().step_by(4));
    cases.extend((0..4).map(|k| Case {
        kind: Kind::Coll(Collective::Broadcast { root: k % 2 }),
        count: 20_000 + 777 * k,
        dtype: DataType::Int32,
        red: Reduction::Plain(ReduceKind::Sum),
        in_place: false,
    }));
    cases
}

/// Copies queued on `lane` of `d`.
fn copies_on(d: &SimDevice, lane: Lane) -> usize {
    d.lanes.get(&lane).map_or(0, |q| {
        q.iter().filter(|o| matches!(o, Op::Copy(..))).count()
    })
}

/// The host path (two ranks): a share of every large direct transfer goes through a ring in
/// host memory beside the copy over NVLink. Every data collective and exchange, below and
/// above the threshold, in and out of place, through bounce buffers (every third seed),
/// rings that cycle over many transfers, a share the ring caps (500 permille of 80 KB in 4
/// slots of 8 KiB), random and merged stream orders: all finish, all exact, and the host
/// lanes carry copies on both ranks.
#[test]
fn host_path_transfers_are_exact_under_any_stream_order() {
    for (slots, permille) in [(2u32, 300u32), (3, 120), (4, 500)] {
        let s = Setup {
            host: Some((16 << 10, permille, 8192, slots)),
            ..Setup::new(2)
        };
        let cases = host_path_cases();
        let used = std::cell::Cell::new([0usize; 2]);
        let look = |d: &mut SimDevice, r: usize| {
            let mut u = used.get();
            u[r] += copies_on(d, Lane::Host(0)) + copies_on(d, Lane::Host(1));
            used.set(u);
        };
        for (merged, seeds) in [(true, 0..2u64), (false, 0..3u64)] {
            for seed in seeds {
                if let Err(e) = simulate(&s, &cases, merged, seed * 31 + 5, Some(&look)) {
                    panic!("slots {slots} permille {permille} merged {merged} seed {seed}: {e}");
                }
            }
        }
        assert!(used.get().iter().all(|&u| u > 0), "{:?}", used.get());
    }
}

/// Whole transfers through the host path ([`HostPath::WHOLE`]): every byte of every
/// direct transfer through rings far shorter than the transfers (2 and 3 slots of 8 KiB
/// against 80 KB, so each moves in rounds), every data collective and exchange, in and out of
/// place, below the threshold too, random stream orders and both ranks' streams each merged
/// into one queue (the rounds must not deadlock there): all finish, all exact.
#[test]
fn whole_transfers_through_the_host_path_are_exact_and_never_deadlock() {
    for slots in [2u32, 3] {
        let s = Setup {
            host: Some((16 << 10, HostPath::WHOLE, 8192, slots)),
            ..Setup::new(2)
        };
        let cases = host_path_cases();
        for (merged, seeds) in [(true, 0..3u64), (false, 0..3u64)] {
            for seed in seeds {
                if let Err(e) = simulate(&s, &cases, merged, seed * 37 + 11, None) {
                    panic!("slots {slots} merged {merged} seed {seed}: {e}");
                }
            }
        }
    }
}

/// The checker must catch a broken host path: with the sources' credit waits gone, a source
/// overwrites ring slots its peer has not copied out yet, and some stream order shows it.
#[test]
fn the_simulation_catches_a_missing_host_path_credit_wait() {
    let s = Setup {
        host: Some((16 << 10, 500, 4096, 2)),
        ..Setup::new(2)
    };
    // One direction only, many times: nothing the source waits for implies that its peer
    // has copied the last transfer's chunks out of the ring. Sizes differ (the inputs depend
    // on the index only), so an overwritten slot holds other bytes.
    let cases: Vec<Case> = (0..8)
        .map(|k| Case {
            kind: Kind::Coll(Collective::Broadcast { root: 0 }),
            count: 20_000 + 777 * k,
            dtype: DataType::Int32,
            red: Reduction::Plain(ReduceKind::Sum),
            in_place: false,
        })
        .collect();
    let strip = |d: &mut SimDevice, _: usize| {
        if let Some(q) = d.lanes.get_mut(&Lane::Host(0)) {
            for op in q.iter_mut() {
                if let Op::Wait(a, _) = *op {
                    *op = Op::Wait(a, 0);
                }
            }
        }
    };
    assert!(simulate(&s, &cases, false, 1, None).is_ok());
    let caught =
        (0..32u64).any(|seed| simulate(&s, &cases, false, seed * 31 + 1, Some(&strip)).is_err());
    assert!(caught, "no stream order exposed the missing credit waits");
}

/// A send and its receive that disagree on the size, with the host path: the mismatch is
/// reported (once, by the second poster), and both ranks' queues still run to the end, in
/// any stream order, whichever side posts first and whichever is longer; nothing is read
/// or written outside either buffer (the simulated memory would refuse it).
#[test]
fn a_size_mismatch_on_the_host_path_still_finishes() {
    for (sb, rb) in [(40_000usize, 48_000usize), (48_000, 40_000)] {
        for sender_first in [true, false] {
            for (merged, seed) in [(true, 1u64), (false, 2), (false, 3)] {
                let s = Setup {
                    host: Some((16 << 10, 300, 8192, 2)),
                    ..Setup::new(2)
                };
                let layouts = s.layouts();
                let mut mem = s.protocol_mem();
                let dx = DirectSim::new(2);
                let (src, dst) = (base(0) + 0x1000_0000, base(1) + 0x1000_0000);
                mem.alloc(src, sb);
                mem.alloc(dst, rb);
                let mut send =
                    ccl_collectives::task::float_sum(TaskKind::Send { peer: 1 }, 0, 0, sb / 4);
                send.send = src as usize;
                let mut recv =
                    ccl_collectives::task::float_sum(TaskKind::Recv { peer: 0 }, 0, 0, rb / 4);
                recv.recv = dst as usize;
                let mut counters = [Counters::new(2, 1), Counters::new(2, 1)];
                let mut devs = vec![SimDevice::new(), SimDevice::new()];
                let mut mismatches = 0;
                let order = if sender_first { [0, 1] } else { [1, 0] };
                for r in order {
                    let t = if r == 0 { send } else { recv };
                    let p = lower(&[t], r, 2, usize::MAX, 0).unwrap();
                    let mut reach = SimReach {
                        rank: r,
                        unmappable: &[],
                    };
                    let boards = |q: usize| dx.boards.get(q).map(|b| b as &dyn Words);
                    let c = &mut counters[r];
                    let posting = posting::post_group(
                        &mut reach,
                        &p,
                        None,
                        r,
                        c,
                        &boards,
                        None,
                        &|| false,
                        layouts[r].host.as_ref(),
                        &|| false,
                    )
                    .unwrap();
                    let now = std::time::Instant::now();
                    let how = posting::SettleHow {
                        wait: rendezvous::PushWait {
                            soft: now,
                            hard: now,
                            busy: &|| false,
                            futile: &|| false,
                        },
                        single_max: 0,
                        late: None,
                        local_split: plan::LocalSplit::default(),
                        wait_min_bytes: 0,
                        exchange_until: None,
                        remote_min: None,
                        host: layouts[r]
                            .host
                            .as_ref()
                            .map(|h| (h, &mut c.host_out, &mut c.host_in)),
                        mail: None,
                        eager: None,
                    };
                    let (plan, err) = posting
                        .settle(&mut reach, r, &boards, how, &|| false)
                        .unwrap();
                    mismatches += usize::from(err.is_some());
                    assert!(plan.transfers.iter().all(|t| t.host.is_some()));
                    let mut dev = Batched::new(&mut devs[r]);
                    plan.begin(&layouts[r], &mut dev).unwrap();
                    plan.end(&layouts[r], &mut dev).unwrap();
                    dev.flush().unwrap();
                }
                assert_eq!(mismatches, 1);
                if let Err(e) = run(&devs, &mut mem, merged, seed) {
                    panic!(
                        "send {sb} receive {rb} sender first {sender_first} merged {merged}: {e}"
                    );
                }
            }
        }
    }
}
