use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use super::*;
use crate::layout::inbox_words;

fn post_at(addr: u64) -> Post {
    Post {
        pid: 7,
        addr,
        bytes: 64,
        buffer_id: 3,
        offset: 16,
        handle: [0xab; 64],
        host_permille: 0,
    }
}

fn board(n: usize) -> Vec<AtomicU64> {
    (0..inbox_words(n)).map(|_| AtomicU64::new(0)).collect()
}

fn first(b: &dyn Words, seq: u64, src_side: bool, addr: u64) -> Outcome {
    post(b, 1, seq, src_side, &post_at(addr), None, &|| false).unwrap()
}

#[test]
fn a_destination_never_waits_and_the_source_pushes_when_it_can() {
    let b = board(2);
    // Destination first: the source, posting later, pushes at once.
    assert_eq!(first(&b, 5, false, 100), Outcome::First);
    assert_eq!(first(&b, 5, true, 200), Outcome::Second(post_at(100)));
    // Source first: pending; the destination's post settles it as a push.
    let seq = 5 + RING as u64;
    assert_eq!(first(&b, seq, true, 300), Outcome::Pending);
    assert_eq!(first(&b, seq, false, 400), Outcome::First);
    let far = Instant::now() + Duration::from_secs(60);
    let patient = PushWait {
        soft: far,
        hard: far,
        busy: &|| true,
        futile: &|| false,
    };
    assert_eq!(
        resolve(&b, 1, seq, patient, &|| false).unwrap(),
        Outcome::Second(post_at(400))
    );
    // Source first and the destination late: just past the wait the source gives up
    // and the destination pulls.
    let seq = 5 + 2 * RING as u64;
    assert_eq!(first(&b, seq, true, 500), Outcome::Pending);
    // Past the soft limit a busy GPU keeps it waiting, an idle one does not.
    let now = Instant::now();
    let idle = PushWait {
        soft: now,
        hard: far,
        busy: &|| false,
        futile: &|| false,
    };
    assert_eq!(
        resolve(&b, 1, seq, idle, &|| false).unwrap(),
        Outcome::First
    );
    assert_eq!(first(&b, seq, false, 600), Outcome::Second(post_at(500)));
    // The entry is free again for the next round.
    assert_eq!(first(&b, 5 + 3 * RING as u64, false, 700), Outcome::First);
}

#[test]
fn a_side_ring_ahead_waits_until_the_deadline() {
    let b = board(2);
    let never = || false;
    assert_eq!(first(&b, 0, false, 1), Outcome::First);
    // Transfer RING needs entry 0, still held by transfer 0: just fails at the deadline...
    let soon = Some(Instant::now() + Duration::from_millis(20));
    let e = post(&b, 1, RING as u64, false, &post_at(2), soon, &never).unwrap_err();
    assert!(e.to_string().contains("behind"), "{e}");
    // ...and just succeeds once the peer has caught up.
    assert_eq!(first(&b, 0, true, 3), Outcome::Second(post_at(1)));
    let soon = Some(Instant::now() + Duration::from_millis(20));
    assert_eq!(
        post(&b, 1, RING as u64, false, &post_at(2), soon, &never).unwrap(),
        Outcome::First
    );
    // An aborted communicator stops the wait at once.
    let stop = || true;
    let e = post(&b, 1, 2 * RING as u64, false, &post_at(2), None, &stop).unwrap_err();
    assert!(e.to_string().contains("aborted"), "{e}");
}

