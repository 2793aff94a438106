use std::sync::atomic::AtomicU64;
use std::time::Duration;

use super::*;
use crate::layout::inbox_words;

fn post(addr: u64) -> Post {
    Post {
        pid: 1,
        addr,
        bytes: 8,
        buffer_id: addr,
        offset: 0,
        handle: [0; 64],
        host_permille: 0,
    }
}

fn board(n: usize) -> Vec<AtomicU64> {
    (0..inbox_words(n)).map(|_| AtomicU64::new(0)).collect()
}

fn patient() -> PushWait<'static> {
    let far = Instant::now() + Duration::from_secs(60);
    PushWait {
        soft: far,
        hard: far,
        busy: &|| true,
        futile: &|| false,
    }
}

#[test]
fn every_rank_posting_makes_it_direct_for_all() {
    let (n, b) = (3, board(3));
    let never = || false;
    for seq in [
        0u64,
        1,
        SYM_RING as u64,
        SYM_RING as u64 + 1,
        2 * SYM_RING as u64,
    ] {
        let mut outcomes = Vec::new();
        for r in 0..n {
            let mine = Some((post(100 * r as u64), post(100 * r as u64 + 1)));
            outcomes.push(sym_post(&b, n, r, seq, mine, None, &never).unwrap());
        }
        assert_eq!(outcomes[0], SymOutcome::Pending);
        assert_eq!(outcomes[1], SymOutcome::Pending);
        let SymOutcome::Direct(posts) = &outcomes[2] else {
            panic!("{outcomes:?}");
        };
        assert_eq!(posts[1], (post(100), post(101)));
        for r in 0..2 {
            let o = sym_settle(&b, n, seq, patient(), false, &never).unwrap();
            assert_eq!(o, outcomes[2].clone(), "rank {r}");
        }
        // Reusable only once all three have left; the next round proves it.
    }
}

#[test]
fn a_late_rank_or_an_unexportable_buffer_makes_it_staged_for_all() {
    let (n, b) = (2, board(2));
    let never = || false;
    // Rank 0 posts and gives up at once (idle GPU); rank 1 arrives after: staged both.
    assert_eq!(
        sym_post(&b, n, 0, 0, Some((post(1), post(2))), None, &never).unwrap(),
        SymOutcome::Pending
    );
    let now = Instant::now();
    let idle = PushWait {
        soft: now,
        hard: now + Duration::from_secs(60),
        busy: &|| false,
        futile: &|| false,
    };
    assert_eq!(
        sym_settle(&b, n, 0, idle, false, &never).unwrap(),
        SymOutcome::Staged
    );
    assert_eq!(
        sym_post(&b, n, 1, 0, Some((post(3), post(4))), None, &never).unwrap(),
        SymOutcome::Staged
    );
    // Rank 1 cannot export: staged for both, whoever comes first.
    assert_eq!(
        sym_post(&b, n, 1, 1, None, None, &never).unwrap(),
        SymOutcome::Staged
    );
    assert_eq!(
        sym_post(&b, n, 0, 1, Some((post(1), post(2))), None, &never).unwrap(),
        SymOutcome::Staged
    );
    // The entries were freed: collective SYM_RING + 1 (same entry as 1) goes direct.
    let seq = SYM_RING as u64 + 1;
    assert_eq!(
        sym_post(&b, n, 0, seq, Some((post(1), post(2))), None, &never).unwrap(),
        SymOutcome::Pending
    );
    assert!(matches!(
        sym_post(&b, n, 1, seq, Some((post(3), post(4))), None, &never).unwrap(),
        SymOutcome::Direct(_)
    ));
}

