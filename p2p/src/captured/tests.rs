use ccl_collectives::task::{float_sum, Reduction, Scalar, Task, TaskKind};
use ccl_collectives::Collective;

use super::agree::{agreed_push, ends_of, matching, offer, Offer};
use super::group::share;
use super::host_only::{host_only_offer, host_only_offsets, host_only_sources};
use super::steps::parked;
use crate::error::{Error, Result};
use crate::layout::groups;
use crate::rendezvous::{Export, Exported, Post, Reach};

fn reach() -> impl Reach {
    struct Flat;
    impl Reach for Flat {
        fn pid(&self) -> u64 {
            7
        }
        fn export(&mut self, ptr: u64) -> Result<Export> {
            Ok((ptr >= 0x1000).then_some(Exported {
                base: ptr & !0xfff,
                buffer_id: ptr >> 12,
                handle: [3; 64],
            }))
        }
        fn bounce(&mut self, _: usize) -> Result<(u64, Exported)> {
            Err(Error::internal("no bounce buffer here"))
        }
        fn resolve(&mut self, p: &Post) -> Result<u64> {
            Ok(p.addr)
        }
    }
    Flat
}

/// The shares of an all-reduce cover its elements once, in order, each starting on a
/// 256-byte boundary.
#[test]
fn shares_cover_every_element_once() {
    for (count, size, n) in [
        (1usize, 4usize, 2usize),
        (5, 2, 3),
        (1000, 4, 8),
        (65, 1, 9),
    ] {
        let mut next = 0;
        for k in 0..n {
            let (lo, hi) = share(count, size, n, k);
            assert_eq!(lo, next);
            assert!(hi >= lo && (lo * size) % 256 == 0 || lo == count);
            next = hi;
        }
        assert_eq!(next, count);
    }
}

/// Offers round-trip; one that is cut short or carries another magic number is refused.
#[test]
fn offers_round_trip() {
    let tasks = [
        float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x2000, 6),
        float_sum(TaskKind::Send { peer: 1 }, 0x3000, 0, 4),
        float_sum(TaskKind::Recv { peer: 1 }, 0, 0x4000, 4),
    ];
    let o = offer(5, &tasks, (0, 2), (true, 0, usize::MAX), &mut reach());
    assert!(o.able);
    assert!(o.tasks[0].send.is_some() && o.tasks[0].recv.is_some());
    assert!(o.tasks[1].send.is_some() && o.tasks[2].send.is_none());
    let b = o.encode();
    assert_eq!(Offer::decode(&b), Some(o.clone()));
    assert_eq!(Offer::decode(&b[..b.len() - 8]), None);
    let mut bad = b.clone();
    bad[0] ^= 1;
    assert_eq!(Offer::decode(&bad), None);
    // A buffer no peer can map, an index past the area, a PreMulSum scalar in device
    // memory: the staged captured path.
    let host = [float_sum(
        TaskKind::Coll(Collective::AllReduce),
        0x10,
        0x2000,
        6,
    )];
    assert!(!offer(0, &host, (0, 2), (true, 0, usize::MAX), &mut reach()).able);
    assert!(
        !offer(
            groups(2),
            &tasks,
            (0, 2),
            (true, 0, usize::MAX),
            &mut reach()
        )
        .able
    );
    assert!(
        offer(
            groups(2) - 1,
            &tasks,
            (0, 2),
            (true, 0, usize::MAX),
            &mut reach()
        )
        .able
    );
    assert_eq!(
        (groups(2), groups(8), groups(72), groups(4096)),
        (65536, 65536, 19418, 1024)
    );
    let mut avg = tasks[0];
    avg.red = Reduction::Avg;
    assert!(offer(0, &[avg], (0, 2), (true, 0, usize::MAX), &mut reach()).able);
    avg.red = Reduction::PreMulSum(Scalar::Device(0x9000));
    assert!(!offer(0, &[avg], (0, 2), (true, 0, usize::MAX), &mut reach()).able);
    let ring = [
        float_sum(TaskKind::Send { peer: 1 }, 0x3000, 0, 4),
        float_sum(TaskKind::Recv { peer: 1 }, 0, 0x3008, 4),
        float_sum(TaskKind::Recv { peer: 1 }, 0, 0x3010, 4),
        float_sum(TaskKind::Recv { peer: 1 }, 0, 0x5000, 4),
    ];
    assert!(offer(0, &ring, (0, 2), (true, 0, usize::MAX), &mut reach()).able);
    // The two receives onto the send's buffer go through scratch memory, 256-byte aligned.
    assert_eq!(
        parked(&ring, 0, 2, 0),
        (vec![None, Some(0), None, None], 256)
    );
    let two = [ring[0], ring[1], ring[1]];
    assert_eq!(parked(&two, 0, 2, 0), (vec![None, Some(0), Some(256)], 512));
    // An in-place all-to-all parks its whole receive buffer; apart, nothing.
    let a2a = |s, r| float_sum(TaskKind::Coll(Collective::AlltoAll), s, r, 100);
    assert_eq!(
        parked(&[a2a(0x3000, 0x3000)], 1, 3, 0),
        (vec![Some(0)], 1280)
    );
    assert_eq!(parked(&[a2a(0x3000, 0x8000)], 1, 3, 0), (vec![None], 0));
    // An in-place all-reduce parks its sum only when it goes one-shot.
    let ar = float_sum(TaskKind::Coll(Collective::AllReduce), 0x3000, 0x3000, 64);
    assert_eq!(parked(&[ar], 0, 2, 256), (vec![Some(0)], 256));
    assert_eq!(parked(&[ar], 0, 2, 255), (vec![None], 0));
}

