//! Tests of plans: frames on the wire, receives into lent memory, gates, and the order rules
//! of one step.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use ccl_cuda::{DataType, ReduceKind};
use ccl_transports::Link;

use super::mem_link;
use super::{CollGates, ExecStats, Flag, Plan, HDR_BYTES};
use crate::error::Result;
use crate::task::{Reduction, Task, TaskKind};

/// What a [`HoldingLink`] was sent, and whether it still says it holds bytes.
#[derive(Default)]
struct Held {
    sent: Vec<Vec<u8>>,
    holding: bool,
}

/// A link that takes every frame at once but says it still holds bytes until told
/// otherwise (as a network link may until its peer acknowledges them).
struct HoldingLink(Arc<Mutex<Held>>);

impl Link for HoldingLink {
    fn max_frame(&self) -> usize {
        64 + HDR_BYTES
    }
    fn try_send(&mut self, frame: &[u8]) -> ccl_transports::Result<bool> {
        self.0.lock().unwrap().sent.push(frame.to_vec());
        Ok(true)
    }
    fn peek(&mut self) -> ccl_transports::Result<Option<&[u8]>> {
        Ok(None)
    }
    fn pop(&mut self) {}
    fn flush(&mut self) -> ccl_transports::Result<bool> {
        Ok(false)
    }
    fn has_pending(&self) -> bool {
        self.0.lock().unwrap().holding
    }
    fn kind(&self) -> &'static str {
        "holding"
    }
}

/// Two sends to one peer in one group: the second queues its frames while the first
/// still waits for the link to push its bytes out (waiting drained the link between
/// every two pieces of a staged GPU group), in order; neither completes before the link
/// is empty.
#[test]
fn a_send_queues_behind_an_earlier_one_that_waits_for_the_link_to_empty() {
    let (a, b) = (vec![1u8; 100], vec![2u8; 40]);
    let send = |src: &[u8]| Task {
        kind: TaskKind::Send { peer: 1 },
        send: src.as_ptr() as usize,
        recv: 0,
        count: src.len(),
        dtype: DataType::Uint8,
        red: Reduction::Plain(ReduceKind::Sum),
        stream: 0,
        fold: false,
    };
    let mut seqs = vec![(0u64, 0u64); 2];
    let mut plan = Plan::p2p(&[send(&a), send(&b)], 0, 2, &mut seqs, None).unwrap();
    let held = Arc::new(Mutex::new(Held {
        holding: true,
        ..Held::default()
    }));
    let mut links: Vec<Option<Box<dyn Link>>> =
        vec![None, Some(Box::new(HoldingLink(Arc::clone(&held))))];
    let mut staging = Vec::new();
    assert!(plan
        .progress(&mut links, &mut staging, &mut ExecStats::default())
        .unwrap());
    assert!(!plan.is_done(), "complete while the link still holds bytes");
    let frames = std::mem::take(&mut held.lock().unwrap().sent);
    // a: a header frame carrying 64 of its bytes, then 36; b: a header frame with 40.
    let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
    assert_eq!(lens, [HDR_BYTES + 64, 36, HDR_BYTES + 40]);
    let payload: Vec<u8> = [
        &frames[0][HDR_BYTES..],
        &frames[1][..],
        &frames[2][HDR_BYTES..],
    ]
    .concat();
    assert_eq!(payload, [a.clone(), b.clone()].concat());
    held.lock().unwrap().holding = false;
    plan.progress(&mut links, &mut staging, &mut ExecStats::default())
        .unwrap();
    assert!(plan.is_done());
}

/// A link that delivers `frames` (as a sender cut them) and, like an mpt link that
/// places receives, writes each frame into the loan it was given before showing it: the
/// next frame at the loan's start, the one after `max_frame` further on. `skew` shifts
/// where it writes (a sender that cut its frames differently).
struct PlacingLink {
    frames: std::collections::VecDeque<Vec<u8>>,
    loan: Option<(usize, usize)>,
    shown: Option<(usize, usize)>,
    skew: usize,
}

