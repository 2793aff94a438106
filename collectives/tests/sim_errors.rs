//! The reference simulator catches broken schedules: deadlocks, hazards, bad operations, lost
//! and double contributions, and in-place aliasing.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use ccl_collectives::reference::{expected, simulate, ReduceOp, SimError, SimOptions};
use ccl_collectives::{schedule_with, Algorithm, Collective, Op, Pipeline, Schedule};

mod common;
use common::{rcv, snd, steps};

fn all(coll: Collective, algo: Algorithm, n: usize, count: usize, pipe: Pipeline) -> Vec<Schedule> {
    (0..n)
        .map(|r| schedule_with(coll, algo, r, n, count, pipe).unwrap())
        .collect()
}
const P1: Pipeline = Pipeline {
    min_piece: 1,
    max_pieces: 1,
};

fn sim(
    coll: Collective,
    n: usize,
    count: usize,
    scheds: &[Schedule],
    in_place: bool,
) -> Result<(), SimError> {
    let inputs: Vec<Vec<u64>> = (0..n)
        .map(|r| {
            let len = ccl_collectives::buffer_sizes(coll, r, n, count)
                .unwrap()
                .send;
            (0..len as u64).map(|i| 1000 * r as u64 + i + 1).collect()
        })
        .collect();
    let rep = simulate(
        coll,
        n,
        count,
        scheds,
        &inputs,
        SimOptions {
            in_place,
            op: ReduceOp::Sum,
        },
    )?;
    let want = expected(coll, n, count, &inputs, ReduceOp::Sum)?;
    if rep.recv != want {
        return Err(SimError::Mismatch {
            rank: 0,
            index: 0,
            got: 0,
            expected: 0,
        });
    }
    Ok(())
}

fn sched(steps_: Vec<Vec<Op>>) -> Schedule {
    Schedule {
        steps: steps(steps_),
        scratch: 0,
    }
}

#[test]
fn sim_detects_deadlock() {
    // Both ranks send in their first step and receive in their second: rendezvous deadlock.
    let ag = Collective::AllGather;
    let mk = |me: usize, peer: usize| {
        sched(vec![
            vec![
                Op::Copy {
                    src: snd(0, 1),
                    dst: rcv(me, 1),
                },
                Op::Send {
                    peer,
                    src: snd(0, 1),
                },
            ],
            vec![Op::Recv {
                peer,
                dst: rcv(peer, 1),
            }],
        ])
    };
    let err = sim(ag, 2, 1, &[mk(0, 1), mk(1, 0)], false).unwrap_err();
    assert!(matches!(err, SimError::Deadlock { .. }), "{err}");
    // Same ops with the receive moved into the sending step: fine.
    let ok = |me: usize, peer: usize| {
        sched(vec![vec![
            Op::Copy {
                src: snd(0, 1),
                dst: rcv(me, 1),
            },
            Op::Send {
                peer,
                src: snd(0, 1),
            },
            Op::Recv {
                peer,
                dst: rcv(peer, 1),
            },
        ]])
    };
    sim(ag, 2, 1, &[ok(0, 1), ok(1, 0)], false).unwrap();
    // In place the same schedule is fine too (the copy is onto itself).
    sim(ag, 2, 1, &[ok(0, 1), ok(1, 0)], true).unwrap();
}