/// Ranks push a group that only copies and parks nothing, with more than their limit landing
/// at or leaving from them, when every rank offers to: the receive buffers are posted, and each rank maps the
/// receive buffers it writes, not the inputs it no longer reads.
#[test]
fn offers_push_copies_only_unparked_large_groups_and_map_what_they_write() {
    let a2a = |s, r| float_sum(TaskKind::Coll(Collective::AlltoAll), s, r, 1000);
    let offers_of = |groups: &[Vec<Task>], above: usize| -> Vec<Offer> {
        groups
            .iter()
            .enumerate()
            .map(|(r, t)| offer(0, t, (r, groups.len()), (true, 0, above), &mut reach()))
            .collect()
    };
    // 2 x 1000 floats land at each rank: 8000 bytes.
    let apart = [vec![a2a(0x10_000, 0x20_000)], vec![a2a(0x30_000, 0x40_000)]];
    let o = offers_of(&apart, 7999);
    assert!(o.iter().all(|o| o.push && o.tasks[0].recv.is_some()));
    assert!(agreed_push(&o));
    assert_eq!(Offer::decode(&o[0].encode()), Some(o[0].clone()));
    let rows = matching(&o, 0).unwrap();
    let ends = ends_of(&o, 0, &apart[0], &rows, &mut reach()).unwrap();
    assert_eq!((ends[0][1].send, ends[0][1].recv), (0, 0x40_000));
    // Not above the limit; one rank in place (it parks its receive): every rank pulls.
    assert!(!agreed_push(&offers_of(&apart, 8000)));
    let one_in_place = [vec![a2a(0x10_000, 0x20_000)], vec![a2a(0x30_000, 0x30_000)]];
    let o = offers_of(&one_in_place, 0);
    assert!(o[0].push && !o[1].push && !agreed_push(&o));
    let ends = ends_of(
        &o,
        0,
        &one_in_place[0],
        &matching(&o, 0).unwrap(),
        &mut reach(),
    );
    assert_eq!((ends.unwrap()[0][1].send, 0), (0x30_000, 0));
    // A receive buffer no peer can map: that rank reads, and so every rank.
    let unmappable = [vec![a2a(0x10_000, 0x20_000)], vec![a2a(0x30_000, 0x10)]];
    let o = offers_of(&unmappable, 0);
    assert!(o[1].able && !o[1].push && o[1].tasks[0].send.is_some());
    assert!(!agreed_push(&o));
    // A reduction never pushes; a send maps the matching receive's buffer.
    let ar = float_sum(
        TaskKind::Coll(Collective::AllReduce),
        0x10_000,
        0x20_000,
        4000,
    );
    assert!(!offers_of(&[vec![ar], vec![ar]], 0)[0].push);
    let pair = [
        vec![float_sum(TaskKind::Send { peer: 1 }, 0x10_000, 0, 4000)],
        vec![float_sum(TaskKind::Recv { peer: 0 }, 0, 0x50_000, 4000)],
    ];
    let o = offers_of(&pair, 15_999);
    assert!(agreed_push(&o) && o[1].tasks[0].recv.is_some());
    let ends = ends_of(&o, 0, &pair[0], &matching(&o, 0).unwrap(), &mut reach()).unwrap();
    assert_eq!(ends[0][1].recv, 0x50_000);
    assert!(!agreed_push(&offers_of(&pair, 16_000)));
}