#[test]
fn with_takeover_the_late_rank_reduces_alone_and_nobody_waits() {
    let (n, b) = (2, board(2));
    let never = || false;
    let now = Instant::now();
    let at_once = PushWait {
        soft: now,
        hard: now,
        busy: &|| true,
        futile: &|| false,
    };
    // Rank 0 first, gives up at once: passive; rank 1 finds that and reduces alone, even
    // though its own buffers cannot be exported (it needs only rank 0's).
    assert_eq!(
        sym_post(&b, n, 0, 0, Some((post(1), post(2))), None, &never).unwrap(),
        SymOutcome::Pending
    );
    assert_eq!(
        sym_settle(&b, n, 0, at_once, true, &never).unwrap(),
        SymOutcome::Passive
    );
    let SymOutcome::Active(posts) = sym_post(&b, n, 1, 0, None, None, &never).unwrap() else {
        panic!("rank 1 should reduce alone");
    };
    assert_eq!(posts[0], (post(1), post(2)));
    // Both arriving before either gives up: shared, as without takeover.
    assert_eq!(
        sym_post(&b, n, 1, 1, Some((post(3), post(4))), None, &never).unwrap(),
        SymOutcome::Pending
    );
    assert!(matches!(
        sym_post(&b, n, 0, 1, Some((post(1), post(2))), None, &never).unwrap(),
        SymOutcome::Direct(_)
    ));
    assert!(matches!(
        sym_settle(&b, n, 1, at_once, true, &never).unwrap(),
        SymOutcome::Direct(_)
    ));
    // The first poster cannot export: staged for both, takeover or not.
    assert_eq!(
        sym_post(&b, n, 0, 2, None, None, &never).unwrap(),
        SymOutcome::Staged
    );
    assert_eq!(
        sym_post(&b, n, 1, 2, Some((post(3), post(4))), None, &never).unwrap(),
        SymOutcome::Staged
    );
    // Every entry was freed: the same slots serve the next round.
    for seq in 0..3 {
        let e = SymEntry::new(&b, n, seq);
        assert_eq!(
            e.word(0).unwrap().load(Ordering::Acquire) >> GEN_SHIFT,
            1,
            "entry {seq}"
        );
    }
}

#[test]
fn racing_ranks_agree_on_direct_or_staged() {
    let n = 4;
    let b = std::sync::Arc::new(board(n));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let b = b.clone();
            std::thread::spawn(move || {
                (0..4 * SYM_RING as u64)
                    .map(|seq| {
                        let mine = Some((post(r as u64), post(r as u64 + 10)));
                        match sym_post(&*b, n, r, seq, mine, None, &|| false).unwrap() {
                            SymOutcome::Pending => {
                                // Some ranks give up quickly, others wait.
                                let by = Instant::now()
                                    + Duration::from_micros((seq + r as u64) % 3 * 40);
                                let w = PushWait {
                                    soft: by,
                                    hard: by,
                                    busy: &|| true,
                                    futile: &|| false,
                                };
                                sym_settle(&*b, n, seq, w, false, &|| false).unwrap()
                            }
                            o => o,
                        }
                    })
                    .map(|o| matches!(o, SymOutcome::Direct(_)))
                    .collect::<Vec<bool>>()
            })
        })
        .collect();
    let all: Vec<Vec<bool>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for seq in 0..all[0].len() {
        let first = all[0][seq];
        assert!(
            all.iter().all(|v| v[seq] == first),
            "collective {seq} disagrees"
        );
    }
}

/// Model checks (loom): two ranks posting one collective, one of them giving up at its
/// first look or waiting (going staged, or with `takeover` leaving it to the other), in
/// every interleaving: both choose matching paths, whoever reduces sees the posts intact,
/// and the entry ends free.
mod loom_model {
    use super::*;
    use crate::rendezvous::LoomWords;
    use loom::sync::Arc;

