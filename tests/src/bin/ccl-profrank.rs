//! One rank of the profiler-plugin test (`tests/tests/profiler.rs`), through the C ABI:
//! a communicator named "prof-test", then an all-reduce (a group of one), a grouped send and
//! receive with the other rank, a broadcast from rank 1, a second all-reduce, and destroy.
//! Launched with `NCCL_COMM_ID`, `CCL_RANK`, `CCL_NRANKS` (2) set; prints `ok` at the end.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::ffi::c_void;

use nccl::config::ncclConfig_t;
use nccl::*;

const INT32: i32 = 2;
const FLOAT32: i32 = 7;
const FLOAT64: i32 = 8;
const SUM: i32 = 0;

fn env_usize(k: &str) -> usize {
    std::env::var(k).unwrap().parse().unwrap()
}

fn main() {
    let rank = env_usize("CCL_RANK");
    let nranks = env_usize("CCL_NRANKS");
    assert_eq!(nranks, 2, "the scenario is written for two ranks");
    let peer = (1 - rank) as i32;
    let null: *mut c_void = std::ptr::null_mut();
    let name = c"prof-test";
    // SAFETY: plain C ABI calls with valid pointers and buffers of the counts passed.
    unsafe {
        let mut id = ncclUniqueId { internal: [0; 128] };
        assert_eq!(ncclGetUniqueId(&mut id), 0);
        let mut cfg = ncclConfig_t {
            commName: name.as_ptr(),
            ..ncclConfig_t::default()
        };
        let mut comm: ncclComm_t = std::ptr::null_mut();
        assert_eq!(
            ncclCommInitRankConfig(&mut comm, 2, id, rank as i32, &mut cfg),
            0
        );

        let send = vec![1.0f32 + rank as f32; 1024];
        let mut recv = vec![0.0f32; 1024];
        let (sp, rp) = (
            send.as_ptr() as *const c_void,
            recv.as_mut_ptr() as *mut c_void,
        );
        assert_eq!(ncclAllReduce(sp, rp, 1024, FLOAT32, SUM, comm, null), 0);
        assert_eq!(recv[0], 3.0);

        let out = vec![rank as i32; 256];
        let mut inb = vec![-1i32; 256];
        assert_eq!(ncclGroupStart(), 0);
        assert_eq!(
            ncclSend(out.as_ptr() as *const c_void, 256, INT32, peer, comm, null),
            0
        );
        assert_eq!(
            ncclRecv(
                inb.as_mut_ptr() as *mut c_void,
                256,
                INT32,
                peer,
                comm,
                null
            ),
            0
        );
        assert_eq!(ncclGroupEnd(), 0);
        assert_eq!(inb[255], peer);

        let mut b = vec![rank as f64; 10];
        let bp = b.as_mut_ptr() as *mut c_void;
        assert_eq!(ncclBroadcast(bp, bp, 10, FLOAT64, 1, comm, null), 0);
        assert_eq!(b[9], 1.0);

        assert_eq!(ncclAllReduce(sp, rp, 1024, FLOAT32, SUM, comm, null), 0);
        assert_eq!(ncclCommDestroy(comm), 0);
    }
    println!("ok");
}