#[test]
fn racing_posters_always_pair_up_one_copier_per_transfer() {
    let b = std::sync::Arc::new(board(2));
    let run = |i_am_src: bool, b: std::sync::Arc<Vec<AtomicU64>>| {
        std::thread::spawn(move || {
            (0..4 * RING as u64)
                .map(|seq| {
                    let me = post_at(seq * 2 + i_am_src as u64);
                    let o = post(&*b, 1, seq, i_am_src, &me, None, &|| false).unwrap();
                    if o == Outcome::Pending {
                        // Alternate between giving up at once and waiting.
                        let by = Instant::now() + Duration::from_micros(seq % 2 * 50);
                        let wait = PushWait {
                            soft: by,
                            hard: by,
                            busy: &|| true,
                            futile: &|| false,
                        };
                        resolve(&*b, 1, seq, wait, &|| false).unwrap()
                    } else {
                        o
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    let (s, d) = (run(true, b.clone()), run(false, b.clone()));
    let (s, d) = (s.join().unwrap(), d.join().unwrap());
    for (seq, (a, c)) in s.iter().zip(&d).enumerate() {
        let seq = seq as u64;
        match (a, c) {
            (Outcome::First, Outcome::Second(p)) => assert_eq!(p.addr, seq * 2 + 1),
            (Outcome::Second(p), Outcome::First) => assert_eq!(p.addr, seq * 2),
            other => panic!("transfer {seq}: {other:?}"),
        }
    }
}

/// Two ranks each call a send before their receive (Megatron's overlapped p2p): neither
/// waits out its push window; both give up at once and both pull.
#[test]
fn sends_crossing_give_up_at_once_and_both_pull() {
    let (inbox0, inbox1) = (board(2), board(2));
    let far = Instant::now() + Duration::from_secs(60);
    let never = || false;
    let post_as = |b: &Vec<AtomicU64>, src, src_side, addr| {
        post(b, src, 0, src_side, &post_at(addr), None, &never).unwrap()
    };
    assert_eq!(post_as(&inbox1, 0, true, 10), Outcome::Pending);
    assert_eq!(post_as(&inbox0, 1, true, 20), Outcome::Pending);
    let settle = |to: &Vec<AtomicU64>, mine: &Vec<AtomicU64>, src, peer| {
        let crossed = || peer_sends_first(mine, peer, 0);
        let wait = PushWait {
            soft: far,
            hard: far,
            busy: &|| true,
            futile: &crossed,
        };
        let t = Instant::now();
        let o = resolve(to, src, 0, wait, &never).unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "waited out the window"
        );
        o
    };
    assert_eq!(settle(&inbox1, &inbox0, 0, 1), Outcome::First);
    assert_eq!(settle(&inbox0, &inbox1, 1, 0), Outcome::First);
    assert_eq!(post_as(&inbox0, 1, false, 30), Outcome::Second(post_at(20)));
    assert_eq!(post_as(&inbox1, 0, false, 40), Outcome::Second(post_at(10)));
    // Once the receive is posted the entry no longer counts as a crossing send.
    assert!(!peer_sends_first(&inbox0, 1, 0));
}

#[test]
fn posts_round_trip_through_words() {
    let p = post_at(0xdead_beef);
    assert_eq!(Post::from_words(&p.to_words()), p);
}

/// Model checks (loom): every interleaving of two ranks posting one transfer, and every
/// reordering the memory orderings allow, with the source giving up at once or waiting.
mod loom_model {
    use super::*;
    use crate::rendezvous::LoomWords as Sparse;
    use loom::sync::Arc;

    fn entry_of(src: usize) -> (usize, usize) {
        (src * RING * ENTRY_WORDS, ENTRY_WORDS)
    }

    fn wait(patient: bool) -> PushWait<'static> {
        // Deterministic (the model reruns every execution): give up at the first look,
        // or never on time (only when the destination posts).
        let (soft, hard) = if patient {
            let far = Instant::now() + Duration::from_secs(3600);
            (far, far)
        } else {
            let past = Instant::now();
            (past, past)
        };
        PushWait {
            soft,
            hard,
            busy: &|| true,
            futile: &|| false,
        }
    }

    fn one_transfer(patient: bool) {
        loom::model(move || {
            let b = Arc::new(Sparse::new(&[entry_of(0)]));
            let b2 = b.clone();
            let src = loom::thread::spawn(move || {
                match post(&*b2, 0, 0, true, &post_at(10), None, &|| false).unwrap() {
                    Outcome::Pending => resolve(&*b2, 0, 0, wait(patient), &|| false).unwrap(),
                    o => o,
                }
            });
            let dst = post(&*b, 0, 0, false, &post_at(20), None, &|| false).unwrap();
            let src = src.join().unwrap();
            match (src, dst) {
                (Outcome::Second(p), Outcome::First) => assert_eq!(p, post_at(20)),
                (Outcome::First, Outcome::Second(p)) => {
                    assert!(!patient, "a patient source must push");
                    assert_eq!(p, post_at(10))
                }
                other => panic!("{other:?}"),
            }
            // Freed for the transfer RING later.
            let w = b.word(0).unwrap().load(Ordering::Acquire);
            assert_eq!(w, 1 << GEN_SHIFT);
        });
    }

    #[test]
    fn one_transfer_pairs_up_when_the_source_gives_up_at_once() {
        one_transfer(false);
    }

    #[test]
    fn one_transfer_pairs_up_when_the_source_waits() {
        one_transfer(true);
    }

    /// An eager source ([`go_eager`]) racing its destination's post: either the destination
    /// posted first and the source pushes into its buffer, or the source went eager and the
    /// destination learns so, with the source's post, when it posts. Never both, never
    /// neither; the entry ends freed either way.
    #[test]
    fn an_eager_source_and_its_destination_agree_on_the_path() {
        loom::model(|| {
            let b = Arc::new(Sparse::new(&[entry_of(0)]));
            let b2 = b.clone();
            let src = loom::thread::spawn(move || {
                match post(&*b2, 0, 0, true, &post_at(10), None, &|| false).unwrap() {
                    Outcome::Pending => go_eager(&*b2, 0, 0).unwrap(),
                    o => o,
                }
            });
            let dst = post(&*b, 0, 0, false, &post_at(20), None, &|| false).unwrap();
            let src = src.join().unwrap();
            match (src, dst) {
                (Outcome::Second(p), Outcome::First) => assert_eq!(p, post_at(20)),
                (Outcome::Eager(None), Outcome::Eager(Some(p))) => assert_eq!(p, post_at(10)),
                other => panic!("{other:?}"),
            }
            let w = b.word(0).unwrap().load(Ordering::Acquire);
            assert_eq!(w, 1 << GEN_SHIFT);
        });
    }

    /// A source that knows its target (a symmetric window, [`post_pushed`]) racing its
    /// destination's post: the source pushes either way (to the destination's post when it
    /// came first, else to its target, which the destination then learns); never both
    /// waiting, never the destination copying; the entry ends freed.
    #[test]
    fn a_pushing_source_and_its_destination_agree() {
        loom::model(|| {
            let b = Arc::new(Sparse::new(&[entry_of(0)]));
            let b2 = b.clone();
            let target = post_at(30);
            let src = loom::thread::spawn(move || {
                post_pushed(&*b2, 0, 0, &post_at(10), &target, None, &|| false).unwrap()
            });
            let dst = post(&*b, 0, 0, false, &post_at(20), None, &|| false).unwrap();
            match (src.join().unwrap(), dst) {
                (Outcome::Second(p), Outcome::First) => assert_eq!(p, post_at(20)),
                (Outcome::Second(p), Outcome::Pushed(q)) => {
                    assert_eq!(p, target);
                    assert_eq!(q.addr, 30, "the destination learns the target");
                }
                other => panic!("{other:?}"),
            }
            let w = b.word(0).unwrap().load(Ordering::Acquire);
            assert_eq!(w, 1 << GEN_SHIFT);
        });
    }

    /// Two ranks each send before they receive: the crossing is seen, nobody waits for
    /// ever, and both end up pulling.
    #[test]
    fn crossing_sends_never_hang() {
        loom::model(|| {
            // Transfer 0 -> 1 sits in rank 1's inbox, 1 -> 0 in rank 0's.
            let inbox0 = Arc::new(Sparse::new(&[entry_of(1)]));
            let inbox1 = Arc::new(Sparse::new(&[entry_of(0)]));
            let rank = |me: usize, mine: Arc<Sparse>, theirs: Arc<Sparse>| {
                move || {
                    let peer = 1 - me;
                    let addr = 10 * me as u64;
                    let out = match post(&*theirs, me, 0, true, &post_at(addr), None, &|| false)
                        .unwrap()
                    {
                        Outcome::Pending => {
                            let crossed = || peer_sends_first(&*mine, peer, 0);
                            let w = PushWait {
                                futile: &crossed,
                                ..wait(true)
                            };
                            resolve(&*theirs, me, 0, w, &|| false).unwrap()
                        }
                        o => o,
                    };
                    let inc =
                        post(&*mine, peer, 0, false, &post_at(addr + 1), None, &|| false).unwrap();
                    (out, inc)
                }
            };
            let t = loom::thread::spawn(rank(1, inbox1.clone(), inbox0.clone()));
            let r0 = rank(0, inbox0.clone(), inbox1.clone())();
            let r1 = t.join().unwrap();
            // Every transfer has exactly one copier.
            for (out, inc) in [(r0.0, r1.1), (r1.0, r0.1)] {
                let seconds = [out, inc]
                    .iter()
                    .filter(|o| matches!(o, Outcome::Second(_)))
                    .count();
                assert_eq!(seconds, 1, "{out:?} / {inc:?}");
            }
        });
    }
}

#[test]
fn a_source_that_knows_its_target_pushes_whoever_posts_first() {
    let b = board(2);
    let target = post_at(0x9000);
    let pushed = |seq: u64| post_pushed(&b, 1, seq, &post_at(200), &target, None, &|| false);
    // Source first: it pushes to the target at once; the destination, posting later, learns
    // where (the source's post names the target) and waits for "done".
    assert_eq!(pushed(5).unwrap(), Outcome::Second(target));
    assert!(
        !peer_sends_first(&b, 1, 5),
        "a pushed send waits for nobody"
    );
    let theirs = Post {
        addr: 0x9000,
        ..post_at(200)
    };
    assert_eq!(first(&b, 5, false, 100), Outcome::Pushed(theirs));
    // Destination first: the source takes its post as any source would.
    let seq = 5 + RING as u64;
    assert_eq!(first(&b, seq, false, 300), Outcome::First);
    assert_eq!(pushed(seq).unwrap(), Outcome::Second(post_at(300)));
    // Either way the entry is free for the next round; a second source post is refused.
    let seq = 5 + 2 * RING as u64;
    assert_eq!(pushed(seq).unwrap(), Outcome::Second(target));
    assert!(pushed(seq).is_err());
    assert_eq!(first(&b, seq, false, 400), Outcome::Pushed(theirs));
    assert_eq!(first(&b, 5 + 3 * RING as u64, false, 500), Outcome::First);
}