#[test]
fn sim_detects_hazards_and_bad_ops() {
    let ar = Collective::AllReduce;
    let good = all(ar, Algorithm::Ring, 2, 4, P1);
    sim(ar, 2, 4, &good, false).unwrap();

    // A local copy into the chunk a send of the same step reads.
    let mut bad = good.clone();
    bad[0].steps[1].ops.push(Op::Copy {
        src: snd(0, 2),
        dst: rcv(2, 2),
    });
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::Hazard {
            rank: 0,
            step: 1,
            ..
        })
    ));

    // Writing the send buffer.
    let mut bad = good.clone();
    bad[0].steps[0].ops[1] = Op::RecvReduce {
        peer: 1,
        local: snd(2, 2),
        dst: snd(2, 2),
    };
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::WritesSend(_))
    ));

    // Out of bounds.
    let mut bad = good.clone();
    bad[1].steps[1].ops[0] = Op::Send {
        peer: 0,
        src: rcv(3, 2),
    };
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::OutOfBounds(_))
    ));

    // Message sizes differ between the ends.
    let mut bad = good.clone();
    bad[1].steps[1].ops[0] = Op::Send {
        peer: 0,
        src: rcv(0, 1),
    };
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::MessageSize { .. })
    ));

    // A send without a receive.
    let mut bad = good.clone();
    bad[1].steps[1].ops.pop();
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::Unmatched { .. })
    ));

    // Peer is self.
    let mut bad = good.clone();
    bad[1].steps[1].ops[0] = Op::Send {
        peer: 1,
        src: rcv(0, 2),
    };
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::BadPeer(_))
    ));

    // Zero-count op.
    let mut bad = good.clone();
    bad[1].steps[1].ops.push(Op::Copy {
        src: snd(0, 0),
        dst: rcv(0, 0),
    });
    assert!(matches!(
        sim(ar, 2, 4, &bad, false),
        Err(SimError::ZeroCount(_))
    ));

    // Two receives from different peers into overlapping memory in one step (from one peer
    // they land in order).
    let to2 = || {
        sched(vec![vec![Op::Send {
            peer: 2,
            src: snd(0, 2),
        }]])
    };
    let two = vec![
        to2(),
        to2(),
        sched(vec![vec![
            Op::Recv {
                peer: 0,
                dst: rcv(0, 2),
            },
            Op::Recv {
                peer: 1,
                dst: rcv(1, 2),
            },
        ]]),
    ];
    assert!(matches!(
        sim(ar, 3, 3, &two, false),
        Err(SimError::Hazard {
            rank: 2,
            step: 0,
            a: 0,
            b: 1
        })
    ));
}

#[test]
fn sim_detects_lost_and_double_contributions() {
    let ar = Collective::AllReduce;
    let good = all(ar, Algorithm::Ring, 3, 3, P1);
    sim(ar, 3, 3, &good, false).unwrap();
    // Forwarding the raw input instead of the partial sum loses a contribution.
    let mut bad = good.clone();
    bad[0].steps[1].ops[0] = Op::Send {
        peer: 1,
        src: snd(2, 1),
    };
    assert!(matches!(
        sim(ar, 3, 3, &bad, false),
        Err(SimError::Mismatch { .. })
    ));
    // Folding the partial sum into itself double-counts.
    let mut bad = good.clone();
    bad[0].steps[1].ops[1] = Op::RecvReduce {
        peer: 2,
        local: rcv(2, 1),
        dst: rcv(1, 1),
    };
    assert!(sim(ar, 3, 3, &bad, false).is_err());
}

#[test]
fn sim_checks_in_place_aliasing() {
    // An AllGather that forwards block r from Recv in step 0 is fine out of place only if the
    // copy happened; in place a schedule that writes its own block before sending it breaks.
    let ag = Collective::AllGather;
    let mk = |me: usize, peer: usize| {
        sched(vec![
            vec![
                Op::Send {
                    peer,
                    src: snd(0, 1),
                },
                Op::Recv {
                    peer,
                    dst: rcv(peer, 1),
                },
            ],
            // Overwrites Recv[me], which in place is the input: harmless here because the
            // input was already sent, and the result there must be the input anyway.
            vec![Op::Copy {
                src: snd(0, 1),
                dst: rcv(me, 1),
            }],
        ])
    };
    sim(ag, 2, 1, &[mk(0, 1), mk(1, 0)], false).unwrap();
    sim(ag, 2, 1, &[mk(0, 1), mk(1, 0)], true).unwrap();
    // An AlltoAll receiving straight into Recv is right out of place, wrong in place (it
    // overwrites blocks it still has to send: here a same-step hazard).
    let a2a = Collective::AlltoAll;
    let mk = |me: usize, peer: usize| {
        sched(vec![vec![
            Op::Copy {
                src: snd(me, 1),
                dst: rcv(me, 1),
            },
            Op::Send {
                peer,
                src: snd(peer, 1),
            },
            Op::Recv {
                peer,
                dst: rcv(peer, 1),
            },
        ]])
    };
    sim(a2a, 2, 1, &[mk(0, 1), mk(1, 0)], false).unwrap();
    // In place too, since the send of the block comes before the receive that overwrites it
    // (a send's data is taken first; executors hold such a receive until the send has left);
    // with the receive first, the send forwards what arrived: a wrong result, not a hazard.
    sim(a2a, 2, 1, &[mk(0, 1), mk(1, 0)], true).unwrap();
    let mut late = mk(0, 1);
    late.steps[0].ops.swap(1, 2);
    assert!(matches!(
        sim(a2a, 2, 1, &[late, mk(1, 0)], true),
        Err(SimError::Mismatch { .. })
    ));
}