    fn two_ranks(patient: bool, takeover: bool) {
        loom::model(move || {
            let n = 2;
            let b = Arc::new(LoomWords::new(&[(sym_ring_base(n), sym_entry_words(n))]));
            let b2 = b.clone();
            let never = || false;
            let other = loom::thread::spawn(move || {
                sym_post(&*b2, n, 1, 0, Some((post(10), post(11))), None, &|| false).unwrap()
            });
            let at = if patient {
                Instant::now() + Duration::from_secs(3600)
            } else {
                Instant::now()
            };
            let w = PushWait {
                soft: at,
                hard: at,
                busy: &|| true,
                futile: &|| false,
            };
            let mine = match sym_post(&*b, n, 0, 0, Some((post(0), post(1))), None, &never).unwrap()
            {
                SymOutcome::Pending => sym_settle(&*b, n, 0, w, takeover, &never).unwrap(),
                o => o,
            };
            let theirs = match other.join().unwrap() {
                SymOutcome::Pending => {
                    let patient = PushWait {
                        soft: Instant::now() + Duration::from_secs(3600),
                        hard: Instant::now() + Duration::from_secs(3600),
                        busy: &|| true,
                        futile: &|| false,
                    };
                    sym_settle(&*b, n, 0, patient, false, &never).unwrap()
                }
                o => o,
            };
            match (mine, theirs) {
                (SymOutcome::Direct(p), SymOutcome::Direct(q)) => {
                    assert_eq!(p, vec![(post(0), post(1)), (post(10), post(11))]);
                    assert_eq!(p, q);
                }
                (SymOutcome::Staged, SymOutcome::Staged) => {
                    assert!(!patient && !takeover, "nobody gave up")
                }
                (SymOutcome::Passive, SymOutcome::Active(q)) => {
                    assert!(!patient && takeover, "nobody gave up");
                    assert_eq!(q[0], (post(0), post(1)));
                }
                (m, t) => panic!("rank 0 {m:?}, rank 1 {t:?}"),
            }
            let e = SymEntry::new(&*b, n, 0);
            assert_eq!(e.word(0).unwrap().load(Ordering::Acquire), 1 << GEN_SHIFT);
            assert_eq!(e.word(1).unwrap().load(Ordering::Acquire), 0);
        });
    }

    #[test]
    fn two_ranks_agree_when_one_gives_up_at_once() {
        two_ranks(false, false);
    }

    #[test]
    fn two_ranks_go_direct_when_both_wait() {
        two_ranks(true, false);
    }

    #[test]
    fn two_ranks_agree_when_one_leaves_it_to_the_other() {
        two_ranks(false, true);
    }

    /// Two ranks on symmetric windows, in every interleaving: neither waits, both reduce
    /// directly from the mirrored buffers (or the posts, for the later one, equal to them),
    /// and the entry ends free for the collective `SYM_RING` later.
    #[test]
    fn two_ranks_on_windows_go_direct_and_free_the_entry() {
        loom::model(|| {
            let n = 2;
            let b = Arc::new(LoomWords::new(&[(sym_ring_base(n), sym_entry_words(n))]));
            let mirrors = vec![(post(0), post(1)), (post(10), post(11))];
            let rank = move |b: &LoomWords, r: usize, mirrors: Vec<(Post, Post)>| {
                let mine = Some(mirrors[r]);
                let o = sym_post(b, n, r, 0, mine, None, &|| false).unwrap();
                on_windows(b, n, r, 0, o, mirrors).unwrap()
            };
            let (b2, m2) = (b.clone(), mirrors.clone());
            let other = loom::thread::spawn(move || rank(&b2, 1, m2));
            let mine = rank(&b, 0, mirrors.clone());
            let theirs = other.join().unwrap();
            assert_eq!(mine, SymOutcome::Direct(mirrors.clone()));
            assert_eq!(theirs, SymOutcome::Direct(mirrors));
            let e = SymEntry::new(&*b, n, 0);
            assert_eq!(e.word(0).unwrap().load(Ordering::Acquire), 1 << GEN_SHIFT);
            assert_eq!(e.word(1).unwrap().load(Ordering::Acquire), 0);
        });
    }

