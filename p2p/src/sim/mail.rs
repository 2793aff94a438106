//! The mail thread of mailed sends in the simulation ([`crate::mail`]): the slots as atomic
//! words, the jobs handed over at settling, and the thread's step run at random points of a
//! run (every rank has posted by then, as when the thread looks late).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ccl_cuda::cuda::source::{MAIL_ALSO, MAIL_BYTES, MAIL_DST, MAIL_SEEN, MAIL_SLOT_WORDS};
use ccl_cuda::cuda::source::{MAIL_SRCS, MAIL_TAG, REDUCE_N_MAX};

use super::device::{MailThread, Mem};
use crate::device::Kernel;
use crate::mail::{Claims, Job, MailJob, ReduceJob, Step};

/// Slots the simulated engines share (as many as one engine has: a run's sends all fit).
const SLOTS: usize = crate::mail::Mail::SLOTS;

pub(super) struct SimMail {
    words: Vec<AtomicU64>,
    claims: RefCell<Claims>,
    jobs: RefCell<Vec<Job>>,
    /// Sends mailed so far.
    pub(super) handed: std::cell::Cell<usize>,
}

impl SimMail {
    pub(super) fn new() -> SimMail {
        SimMail {
            words: (0..SLOTS * MAIL_SLOT_WORDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            claims: RefCell::new(Claims::new(SLOTS)),
            jobs: RefCell::new(Vec::new()),
            handed: std::cell::Cell::new(0),
        }
    }

    /// Claims a slot for rank `src`'s send to `dst` and queues the job; the slot index stands
    /// for its device address. No slot free: None (the send then settles as without mail).
    pub(super) fn hand(
        &self,
        src: usize,
        dst: usize,
        seq: u64,
        bytes: usize,
    ) -> Option<(u64, u64)> {
        let (slot, tag) = self.claims.borrow_mut().claim(&self.words, 1)?;
        self.handed.set(self.handed.get() + 1);
        self.jobs.borrow_mut().push(Job::Copy(MailJob {
            slot,
            tag,
            src,
            dst,
            seq,
            bytes: bytes as u64,
            abort: Arc::new(AtomicBool::new(false)),
        }));
        Some((slot as u64, tag))
    }

    /// Claims a slot for a mailed reduction and queues the job (built from the slot and its
    /// tag); the slot index stands for its address, and for its arrival count's.
    pub(super) fn hand_reduce(
        &self,
        job: impl FnOnce(usize, u64) -> ReduceJob,
    ) -> Option<(u64, u64, u64)> {
        let (slot, tag) = self.claims.borrow_mut().claim(&self.words, 1)?;
        self.handed.set(self.handed.get() + 1);
        self.jobs.borrow_mut().push(Job::Reduce(job(slot, tag)));
        Some((slot as u64, tag, slot as u64))
    }

    fn word(&self, slot: u64, i: usize) -> &AtomicU64 {
        &self.words[slot as usize * MAIL_SLOT_WORDS + i]
    }
}

impl MailThread for SimMail {
    fn filled(&self, slot: u64, tag: u64) -> bool {
        self.word(slot, MAIL_TAG).load(Ordering::Acquire) == tag
    }

    fn pending(&self) -> bool {
        !self.jobs.borrow().is_empty()
    }

    /// The thread looks at one pending send (picked by `pick`): filled, it leaves the list.
    fn step_one(&self, pick: u64, boards: &[Vec<AtomicU64>]) -> Result<(), String> {
        let mut jobs = self.jobs.borrow_mut();
        let i = (pick % jobs.len() as u64) as usize;
        let j = &jobs[i];
        let board = match j {
            Job::Copy(c) => &boards[c.dst],
            Job::Reduce(_) => &boards[0],
        };
        match j
            .step(board, &self.words, &mut |p| Ok(p.addr))
            .map_err(|e| e.to_string())?
        {
            Step::Filled => {
                jobs.swap_remove(i);
            }
            Step::Waiting => {}
        }
        Ok(())
    }

    /// The kernel: copies what the slot names (at most `max` bytes) and marks it seen.
    fn copy(&self, mem: &mut Mem, slot: u64, tag: u64, src: u64, max: usize) {
        let dst = self.word(slot, MAIL_DST).load(Ordering::Acquire);
        let bytes = (self.word(slot, MAIL_BYTES).load(Ordering::Acquire) as usize).min(max);
        if dst != 0 && bytes > 0 {
            let b = mem.read(src, bytes);
            mem.range(dst, bytes).copy_from_slice(&b);
        }
        self.word(slot, MAIL_SEEN).store(tag, Ordering::Release);
    }

    fn resolve(&self, k: &Kernel) -> Option<Kernel> {
        let Kernel::ReduceNMail {
            dtype,
            op,
            k,
            nalso,
            n,
            slot,
            tag,
            ..
        } = *k
        else {
            return Some(*k);
        };
        let at = |i: usize| self.word(slot, i).load(Ordering::Acquire);
        let (mut srcs, mut also) = ([0u64; REDUCE_N_MAX], [0u64; REDUCE_N_MAX]);
        for m in 0..REDUCE_N_MAX {
            (srcs[m], also[m]) = (at(MAIL_SRCS + m), at(MAIL_ALSO + m));
        }
        let dst = at(MAIL_DST);
        self.word(slot, MAIL_SEEN).store(tag, Ordering::Release);
        (dst != 0 && n > 0).then_some(Kernel::ReduceN {
            dtype,
            op,
            dst,
            srcs,
            k,
            n,
            also,
            nalso,
        })
    }
}
