//! Sends posted before their receivers, queued without waiting (`CCL_IPC_MAILED_PUSH`).
//!
//! A copy across processes needs the destination's address, which the sender learns only
//! when its receiver calls. Instead of holding the sender's host thread until then (the push
//! wait) or leaving the copy to the receiver (which then pushes and pulls on one GPU's copy
//! engines, half speed each way), the sender queues at its call a kernel that waits on a
//! mailbox slot in host-mapped memory and then copies ([`ccl_cuda::cuda::source`]'s
//! `MAIL_*` layout). The engine's mail thread watches the rendezvous entries of such sends;
//! once a receiver has posted, it maps the receiver's buffer in this process and writes the
//! address and length into the slot. So neither host waits for the other, and each GPU
//! pushes its own data; the price is a few SMs for the copy itself. The receiver's side is
//! unchanged: it finds the send pending, posts, and waits on its stream for "done".
//!
//! Direct all-reduces and reduce-scatters go the same way (`CCL_IPC_DIRECT_REDUCE_MAILED`): a
//! rank whose peers have not all posted queues the many-source reduction kernel on a slot
//! ([`ReduceJob`]); once every rank has posted, the thread maps the peers' buffers and writes
//! every source and destination of this rank's slice there.
//!
//! [`step`] is the protocol without threads or CUDA (tested here); [`Mail`] runs it on a
//! thread against pinned memory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccl_cuda::cuda::source::{MAIL_ALSO, MAIL_BYTES, MAIL_DST, MAIL_SEEN, MAIL_SLOT_WORDS};
use ccl_cuda::cuda::source::{MAIL_SRCS, MAIL_TAG, REDUCE_N_MAX};
use ccl_cuda::cuda::{Context, DeviceBuffer, PinnedBuffer};
use parking_lot::Mutex;

use crate::calls::RankBoards;
use crate::direct_reduce::Part;
use crate::error::{cuda_err, Error, Result};
use crate::rendezvous::{self, Post, Words};

/// One mailed send: the rendezvous entry to watch and the slot to fill.
#[derive(Debug, Clone)]
pub(crate) struct MailJob {
    pub slot: usize,
    pub tag: u64,
    /// The transfer: from `src` (this rank) to `dst`, its number between them, our length.
    pub src: usize,
    pub dst: usize,
    pub seq: u64,
    pub bytes: u64,
    /// The communicator's abort flag: set, the slot is filled with "copy nothing".
    pub abort: Arc<AtomicBool>,
}

/// One mailed reduction: the rendezvous entry of direct reduction `seq` over `n` ranks (in
/// rank 0's inbox) and what to write into the slot once every rank has posted: the kernel's
/// destination, its sources in fold order and its further destinations.
#[derive(Debug, Clone)]
pub(crate) struct ReduceJob {
    pub slot: usize,
    pub tag: u64,
    pub seq: u64,
    pub n: usize,
    pub dst: Part,
    pub srcs: Vec<Part>,
    pub also: Vec<Part>,
    /// The communicator's abort flag: set, the slot is filled with "reduce nothing".
    pub abort: Arc<AtomicBool>,
}

/// What the mail thread serves: a mailed send's copy or a mailed reduction.
#[derive(Debug, Clone)]
pub(crate) enum Job {
    Copy(MailJob),
    Reduce(ReduceJob),
}

impl Job {
    fn slot_tag(&self) -> (usize, u64) {
        match self {
            Job::Copy(j) => (j.slot, j.tag),
            Job::Reduce(j) => (j.slot, j.tag),
        }
    }

    /// The rank whose inbox holds the job's rendezvous entry.
    fn board_rank(&self) -> usize {
        match self {
            Job::Copy(j) => j.dst,
            Job::Reduce(_) => 0,
        }
    }

    /// One look: `step` for a copy, [`step_reduce`] for a reduction.
    pub(crate) fn step(
        &self,
        board: &dyn Words,
        words: &dyn SlotWords,
        map: &mut dyn FnMut(&Post) -> Result<u64>,
    ) -> Result<Step> {
        match self {
            Job::Copy(j) => step(j, board, words, map),
            Job::Reduce(j) => step_reduce(j, board, words, map),
        }
    }

