//! One rank of a multi-process fault scenario, driven through the C ABI exactly as a C
//! program would call it. Launched by `tests/tests/faults.rs` with `NCCL_COMM_ID`, `CCL_RANK`
//! and `CCL_NRANKS` set. Prints `result=<code> async=<code> elapsed_ms=<ms>` and exits 0 when
//! the scenario reached its end (whatever the result), so the test judges the codes.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::ffi::{c_void, CStr};
use std::time::Instant;

use nccl::*;

fn env_usize(k: &str) -> usize {
    std::env::var(k).unwrap().parse().unwrap()
}

fn last(comm: ncclComm_t) -> String {
    // SAFETY: ncclGetLastError returns a valid C string.
    unsafe { CStr::from_ptr(ncclGetLastError(comm)) }
        .to_string_lossy()
        .into_owned()
}

/// One rank of a fault scenario, picked by name: one `match` arm per scenario, each read
/// top to bottom as the story it tests, hence the length.
fn main() {
    let scenario = std::env::args().nth(1).unwrap();
    let rank = env_usize("CCL_RANK");
    let nranks = env_usize("CCL_NRANKS");
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: plain C ABI calls with valid pointers.
    unsafe {
        if scenario == "garbage-id" {
            for (i, b) in id.internal.iter_mut().enumerate() {
                *b = (i * 37 + 11) as _;
            }
            let mut comm: ncclComm_t = std::ptr::null_mut();
            let r = ncclCommInitRank(&mut comm, nranks as i32, id, rank as i32);
            println!(
                "result={r} async=-1 elapsed_ms=0 msg={}",
                last(std::ptr::null_mut())
            );
            return;
        }
        if scenario == "grow" {
            grow(rank, nranks);
            return;
        }
        assert_eq!(ncclGetUniqueId(&mut id), 0);
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let r = ncclCommInitRank(&mut comm, nranks as i32, id, rank as i32);
        assert_eq!(r, 0, "init: {}", last(std::ptr::null_mut()));
        // About 1 Mi elements, a multiple of the ranks (blocks of all-gathers and the like).
        let count = (1 << 20) / nranks * nranks;
        let send = vec![1.0f32; count];
        let mut recv = vec![0.0f32; count];
        let sp = send.as_ptr() as *const c_void;
        let rp = recv.as_mut_ptr() as *mut c_void;
        let null = std::ptr::null_mut();
        // One good collective first, so every scenario starts from a working communicator.
        assert_eq!(
            ncclAllReduce(sp, rp, count, 7, 0, comm, null),
            0,
            "{}",
            last(comm)
        );
        assert_eq!(recv[0], nranks as f32);
        let start = Instant::now();
        let r = match scenario.as_str() {
            // The last rank dies in the middle of a stream of collectives.
            "kill" => {
                let mut r = 0;
                for i in 0..200 {
                    if rank == nranks - 1 && i == 3 {
                        println!("dying");
                        std::process::exit(9);
                    }
                    r = ncclAllReduce(sp, rp, count, 7, 0, comm, null);
                    if r != 0 {
                        break;
                    }
                }
                r
            }
            // Rank 0 calls a different collective than everybody else.
            "mismatch" => {
                if rank == 0 {
                    ncclAllGather(sp, rp, count / nranks, 7, comm, null)
                } else {
                    ncclAllReduce(sp, rp, count, 7, 0, comm, null)
                }
            }
            // The last rank goes silent; the others must time out (CCL_TIMEOUT_S).
            "silent" => {
                if rank == nranks - 1 {
                    std::thread::sleep(std::time::Duration::from_secs(30));
                    0
                } else {
                    ncclAllReduce(sp, rp, count, 7, 0, comm, null)
                }
            }
            // The last rank goes silent while the others split the communicator (an exchange
            // over the control connections, as init's): they must fail by CCL_TIMEOUT_S too.
            "silent-split" => {
                if rank == nranks - 1 {
                    std::thread::sleep(std::time::Duration::from_secs(8));
                    0
                } else {
                    let mut child: ncclComm_t = std::ptr::null_mut();
                    ncclCommSplit(comm, 0, rank as i32, &mut child, std::ptr::null_mut())
                }
            }
            // Rank 0 is stuck waiting for a peer that never calls; another thread aborts.
            "abort" => {
                if rank == 0 {
                    let c = comm as usize;
                    let t = std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(500));
                        ncclCommAbort(c as ncclComm_t)
                    });
                    let r = ncclAllReduce(sp, rp, count, 7, 0, comm, null);
                    let a = t.join().unwrap();
                    println!("abort_result={a}");
                    println!(
                        "result={r} async=-1 elapsed_ms={} msg={}",
                        start.elapsed().as_millis(),
                        last(std::ptr::null_mut())
                    );
                    return;
                } else {
                    std::thread::sleep(std::time::Duration::from_secs(3));
                    0
                }
            }
            // Results of a few collectives, and how the communicator is wired.
            "basic" => {
                let mut r = ncclAllGather(sp, rp, count / nranks, 7, comm, null);
                if r == 0 && recv.iter().any(|&x| x != 1.0) {
                    r = 99;
                }
                let (ring, links) = nccl::describe_comm(comm);
                println!("ring={ring} links={links}");
                r
            }
            // The last rank dies; the survivors see the failure, shrink it away with
            // NCCL_SHRINK_ABORT and carry on with a working communicator.
            "shrink" => {
                if rank == nranks - 1 {
                    std::process::exit(9);
                }
                let failed = ncclAllReduce(sp, rp, count, 7, 0, comm, null);
                let (r, small) = shrink_last(comm, nranks, 1);
                let (mut n, mut me) = (-1, -1);
                let mut r2 = -1;
                if r == 0 {
                    ncclCommCount(small, &mut n);
                    ncclCommUserRank(small, &mut me);
                    r2 = sum_of_ones(small, count, (nranks - 1) as f32);
                    ncclCommDestroy(small);
                }
                println!("failed={failed} shrink={r} newcount={n} newrank={me} after={r2}");
                r
            }
            // The last rank goes silent; another thread of each survivor revokes the
            // communicator, which ends the all-reduce waiting on it, and the survivors shrink
            // the silent rank away (NCCL_SHRINK_DEFAULT: the revoke already ended the work).
            "revoke" => revoke(comm, rank, nranks, count),
            // Every rank revokes a working communicator, then splits it: the child works.
            "revoke-split" => {
                let revoked = ncclCommRevoke(comm, 0);
                let mut child: ncclComm_t = std::ptr::null_mut();
                let r = ncclCommSplit(comm, 0, rank as i32, &mut child, std::ptr::null_mut());
                let mut after = -1;
                if r == 0 {
                    after = sum_of_ones(child, count, nranks as f32);
                    ncclCommDestroy(child);
                }
                println!("revoked={revoked} split={r} after={after}");
                r
            }
            // An all-gather, an all-reduce, a broadcast, a reduce-scatter, a reduce, an
            // all-to-all, a gather and a scatter: the first half of the ranks call them in one group, the others one by one (NCCL
            // allows both; a hierarchy must issue the same sequence on every sub-communicator
            // either way, and give each operation its own part of its scratch).
            "grouped" => {
                let rank_f = rank as f32;
                let mine: Vec<f32> = (0..count / nranks).map(|i| rank_f + i as f32).collect();
                let mut gathered = vec![0.0f32; count];
                let mut summed = vec![0.0f32; count];
                let mut sent = vec![if rank == 1 { 5.0f32 } else { 0.0 }; count];
                let (gp, mp) = (
                    gathered.as_mut_ptr() as *mut c_void,
                    mine.as_ptr() as *const c_void,
                );
                let spp = summed.as_mut_ptr() as *mut c_void;
                let bp = sent.as_mut_ptr() as *mut c_void;
                let together = rank < nranks / 2;
                let mut r = 0;
                if together {
                    r |= ncclGroupStart();
                }
                r |= ncclAllGather(mp, gp, count / nranks, 7, comm, null);
                // Integer averages stay flat: between hierarchical operations they must keep
                // their place in the sequence. Element i: 10 * rank + i, and then
                // 20 * rank + i, so the averages are 5 (n - 1) + i and 10 (n - 1) + i (exact).
                let ints: Vec<i32> = (0..count as i32).map(|i| 10 * rank as i32 + i).collect();
                let ints2: Vec<i32> = (0..count as i32).map(|i| 20 * rank as i32 + i).collect();
                let mut avg = vec![0i32; count];
                let mut avg2 = vec![0i32; count];
                let avp = avg.as_mut_ptr() as *mut c_void;
                let avp2 = avg2.as_mut_ptr() as *mut c_void;
                r |= ncclAllReduce(ints.as_ptr() as *const c_void, avp, count, 2, 4, comm, null);
                r |= ncclAllReduce(sp, spp, count - 1, 7, 0, comm, null);
                r |= ncclBroadcast(bp, bp, count, 7, 1, comm, null);
                r |= ncclAllReduce(
                    ints2.as_ptr() as *const c_void,
                    avp2,
                    count,
                    2,
                    4,
                    comm,
                    null,
                );
                let per = count / nranks;
                // Element i of every input: rank + i, so block b's j-th sums to
                // sum(ranks) + nranks * (b * per + j).
                let spread: Vec<f32> = (0..count).map(|i| rank_f + i as f32).collect();
                let mut scattered = vec![0.0f32; per];
                let scp = scattered.as_mut_ptr() as *mut c_void;
                r |=
                    ncclReduceScatter(spread.as_ptr() as *const c_void, scp, per, 7, 0, comm, null);
                let root = nranks - 1;
                let mut reduced = vec![0.0f32; count];
                let rdp = reduced.as_mut_ptr() as *mut c_void;
                r |= ncclReduce(
                    spread.as_ptr() as *const c_void,
                    rdp,
                    count,
                    7,
                    0,
                    root as i32,
                    comm,
                    null,
                );
                // All-to-all: block j of rank q's input, element i: (q * nranks + j) * 1000 + i.
                let a2a_in: Vec<f32> = (0..count)
                    .map(|x| ((rank * nranks + x / per) * 1000 + x % per) as f32)
                    .collect();
                let mut a2a_out = vec![0.0f32; count];
                let a2p = a2a_out.as_mut_ptr() as *mut c_void;
                r |= ncclAlltoAll(a2a_in.as_ptr() as *const c_void, a2p, per, 7, comm, null);
                // A gather of every rank's block (rank + i) to rank 1, and a scatter from rank 2
                // of block j: 100 * j + i.
                let mut gathered_at = vec![0.0f32; count];
                let gap = gathered_at.as_mut_ptr() as *mut c_void;
                r |= ncclGather(mp, gap, per, 7, 1, comm, null);
                let to_scatter: Vec<f32> = (0..count)
                    .map(|x| (x / per * 100 + x % per) as f32)
                    .collect();
                let mut scattered_from = vec![0.0f32; per];
                let sfp = scattered_from.as_mut_ptr() as *mut c_void;
                r |= ncclScatter(
                    to_scatter.as_ptr() as *const c_void,
                    sfp,
                    per,
                    7,
                    2,
                    comm,
                    null,
                );
                if together {
                    r |= ncclGroupEnd();
                }
                // Then sends and receives with the rank beside it on its host (two ranks a
                // host; over the host's communicator) and with the one across (half the ranks
                // on; over this one): rank + 0.5 each, in one group on every rank; and an
                // all-reduce (hierarchical), called last in that group by the first half, before
                // it by the others: a group's collectives go before its transfers.
                // Odd rank counts: the last rank is its own partner, and the ring step across
                // sends to one rank and receives from another.
                let partner = if rank ^ 1 < nranks { rank ^ 1 } else { rank };
                let across = (rank + nranks / 2) % nranks;
                let across_from = (rank + nranks - nranks / 2) % nranks;
                let mine_p2p = vec![rank_f + 0.5; count];
                let mut from_partner = vec![0.0f32; count];
                let mut from_across = vec![0.0f32; count];
                let mpp = mine_p2p.as_ptr() as *const c_void;
                let fpp = from_partner.as_mut_ptr() as *mut c_void;
                let fap = from_across.as_mut_ptr() as *mut c_void;
                let mut last_sum = vec![0.0f32; count];
                let lsp = last_sum.as_mut_ptr() as *mut c_void;
                if !together {
                    r |= ncclAllReduce(sp, lsp, count, 7, 0, comm, null);
                }
                r |= ncclGroupStart();
                r |= ncclSend(mpp, count, 7, partner as i32, comm, null);
                r |= ncclRecv(fpp, count, 7, partner as i32, comm, null);
                r |= ncclSend(mpp, count, 7, across as i32, comm, null);
                r |= ncclRecv(fap, count, 7, across_from as i32, comm, null);
                if together {
                    r |= ncclAllReduce(sp, lsp, count, 7, 0, comm, null);
                }
                r |= ncclGroupEnd();
                let gathered_ok =
                    (0..count).all(|i| gathered[i] == (i / per) as f32 + (i % per) as f32);
                let summed_ok = summed[..count - 1].iter().all(|&x| x == nranks as f32)
                    && last_sum.iter().all(|&x| x == nranks as f32);
                let avg_ok = {
                    // sum(10 * rank) / nranks = 5 * (nranks - 1): exact.
                    let base = 5 * (nranks as i32 - 1);
                    (0..count).all(|i| avg[i] == base + i as i32 && avg2[i] == 2 * base + i as i32)
                };
                let sent_ok = sent.iter().all(|&x| x == 5.0);
                let ranks_sum = (nranks * (nranks - 1) / 2) as f32;
                let scattered_ok = (0..per)
                    .all(|j| scattered[j] == ranks_sum + (nranks * (rank * per + j)) as f32);
                let reduced_ok = rank != root
                    || (0..count).all(|i| reduced[i] == ranks_sum + (nranks * i) as f32);
                let a2a_ok = (0..count)
                    .all(|x| a2a_out[x] == ((x / per * nranks + rank) * 1000 + x % per) as f32);
                let rooted_ok = (rank != 1
                    || (0..count).all(|i| gathered_at[i] == (i / per) as f32 + (i % per) as f32))
                    && (0..per).all(|i| scattered_from[i] == (rank * 100 + i) as f32);
                let p2p_ok = from_partner.iter().all(|&x| x == partner as f32 + 0.5)
                    && from_across.iter().all(|&x| x == across_from as f32 + 0.5);
                println!(
                    "gathered={gathered_ok} summed={summed_ok} broadcast={sent_ok} \
                     scattered={scattered_ok} reduced={reduced_ok} a2a={a2a_ok} p2p={p2p_ok} \
                     int_avg={avg_ok} gather_scatter={rooted_ok}"
                );
                let all_ok = gathered_ok
                    && summed_ok
                    && sent_ok
                    && scattered_ok
                    && reduced_ok
                    && a2a_ok
                    && avg_ok
                    && rooted_ok;
                if r == 0 && !(all_ok && p2p_ok) {
                    r = 99;
                }
                r
            }
            // Communicators split off a hierarchical one: the whole of it again (hierarchical
            // too) and one per host (one host: flat); an all-reduce on each, checked.
            "split" => {
                let mut r = 0;
                let mut checked = Vec::new();
                for color in [0, (rank / 2) as i32] {
                    let mut child: ncclComm_t = std::ptr::null_mut();
                    r |= ncclCommSplit(comm, color, rank as i32, &mut child, std::ptr::null_mut());
                    let mut n = 0;
                    ncclCommCount(child, &mut n);
                    r |= ncclAllReduce(sp, rp, count, 7, 0, child, null);
                    checked.push(recv.iter().all(|&x| x == n as f32));
                    ncclCommDestroy(child);
                }
                println!("split_results={checked:?}");
                if r == 0 && checked.iter().any(|ok| !ok) {
                    r = 99;
                }
                r
            }
            s => panic!("unknown scenario {s}"),
        };
        let elapsed = start.elapsed().as_millis();
        let mut a = -1;
        ncclCommGetAsyncError(comm, &mut a);
        println!(
            "result={r} async={a} elapsed_ms={elapsed} msg={}",
            last(comm)
        );
        if r == 0 {
            ncclCommDestroy(comm);
        } else {
            ncclCommAbort(comm);
        }
    }
}

