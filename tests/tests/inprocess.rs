//! Several ranks driven by one thread (`ncclCommInitAll` + groups), as `ccl-perf -g N` and
//! nccl-tests do: every collective, in place and out of place, odd counts, checked exactly.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::undocumented_unsafe_blocks,
    clippy::needless_range_loop
)]

use std::ffi::c_void;

use nccl::*;

const FLOAT: i32 = 7;
const INT32: i32 = 2;
const SUM: i32 = 0;
const MAX: i32 = 2;

fn comms(n: usize) -> Vec<ncclComm_t> {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut c = vec![std::ptr::null_mut(); n];
    // SAFETY: c has room for n communicators.
    assert_eq!(
        unsafe { ncclCommInitAll(c.as_mut_ptr(), n as i32, std::ptr::null()) },
        0
    );
    c
}

fn destroy(c: Vec<ncclComm_t>) {
    for x in c {
        // SAFETY: each comm came from ncclCommInitAll.
        assert_eq!(unsafe { ncclCommDestroy(x) }, 0);
    }
}

fn input(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i * 3) % 13) as f32
}

/// Runs `f(rank, comm)` for every rank inside one group.
fn group(comms: &[ncclComm_t], mut f: impl FnMut(usize, ncclComm_t) -> ncclResult_t) {
    // SAFETY: plain group calls.
    unsafe {
        assert_eq!(ncclGroupStart(), 0);
        for (r, &c) in comms.iter().enumerate() {
            assert_eq!(f(r, c), 0);
        }
        assert_eq!(ncclGroupEnd(), 0);
    }
}

/// Every collective, one thread driving all ranks, counts from 0 to 70,001, checked exactly.
#[test]
fn every_collective_with_one_thread_driving_all_ranks() {
    // 8 ranks too: more ranks expose ring order, tree depth and many-peer all-to-all bugs
    // that two hide.
    for n in [1usize, 2, 3, 4, 8] {
        let cs = comms(n);
        let counts: &[usize] = if n > 4 {
            &[0, 1, 5, 1000, 9_001]
        } else {
            &[0, 1, 5, 1000, 70_001]
        };
        for &count in counts {
            let mut c = Case::new(&cs, count);
            c.all_reduce();
            c.all_gather_in_place();
            c.reduce_scatter_max();
            c.broadcast();
            c.all_to_all();
            c.gather();
            c.scatter();
            c.reduce();
        }
        destroy(cs);
    }
}

/// One count's buffers on every rank: inputs of `count * n` elements (`input(rank, i)`), and
/// outputs as large.
struct Case<'a> {
    cs: &'a [ncclComm_t],
    n: usize,
    count: usize,
    root: usize,
    sends: Vec<Vec<f32>>,
    recvs: Vec<Vec<f32>>,
}

