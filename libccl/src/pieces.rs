//! Cutting staged GPU groups into pieces lives in `ccl-collectives` (a pure plan); this module
//! keeps the test that runs such pieces through the host executor's gates.

pub(crate) use ccl_collectives::pieces::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Reduction, Task, TaskKind};
    use ccl_cuda::{DataType, ReduceKind};
    use std::collections::VecDeque;

    /// Rank 0 sends X in one group and receives Y in the next; rank 1 receives X and sends Y
    /// in one group. Cut into pieces run as jobs one after another, rank 1's first job would
    /// wait on Y's first piece, which rank 0 receives only after all of X: deadlock. Gated in
    /// one plan per group, it completes, each piece's landed flag is set once its bytes are
    /// in, and sends wait for their start flag.
    #[test]
    fn gated_pieces_run_asymmetric_groups_to_completion() {
        use crate::exec::{Flag, PieceGates, Plan};
        use std::sync::atomic::{AtomicU32, Ordering};
        let (x, y) = (1000usize, 600usize);
        let src_x: Vec<u8> = (0..x).map(|i| (i * 3 + 1) as u8).collect();
        let src_y: Vec<u8> = (0..y).map(|i| (i * 5 + 2) as u8).collect();
        let mut dst_x = vec![0u8; x];
        let mut dst_y = vec![0u8; y];
        let task = |kind, send: &[u8], recv: &mut [u8], count| Task {
            kind,
            send: send.as_ptr() as usize,
            recv: recv.as_mut_ptr() as usize,
            count,
            dtype: DataType::Uint8,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        };
        let none: &mut [u8] = &mut [];
        let r0 = vec![
            vec![task(TaskKind::Send { peer: 1 }, &src_x, none, x)],
            vec![Task {
                send: 0,
                ..task(TaskKind::Recv { peer: 1 }, &[], &mut dst_y, y)
            }],
        ];
        let r1 = vec![vec![
            Task {
                send: 0,
                ..task(TaskKind::Recv { peer: 0 }, &[], &mut dst_x, x)
            },
            task(TaskKind::Send { peer: 0 }, &src_y, none, y),
        ]];
        // Flag words: 64 per rank and group, start and landed.
        let words: Vec<AtomicU32> = (0..4 * 2 * 64).map(|_| AtomicU32::new(0)).collect();
        // SAFETY: `words` outlives every plan of the test and is only used atomically.
        let flag = |i: usize, v: u32| unsafe { Flag::new(&words[i] as *const AtomicU32, v) };
        let mut plans: Vec<VecDeque<Plan>> = Vec::new();
        let mut starts: Vec<Vec<(usize, u32)>> = Vec::new();
        let mut landed_of_r1 = Vec::new();
        for (r, groups) in [r0, r1].into_iter().enumerate() {
            let mut seqs = vec![(0u64, 0u64); 2];
            let mut q = VecDeque::new();
            let mut st = Vec::new();
            for (gi, g) in groups.iter().enumerate() {
                let Split::Gated {
                    tasks,
                    input,
                    gates,
                    ..
                } = split(g, r, 2, 256, StreamCut::OFF, false, &|_| false)
                else {
                    panic!("rank {r} group {gi} not gated");
                };
                let base = (r * 2 + gi) * 128;
                let gates_of = PieceGates {
                    of_task: input.clone(),
                    start: (0..gates).map(|k| flag(base + k, k as u32 + 1)).collect(),
                    landed: (0..gates - 1)
                        .map(|k| flag(base + 64 + k, k as u32 + 1))
                        .collect(),
                };
                if r == 1 {
                    landed_of_r1 = (0..gates - 1).map(|k| base + 64 + k).collect();
                }
                st.extend((0..gates).map(|k| (base + k, k as u32 + 1)));
                q.push_back(Plan::p2p(&tasks, r, 2, &mut seqs, Some(&gates_of)).unwrap());
            }
            plans.push(q);
            starts.push(st);
        }
        // A few small frames per direction, so senders stall as on a real link.
        let (mut links, _) = crate::exec::mem_link::pair(96, 3);
        let mut staging = Vec::new();
        // Nothing moves while no start flag is set: the sends wait for their bytes.
        for r in 0..2 {
            let p = plans[r].front_mut().unwrap();
            p.progress(&mut links[r], &mut staging, &mut Default::default())
                .unwrap();
        }
        assert!(dst_x.iter().all(|&v| v == 0) && dst_y.iter().all(|&v| v == 0));
        // Open the gates one at a time per rank (a stream copying piece after piece down),
        // driving both ranks between.
        let mut opened = [0usize; 2];
        for round in 0..100_000 {
            for r in 0..2 {
                if let Some(&(i, v)) = starts[r].get(opened[r]) {
                    if round % 3 == 0 {
                        words[i].store(v, Ordering::Release);
                        opened[r] += 1;
                    }
                }
                while let Some(p) = plans[r].front_mut() {
                    p.progress(&mut links[r], &mut staging, &mut Default::default())
                        .unwrap();
                    if !p.is_done() {
                        break;
                    }
                    plans[r].pop_front();
                }
            }
            if plans.iter().all(|q| q.is_empty()) {
                break;
            }
        }
        assert!(plans.iter().all(|q| q.is_empty()), "stuck");
        assert_eq!(dst_x, src_x);
        assert_eq!(dst_y, src_y);
        assert!(!landed_of_r1.is_empty());
        for (k, &i) in landed_of_r1.iter().enumerate() {
            assert_eq!(
                words[i].load(Ordering::Acquire),
                k as u32 + 1,
                "piece {k} not landed"
            );
        }
    }
}