impl Link for PlacingLink {
    fn max_frame(&self) -> usize {
        64 + HDR_BYTES
    }
    fn try_send(&mut self, _: &[u8]) -> ccl_transports::Result<bool> {
        Ok(false)
    }
    fn peek(&mut self) -> ccl_transports::Result<Option<&[u8]>> {
        let Some(f) = self.frames.front() else {
            return Ok(None);
        };
        let at = match self.loan {
            Some((addr, len)) if len >= f.len() => {
                let at = addr + self.skew;
                // SAFETY: the executor lent [addr, addr + len) (`Link::lend`); the test
                // keeps `skew` inside the destination it owns.
                unsafe { std::ptr::copy_nonoverlapping(f.as_ptr(), at as *mut u8, f.len()) };
                at
            }
            _ => f.as_ptr() as usize,
        };
        self.shown = Some((at, f.len()));
        // SAFETY: `at` holds the frame's bytes (just written, or the frame itself), alive
        // until `pop`.
        Ok(Some(unsafe {
            std::slice::from_raw_parts(at as *const u8, f.len())
        }))
    }
    fn pop(&mut self) {
        if let (Some((_, n)), Some((addr, len))) = (self.shown.take(), self.loan) {
            if len >= n {
                let step = self.max_frame().min(len);
                self.loan = Some((addr + step, len - step));
            }
        }
        self.frames.pop_front();
    }
    fn flush(&mut self) -> ccl_transports::Result<bool> {
        Ok(false)
    }
    fn has_pending(&self) -> bool {
        false
    }
    unsafe fn lend(&mut self, dst: *mut u8, len: usize) {
        self.loan = Some((dst as usize, len));
    }
    fn kind(&self) -> &'static str {
        "placing"
    }
}

/// The frames a send of `src` to rank 1 is cut into.
fn frames_of(src: &[u8]) -> Vec<Vec<u8>> {
    frames_of_send(src, false)
}

/// The frames a send of `src` to rank 1 is cut into, `fold` as [`Task::fold`].
fn frames_of_send(src: &[u8], fold: bool) -> Vec<Vec<u8>> {
    let t = Task {
        fold,
        ..p2p_task(
            TaskKind::Send { peer: 1 },
            src.as_ptr() as usize,
            0,
            src.len(),
        )
    };
    let mut plan = Plan::p2p(&[t], 0, 2, &mut [(0, 0); 2], None).unwrap();
    let held = Arc::new(Mutex::new(Held::default()));
    let mut links: Vec<Option<Box<dyn Link>>> =
        vec![None, Some(Box::new(HoldingLink(Arc::clone(&held))))];
    plan.progress(&mut links, &mut Vec::new(), &mut ExecStats::default())
        .unwrap();
    assert!(plan.is_done());
    let frames = std::mem::take(&mut held.lock().unwrap().sent);
    frames
}

fn p2p_task(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
    Task {
        kind,
        send,
        recv,
        count,
        dtype: DataType::Uint8,
        red: Reduction::Plain(ReduceKind::Sum),
        stream: 0,
        fold: false,
    }
}

/// Receives `src`'s frames from rank 1 over a [`PlacingLink`].
fn receive_placed(src: &[u8], skew: usize) -> (Result<bool>, Vec<u8>, ExecStats) {
    receive_marked(src, skew, (false, false))
}

