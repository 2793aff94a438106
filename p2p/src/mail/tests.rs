use std::sync::atomic::AtomicU64;

use super::*;
use crate::layout::inbox_words;
use crate::rendezvous::{post, Outcome};

fn post_of(bytes: u64, addr: u64) -> Post {
    Post {
        pid: 9,
        addr,
        bytes,
        buffer_id: 4,
        offset: 0,
        handle: [0x5a; 64],
        host_permille: 0,
    }
}

fn words(slots: usize) -> Vec<AtomicU64> {
    (0..slots * MAIL_SLOT_WORDS)
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn job(slot: usize, tag: u64, seq: u64, bytes: u64, abort: &Arc<AtomicBool>) -> MailJob {
    MailJob {
        slot,
        tag,
        src: 1,
        dst: 0,
        seq,
        bytes,
        abort: abort.clone(),
    }
}

fn slot_of(w: &[AtomicU64], slot: usize) -> (u64, u64, u64) {
    let at = |i: usize| w[slot * MAIL_SLOT_WORDS + i].load(Ordering::Acquire);
    (at(MAIL_TAG), at(MAIL_DST), at(MAIL_BYTES))
}

/// The receiver's address as "this process" maps it in the tests: its own plus a fixed shift.
fn map_shifted(p: &Post) -> Result<u64> {
    Ok(p.addr + 0x1000)
}

#[test]
fn a_mailed_send_is_filled_once_its_receiver_posts_and_not_before() {
    let (b, w) = (
        (0..inbox_words(2))
            .map(|_| AtomicU64::new(0))
            .collect::<Vec<_>>(),
        words(4),
    );
    let no = Arc::new(AtomicBool::new(false));
    let stop = || false;
    let o = post(&b, 1, 0, true, &post_of(256, 0x10), None, &stop).unwrap();
    assert_eq!(o, Outcome::Pending);
    let j = job(2, 77, 0, 256, &no);
    assert_eq!(step(&j, &b, &w, &mut map_shifted).unwrap(), Step::Waiting);
    assert_eq!(
        slot_of(&w, 2),
        (0, 0, 0),
        "slot written before the receiver posted"
    );
    // The receiver finds the send pending and leaves the copy to it.
    let o = post(&b, 1, 0, false, &post_of(256, 0x4000), None, &stop).unwrap();
    assert_eq!(o, Outcome::First);
    assert_eq!(step(&j, &b, &w, &mut map_shifted).unwrap(), Step::Filled);
    assert_eq!(slot_of(&w, 2), (77, 0x5000, 256));
    // The entry is free for the transfer a ring later.
    let later = crate::layout::RING as u64;
    let o = post(&b, 1, later, true, &post_of(8, 0x10), None, &stop).unwrap();
    assert_eq!(o, Outcome::Pending);
}

#[test]
fn a_size_mismatch_copies_the_smaller_and_is_an_error() {
    let b: Vec<AtomicU64> = (0..inbox_words(2)).map(|_| AtomicU64::new(0)).collect();
    let w = words(1);
    let no = Arc::new(AtomicBool::new(false));
    post(&b, 1, 3, true, &post_of(1000, 0x10), None, &|| false).unwrap();
    post(&b, 1, 3, false, &post_of(600, 0x8000), None, &|| false).unwrap();
    let e = step(&job(0, 5, 3, 1000, &no), &b, &w, &mut map_shifted).unwrap_err();
    assert!(
        e.to_string().contains("rank 1 sends 1000 bytes to rank 0"),
        "{e}"
    );
    assert_eq!(slot_of(&w, 0), (5, 0x9000, 600));
}

#[test]
fn an_abort_or_a_failed_mapping_fills_the_slot_with_nothing() {
    let b: Vec<AtomicU64> = (0..inbox_words(2)).map(|_| AtomicU64::new(0)).collect();
    let w = words(2);
    let aborted = Arc::new(AtomicBool::new(true));
    post(&b, 1, 0, true, &post_of(64, 0x10), None, &|| false).unwrap();
    // Aborted before the receiver came: the kernel is released, copying nothing.
    assert_eq!(
        step(&job(0, 11, 0, 64, &aborted), &b, &w, &mut map_shifted).unwrap(),
        Step::Filled
    );
    assert_eq!(slot_of(&w, 0), (11, 0, 0));
    let no = Arc::new(AtomicBool::new(false));
    post(&b, 1, 1, true, &post_of(64, 0x10), None, &|| false).unwrap();
    post(&b, 1, 1, false, &post_of(64, 0x20), None, &|| false).unwrap();
    let mut failing = |_: &Post| -> Result<u64> { Err(Error::system("no mapping")) };
    assert!(step(&job(1, 12, 1, 64, &no), &b, &w, &mut failing).is_err());
    assert_eq!(slot_of(&w, 1), (12, 0, 0));
}

#[test]
fn a_slot_is_reused_only_after_every_block_of_its_kernel_read_it() {
    let w = words(2);
    let mut c = Claims::new(2);
    // Tags 1 and 2 take slots 1 and 0; the ring comes back to slot 1 for tag 3.
    assert_eq!(c.claim(&w, 3), Some((1, 1)));
    assert_eq!(c.claim(&w, 1), Some((0, 2)));
    assert_eq!(c.claim(&w, 3), None, "slot 1's kernel has not read it");
    // Two of its three blocks have read it: still in use.
    for b in 0..2 {
        w[MAIL_SLOT_WORDS + MAIL_SEEN + b].store(1, Ordering::Release);
    }
    assert_eq!(c.claim(&w, 3), None);
    w[MAIL_SLOT_WORDS + MAIL_SEEN + 2].store(1, Ordering::Release);
    assert_eq!(c.claim(&w, 2), Some((1, 3)));
    // Slot 0's one block read tag 2: tag 4 may take it.
    w[MAIL_SEEN].store(2, Ordering::Release);
    assert_eq!(c.claim(&w, 2), Some((0, 4)));
}

#[test]
fn a_pulled_or_unknown_transfer_is_not_mistaken_for_a_mailed_one() {
    let b: Vec<AtomicU64> = (0..inbox_words(2)).map(|_| AtomicU64::new(0)).collect();
    let w = words(1);
    let no = Arc::new(AtomicBool::new(false));
    // Nothing posted for transfer 0: not a pending send.
    assert!(step(&job(0, 1, 0, 8, &no), &b, &w, &mut map_shifted).is_err());
    assert_eq!(slot_of(&w, 0), (0, 0, 0));
}

fn reduce_slot(w: &[AtomicU64], slot: usize) -> (u64, u64, Vec<u64>, Vec<u64>) {
    use ccl_cuda::cuda::source::{MAIL_ALSO, MAIL_SRCS};
    let at = |i: usize| w[slot * MAIL_SLOT_WORDS + i].load(Ordering::Acquire);
    (
        at(MAIL_TAG),
        at(MAIL_DST),
        (0..3).map(|m| at(MAIL_SRCS + m)).collect(),
        (0..2).map(|a| at(MAIL_ALSO + a)).collect(),
    )
}

/// Rank 0 of three mails its all-reduce's slice: sources in fold order (its own input, then
/// ranks 1 and 2), its own output slice, the peers' output slices.
fn reduce_job(slot: usize, tag: u64, seq: u64, abort: &Arc<AtomicBool>) -> ReduceJob {
    let part = |rank, output| Part {
        rank,
        output,
        offset: 0x40,
    };
    ReduceJob {
        slot,
        tag,
        seq,
        n: 3,
        dst: part(0, true),
        srcs: vec![part(0, false), part(1, false), part(2, false)],
        also: vec![part(1, true), part(2, true)],
        abort: abort.clone(),
    }
}

/// (input, output) of rank r: 0x10000 * (r + 1) and that plus 0x1000.
fn sym_posts(r: u64) -> (Post, Post) {
    (
        post_of(4096, 0x10000 * (r + 1)),
        post_of(4096, 0x10000 * (r + 1) + 0x1000),
    )
}

#[test]
fn a_mailed_reduction_is_filled_once_every_rank_posted_with_every_buffer_mapped() {
    use crate::direct_reduce::{sym_post, SymOutcome};
    let (b, w) = (
        (0..inbox_words(3))
            .map(|_| AtomicU64::new(0))
            .collect::<Vec<_>>(),
        words(2),
    );
    let no = Arc::new(AtomicBool::new(false));
    let never = || false;
    let o = sym_post(&b, 3, 0, 0, Some(sym_posts(0)), None, &never).unwrap();
    assert_eq!(o, SymOutcome::Pending);
    let j = Job::Reduce(reduce_job(1, 9, 0, &no));
    assert_eq!(j.step(&b, &w, &mut map_shifted).unwrap(), Step::Waiting);
    let o = sym_post(&b, 3, 2, 0, Some(sym_posts(2)), None, &never).unwrap();
    assert_eq!(o, SymOutcome::Pending);
    assert_eq!(j.step(&b, &w, &mut map_shifted).unwrap(), Step::Waiting);
    assert_eq!(
        reduce_slot(&w, 1).0,
        0,
        "slot written before every rank posted"
    );
    // The last rank finds every post and reduces directly itself.
    let o = sym_post(&b, 3, 1, 0, Some(sym_posts(1)), None, &never).unwrap();
    assert!(matches!(o, SymOutcome::Direct(_)), "{o:?}");
    assert_eq!(j.step(&b, &w, &mut map_shifted).unwrap(), Step::Filled);
    // Every address is the post's, mapped (+0x1000), at the part's offset (+0x40).
    let m = |a: u64| a + 0x1040;
    assert_eq!(
        reduce_slot(&w, 1),
        (
            9,
            m(0x11000),
            vec![m(0x10000), m(0x20000), m(0x30000)],
            vec![m(0x21000), m(0x31000)]
        )
    );
}

#[test]
fn a_mailed_reduction_abandoned_or_aborted_reduces_nothing() {
    use crate::direct_reduce::sym_post;
    let b: Vec<AtomicU64> = (0..inbox_words(3)).map(|_| AtomicU64::new(0)).collect();
    let w = words(2);
    let never = || false;
    let no = Arc::new(AtomicBool::new(false));
    sym_post(&b, 3, 0, 0, Some(sym_posts(0)), None, &never).unwrap();
    // A rank that cannot export (a disagreeing setting) marks the entry failed.
    sym_post(&b, 3, 1, 0, None, None, &never).unwrap();
    let e = Job::Reduce(reduce_job(0, 4, 0, &no))
        .step(&b, &w, &mut map_shifted)
        .unwrap_err();
    assert!(e.to_string().contains("abandoned"), "{e}");
    assert_eq!(reduce_slot(&w, 0).0, 4);
    assert_eq!(
        reduce_slot(&w, 0).1,
        0,
        "a destination after an abandoned rendezvous"
    );
    // Aborted before the peers came: released at once, reducing nothing.
    sym_post(&b, 3, 0, 1, Some(sym_posts(0)), None, &never).unwrap();
    let aborted = Arc::new(AtomicBool::new(true));
    let j = Job::Reduce(reduce_job(1, 5, 1, &aborted));
    assert_eq!(j.step(&b, &w, &mut map_shifted).unwrap(), Step::Filled);
    assert_eq!(reduce_slot(&w, 1).0, 5);
    assert_eq!(reduce_slot(&w, 1).1, 0);
}