/// The survivors' shrink of the last rank away (`flags`: `NCCL_SHRINK_DEFAULT` 0 or
/// `NCCL_SHRINK_ABORT` 1): its result and the new communicator.
///
/// # Safety
/// `comm` is a communicator of `nranks` ranks.
unsafe fn shrink_last(comm: ncclComm_t, nranks: usize, flags: i32) -> (i32, ncclComm_t) {
    let exclude = [(nranks - 1) as i32];
    let mut small: ncclComm_t = std::ptr::null_mut();
    let nocfg = std::ptr::null_mut();
    // SAFETY: valid pointers; the caller's communicator.
    let r = unsafe {
        ncclCommShrink(
            comm,
            exclude.as_ptr() as *mut i32,
            1,
            &mut small,
            nocfg,
            flags,
        )
    };
    (r, small)
}

/// An all-reduce of `count` ones on `comm`: its result, or 99 when a sum is not `want`.
///
/// # Safety
/// `comm` is a communicator every rank of which calls this.
unsafe fn sum_of_ones(comm: ncclComm_t, count: usize, want: f32) -> i32 {
    let send = vec![1.0f32; count];
    let mut recv = vec![0.0f32; count];
    let (sp, rp) = (
        send.as_ptr() as *const c_void,
        recv.as_mut_ptr() as *mut c_void,
    );
    // SAFETY: buffers of `count` floats; the caller's communicator.
    let r = unsafe { ncclAllReduce(sp, rp, count, 7, 0, comm, std::ptr::null_mut()) };
    if r == 0 && recv.iter().any(|&x| x != want) {
        return 99;
    }
    r
}