/// [`receive_placed`] with the send's and the receive's [`Task::fold`].
fn receive_marked(
    src: &[u8],
    skew: usize,
    (sent_fold, recv_fold): (bool, bool),
) -> (Result<bool>, Vec<u8>, ExecStats) {
    let mut dst = vec![0u8; src.len()];
    let t = Task {
        fold: recv_fold,
        ..p2p_task(
            TaskKind::Recv { peer: 1 },
            0,
            dst.as_mut_ptr() as usize,
            dst.len(),
        )
    };
    let mut plan = Plan::p2p(&[t], 0, 2, &mut [(0, 0); 2], None).unwrap();
    let link = PlacingLink {
        frames: frames_of_send(src, sent_fold).into(),
        loan: None,
        shown: None,
        skew,
    };
    let mut links: Vec<Option<Box<dyn Link>>> = vec![None, Some(Box::new(link))];
    let mut stats = ExecStats::default();
    let r = plan.progress(&mut links, &mut Vec::new(), &mut stats);
    let done = r.as_ref().is_ok_and(|_| plan.is_done());
    (r.map(|_| done), dst, stats)
}

/// A receive lends the rest of its destination after each frame; frames shown in place
/// are not copied again. 64 + 3 x 112 bytes: the header frame (64 of them) is copied, the
/// three full frames after it are placed.
#[test]
fn a_receive_takes_frames_placed_in_its_destination_without_copying_them() {
    let src: Vec<u8> = (0..400u32).map(|i| (i * 7 + 1) as u8).collect();
    let lens: Vec<usize> = frames_of(&src).iter().map(Vec::len).collect();
    assert_eq!(lens, [HDR_BYTES + 64, 112, 112, 112]);
    let (r, dst, stats) = receive_placed(&src, 0);
    assert!(r.unwrap(), "receive not done");
    assert_eq!(dst, src);
    assert_eq!(stats.placed_bytes, 336);
}

/// The sends and receives the GPU path makes of a folded reduction meet only their own
/// kind: a user's send of the same size met by one (the ranks called them in crossed
/// orders) is a mismatch error naming it, not the other operation's bytes.
#[test]
fn a_folded_reductions_transfer_meets_only_another_such_transfer() {
    let src: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    for marks in [(false, false), (true, true)] {
        let (r, dst, _) = receive_marked(&src, 0, marks);
        assert!(r.unwrap(), "{marks:?}: receive not done");
        assert_eq!(dst, src);
    }
    for marks in [(true, false), (false, true)] {
        let (r, dst, _) = receive_marked(&src, 0, marks);
        let e = r.expect_err("crossed transfers met");
        assert!(
            e.to_string().contains("mismatched operations")
                && e.to_string().contains("folded on the GPU"),
            "{marks:?}: {e}"
        );
        assert!(dst.iter().all(|&b| b == 0), "{marks:?}: bytes landed");
    }
}

/// A frame shown inside the destination but not where it belongs (the two sides cut
/// the operation differently) is an error, not a silent misorder.
#[test]
fn a_frame_placed_at_the_wrong_offset_is_an_error() {
    let src = vec![5u8; 400];
    let (r, _, _) = receive_placed(&src, 16);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("arrived at offset"), "{e}");
}

/// A two-rank all-reduce on piece gates: nothing that reads a piece moves before its input
/// flag is set (flags set here in reverse order, one at a time); each output flag is set
/// only once its piece holds the final sum; at the end every output flag is set and the
/// result is exact. Out of place and in place.
/// Runs rank `ahead`'s plan alone for a few rounds, then both to the end.
fn run_ahead(plans: &mut [Plan], links: &mut mem_link::Links, ahead: usize) {
    let mut stats = ExecStats::default();
    for _ in 0..5 {
        plans[ahead]
            .progress(&mut links[ahead], &mut Vec::new(), &mut stats)
            .unwrap();
    }
    for _ in 0..400 {
        for (r, p) in plans.iter_mut().enumerate() {
            p.progress(&mut links[r], &mut Vec::new(), &mut stats)
                .unwrap();
        }
    }
}

/// Two ranks' buffers for an all-reduce of `u32` sums, checked exactly.
struct TwoRanks {
    send: Vec<Vec<u32>>,
    recv: Vec<Vec<u32>>,
    want: Vec<u32>,
    in_place: bool,
}

