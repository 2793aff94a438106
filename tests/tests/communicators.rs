//! Communicator lifecycle through the C ABI, with ranks as threads of one process: blocking
//! and non-blocking init, init inside a group, split with colors/keys/NOCOLOR, finalize,
//! destroy, config checks, PreMulSum op lifecycle.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::undocumented_unsafe_blocks,
    clippy::needless_range_loop
)]

use std::ffi::c_void;

use nccl::config::{ncclConfig_t, NCCL_API_MAGIC};
use nccl::*;

const FLOAT: i32 = 7;
const SUM: i32 = 0;

fn unique_id() -> ncclUniqueId {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, 0);
    id
}

/// Runs `f(rank, id)` on `n` threads and returns their results.
fn ranks<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize, ncclUniqueId) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let id = unique_id();
    let f = std::sync::Arc::new(f);
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let f = f.clone();
            std::thread::spawn(move || f(r, id))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn allreduce_sum(comm: ncclComm_t, v: f32) -> f32 {
    let send = [v; 3];
    let mut recv = [0.0f32; 3];
    // SAFETY: buffers of 3 floats.
    let r = unsafe {
        ncclAllReduce(
            send.as_ptr() as *const c_void,
            recv.as_mut_ptr() as *mut c_void,
            3,
            FLOAT,
            SUM,
            comm,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, 0);
    recv[0]
}

#[test]
fn nonblocking_init_reports_in_progress_then_success() {
    let out = ranks(3, |r, id| unsafe {
        let mut cfg = ncclConfig_t {
            blocking: 0,
            ..Default::default()
        };
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let rc = ncclCommInitRankConfig(&mut comm, 3, id, r as i32, &mut cfg);
        assert!(rc == 7 || rc == 0, "InProgress or Success, got {rc}");
        assert!(!comm.is_null(), "handle is set at once");
        let mut st = 7;
        let mut polls = 0;
        while st == 7 {
            assert_eq!(ncclCommGetAsyncError(comm, &mut st), 0);
            polls += 1;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(st, 0);
        let s = allreduce_sum(comm, r as f32 + 1.0);
        assert_eq!(ncclCommFinalize(comm), 0);
        assert_eq!(ncclCommDestroy(comm), 0);
        (s, polls)
    });
    for (s, _) in out {
        assert_eq!(s, 6.0);
    }
}

#[test]
fn init_inside_a_group_for_several_ranks_on_one_thread() {
    let id = unique_id();
    let n = 3;
    let mut comms = vec![std::ptr::null_mut(); n];
    // SAFETY: valid pointers; inits complete at group end.
    unsafe {
        assert_eq!(ncclGroupStart(), 0);
        for (r, c) in comms.iter_mut().enumerate() {
            assert_eq!(ncclCommInitRank(c, n as i32, id, r as i32), 0);
        }
        assert_eq!(ncclGroupEnd(), 0);
        let mut bufs: Vec<[f32; 4]> = (0..n).map(|r| [r as f32; 4]).collect();
        assert_eq!(ncclGroupStart(), 0);
        for (r, &c) in comms.iter().enumerate() {
            let p = bufs[r].as_mut_ptr() as *mut c_void;
            assert_eq!(
                ncclAllReduce(p, p, 4, FLOAT, SUM, c, std::ptr::null_mut()),
                0
            );
        }
        assert_eq!(ncclGroupEnd(), 0);
        for b in &bufs {
            assert_eq!(*b, [3.0; 4]);
        }
        for c in comms {
            assert_eq!(ncclCommDestroy(c), 0);
        }
    }
}

#[test]
fn split_by_color_and_key_with_nocolor_ranks() {
    // 5 ranks: even ranks form one group ordered by descending key, odd ranks another, rank 4
    // opts out with NCCL_SPLIT_NOCOLOR.
    let out = ranks(5, |r, id| unsafe {
        let mut comm: ncclComm_t = std::ptr::null_mut();
        assert_eq!(ncclCommInitRank(&mut comm, 5, id, r as i32), 0);
        let color = if r == 4 { -1 } else { (r % 2) as i32 };
        let mut child: ncclComm_t = std::ptr::null_mut();
        assert_eq!(
            ncclCommSplit(comm, color, 10 - r as i32, &mut child, std::ptr::null_mut()),
            0
        );
        let res = if child.is_null() {
            None
        } else {
            let (mut n, mut me) = (0, 0);
            assert_eq!(ncclCommCount(child, &mut n), 0);
            assert_eq!(ncclCommUserRank(child, &mut me), 0);
            let s = allreduce_sum(child, r as f32);
            assert_eq!(ncclCommDestroy(child), 0);
            Some((n, me, s))
        };
        // The parent still works after the split.
        let total = allreduce_sum(comm, 1.0);
        assert_eq!(ncclCommDestroy(comm), 0);
        (res, total)
    });
    assert_eq!(out[4].0, None, "NOCOLOR gets no communicator");
    // Even: ranks 0, 2 with keys 10, 8 -> new ranks 1, 0.
    assert_eq!(out[0].0, Some((2, 1, 2.0)));
    assert_eq!(out[2].0, Some((2, 0, 2.0)));
    // Odd: ranks 1, 3 with keys 9, 7 -> new ranks 1, 0.
    assert_eq!(out[1].0, Some((2, 1, 4.0)));
    assert_eq!(out[3].0, Some((2, 0, 4.0)));
    for o in &out {
        assert_eq!(o.1, 5.0);
    }
}

#[test]
fn config_is_checked_and_bad_init_arguments_are_rejected() {
    let id = unique_id();
    // SAFETY: deliberately bad arguments to entry points that must reject them.
    unsafe {
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let mut cfg = ncclConfig_t {
            magic: 0x1234,
            ..Default::default()
        };
        assert_eq!(
            ncclCommInitRankConfig(&mut comm, 1, id, 0, &mut cfg),
            4,
            "bad magic"
        );
        assert!(comm.is_null());
        assert_eq!(
            ncclCommInitRank(&mut comm, 2, id, 2),
            4,
            "rank out of range"
        );
        assert_eq!(ncclCommInitRank(&mut comm, 0, id, 0), 4, "nranks 0");
        assert_eq!(
            ncclCommInitRank(std::ptr::null_mut(), 1, id, 0),
            4,
            "NULL newcomm"
        );
        let mut v = 0;
        assert_eq!(ncclGetVersion(&mut v), 0);
        assert_eq!(v, 22809);
        assert_eq!(ncclGetVersion(std::ptr::null_mut()), 4);
        let cfg = ncclConfig_t::default();
        assert_eq!(cfg.magic, NCCL_API_MAGIC);
    }
}

#[test]
fn premulsum_ops_scale_inputs_and_are_per_communicator() {
    let out = ranks(2, |r, id| unsafe {
        let mut comm: ncclComm_t = std::ptr::null_mut();
        assert_eq!(ncclCommInitRank(&mut comm, 2, id, r as i32), 0);
        let mut scalar = 3.0f32;
        let mut op = 0;
        assert_eq!(
            ncclRedOpCreatePreMulSum(
                &mut op,
                &mut scalar as *mut f32 as *mut c_void,
                FLOAT,
                1,
                comm
            ),
            0
        );
        assert!(op >= 5);
        let send = [r as f32 + 1.0; 2];
        let mut recv = [0.0f32; 2];
        std::ptr::write_volatile(&mut scalar, 100.0); // host-immediate: the value at creation counts
        assert_eq!(
            ncclAllReduce(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                2,
                FLOAT,
                op,
                comm,
                std::ptr::null_mut()
            ),
            0
        );
        assert_eq!(
            ncclAllReduce(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                2,
                8,
                op,
                comm,
                std::ptr::null_mut()
            ),
            4,
            "op made for float used with double"
        );
        assert_eq!(ncclRedOpDestroy(op, comm), 0);
        assert_eq!(ncclRedOpDestroy(op, comm), 4, "destroyed twice");
        assert_eq!(
            ncclAllReduce(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                2,
                FLOAT,
                op,
                comm,
                std::ptr::null_mut()
            ),
            4,
            "destroyed op"
        );
        assert_eq!(ncclCommDestroy(comm), 0);
        recv[0]
    });
    assert_eq!(out, vec![9.0, 9.0]);
}

/// `ncclCommMemStats` on host memory: no GPU memory held (0 for every statistic), nothing
/// suspended; an unknown statistic is `ncclInvalidArgument`. `ncclCommRevoke` of a NULL
/// communicator is nothing to do, as in NCCL.
#[test]
fn memory_statistics_on_the_host_backend_and_a_null_revoke() {
    let outs = ranks(2, |r, id| {
        let mut c = std::ptr::null_mut();
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(ncclCommInitRank(&mut c, 2, id, r as i32), 0);
            let stats: Vec<(i32, u64)> = (0..5)
                .map(|s| {
                    let mut v = u64::MAX;
                    (ncclCommMemStats(c, s, &mut v), v)
                })
                .collect();
            assert_eq!(allreduce_sum(c, 1.0), 2.0);
            assert_eq!(ncclCommDestroy(c), 0);
            stats
        }
    });
    for stats in outs {
        assert_eq!(stats[..4], [(0, 0); 4]);
        assert_eq!(stats[4], (4, u64::MAX), "statistic 4 is not one");
    }
    // SAFETY: NULL is the case under test.
    assert_eq!(unsafe { ncclCommRevoke(std::ptr::null_mut(), 0) }, 0);
}
