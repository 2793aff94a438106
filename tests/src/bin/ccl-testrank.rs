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

/// One rank of a fault scenario, picked by name: each scenario is a function read top to
/// bottom as the story it tests.
fn main() {
    let scenario = std::env::args().nth(1).unwrap();
    let rank = env_usize("CCL_RANK");
    let nranks = env_usize("CCL_NRANKS");
    // SAFETY: plain C ABI calls with valid pointers.
    unsafe {
        match scenario.as_str() {
            "garbage-id" => return garbage_id(rank, nranks),
            "grow" => return grow(rank, nranks),
            _ => {}
        }
        let mut c = Ctx::working(rank, nranks);
        let r = match scenario.as_str() {
            "kill" => kill(&mut c),
            "mismatch" => mismatch(&mut c),
            "silent" => silent(&mut c),
            "silent-split" => silent_split(&c),
            "abort" => match abort(&mut c) {
                Some(r) => r,
                None => return,
            },
            "basic" => basic(&mut c),
            "shrink" => shrink(&mut c),
            "revoke" => revoke(c.comm, rank, nranks, c.count),
            "revoke-split" => revoke_split(&c),
            "grouped" => grouped(&mut c),
            "split" => split(&mut c),
            s => panic!("unknown scenario {s}"),
        };
        c.finish(r);
    }
}

/// What a scenario starts from: a communicator that has run one good all-reduce, its rank's
/// place, and that all-reduce's buffers (`count` floats, ones to send).
struct Ctx {
    comm: ncclComm_t,
    rank: usize,
    nranks: usize,
    count: usize,
    send: Vec<f32>,
    recv: Vec<f32>,
    start: Instant,
}

impl Ctx {
    /// Every rank's communicator, after one good all-reduce (asserted exact).
    ///
    /// # Safety
    /// Every rank of the scenario calls this.
    unsafe fn working(rank: usize, nranks: usize) -> Ctx {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: plain C ABI calls with valid pointers.
        unsafe {
            assert_eq!(ncclGetUniqueId(&mut id), 0);
            let mut comm: ncclComm_t = std::ptr::null_mut();
            let r = ncclCommInitRank(&mut comm, nranks as i32, id, rank as i32);
            assert_eq!(r, 0, "init: {}", last(std::ptr::null_mut()));
            // About 1 Mi elements, a multiple of the ranks (blocks of all-gathers and the like).
            let count = (1 << 20) / nranks * nranks;
            let mut c = Ctx {
                comm,
                rank,
                nranks,
                count,
                send: vec![1.0f32; count],
                recv: vec![0.0f32; count],
                start: Instant::now(),
            };
            assert_eq!(c.all_reduce(), 0, "{}", last(comm));
            assert_eq!(c.recv[0], nranks as f32);
            c.start = Instant::now();
            c
        }
    }

    fn sp(&self) -> *const c_void {
        self.send.as_ptr() as *const c_void
    }

    fn rp(&mut self) -> *mut c_void {
        self.recv.as_mut_ptr() as *mut c_void
    }

    /// The sum of every rank's ones into `recv`.
    ///
    /// # Safety
    /// Every rank calls it in the same place of its scenario.
    unsafe fn all_reduce(&mut self) -> i32 {
        let (sp, rp) = (self.sp(), self.rp());
        // SAFETY: buffers of `count` floats on the scenario's communicator.
        unsafe { ncclAllReduce(sp, rp, self.count, 7, 0, self.comm, std::ptr::null_mut()) }
    }

    /// The scenario's last line (its result, the async error, the time it took, the last
    /// error's message), then the communicator destroyed, or aborted when `r` failed.
    ///
    /// # Safety
    /// The communicator is not used after.
    unsafe fn finish(&self, r: i32) {
        let elapsed = self.start.elapsed().as_millis();
        let mut a = -1;
        // SAFETY: the scenario's communicator, used no more after this.
        unsafe {
            ncclCommGetAsyncError(self.comm, &mut a);
            println!(
                "result={r} async={a} elapsed_ms={elapsed} msg={}",
                last(self.comm)
            );
            if r == 0 {
                ncclCommDestroy(self.comm);
            } else {
                ncclCommAbort(self.comm);
            }
        }
    }
}