    /// Two ranks mailing their reductions (`CCL_IPC_DIRECT_REDUCE_MAILED`), in every
    /// interleaving: a rank posting first peeks once and hands the entry to its mail thread,
    /// which polls until it finds every post; nobody marks the entry, both sides see both
    /// posts intact (the later rank directly, the earlier through its mail thread), and the
    /// entry ends free.
    #[test]
    fn two_mailing_ranks_both_see_both_posts_and_free_the_entry() {
        loom::model(|| {
            let n = 2;
            let b = Arc::new(LoomWords::new(&[(sym_ring_base(n), sym_entry_words(n))]));
            let all = vec![(post(0), post(1)), (post(10), post(11))];
            let rank = move |b: &LoomWords, r: usize, mine: (Post, Post)| {
                let o = sym_post(b, n, r, 0, Some(mine), None, &|| false).unwrap();
                let o = match o {
                    SymOutcome::Pending => sym_peek(b, n, 0).unwrap(),
                    o => o,
                };
                match o {
                    SymOutcome::Direct(p) => p,
                    SymOutcome::Pending => loop {
                        // The mail thread's looks.
                        match sym_poll(b, n, 0).unwrap() {
                            SymPoll::Posted(p) => break p,
                            SymPoll::Waiting => loom::thread::yield_now(),
                            SymPoll::Abandoned => panic!("rank {r}: abandoned"),
                        }
                    },
                    o => panic!("rank {r}: {o:?}"),
                }
            };
            let (b2, theirs) = (b.clone(), all[1]);
            let other = loom::thread::spawn(move || rank(&b2, 1, theirs));
            let mine = rank(&b, 0, all[0]);
            assert_eq!(mine, all);
            assert_eq!(other.join().unwrap(), all);
            let e = SymEntry::new(&*b, n, 0);
            assert_eq!(e.word(0).unwrap().load(Ordering::Acquire), 1 << GEN_SHIFT);
            assert_eq!(e.word(1).unwrap().load(Ordering::Acquire), 0);
        });
    }
}

#[test]
fn on_windows_nobody_waits_and_a_rank_off_its_window_is_reported() {
    let (n, b) = (3, board(3));
    let never = || false;
    let mine = |r: u64| Some((post(100 * r), post(100 * r + 1)));
    let mirrors = |wrong: Option<usize>| -> Vec<(Post, Post)> {
        (0..n as u64)
            .map(|q| match wrong == Some(q as usize) {
                true => (post(100 * q), post(7)),
                false => (post(100 * q), post(100 * q + 1)),
            })
            .collect()
    };
    for seq in [0u64, SYM_RING as u64, 2 * SYM_RING as u64] {
        // The first two go at once on the mirrors; the last checks every post against them.
        for r in 0..2 {
            let o = sym_post(&b, n, r, seq, mine(r as u64), None, &never).unwrap();
            let o = on_windows(&b, n, r, seq, o, mirrors(None)).unwrap();
            assert_eq!(o, SymOutcome::Direct(mirrors(None)), "rank {r} seq {seq}");
        }
        let o = sym_post(&b, n, 2, seq, mine(2), None, &never).unwrap();
        let o = on_windows(&b, n, 2, seq, o, mirrors(None)).unwrap();
        assert_eq!(o, SymOutcome::Direct(mirrors(None)));
        // Every rank left: the entry serves seq + SYM_RING (the next round proves it).
    }
    // Rank 1's output is not where rank 2's window says: rank 2, posting last, reports it.
    let seq = 1;
    for r in 0..2 {
        let o = sym_post(&b, n, r, seq, mine(r as u64), None, &never).unwrap();
        on_windows(&b, n, r, seq, o, mirrors(None)).unwrap();
    }
    let o = sym_post(&b, n, 2, seq, mine(2), None, &never).unwrap();
    let e = on_windows(&b, n, 2, seq, o, mirrors(Some(1))).unwrap_err();
    assert_eq!(e.kind, crate::error::ErrorKind::InvalidUsage);
    assert!(
        e.to_string().contains("rank 1's output is 8 bytes at 0x65"),
        "{e}"
    );
    // A peer whose buffers lie outside its window cannot export... or waited and gave up.
    let o = sym_post(&b, n, 0, 2, None, None, &never).unwrap();
    assert_eq!(o, SymOutcome::Staged);
    let o = sym_post(&b, n, 1, 2, mine(1), None, &never).unwrap();
    let e = on_windows(&b, n, 1, 2, o, mirrors(None)).unwrap_err();
    assert_eq!(e.kind, crate::error::ErrorKind::InvalidUsage);
}