    /// Fills the slot with "do nothing" (the communicator is going away).
    pub(crate) fn fill_nothing(&self, words: &dyn SlotWords) {
        let (slot, tag) = self.slot_tag();
        fill(words, slot, tag, 0, 0);
    }
}

/// Words the slots live in: pinned memory in production, a vector in tests.
pub(crate) trait SlotWords: Send + Sync {
    fn word(&self, i: usize) -> &AtomicU64;
}

impl SlotWords for Vec<AtomicU64> {
    fn word(&self, i: usize) -> &AtomicU64 {
        &self[i]
    }
}

/// Pinned, device-mapped slots.
pub(crate) struct PinnedSlots {
    buf: PinnedBuffer,
    words: usize,
}

// SAFETY: the buffer is process-wide pinned memory that host code touches only through
// `AtomicU64`s (and the device through whole aligned words); it is freed on drop, after the
// mail thread that shares it has been joined.
unsafe impl Send for PinnedSlots {}
// SAFETY: as above.
unsafe impl Sync for PinnedSlots {}

impl SlotWords for PinnedSlots {
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "mailbox word {i} outside {}", self.words);
        // SAFETY: `i` is inside the buffer (checked), which is page-aligned (so every word is
        // 8-byte aligned), lives as long as `self`, and is only accessed as whole atomic words.
        unsafe { AtomicU64::from_ptr(self.buf.as_ptr().cast::<u64>().add(i)) }
    }
}

/// Which slot serves which send: a ring of slots, each reused once every block of the kernel
/// it last served has read it.
#[derive(Debug)]
pub(crate) struct Claims {
    next_tag: u64,
    /// Per slot: the tag it last served and that kernel's block count (0: never used).
    last: Vec<(u64, u32)>,
}

impl Claims {
    pub(crate) fn new(slots: usize) -> Claims {
        Claims {
            next_tag: 1,
            last: vec![(0, 0); slots],
        }
    }

    /// A free slot for a kernel of `blocks` blocks, and the tag it will wait for (None: the
    /// slot next in the ring is still in use, as when more sends are in flight than slots).
    pub(crate) fn claim(&mut self, words: &dyn SlotWords, blocks: u32) -> Option<(usize, u64)> {
        let tag = self.next_tag;
        let slot = (tag % self.last.len() as u64) as usize;
        let (prev, prev_blocks) = self.last[slot];
        let base = slot * MAIL_SLOT_WORDS;
        let free = (0..prev_blocks as usize)
            .all(|b| words.word(base + MAIL_SEEN + b).load(Ordering::Acquire) == prev);
        if !free {
            return None;
        }
        self.next_tag += 1;
        self.last[slot] = (tag, blocks);
        Some((slot, tag))
    }
}

/// Writes a slot's destination and length, then its tag (release: a kernel that sees the tag
/// sees the rest). `dst` 0: the kernel copies nothing.
pub(crate) fn fill(words: &dyn SlotWords, slot: usize, tag: u64, dst: u64, bytes: u64) {
    let base = slot * MAIL_SLOT_WORDS;
    words.word(base + MAIL_DST).store(dst, Ordering::Relaxed);
    words
        .word(base + MAIL_BYTES)
        .store(bytes, Ordering::Relaxed);
    words.word(base + MAIL_TAG).store(tag, Ordering::Release);
}

/// Writes a mailed reduction's slot: every source and further destination, the destination,
/// then the tag (release). `dst` 0: the kernel reduces nothing.
pub(crate) fn fill_reduce(
    words: &dyn SlotWords,
    (slot, tag): (usize, u64),
    dst: u64,
    srcs: &[u64],
    also: &[u64],
) {
    let base = slot * MAIL_SLOT_WORDS;
    for m in 0..REDUCE_N_MAX {
        let (s, a) = (srcs.get(m), also.get(m));
        words
            .word(base + MAIL_SRCS + m)
            .store(s.copied().unwrap_or(0), Ordering::Relaxed);
        words
            .word(base + MAIL_ALSO + m)
            .store(a.copied().unwrap_or(0), Ordering::Relaxed);
    }
    words.word(base + MAIL_DST).store(dst, Ordering::Relaxed);
    words.word(base + MAIL_TAG).store(tag, Ordering::Release);
}