/// An id of bytes no rank made: init must refuse it with an error, not a crash.
///
/// # Safety
/// Plain C ABI calls.
unsafe fn garbage_id(rank: usize, nranks: usize) {
    let mut id = ncclUniqueId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        *b = (i * 37 + 11) as _;
    }
    let mut comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let r = unsafe { ncclCommInitRank(&mut comm, nranks as i32, id, rank as i32) };
    println!(
        "result={r} async=-1 elapsed_ms=0 msg={}",
        last(std::ptr::null_mut())
    );
}

/// The last rank dies in the middle of a stream of collectives.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn kill(c: &mut Ctx) -> i32 {
    let mut r = 0;
    for i in 0..200 {
        if c.rank == c.nranks - 1 && i == 3 {
            println!("dying");
            std::process::exit(9);
        }
        // SAFETY: as the function's.
        r = unsafe { c.all_reduce() };
        if r != 0 {
            break;
        }
    }
    r
}

/// Rank 0 calls a different collective than everybody else.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn mismatch(c: &mut Ctx) -> i32 {
    let (sp, rp, null) = (c.sp(), c.rp(), std::ptr::null_mut());
    // SAFETY: the context's buffers and communicator.
    unsafe {
        if c.rank == 0 {
            ncclAllGather(sp, rp, c.count / c.nranks, 7, c.comm, null)
        } else {
            c.all_reduce()
        }
    }
}

/// The last rank goes silent; the others must time out (`CCL_TIMEOUT_S`).
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn silent(c: &mut Ctx) -> i32 {
    if c.rank == c.nranks - 1 {
        std::thread::sleep(std::time::Duration::from_secs(30));
        return 0;
    }
    // SAFETY: as the function's.
    unsafe { c.all_reduce() }
}

/// The last rank goes silent while the others split the communicator (an exchange over the
/// control connections, as init's): they must fail by `CCL_TIMEOUT_S` too.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn silent_split(c: &Ctx) -> i32 {
    if c.rank == c.nranks - 1 {
        std::thread::sleep(std::time::Duration::from_secs(8));
        return 0;
    }
    let mut child: ncclComm_t = std::ptr::null_mut();
    // SAFETY: the context's communicator, valid pointers.
    unsafe { ncclCommSplit(c.comm, 0, c.rank as i32, &mut child, std::ptr::null_mut()) }
}

/// Rank 0 is stuck waiting for a peer that never calls; another thread aborts. Rank 0 prints
/// its own lines (None: nothing more to do), the others wait and end as usual.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn abort(c: &mut Ctx) -> Option<i32> {
    if c.rank != 0 {
        std::thread::sleep(std::time::Duration::from_secs(3));
        return Some(0);
    }
    let comm = c.comm as usize;
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: the communicator outlives this thread, which rank 0 joins below.
        unsafe { ncclCommAbort(comm as ncclComm_t) }
    });
    // SAFETY: as the function's.
    let r = unsafe { c.all_reduce() };
    let a = t.join().unwrap();
    println!("abort_result={a}");
    println!(
        "result={r} async=-1 elapsed_ms={} msg={}",
        c.start.elapsed().as_millis(),
        last(std::ptr::null_mut())
    );
    None
}

/// Results of a few collectives, and how the communicator is wired.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn basic(c: &mut Ctx) -> i32 {
    let (sp, rp) = (c.sp(), c.rp());
    // SAFETY: the context's buffers and communicator.
    let mut r =
        unsafe { ncclAllGather(sp, rp, c.count / c.nranks, 7, c.comm, std::ptr::null_mut()) };
    if r == 0 && c.recv.iter().any(|&x| x != 1.0) {
        r = 99;
    }
    // SAFETY: a live communicator.
    let (ring, links) = unsafe { nccl::describe_comm(c.comm) };
    println!("ring={ring} links={links}");
    r
}