impl TwoRanks {
    fn new(n: usize, in_place: bool) -> TwoRanks {
        let send: Vec<Vec<u32>> = (0..2u32)
            .map(|r| (0..n as u32).map(|i| i * 3 + r * 100_000 + 1).collect())
            .collect();
        let want = (0..n).map(|i| send[0][i] + send[1][i]).collect();
        TwoRanks {
            recv: vec![vec![0; n]; 2],
            send,
            want,
            in_place,
        }
    }

    /// Rank `r`'s all-reduce (in place: the send buffer is the output).
    fn task(&mut self, r: usize) -> Task {
        let sp = self.send[r].as_mut_ptr() as usize;
        Task {
            kind: TaskKind::Coll(ccl_collectives::Collective::AllReduce),
            send: sp,
            recv: if self.in_place {
                sp
            } else {
                self.recv[r].as_mut_ptr() as usize
            },
            count: self.want.len(),
            dtype: DataType::Uint32,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        }
    }

    fn out(&self, r: usize) -> &[u32] {
        if self.in_place {
            &self.send[r]
        } else {
            &self.recv[r]
        }
    }
}

#[test]
fn a_collective_on_piece_gates_reads_only_arrived_pieces_and_releases_finished_ones() {
    use ccl_collectives::{schedule, Algorithm, Collective};
    const N: usize = 120; // u32 elements: 480 bytes, 4 pieces of 120 bytes
    const PIECE: usize = 120;
    for in_place in [false, true] {
        let mut bufs = TwoRanks::new(N, in_place);
        // Flag words: [rank][piece] inputs, outputs.
        let words: Vec<Vec<AtomicU32>> = (0..4)
            .map(|_| (0..4).map(|_| AtomicU32::new(0)).collect())
            .collect();
        let (mut links, [a, b]) = mem_link::pair(64 + HDR_BYTES, usize::MAX);
        let mut plans = Vec::new();
        for r in 0..2 {
            let task = bufs.task(r);
            let (sp, rp) = (task.send, task.recv);
            let sched = schedule(Collective::AllReduce, Algorithm::Ring, r, 2, N).unwrap();
            let piece = |base: usize, k: usize, w: &AtomicU32| {
                // SAFETY: the words outlive the plans (dropped at the end of the test).
                (base + k * PIECE, base + (k + 1) * PIECE, unsafe {
                    Flag::new(w, 1)
                })
            };
            let gates = CollGates {
                input: (0..4).map(|k| piece(sp, k, &words[r][k])).collect(),
                output: (0..4).map(|k| piece(rp, k, &words[2 + r][k])).collect(),
            };
            plans.push(Plan::collective(&task, &sched, r, 2, 1, Some(&gates)).unwrap());
        }
        let mut stats = ExecStats::default();
        let mut drive = |plans: &mut Vec<Plan>| {
            for _ in 0..50 {
                for (r, p) in plans.iter_mut().enumerate() {
                    p.progress(&mut links[r], &mut Vec::new(), &mut stats)
                        .unwrap();
                }
            }
        };
        drive(&mut plans);
        assert!(a.lock().unwrap().is_empty() && b.lock().unwrap().is_empty());
        let (out, want) = (|r: usize| bufs.out(r), &bufs.want);
        let mut released_early = 0;
        for k in (0..4).rev() {
            for w in words.iter().take(2) {
                w[k].store(1, Ordering::Release);
            }
            drive(&mut plans);
            for r in 0..2 {
                for j in 0..4 {
                    if words[2 + r][j].load(Ordering::Acquire) == 1 {
                        released_early += (k > 0) as usize;
                        let e = (j + 1) * PIECE / 4;
                        assert_eq!(out(r)[j * PIECE / 4..e], want[j * PIECE / 4..e]);
                    }
                }
            }
        }
        assert!(plans.iter().all(Plan::is_done), "in place {in_place}");
        // Each rank's own half is final after the reduce-scatter, before the last input.
        assert!(released_early > 0, "in place {in_place}");
        for r in 0..2 {
            assert_eq!(out(r), want, "rank {r} in place {in_place}");
            assert!(words[2 + r].iter().all(|w| w.load(Ordering::Acquire) == 1));
        }
        drop(plans);
    }
}

