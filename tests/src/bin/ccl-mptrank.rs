//! One rank of the mpt transport test: all_reduce (out of place and in place) and alltoall of
//! int32 data through the C ABI, checked exactly. Launched by `tests/tests/mpt_net.rs` with `NCCL_COMM_ID`,
//! `CCL_RANK`, `CCL_NRANKS` (and `CCL_NET=mpt`, `CCL_HOSTID` per rank). Prints `ok` when
//! every result matched.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::ffi::{c_void, CStr};

use nccl::*;

const INT32: i32 = 2;
const SUM: i32 = 0;

fn env_usize(k: &str) -> usize {
    std::env::var(k).unwrap().parse().unwrap()
}

fn last(comm: ncclComm_t) -> String {
    // SAFETY: ncclGetLastError returns a valid C string.
    unsafe { CStr::from_ptr(ncclGetLastError(comm)) }
        .to_string_lossy()
        .into_owned()
}

/// `CCL_TEST_TAIL=k`: rank 0 sends `k` small messages to rank 1 and destroys its
/// communicator at once; rank 1 starts receiving only 300 ms later. The sends complete before
/// rank 1 reads (or acknowledges) them, so under injected loss rank 0's destroy must keep
/// resending until rank 1's side confirms them.
///
/// # Safety
/// `comm` is a live communicator of at least 2 ranks.
unsafe fn tail(comm: ncclComm_t, rank: usize, k: usize) {
    let null = std::ptr::null_mut();
    let msg = |i: usize| -> Vec<i32> { (0..64).map(|j| (i * 1000 + j) as i32).collect() };
    if rank == 0 {
        for i in 0..k {
            let m = msg(i);
            // SAFETY: `m` holds 64 int32 and outlives the call, which completes before it
            // returns (host memory).
            let r = unsafe { ncclSend(m.as_ptr() as *const c_void, 64, INT32, 1, comm, null) };
            assert_eq!(r, 0, "send {i}: {}", last(comm));
        }
    } else if rank == 1 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        for i in 0..k {
            let mut m = vec![0i32; 64];
            // SAFETY: as for the sends.
            let r = unsafe { ncclRecv(m.as_mut_ptr() as *mut c_void, 64, INT32, 0, comm, null) };
            assert_eq!(r, 0, "recv {i}: {}", last(comm));
            assert_eq!(m, msg(i), "message {i}");
        }
    }
    // SAFETY: `comm` is live (this function's contract) and not used after.
    assert_eq!(unsafe { ncclCommDestroy(comm) }, 0);
}

fn main() {
    let rank = env_usize("CCL_RANK");
    let n = env_usize("CCL_NRANKS");
    let null = std::ptr::null_mut();
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: plain C ABI calls with valid pointers and element counts that match the
    // buffers.
    unsafe {
        assert_eq!(ncclGetUniqueId(&mut id), 0);
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let r = ncclCommInitRank(&mut comm, n as i32, id, rank as i32);
        assert_eq!(r, 0, "init: {}", last(std::ptr::null_mut()));
        if let Ok(k) = std::env::var("CCL_TEST_TAIL") {
            tail(comm, rank, k.parse().unwrap());
            println!("ok");
            return;
        }
        for (iter, count) in [1usize, 1000, 1 << 22, 123_457].into_iter().enumerate() {
            let send: Vec<i32> = (0..count)
                .map(|i| (rank as i32 + 1) * ((i % 1000) as i32 + iter as i32))
                .collect();
            // `from` and `to` hold `count` int32 each (the enclosing block's contract).
            let all_reduce = |from: *const i32, to: *mut i32| {
                ncclAllReduce(
                    from as *const c_void,
                    to as *mut c_void,
                    count,
                    INT32,
                    SUM,
                    comm,
                    null,
                )
            };
            let mut recv = vec![0i32; count];
            let r = all_reduce(send.as_ptr(), recv.as_mut_ptr());
            assert_eq!(r, 0, "all_reduce: {}", last(comm));
            let k = (n * (n + 1) / 2) as i32;
            for (i, v) in recv.iter().enumerate() {
                assert_eq!(*v, k * ((i % 1000) as i32 + iter as i32), "all_reduce[{i}]");
            }
            // In place: the input is the output (an exchange all-reduce then sends each
            // frame before folding the peer's into it).
            let mut buf = send.clone();
            let r = all_reduce(buf.as_ptr(), buf.as_mut_ptr());
            assert_eq!(r, 0, "all_reduce in place: {}", last(comm));
            assert!(buf == recv, "all_reduce in place of {count} differs");
        }
        for count in [1usize, 1 << 20, 77_777] {
            let send: Vec<i32> = (0..n * count)
                .map(|j| (rank * 1_000_000 + (j / count) * 1000 + (j % count) % 997) as i32)
                .collect();
            let mut recv = vec![0i32; n * count];
            let r = ncclAlltoAll(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                count,
                INT32,
                comm,
                null,
            );
            assert_eq!(r, 0, "alltoall: {}", last(comm));
            for (j, v) in recv.iter().enumerate() {
                let p = j / count;
                let want = (p * 1_000_000 + rank * 1000 + (j % count) % 997) as i32;
                assert_eq!(*v, want, "alltoall[{j}]");
            }
        }
        assert_eq!(ncclCommDestroy(comm), 0);
    }
    println!("ok");
}