/// The mail thread's look at a mailed reduction: once every rank has posted, each buffer of
/// the job is mapped here (`map`) and the slot filled. An entry some rank abandoned (went
/// staged) is an error and reduces nothing: the ranks disagree on the setting.
pub(crate) fn step_reduce(
    job: &ReduceJob,
    board: &dyn Words,
    words: &dyn SlotWords,
    map: &mut dyn FnMut(&Post) -> Result<u64>,
) -> Result<Step> {
    let at = (job.slot, job.tag);
    if job.abort.load(Ordering::Relaxed) {
        fill_reduce(words, at, 0, &[], &[]);
        return Ok(Step::Filled);
    }
    let posts = match crate::direct_reduce::sym_poll(board, job.n, job.seq)? {
        crate::direct_reduce::SymPoll::Waiting => return Ok(Step::Waiting),
        crate::direct_reduce::SymPoll::Posted(p) => p,
        crate::direct_reduce::SymPoll::Abandoned => {
            fill_reduce(words, at, 0, &[], &[]);
            return Err(Error::internal(format!(
                "cuda-ipc: mailed direct reduction {} was abandoned by a peer (went staged); \
                 CCL_IPC_DIRECT_REDUCE_MAILED must be agreed by every rank",
                job.seq
            )));
        }
    };
    let mut addr = |p: &Part| -> Result<u64> {
        let (input, output) = posts
            .get(p.rank)
            .ok_or_else(|| Error::internal(format!("cuda-ipc: no post of rank {}", p.rank)))?;
        Ok(map(if p.output { output } else { input })? + p.offset)
    };
    let resolved = (|| -> Result<(u64, Vec<u64>, Vec<u64>)> {
        let srcs = job.srcs.iter().map(&mut addr).collect::<Result<_>>()?;
        let also = job.also.iter().map(&mut addr).collect::<Result<_>>()?;
        Ok((addr(&job.dst)?, srcs, also))
    })();
    match resolved {
        Ok((dst, srcs, also)) => {
            fill_reduce(words, at, dst, &srcs, &also);
            Ok(Step::Filled)
        }
        Err(e) => {
            // The peers still get this rank's "done" (after a reduction of nothing): the
            // error is the communicator's from here on.
            fill_reduce(words, at, 0, &[], &[]);
            Err(e)
        }
    }
}

/// What one look at a mailed send found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The receiver has not posted yet.
    Waiting,
    /// The slot is filled (with the receiver's buffer, or with nothing after an abort).
    Filled,
}

/// The mail thread's protocol: looks at a send's rendezvous entry and fills its slot once the
/// receiver has posted. `map` turns the receiver's post into an address of this process.
pub(crate) fn step(
    job: &MailJob,
    board: &dyn Words,
    words: &dyn SlotWords,
    map: &mut dyn FnMut(&Post) -> Result<u64>,
) -> Result<Step> {
    if job.abort.load(Ordering::Relaxed) {
        fill(words, job.slot, job.tag, 0, 0);
        return Ok(Step::Filled);
    }
    let Some(theirs) = rendezvous::take_if_posted(board, job.src, job.seq)? else {
        return Ok(Step::Waiting);
    };
    let bytes = job.bytes.min(theirs.bytes);
    let mismatch = (theirs.bytes != job.bytes).then(|| {
        Error::invalid_usage(format!(
            "rank {} sends {} bytes to rank {}, which receives {} bytes (transfer {} between \
             them)",
            job.src, job.bytes, job.dst, theirs.bytes, job.seq
        ))
    });
    let dst = if bytes == 0 { Ok(0) } else { map(&theirs) };
    match dst {
        Ok(dst) => fill(words, job.slot, job.tag, dst, bytes),
        Err(e) => {
            // The receiver still gets its "done" (after a copy of nothing): the error is the
            // communicator's from here on.
            fill(words, job.slot, job.tag, 0, 0);
            return Err(e);
        }
    }
    mismatch.map_or(Ok(Step::Filled), Err)
}