impl<'a> Case<'a> {
    fn new(cs: &'a [ncclComm_t], count: usize) -> Case<'a> {
        let n = cs.len();
        Case {
            cs,
            n,
            count,
            root: n - 1,
            sends: (0..n)
                .map(|r| (0..count * n).map(|i| input(r, i)).collect())
                .collect(),
            recvs: (0..n).map(|_| vec![-1.0; count * n]).collect(),
        }
    }

    /// Runs `f(send, recv, comm)` for every rank inside one group.
    fn each(&mut self, mut f: impl FnMut(*const c_void, *mut c_void, ncclComm_t) -> ncclResult_t) {
        let (sends, recvs) = (&self.sends, &mut self.recvs);
        group(self.cs, |r, c| {
            f(
                sends[r].as_ptr() as *const c_void,
                recvs[r].as_mut_ptr() as *mut c_void,
                c,
            )
        });
    }

    /// Out of place, summed.
    fn all_reduce(&mut self) {
        let (n, count) = (self.n, self.count);
        self.each(|s, d, c| unsafe { ncclAllReduce(s, d, count, FLOAT, SUM, c, null()) });
        for r in 0..n {
            for i in 0..count {
                let want: f32 = (0..n).map(|q| input(q, i)).sum();
                assert_eq!(
                    self.recvs[r][i], want,
                    "allreduce n={n} count={count} rank={r} i={i}"
                );
            }
        }
    }

    /// In place: each rank's block already in its output.
    fn all_gather_in_place(&mut self) {
        let (n, count) = (self.n, self.count);
        for (r, buf) in self.recvs.iter_mut().enumerate() {
            for i in 0..count {
                buf[r * count + i] = input(r, i);
            }
        }
        let recvs = &mut self.recvs;
        group(self.cs, |r, c| unsafe {
            let base = recvs[r].as_mut_ptr();
            ncclAllGather(
                base.add(r * count) as *const c_void,
                base as *mut c_void,
                count,
                FLOAT,
                c,
                null(),
            )
        });
        for r in 0..n {
            for q in 0..n {
                for i in 0..count {
                    assert_eq!(
                        self.recvs[r][q * count + i],
                        input(q, i),
                        "allgather n={n} count={count}"
                    );
                }
            }
        }
    }

    /// Out of place, with Max.
    fn reduce_scatter_max(&mut self) {
        let (n, count) = (self.n, self.count);
        self.each(|s, d, c| unsafe { ncclReduceScatter(s, d, count, FLOAT, MAX, c, null()) });
        for r in 0..n {
            for i in 0..count {
                let want = (0..n)
                    .map(|q| self.sends[q][r * count + i])
                    .fold(f32::MIN, f32::max);
                assert_eq!(self.recvs[r][i], want, "reducescatter n={n} count={count}");
            }
        }
    }

    /// From the last rank.
    fn broadcast(&mut self) {
        let (n, count, root) = (self.n, self.count, self.root as i32);
        self.each(|s, d, c| unsafe { ncclBroadcast(s, d, count, FLOAT, root, c, null()) });
        for r in 0..n {
            assert_eq!(
                &self.recvs[r][..count],
                &self.sends[self.root][..count],
                "broadcast n={n}"
            );
        }
    }

    fn all_to_all(&mut self) {
        let (n, count) = (self.n, self.count);
        self.each(|s, d, c| unsafe { ncclAlltoAll(s, d, count, FLOAT, c, null()) });
        for r in 0..n {
            for q in 0..n {
                assert_eq!(
                    &self.recvs[r][q * count..(q + 1) * count],
                    &self.sends[q][r * count..(r + 1) * count],
                    "alltoall n={n}"
                );
            }
        }
    }

    /// To the last rank.
    fn gather(&mut self) {
        let (n, count, root) = (self.n, self.count, self.root as i32);
        self.each(|s, d, c| unsafe { ncclGather(s, d, count, FLOAT, root, c, null()) });
        for q in 0..n {
            assert_eq!(
                &self.recvs[self.root][q * count..(q + 1) * count],
                &self.sends[q][..count],
                "gather n={n}"
            );
        }
    }

    /// From the last rank.
    fn scatter(&mut self) {
        let (n, count, root) = (self.n, self.count, self.root as i32);
        self.each(|s, d, c| unsafe { ncclScatter(s, d, count, FLOAT, root, c, null()) });
        for r in 0..n {
            assert_eq!(
                &self.recvs[r][..count],
                &self.sends[self.root][r * count..(r + 1) * count],
                "scatter n={n}"
            );
        }
    }

    /// Summed at the last rank.
    fn reduce(&mut self) {
        let (n, count, root) = (self.n, self.count, self.root as i32);
        self.each(|s, d, c| unsafe { ncclReduce(s, d, count, FLOAT, SUM, root, c, null()) });
        for i in 0..count {
            let want: f32 = (0..n).map(|q| input(q, i)).sum();
            assert_eq!(self.recvs[self.root][i], want, "reduce n={n}");
        }
    }
}

/// The default stream.
fn null() -> *mut c_void {
    std::ptr::null_mut()
}

#[test]
fn sends_and_receives_in_any_order_within_a_group() {
    let n = 4;
    let cs = comms(n);
    let count = 100_003;
    let sends: Vec<Vec<i32>> = (0..n)
        .map(|r| (0..count).map(|i| (r * 1_000_000 + i) as i32).collect())
        .collect();
    let mut recvs: Vec<Vec<Vec<i32>>> = (0..n)
        .map(|_| (0..n).map(|_| vec![0; count]).collect())
        .collect();
    let null = std::ptr::null_mut();
    // Every rank sends to every rank (itself included); receives are posted before sends on
    // odd ranks and after on even ones.
    // SAFETY: buffers outlive the group.
    unsafe {
        assert_eq!(ncclGroupStart(), 0);
        for r in 0..n {
            let post_recvs = |recvs: &mut Vec<Vec<Vec<i32>>>| {
                for p in (0..n).rev() {
                    assert_eq!(
                        ncclRecv(
                            recvs[r][p].as_mut_ptr() as *mut c_void,
                            count,
                            INT32,
                            p as i32,
                            cs[r],
                            null
                        ),
                        0
                    );
                }
            };
            if r % 2 == 1 {
                post_recvs(&mut recvs);
            }
            for p in 0..n {
                assert_eq!(
                    ncclSend(
                        sends[r].as_ptr() as *const c_void,
                        count,
                        INT32,
                        p as i32,
                        cs[r],
                        null
                    ),
                    0
                );
            }
            if r % 2 == 0 {
                post_recvs(&mut recvs);
            }
        }
        assert_eq!(ncclGroupEnd(), 0);
    }
    for r in 0..n {
        for p in 0..n {
            assert_eq!(recvs[r][p], sends[p], "rank {r} from {p}");
        }
    }
    destroy(cs);
}

#[test]
fn bad_arguments_get_invalid_argument_and_the_comm_still_works() {
    let cs = comms(1);
    let c = cs[0];
    let mut buf = vec![1.0f32; 16];
    let p = buf.as_mut_ptr() as *mut c_void;
    let null = std::ptr::null_mut();
    // SAFETY: each call is given valid or deliberately invalid arguments it must reject.
    unsafe {
        assert_eq!(
            ncclAllReduce(p, p, 16, FLOAT, SUM, std::ptr::null_mut(), null),
            4,
            "NULL comm"
        );
        assert_eq!(
            ncclAllReduce(std::ptr::null(), p, 16, FLOAT, SUM, c, null),
            4,
            "NULL sendbuff"
        );
        assert_eq!(ncclAllReduce(p, p, 16, 12, SUM, c, null), 4, "dtype 12");
        assert_eq!(ncclAllReduce(p, p, 16, -1, SUM, c, null), 4, "dtype -1");
        assert_eq!(ncclAllReduce(p, p, 16, FLOAT, 99, c, null), 4, "op 99");
        // As with NCCL's static buffer, a message pointer stays readable after later calls.
        let earlier = ncclGetLastError(c);
        let earlier_text = std::ffi::CStr::from_ptr(earlier).to_owned();
        assert!(!earlier_text.is_empty());
        assert_eq!(ncclBroadcast(p, p, 16, FLOAT, 1, c, null), 4, "root 1 of 1");
        assert_eq!(ncclSend(p, 16, FLOAT, -1, c, null), 4, "peer -1");
        assert_eq!(
            ncclAllReduce(p, p, usize::MAX / 2, FLOAT, SUM, c, null),
            4,
            "count overflow"
        );
        let msg = std::ffi::CStr::from_ptr(ncclGetLastError(c))
            .to_string_lossy()
            .into_owned();
        assert!(
            msg.contains("too large") || msg.contains("overflow"),
            "{msg}"
        );
        assert_eq!(
            std::ffi::CStr::from_ptr(earlier),
            earlier_text.as_c_str(),
            "the earlier message, read after later errors"
        );
        assert_eq!(
            ncclAllReduce(p, p, 0, FLOAT, SUM, c, null),
            0,
            "count 0 with any pointer"
        );
        assert_eq!(
            ncclAllReduce(p, p, 16, FLOAT, SUM, c, null),
            0,
            "still works"
        );
        let mut a = -1;
        assert_eq!(ncclCommGetAsyncError(c, &mut a), 0);
        assert_eq!(a, 0);
        // An error inside a group fails the group end too.
        assert_eq!(ncclGroupStart(), 0);
        assert_eq!(ncclAllReduce(p, p, 16, 42, SUM, c, null), 4);
        assert_eq!(ncclGroupEnd(), 4);
    }
    destroy(cs);
}

/// Collectives of zero elements succeed with NULL buffers and are dropped, as NCCL drops them
/// (PyTorch passes NULL data pointers for empty tensors): alone, and inside a group beside a
/// real all-reduce, whose result stays exact. Three ranks, every kind.
#[test]
fn zero_element_collectives_are_dropped_and_the_rest_of_the_group_runs() {
    let n = 3;
    let cs = comms(n);
    let null = std::ptr::null_mut();
    let nul = std::ptr::null();
    let count = 1000;
    let sends: Vec<Vec<f32>> = (0..n)
        .map(|r| (0..count).map(|i| input(r, i)).collect())
        .collect();
    let mut recvs = vec![vec![0f32; count]; n];
    for alone in [true, false] {
        group(&cs, |r, c| unsafe {
            let zero: [ncclResult_t; 8] = [
                ncclAllReduce(nul, null, 0, FLOAT, SUM, c, null),
                ncclBroadcast(nul, null, 0, FLOAT, 0, c, null),
                ncclReduce(nul, null, 0, FLOAT, SUM, 1, c, null),
                ncclAllGather(nul, null, 0, FLOAT, c, null),
                ncclReduceScatter(nul, null, 0, FLOAT, SUM, c, null),
                ncclAlltoAll(nul, null, 0, FLOAT, c, null),
                ncclGather(nul, null, 0, FLOAT, 2, c, null),
                ncclScatter(nul, null, 0, FLOAT, 2, c, null),
            ];
            assert_eq!(zero, [0; 8], "rank {r}");
            if alone {
                0
            } else {
                ncclAllReduce(
                    sends[r].as_ptr() as *const c_void,
                    recvs[r].as_mut_ptr() as *mut c_void,
                    count,
                    FLOAT,
                    SUM,
                    c,
                    null,
                )
            }
        });
    }
    for (r, got) in recvs.iter().enumerate() {
        for (i, &v) in got.iter().enumerate() {
            let want: f32 = (0..n).map(|q| input(q, i)).sum();
            assert_eq!(v, want, "rank {r} element {i}");
        }
    }
    for c in &cs {
        let mut a = -1;
        // SAFETY: a live communicator and a writable result.
        assert_eq!(unsafe { ncclCommGetAsyncError(*c, &mut a) }, 0);
        assert_eq!(a, 0);
    }
    destroy(cs);
}