/// The "revoke" scenario on a survivor (the last rank goes silent): a bad flag first, then
/// another thread's revoke ends the all-reduce waiting on the silent rank; what the revoked
/// communicator answers next; the shrink with `NCCL_SHRINK_DEFAULT` and its all-reduce.
///
/// # Safety
/// `comm` is a communicator of `nranks` ranks.
unsafe fn revoke(comm: ncclComm_t, rank: usize, nranks: usize, count: usize) -> i32 {
    if rank == nranks - 1 {
        std::thread::sleep(std::time::Duration::from_secs(6));
        std::process::exit(0);
    }
    let start = Instant::now();
    // SAFETY: plain C ABI calls on the caller's communicator.
    unsafe {
        let bad_flags = ncclCommRevoke(comm, 1);
        let c = comm as usize;
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            ncclCommRevoke(c as ncclComm_t, 0)
        });
        let failed = sum_of_ones(comm, count, nranks as f32);
        let waited = start.elapsed().as_millis();
        let revoked = t.join().unwrap();
        let mut state = -1;
        ncclCommGetAsyncError(comm, &mut state);
        let again = ncclCommRevoke(comm, 0);
        let refused = sum_of_ones(comm, count, nranks as f32);
        let finalized = ncclCommFinalize(comm);
        let (r, small) = shrink_last(comm, nranks, 0);
        let mut after = -1;
        if r == 0 {
            after = sum_of_ones(small, count, (nranks - 1) as f32);
            ncclCommDestroy(small);
        }
        println!(
            "bad_flags={bad_flags} failed={failed} waited_ms={waited} revoked={revoked} \
             state={state} again={again} refused={refused} finalized={finalized} \
             shrink={r} after={after}"
        );
        r
    }
}