/// The last rank dies; the survivors see the failure, shrink it away with
/// `NCCL_SHRINK_ABORT` and carry on with a working communicator.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn shrink(c: &mut Ctx) -> i32 {
    if c.rank == c.nranks - 1 {
        std::process::exit(9);
    }
    // SAFETY: the context's buffers and communicator; the shrunk one is this rank's.
    unsafe {
        let failed = c.all_reduce();
        let (r, small) = shrink_last(c.comm, c.nranks, 1);
        let (mut n, mut me) = (-1, -1);
        let mut r2 = -1;
        if r == 0 {
            ncclCommCount(small, &mut n);
            ncclCommUserRank(small, &mut me);
            r2 = sum_of_ones(small, c.count, (c.nranks - 1) as f32);
            ncclCommDestroy(small);
        }
        println!("failed={failed} shrink={r} newcount={n} newrank={me} after={r2}");
        r
    }
}

/// Every rank revokes a working communicator, then splits it: the child works.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn revoke_split(c: &Ctx) -> i32 {
    // SAFETY: the context's communicator; the child is this rank's.
    unsafe {
        let revoked = ncclCommRevoke(c.comm, 0);
        let mut child: ncclComm_t = std::ptr::null_mut();
        let r = ncclCommSplit(c.comm, 0, c.rank as i32, &mut child, std::ptr::null_mut());
        let mut after = -1;
        if r == 0 {
            after = sum_of_ones(child, c.count, c.nranks as f32);
            ncclCommDestroy(child);
        }
        println!("revoked={revoked} split={r} after={after}");
        r
    }
}

/// An all-gather, an all-reduce, a broadcast, a reduce-scatter, a reduce, an all-to-all, a
/// gather and a scatter: the first half of the ranks call them in one group, the others one by
/// one (NCCL allows both; a hierarchy must issue the same sequence on every sub-communicator
/// either way, and give each operation its own part of its scratch); then sends and receives
/// in one group with an all-reduce; every result checked.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn grouped(c: &mut Ctx) -> i32 {
    let together = c.rank < c.nranks / 2;
    let mut g = Grouped::new(c);
    // SAFETY: the buffers live in `g` until the checks; the context's communicator.
    let mut r = unsafe { g.collectives(c, together) };
    // SAFETY: as above.
    r |= unsafe { g.sends_and_receives(c, together) };
    if r == 0 && !g.all_exact(c) {
        r = 99;
    }
    r
}

/// The buffers of [`grouped`], every input filled as its check expects.
struct Grouped {
    per: usize,
    root: usize,
    /// This rank's block for the all-gather and the gather: rank + i.
    mine: Vec<f32>,
    gathered: Vec<f32>,
    summed: Vec<f32>,
    sent: Vec<f32>,
    /// Integer averages stay flat: between hierarchical operations they must keep their place
    /// in the sequence. Element i: 10 * rank + i, and then 20 * rank + i, so the averages are
    /// 5 (n - 1) + i and 10 (n - 1) + i (exact).
    ints: Vec<i32>,
    ints2: Vec<i32>,
    avg: Vec<i32>,
    avg2: Vec<i32>,
    /// Element i of every input: rank + i, so block b's j-th sums to
    /// sum(ranks) + nranks * (b * per + j).
    spread: Vec<f32>,
    scattered: Vec<f32>,
    reduced: Vec<f32>,
    /// All-to-all: block j of rank q's input, element i: (q * nranks + j) * 1000 + i.
    a2a_in: Vec<f32>,
    a2a_out: Vec<f32>,
    /// A gather of every rank's block to rank 1, and a scatter from rank 2 of block j:
    /// 100 * j + i.
    gathered_at: Vec<f32>,
    to_scatter: Vec<f32>,
    scattered_from: Vec<f32>,
    /// Sends of rank + 0.5 to the rank beside it on its host and to the one across.
    partner: usize,
    across: usize,
    across_from: usize,
    mine_p2p: Vec<f32>,
    from_partner: Vec<f32>,
    from_across: Vec<f32>,
    last_sum: Vec<f32>,
}