/// The agreement pairs every receive with the matching send and refuses groups that
/// differ between ranks, saying how.
#[test]
fn matching_pairs_receives_and_refuses_different_groups() {
    let ar = |c| float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x2000, c);
    let send = |p, c| float_sum(TaskKind::Send { peer: p }, 0x3000, 0, c);
    let recv = |p, c| float_sum(TaskKind::Recv { peer: p }, 0, 0x4000, c);
    let offers = |groups: &[Vec<Task>]| -> Vec<Offer> {
        groups
            .iter()
            .enumerate()
            .map(|(r, t)| offer(0, t, (r, groups.len()), (true, 0, usize::MAX), &mut reach()))
            .collect()
    };
    let ok = offers(&[
        vec![send(1, 4), ar(8), recv(1, 2), send(1, 2)],
        vec![recv(0, 4), recv(0, 2), ar(8), send(0, 2)],
    ]);
    assert_eq!(
        matching(&ok, 0).unwrap(),
        vec![
            vec![usize::MAX, 0],
            vec![1, 2],
            vec![usize::MAX, 3],
            vec![usize::MAX, 1]
        ]
    );
    assert_eq!(matching(&ok, 1).unwrap()[1], vec![3, usize::MAX]);
    let other_count = offers(&[vec![ar(8)], vec![ar(9)]]);
    assert!(matching(&other_count, 0)
        .unwrap_err()
        .contains("other collectives"));
    let short = offers(&[vec![send(1, 4)], vec![recv(0, 3)]]);
    assert!(matching(&short, 1)
        .unwrap_err()
        .contains("receive of 12 bytes"));
    let missing = offers(&[vec![send(1, 4)], vec![]]);
    assert!(matching(&missing, 0).unwrap_err().contains("1 sends"));
}