/// All ranks but the last form a communicator; its rank 0 (the coordinator) takes a grow id
/// (`ncclCommGetUniqueId`) and hands it to the last rank through a file (out of band, as an
/// application would); every rank calls `ncclCommGrow` (the old ones with their parent and
/// rank -1, the coordinator passing the id; the new one with no parent, the id and its rank)
/// and the grown communicator's all-reduce must count every rank. Bad calls first: an old
/// rank naming a rank, and a grow that does not grow, are refused before any exchange.
fn grow(rank: usize, nranks: usize) {
    let null: ncclComm_t = std::ptr::null_mut();
    let port = std::env::var("NCCL_COMM_ID")
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let file = std::env::temp_dir().join(format!("ccl-grow-{port}.id"));
    let mut grown: ncclComm_t = null;
    let n = nranks as i32;
    // SAFETY: plain C ABI calls with valid pointers.
    let (bad_rank, no_growth, r) = unsafe {
        if rank == nranks - 1 {
            let deadline = Instant::now() + std::time::Duration::from_secs(30);
            let bytes = loop {
                if let Some(b) = std::fs::read(&file).ok().filter(|b| b.len() == 128) {
                    break b;
                }
                assert!(
                    Instant::now() < deadline,
                    "no grow id in {}",
                    file.display()
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            let mut gid = ncclUniqueId { internal: [0; 128] };
            for (d, s) in gid.internal.iter_mut().zip(&bytes) {
                *d = *s as _;
            }
            (
                0,
                0,
                ncclCommGrow(null, n, &gid, rank as i32, &mut grown, std::ptr::null_mut()),
            )
        } else {
            let mut id = ncclUniqueId { internal: [0; 128] };
            assert_eq!(ncclGetUniqueId(&mut id), 0);
            let mut comm: ncclComm_t = null;
            assert_eq!(
                ncclCommInitRank(&mut comm, n - 1, id, rank as i32),
                0,
                "{}",
                last(null)
            );
            let nocfg = std::ptr::null_mut();
            let bad_rank = ncclCommGrow(comm, n, std::ptr::null(), 0, &mut grown, nocfg);
            let no_growth = ncclCommGrow(comm, n - 1, std::ptr::null(), -1, &mut grown, nocfg);
            let mut gid = ncclUniqueId { internal: [0; 128] };
            let coordinator = rank == 0;
            if coordinator {
                assert_eq!(ncclCommGetUniqueId(comm, &mut gid), 0, "{}", last(comm));
                let tmp = file.with_extension("tmp");
                std::fs::write(
                    &tmp,
                    gid.internal.iter().map(|&c| c as u8).collect::<Vec<_>>(),
                )
                .unwrap();
                std::fs::rename(&tmp, &file).unwrap();
            }
            let idp = if coordinator {
                &gid as *const ncclUniqueId
            } else {
                std::ptr::null()
            };
            let r = ncclCommGrow(comm, n, idp, -1, &mut grown, std::ptr::null_mut());
            ncclCommDestroy(comm);
            (bad_rank, no_growth, r)
        }
    };
    let (mut count_after, mut me, mut after) = (-1, -1, -1);
    if r == 0 {
        // SAFETY: as above.
        unsafe {
            ncclCommCount(grown, &mut count_after);
            ncclCommUserRank(grown, &mut me);
            after = sum_of_ones(grown, 1 << 16, nranks as f32);
            ncclCommDestroy(grown);
        }
    }
    if rank == 0 {
        let _ = std::fs::remove_file(&file);
    }
    println!(
        "bad_rank={bad_rank} no_growth={no_growth} grow={r} newcount={count_after} newrank={me} \
         after={after} msg={}",
        last(null)
    );
}