/// A two-rank ring all-reduce with its steps run as one (`one_step`): the second half's
/// send forwards each frame only once the reduce-scatter has folded it, and in place the
/// all-gather's receive overwrites the first half only once its send has taken it; exact
/// sums on both ranks whichever rank runs ahead (without the forwarding rule rank 1 gets
/// unreduced bytes).
#[test]
fn a_ring_in_one_step_forwards_only_what_has_landed() {
    use ccl_collectives::{one_step, schedule, Algorithm, Collective};
    const N: usize = 100;
    for in_place in [false, true] {
        for ahead in 0..2 {
            let mut bufs = TwoRanks::new(N, in_place);
            // The rank ahead may queue everything it sends at once; the other one frame.
            let mut caps = [1, 1];
            caps[ahead] = 1000;
            let (mut links, _) = mem_link::pair_capped(16 + HDR_BYTES, caps);
            let mut plans = Vec::new();
            for r in 0..2 {
                let task = bufs.task(r);
                let sched =
                    one_step(schedule(Collective::AllReduce, Algorithm::Ring, r, 2, N).unwrap());
                let plan = Plan::collective(&task, &sched, r, 2, 1, None).unwrap();
                assert_eq!(plan.steps.len(), 1);
                assert!(plan.steps[0][2].after_receives, "rank {r}");
                assert_eq!(plan.steps[0][0].copy_frames, in_place, "rank {r}");
                plans.push(plan);
            }
            run_ahead(&mut plans, &mut links, ahead);
            assert!(plans.iter().all(Plan::is_done), "in place {in_place}");
            for r in 0..2 {
                assert_eq!(
                    bufs.out(r),
                    bufs.want,
                    "rank {r} in place {in_place} ahead {ahead}"
                );
            }
            drop(plans);
        }
    }
}

/// The two-rank exchange all-reduce in place: all of the peer's frames are already waiting
/// when rank 0 starts, and rank 0's link takes one frame at a time, so the fold could
/// overwrite input that rank 0 has yet to send; each frame is held until the send has
/// queued (copied) what it covers, and both ranks end with the exact sums (without the
/// hold rank 1 gets rank 0's partly folded input). Out of place nothing is held.
#[test]
fn an_in_place_exchange_folds_a_frame_only_after_sending_what_it_overwrites() {
    const N: usize = 100; // u32: 400 bytes, 16-byte frames after the first
    for in_place in [false, true] {
        let mut bufs = TwoRanks::new(N, in_place);
        let (mut links, _) = mem_link::pair_capped(16 + HDR_BYTES, [1, 1000]);
        let mut plans = Vec::new();
        for r in 0..2 {
            let task = bufs.task(r);
            let sched = ccl_collectives::allreduce_exchange(r, 2, N).unwrap();
            let plan = Plan::collective(&task, &sched, r, 2, 1, None).unwrap();
            let ops = &plan.steps[0];
            assert_eq!(ops.len(), 2);
            assert_eq!(ops[0].copy_frames, in_place, "rank {r}");
            assert_eq!(ops[1].after_sends, in_place, "rank {r}");
            plans.push(plan);
        }
        // Rank 1 alone first: its frames wait in rank 0's link.
        run_ahead(&mut plans, &mut links, 1);
        assert!(plans.iter().all(Plan::is_done), "in place {in_place}");
        for r in 0..2 {
            assert_eq!(bufs.out(r), bufs.want, "rank {r} in place {in_place}");
        }
        drop(plans);
    }
}