impl Grouped {
    fn new(c: &Ctx) -> Grouped {
        let (rank, nranks, count) = (c.rank, c.nranks, c.count);
        let rank_f = rank as f32;
        let per = count / nranks;
        Grouped {
            per,
            root: nranks - 1,
            mine: (0..per).map(|i| rank_f + i as f32).collect(),
            gathered: vec![0.0; count],
            summed: vec![0.0; count],
            sent: vec![if rank == 1 { 5.0 } else { 0.0 }; count],
            ints: (0..count as i32).map(|i| 10 * rank as i32 + i).collect(),
            ints2: (0..count as i32).map(|i| 20 * rank as i32 + i).collect(),
            avg: vec![0; count],
            avg2: vec![0; count],
            spread: (0..count).map(|i| rank_f + i as f32).collect(),
            scattered: vec![0.0; per],
            reduced: vec![0.0; count],
            a2a_in: (0..count)
                .map(|x| ((rank * nranks + x / per) * 1000 + x % per) as f32)
                .collect(),
            a2a_out: vec![0.0; count],
            gathered_at: vec![0.0; count],
            to_scatter: (0..count)
                .map(|x| (x / per * 100 + x % per) as f32)
                .collect(),
            scattered_from: vec![0.0; per],
            // Odd rank counts: the last rank is its own partner, and the ring step across
            // sends to one rank and receives from another.
            partner: if rank ^ 1 < nranks { rank ^ 1 } else { rank },
            across: (rank + nranks / 2) % nranks,
            across_from: (rank + nranks - nranks / 2) % nranks,
            mine_p2p: vec![rank_f + 0.5; count],
            from_partner: vec![0.0; count],
            from_across: vec![0.0; count],
            last_sum: vec![0.0; count],
        }
    }

    /// The eight collectives, in one group when `together`.
    ///
    /// # Safety
    /// Every rank calls this with its own `together`; `self` outlives the operations.
    unsafe fn collectives(&mut self, c: &Ctx, together: bool) -> i32 {
        let (comm, count, per, null) = (c.comm, c.count, self.per, std::ptr::null_mut());
        let mp = self.mine.as_ptr() as *const c_void;
        let mut r = 0;
        // SAFETY: every buffer holds what its call says; the context's communicator.
        unsafe {
            if together {
                r |= ncclGroupStart();
            }
            r |= ncclAllGather(mp, out(&mut self.gathered), per, 7, comm, null);
            r |= ncclAllReduce(inp(&self.ints), out(&mut self.avg), count, 2, 4, comm, null);
            r |= ncclAllReduce(c.sp(), out(&mut self.summed), count - 1, 7, 0, comm, null);
            let bp = out(&mut self.sent);
            r |= ncclBroadcast(bp, bp, count, 7, 1, comm, null);
            r |= ncclAllReduce(
                inp(&self.ints2),
                out(&mut self.avg2),
                count,
                2,
                4,
                comm,
                null,
            );
            let spread = inp(&self.spread);
            r |= ncclReduceScatter(spread, out(&mut self.scattered), per, 7, 0, comm, null);
            let root = self.root as i32;
            r |= ncclReduce(
                spread,
                out(&mut self.reduced),
                count,
                7,
                0,
                root,
                comm,
                null,
            );
            r |= ncclAlltoAll(
                inp(&self.a2a_in),
                out(&mut self.a2a_out),
                per,
                7,
                comm,
                null,
            );
            r |= ncclGather(mp, out(&mut self.gathered_at), per, 7, 1, comm, null);
            let ts = inp(&self.to_scatter);
            r |= ncclScatter(ts, out(&mut self.scattered_from), per, 7, 2, comm, null);
            if together {
                r |= ncclGroupEnd();
            }
        }
        r
    }

    /// Sends and receives with the rank beside it on its host (two ranks a host; over the
    /// host's communicator) and with the one across (half the ranks on; over this one), in one
    /// group on every rank; and an all-reduce (hierarchical), called last in that group by
    /// the first half, before it by the others: a group's collectives go before its transfers.
    ///
    /// # Safety
    /// As [`Grouped::collectives`].
    unsafe fn sends_and_receives(&mut self, c: &Ctx, together: bool) -> i32 {
        let (comm, count, null) = (c.comm, c.count, std::ptr::null_mut());
        let mpp = inp(&self.mine_p2p);
        let (partner, across, from) = (
            self.partner as i32,
            self.across as i32,
            self.across_from as i32,
        );
        let mut r = 0;
        // SAFETY: as the function's.
        unsafe {
            if !together {
                r |= ncclAllReduce(c.sp(), out(&mut self.last_sum), count, 7, 0, comm, null);
            }
            r |= ncclGroupStart();
            r |= ncclSend(mpp, count, 7, partner, comm, null);
            r |= ncclRecv(out(&mut self.from_partner), count, 7, partner, comm, null);
            r |= ncclSend(mpp, count, 7, across, comm, null);
            r |= ncclRecv(out(&mut self.from_across), count, 7, from, comm, null);
            if together {
                r |= ncclAllReduce(c.sp(), out(&mut self.last_sum), count, 7, 0, comm, null);
            }
            r |= ncclGroupEnd();
        }
        r
    }