/// The mailed sends of one engine: its slots, the claims on them, and the thread that fills
/// them.
pub(crate) struct Mail {
    words: Arc<PinnedSlots>,
    claims: Mutex<Claims>,
    /// Blocks and threads per block of the copy kernel (`CCL_IPC_MAIL_BLOCKS`).
    pub(crate) grid: (u32, u32),
    /// Each slot's mirror in device memory for mailed reductions (zeroed), which their kernels
    /// read instead of host memory ([`ccl_cuda::cuda::Kernels::reduce_n_mail`]).
    mirrors: DeviceBuffer,
    jobs: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The first error the thread met (a size mismatch, a mapping that failed): the next
    /// operation returns it.
    error: Arc<Mutex<Option<Error>>>,
    fills: Arc<Mutex<Fills>>,
}

impl Mail {
    /// Slots in the ring: more sends than this in flight at once take the push wait instead.
    pub(crate) const SLOTS: usize = 1024;

    /// Slots for this engine and its mail thread, which watches `inbox` and maps receivers'
    /// buffers through `ctx` (`pid`: this process; a post of it needs no mapping).
    pub(crate) fn new(
        ctx: &Arc<Context>,
        inbox: Arc<RankBoards>,
        pid: u64,
        blocks: u32,
    ) -> Result<Mail> {
        let words = MAIL_SLOT_WORDS * Self::SLOTS;
        let buf = PinnedBuffer::new(ctx, words * 8).map_err(cuda_err)?;
        let words = Arc::new(PinnedSlots { buf, words });
        for i in 0..words.words {
            words.word(i).store(0, Ordering::Relaxed);
        }
        let bytes = MAIL_SLOT_WORDS * Self::SLOTS * 8;
        let mirrors = DeviceBuffer::new(ctx, bytes).map_err(cuda_err)?;
        mirrors.write(0, &vec![0u8; bytes]).map_err(cuda_err)?;
        let (tx, rx) = mpsc::channel();
        let error = Arc::new(Mutex::new(None));
        let fills = Arc::new(Mutex::new(Fills::default()));
        let thread = {
            let (words, error, ctx) = (words.clone(), error.clone(), ctx.clone());
            let fills = fills.clone();
            std::thread::Builder::new()
                .name("ccl-mail".into())
                .spawn(move || run(rx, &*words, &inbox, &ctx, pid, &error, &fills))
                .map_err(|e| Error::system(format!("cuda-ipc: no mail thread: {e}")))?
        };
        Ok(Mail {
            words,
            mirrors,
            claims: Mutex::new(Claims::new(Self::SLOTS)),
            grid: (
                blocks.clamp(1, ccl_cuda::cuda::source::MAIL_MAX_BLOCKS as u32),
                512,
            ),
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            error,
            fills,
        })
    }

    /// Claims a slot for a send to `dst` and hands it to the mail thread: the slot's device
    /// address and the tag its kernel waits for (None: no slot free, or the thread is gone).
    pub(crate) fn send(&self, job: impl FnOnce(usize, u64) -> MailJob) -> Option<(u64, u64)> {
        let (slot, tag) = self.claims.lock().claim(&*self.words, self.grid.0)?;
        let jobs = self.jobs.lock();
        jobs.as_ref()?.send(Job::Copy(job(slot, tag))).ok()?;
        Some((self.slot_ptr(slot), tag))
    }

    /// Claims a slot for a mailed reduction and hands it to the mail thread: the slot's device
    /// address, the tag its kernel waits for and the slot's mirror in device memory (None: no
    /// slot free, or the thread is gone).
    pub(crate) fn reduce(
        &self,
        job: impl FnOnce(usize, u64) -> ReduceJob,
    ) -> Option<(u64, u64, u64)> {
        // The reduction kernel marks one "seen" word, whatever its grid.
        let (slot, tag) = self.claims.lock().claim(&*self.words, 1)?;
        let jobs = self.jobs.lock();
        jobs.as_ref()?.send(Job::Reduce(job(slot, tag))).ok()?;
        let mirror = self.mirrors.ptr() + (slot * MAIL_SLOT_WORDS * 8) as u64;
        Some((self.slot_ptr(slot), tag, mirror))
    }

    fn slot_ptr(&self, slot: usize) -> u64 {
        self.words.buf.device_ptr() + (slot * MAIL_SLOT_WORDS * 8) as u64
    }

