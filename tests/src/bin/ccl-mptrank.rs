//! One rank of the mpt transport test: all_reduce and alltoall of int32 data through the C
//! ABI, checked exactly. Launched by `tests/tests/mpt_net.rs` with `NCCL_COMM_ID`,
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
        for (iter, count) in [1usize, 1000, 1 << 22, 123_457].into_iter().enumerate() {
            let send: Vec<i32> = (0..count)
                .map(|i| (rank as i32 + 1) * ((i % 1000) as i32 + iter as i32))
                .collect();
            let mut recv = vec![0i32; count];
            let r = ncclAllReduce(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                count,
                INT32,
                SUM,
                comm,
                null,
            );
            assert_eq!(r, 0, "all_reduce: {}", last(comm));
            let k = (n * (n + 1) / 2) as i32;
            for (i, v) in recv.iter().enumerate() {
                assert_eq!(*v, k * ((i % 1000) as i32 + iter as i32), "all_reduce[{i}]");
            }
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