    /// Whether every result is exact; prints each check's verdict.
    fn all_exact(&self, c: &Ctx) -> bool {
        let (rank, nranks, count, per) = (c.rank, c.nranks, c.count, self.per);
        let gathered_ok =
            (0..count).all(|i| self.gathered[i] == (i / per) as f32 + (i % per) as f32);
        let summed_ok = self.summed[..count - 1].iter().all(|&x| x == nranks as f32)
            && self.last_sum.iter().all(|&x| x == nranks as f32);
        // sum(10 * rank) / nranks = 5 * (nranks - 1): exact.
        let base = 5 * (nranks as i32 - 1);
        let avg_ok = (0..count)
            .all(|i| self.avg[i] == base + i as i32 && self.avg2[i] == 2 * base + i as i32);
        let sent_ok = self.sent.iter().all(|&x| x == 5.0);
        let ranks_sum = (nranks * (nranks - 1) / 2) as f32;
        let scattered_ok =
            (0..per).all(|j| self.scattered[j] == ranks_sum + (nranks * (rank * per + j)) as f32);
        let reduced_ok = rank != self.root
            || (0..count).all(|i| self.reduced[i] == ranks_sum + (nranks * i) as f32);
        let a2a_ok = (0..count)
            .all(|x| self.a2a_out[x] == ((x / per * nranks + rank) * 1000 + x % per) as f32);
        let rooted_ok = (rank != 1
            || (0..count).all(|i| self.gathered_at[i] == (i / per) as f32 + (i % per) as f32))
            && (0..per).all(|i| self.scattered_from[i] == (rank * 100 + i) as f32);
        let p2p_ok = self
            .from_partner
            .iter()
            .all(|&x| x == self.partner as f32 + 0.5)
            && self
                .from_across
                .iter()
                .all(|&x| x == self.across_from as f32 + 0.5);
        println!(
            "gathered={gathered_ok} summed={summed_ok} broadcast={sent_ok} \
             scattered={scattered_ok} reduced={reduced_ok} a2a={a2a_ok} p2p={p2p_ok} \
             int_avg={avg_ok} gather_scatter={rooted_ok}"
        );
        gathered_ok
            && summed_ok
            && sent_ok
            && scattered_ok
            && reduced_ok
            && a2a_ok
            && avg_ok
            && rooted_ok
            && p2p_ok
    }
}

/// A buffer as a call's input.
fn inp<T>(v: &[T]) -> *const c_void {
    v.as_ptr() as *const c_void
}

/// A buffer as a call's output.
fn out<T>(v: &mut [T]) -> *mut c_void {
    v.as_mut_ptr() as *mut c_void
}

/// Communicators split off a hierarchical one: the whole of it again (hierarchical too) and
/// one per host (one host: flat); an all-reduce on each, checked.
///
/// # Safety
/// Every rank runs this scenario.
unsafe fn split(c: &mut Ctx) -> i32 {
    let mut r = 0;
    let mut checked = Vec::new();
    let (sp, rp) = (c.sp(), c.rp());
    for color in [0, (c.rank / 2) as i32] {
        let mut child: ncclComm_t = std::ptr::null_mut();
        // SAFETY: the context's buffers and communicator; the child is this rank's.
        unsafe {
            r |= ncclCommSplit(
                c.comm,
                color,
                c.rank as i32,
                &mut child,
                std::ptr::null_mut(),
            );
            let mut n = 0;
            ncclCommCount(child, &mut n);
            r |= ncclAllReduce(sp, rp, c.count, 7, 0, child, std::ptr::null_mut());
            checked.push(c.recv.iter().all(|&x| x == n as f32));
            ncclCommDestroy(child);
        }
    }
    println!("split_results={checked:?}");
    if r == 0 && checked.iter().any(|ok| !ok) {
        r = 99;
    }
    r
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