/// Host-only capture: each rank's outbox laid out by itself; a receive finds the matching
/// send's offset in its sender's outbox, a collective the partner's same collective's;
/// groups that do not pair up are refused with what differs.
#[test]
fn host_only_sources_pair_sends_and_collectives_across_layouts() {
    let ar = |c| float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x2000, c);
    let send = |p, c| float_sum(TaskKind::Send { peer: p }, 0x3000, 0, c);
    let recv = |p, c| float_sum(TaskKind::Recv { peer: p }, 0, 0x4000, c);
    let offers = |groups: &[Vec<Task>]| -> Vec<Vec<u8>> {
        groups
            .iter()
            .enumerate()
            .map(|(r, t)| {
                let o = host_only_offsets(t, r, groups.len(), 1 << 20);
                host_only_offer(0, t, o.as_deref())
            })
            .collect()
    };
    // Rank 0's outbox: send (16 B) at 0, all-reduce at 256, nothing for the receive, the
    // second send at 512; rank 1's: its all-reduce at 0, its send at 256.
    let ok = offers(&[
        vec![send(1, 4), ar(8), recv(1, 2), send(1, 2)],
        vec![recv(0, 4), recv(0, 2), ar(8), send(0, 2)],
    ]);
    assert_eq!(
        host_only_sources(1, &ok).unwrap()[0],
        vec![Some(0), Some(512), Some(256), None]
    );
    assert_eq!(
        host_only_sources(0, &ok).unwrap()[1],
        vec![None, Some(0), Some(256), None]
    );
    let other_count = offers(&[vec![ar(8)], vec![ar(9)]]);
    assert!(host_only_sources(0, &other_count)
        .unwrap_err()
        .contains("collectives"));
    let short = offers(&[vec![send(1, 4)], vec![recv(0, 3)]]);
    assert!(host_only_sources(1, &short)
        .unwrap_err()
        .contains("sends 16 bytes"));
    let missing = offers(&[vec![send(1, 4)], vec![]]);
    assert!(host_only_sources(1, &missing)
        .unwrap_err()
        .contains("more than it receives"));
    // A send to itself is not taken (staged).
    assert!(host_only_offsets(&[send(0, 4), recv(0, 4)], 0, 2, 1 << 20).is_none());
}

/// Records what a captured group queues, lane by lane, in order.
#[derive(Default)]
struct LaneLog(Vec<String>);

impl crate::device::Device for LaneLog {
    fn wait(&mut self, lane: crate::layout::Lane, addr: u64, value: u32) -> Result<()> {
        self.0.push(format!("{lane:?} wait {addr} {value}"));
        Ok(())
    }
    fn write(&mut self, lane: crate::layout::Lane, addr: u64, value: u32) -> Result<()> {
        self.0.push(format!("{lane:?} write {addr} {value}"));
        Ok(())
    }
    fn copy(&mut self, lane: crate::layout::Lane, dst: u64, _: u64, bytes: usize) -> Result<()> {
        self.0.push(format!("{lane:?} copy {dst} {bytes}"));
        Ok(())
    }
    fn kernel(&mut self, lane: crate::layout::Lane, _: crate::device::Kernel) -> Result<()> {
        self.0.push(format!("{lane:?} kernel"));
        Ok(())
    }
    fn fork(&mut self, lanes: &[crate::layout::Lane]) -> Result<()> {
        self.0.push(format!("fork {lanes:?}"));
        Ok(())
    }
    fn join(&mut self, lanes: &[crate::layout::Lane]) -> Result<()> {
        self.0.push(format!("join {lanes:?}"));
        Ok(())
    }
}

#[test]
fn copies_side_by_side_balance_bytes_largest_first_between_fork_and_join() {
    let mut log = LaneLog::default();
    let copies = [(1, 10, 100), (2, 20, 300), (3, 30, 200), (4, 40, 150)];
    super::group::copies_side_by_side(&mut log, &copies, 1).unwrap();
    assert_eq!(
        log.0,
        [
            "fork [Tx(0)]",
            "User copy 2 300",
            "Tx(0) copy 3 200",
            "Tx(0) copy 4 150",
            "User copy 1 100",
            "join [Tx(0)]",
        ]
    );
}

#[test]
fn copies_side_by_side_give_each_partner_block_a_lane_of_its_own() {
    let mut log = LaneLog::default();
    let copies = [(1, 10, 64), (2, 20, 64), (3, 30, 64), (4, 40, 64)];
    super::group::copies_side_by_side(&mut log, &copies, 7).unwrap();
    assert_eq!(
        log.0,
        [
            "fork [Tx(0), Tx(1), Tx(2)]",
            "User copy 1 64",
            "Tx(0) copy 2 64",
            "Tx(1) copy 3 64",
            "Tx(2) copy 4 64",
            "join [Tx(0), Tx(1), Tx(2)]",
        ]
    );
}