    /// The mailed reductions the thread has filled so far.
    pub(crate) fn fills(&self) -> Fills {
        *self.fills.lock()
    }

    /// The thread's first error, once.
    pub(crate) fn take_error(&self) -> Option<Error> {
        self.error.lock().take()
    }
}

impl Mail {
    /// Closes the job queue: the thread fills what is left with "copy nothing" and ends (also
    /// for an engine leaked after an abort, which is never dropped).
    pub(crate) fn close(&self) {
        self.jobs.lock().take();
    }
}

impl Drop for Mail {
    fn drop(&mut self) {
        self.close();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

/// The mail thread: takes jobs, looks at each pending send's entry, backs off while nothing
/// moves. When the queue closes, pending sends get "copy nothing" (their communicator is
/// going away, and a kernel must not spin forever).
fn run(
    rx: Receiver<Job>,
    words: &dyn SlotWords,
    inbox: &RankBoards,
    ctx: &Arc<Context>,
    pid: u64,
    error: &Mutex<Option<Error>>,
    fills: &Mutex<Fills>,
) {
    let mut pending: Vec<(Job, Instant)> = Vec::new();
    let mut last_progress = Instant::now();
    let bound = ctx.bind().is_ok();
    let mut map = |p: &Post| -> Result<u64> {
        if !bound {
            return Err(Error::system(
                "cuda-ipc: the mail thread has no CUDA context",
            ));
        }
        crate::buffers::resolve_post(ctx, pid, p)
    };
    loop {
        let closed = take_jobs(&rx, &mut pending);
        if closed {
            for (j, _) in pending.drain(..) {
                j.fill_nothing(words);
            }
            return;
        }
        let before = pending.len();
        pending.retain(|(j, since)| {
            let Some(board) = inbox.of(j.board_rank()) else {
                record(
                    error,
                    Error::internal(format!("cuda-ipc: no inbox of rank {}", j.board_rank())),
                );
                j.fill_nothing(words);
                return false;
            };
            match j.step(board, words, &mut map) {
                Ok(Step::Waiting) => true,
                Ok(Step::Filled) => {
                    if let Job::Reduce(_) = j {
                        fills.lock().add(since.elapsed());
                    }
                    false
                }
                Err(e) => {
                    record(error, e);
                    false
                }
            }
        });
        let newest = pending.iter().map(|(_, t)| *t).max();
        if pending.len() < before {
            last_progress = Instant::now();
        }
        // A kernel may be spinning on one of these slots: look again at once for a while
        // after the last job came or was filled, then every 20 us.
        let from = newest.map_or(last_progress, |t| t.max(last_progress));
        if from.elapsed() < LOOK_AGAIN_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Moves the queued jobs into `pending` (blocking while there is nothing to do), each with the
/// time it was taken; true once the queue is closed.
fn take_jobs(rx: &Receiver<Job>, pending: &mut Vec<(Job, Instant)>) -> bool {
    if pending.is_empty() {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(j) => pending.push((j, Instant::now())),
            Err(RecvTimeoutError::Timeout) => return false,
            Err(RecvTimeoutError::Disconnected) => return true,
        }
    }
    loop {
        match rx.try_recv() {
            Ok(j) => pending.push((j, Instant::now())),
            Err(mpsc::TryRecvError::Empty) => return false,
            Err(mpsc::TryRecvError::Disconnected) => return true,
        }
    }
}

/// How long the mail thread keeps looking without sleeping after a job came or was filled (a
/// peer later than that may wait 20 us more; meanwhile the thread takes a core).
const LOOK_AGAIN_FOR: Duration = Duration::from_millis(20);

/// The mailed reductions filled so far: how many, and the time from the call to the fill (in
/// all, and the longest), which is how late the last peer called plus the mail thread's own
/// delay.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Fills {
    pub count: u64,
    pub total: Duration,
    pub longest: Duration,
}

impl Fills {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.total += d;
        self.longest = self.longest.max(d);
    }
}

fn record(slot: &Mutex<Option<Error>>, e: Error) {
    tracing::warn!("{e}");
    slot.lock().get_or_insert(e);
}

#[cfg(test)]
mod tests;
