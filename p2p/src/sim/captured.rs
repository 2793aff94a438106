//! Groups captured into CUDA graphs, on the direct paths and host-only: replayed back to
//! back, beside eager groups, in rounds; and a missing `DONE` wait caught.

use ccl_collectives::task::{Reduction, Task};
use ccl_collectives::Collective;
use ccl_cuda::ReduceKind;

use super::cases::*;
use super::device::*;
use super::harness::*;
use crate::layout::Layout;
use crate::protocol::Counters;

/// Groups captured into CUDA graphs on the direct paths ([`crate::captured`]): every rank's
/// offer, the agreement and the mappings as at capture, then each rank's program queued
/// `replays` times in a row (a graph replayed back to back, so a fast rank starts its next
/// replay while a slow one is still in the last). Checks every result and that every
/// captured word is back to 0.
fn simulate_captured(
    n: usize,
    cases: &[Case],
    one_group: bool,
    replays: usize,
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(), String> {
    use crate::captured::agree::{self, Offer};
    use crate::captured::group::{self, Group};
    use crate::captured::steps;
    // Every third seed: all-reduces of up to 2 KiB go one-shot (the cases' small counts).
    let one_shot = if seed % 3 == 1 { 2048 } else { 0 };
    let s = Setup::new(n);
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let groups = captured_groups(cases, n, one_group);
    let mut programs: Vec<Vec<Group>> = (0..n).map(|_| Vec::new()).collect();
    for (g, group) in groups.iter().enumerate() {
        let mut offers = Vec::new();
        for (r, t) in group.iter().enumerate() {
            let mut reach = SimReach {
                rank: r,
                unmappable: &[],
            };
            // Seeds 0 mod 3 push every group that may (any bytes landing or leaving).
            let push_above = if seed % 3 == 0 { 0 } else { usize::MAX };
            let o = agree::offer(g, t, (r, n), (true, one_shot, push_above), &mut reach);
            if !o.able {
                return Err(format!("group {g}: rank {r} cannot capture it directly"));
            }
            offers.push(Offer::decode(&o.encode()).ok_or("an offer did not round-trip")?);
        }
        for (r, t) in group.iter().enumerate() {
            let rows = agree::matching(&offers, r)?;
            let mut reach = SimReach {
                rank: r,
                unmappable: &[],
            };
            let ends =
                agree::ends_of(&offers, r, t, &rows, &mut reach).map_err(|e| e.to_string())?;
            // Scratch memory for receives onto send buffers, one region per group.
            let scratch = base(r) + 0x8000_0000 + g as u64 * BUF;
            let bytes = steps::parked(t, r, n, one_shot).1;
            if bytes > 0 {
                mem.alloc(scratch, bytes);
            }
            programs[r].push(Group {
                index: g,
                tasks: t,
                ends,
                reduce_n: seed % 2 == 0,
                scratch,
                one_shot,
                fused: seed % 2 == 1,
                push: agree::agreed_push(&offers),
                fused_copy_max: 1 << 20,
            });
        }
    }
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    // Odd seeds: even ranks run small all-reduce groups as the fused kernel, odd ranks as
    // parts (the two forms must meet).
    for (r, d) in devs
        .iter_mut()
        .enumerate()
        .filter(|(r, _)| seed % 2 == 1 && r % 2 == 0)
    {
        let registers = base(r) + 0xa000_0000;
        mem.alloc(registers, 1 << 20);
        d.fused_registers = Some(registers);
    }
    // Seeds 2 and 3 mod 4: odd ranks run their handshakes as the handshake kernel, even
    // ranks as flag waits and writes (the two forms must meet too).
    for (r, d) in devs.iter_mut().enumerate() {
        d.handshake_kernel = seed % 4 >= 2 && r % 2 == 1;
        // Seeds 4-7 mod 8: ranks 0 and 3 mod 4 copy a group's copies in one kernel.
        d.copy_kernel = seed % 8 >= 4 && r % 4 % 3 == 0;
    }
    for j in 0..replays {
        for r in 0..n {
            for g in &programs[r] {
                group::emit(&mut devs[r], &layouts[r], g).map_err(|e| e.to_string())?;
                if j + 1 == replays {
                    mark_group_done(&mut devs[r], cases.len(), one_group, g.index);
                }
            }
        }
    }
    if let Some(t) = tamper {
        for (r, d) in devs.iter_mut().enumerate() {
            t(d, r);
        }
    }
    let early = at_last_replay(cases, n, replays);
    run_mailed(&devs, &mut mem, merged, seed, None, Some(&early))?;
    check_captured(&mut mem, cases, &layouts, groups.len(), replays)
}

/// The check of a case on a rank whose stream has run past its last replay.
fn at_last_replay(
    cases: &[Case],
    n: usize,
    replays: usize,
) -> impl Fn(usize, usize, &mut Mem) -> std::result::Result<(), String> + '_ {
    move |r, k, mem| {
        check_captured_case(mem, &cases[k], k, r, n, replays)
            .map_err(|e| format!("{e} once its stream had run past the last replay"))
    }
}

/// Marks the cases of captured group `g` complete at this point of the device's caller
/// stream: every case when all are one group, else case `g`.
fn mark_group_done(d: &mut SimDevice, ncases: usize, one_group: bool, g: usize) {
    d.mark_done(if one_group { 0..ncases } else { g..g + 1 });
}

/// [`simulate_captured`] for host-only mode (`HostOnlyGroup`): the cases through every rank's
/// outbox (its receive slots) into the partners' GPU receive areas.
fn simulate_captured_host_only(
    n: usize,
    cases: &[Case],
    one_group: bool,
    replays: usize,
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(), String> {
    simulate_host_only_slots(1 << 18, n, cases, one_group, replays, merged, seed, tamper)
}

/// [`simulate_captured_host_only`] with slots of `chunk` bytes (two per peer): groups larger
/// than a slot region go in rounds.
#[allow(clippy::too_many_arguments)]
fn simulate_host_only_slots(
    chunk: usize,
    n: usize,
    cases: &[Case],
    one_group: bool,
    replays: usize,
    merged: bool,
    seed: u64,
    tamper: Option<Tamper<'_>>,
) -> std::result::Result<(), String> {
    use crate::captured::host_only::{self, HostOnlyGroup};
    let s = Setup {
        chunk,
        mirror: true,
        ..Setup::new(n)
    };
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let groups = captured_groups(cases, n, one_group);
    let region = s.slots as usize * s.chunk;
    // Rank -> its captured rounds (of every group, with the group's index), after the offers'
    // exchange.
    let mut plans: Vec<Vec<(usize, host_only::HostOnlyRound)>> =
        (0..n).map(|_| Vec::new()).collect();
    for (g, group) in groups.iter().enumerate() {
        let offers: Vec<Vec<u8>> = (0..n)
            .map(|r| host_only::host_only_offer_of(g, &group[r], r, n, region, true))
            .collect();
        if offers.iter().any(|o| o.first() != Some(&1)) {
            return Err(format!("group {g} is not taken host-only"));
        }
        for (r, plan) in plans.iter_mut().enumerate() {
            for round in host_only::host_only_plan(&group[r], r, n, region, &offers)? {
                plan.push((g, round));
            }
        }
    }
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    for j in 0..replays {
        for (r, dev) in devs.iter_mut().enumerate() {
            for (i, (g, (round, offsets, sources))) in plans[r].iter().enumerate() {
                let hg = HostOnlyGroup {
                    index: *g,
                    tasks: round,
                    inputs: mirror_base(r),
                    reduce_n: seed % 2 == 0,
                    offsets: offsets.clone(),
                    sources: sources.clone(),
                };
                host_only::emit_host_only(dev, &layouts[r], &hg).map_err(|e| e.to_string())?;
                // A group's last round completes it (checked at the last replay: what an
                // in-place case holds between replays depends on the operation).
                if j + 1 == replays && plans[r].get(i + 1).is_none_or(|next| next.0 != *g) {
                    mark_group_done(dev, cases.len(), one_group, *g);
                }
            }
        }
    }
    if let Some(t) = tamper {
        for (r, d) in devs.iter_mut().enumerate() {
            t(d, r);
        }
    }
    let early = at_last_replay(cases, n, replays);
    run_mailed(&devs, &mut mem, merged, seed, None, Some(&early))?;
    check_captured(&mut mem, cases, &layouts, groups.len(), replays)
}

/// Host-only with eager groups around a captured one: the eager groups go chunk by chunk
/// through the ranks' receive slots, which the captured group uses as outboxes. Cases in turn
/// eager before, captured (all in one group), eager after; every result checked.
fn simulate_eager_around_captured_host_only(
    n: usize,
    cases: &[Case],
    merged: bool,
    seed: u64,
) -> std::result::Result<(), String> {
    use crate::captured::host_only::{self, HostOnlyGroup};
    let s = Setup {
        chunk: 1 << 16,
        direct: false,
        mirror: true,
        ..Setup::new(n)
    };
    let mut mem = s.protocol_mem();
    let layouts = s.layouts();
    place_inputs(&mut mem, cases, n);
    let dx = DirectSim::new(n);
    let mut devs: Vec<SimDevice> = (0..n).map(|_| SimDevice::new()).collect();
    let mut counters: Vec<Counters> = (0..n).map(|_| Counters::new(n, s.rx_lanes)).collect();
    let capturable = |c: &Case| {
        matches!(c.kind, Kind::Coll(_) | Kind::Ring)
            && tasks(c, 0, 0, n)
                .iter()
                .all(crate::captured::steps::supported)
    };
    let phase = |k: usize, c: &Case| if capturable(c) { k % 3 } else { 0 };
    let eager = |devs: &mut Vec<SimDevice>, counters: &mut Vec<Counters>, which: usize| {
        for (k, c) in cases
            .iter()
            .enumerate()
            .filter(|&(k, c)| phase(k, c) == which)
        {
            for r in 0..n {
                s.queue(
                    &layouts[r],
                    &mut counters[r],
                    &mut devs[r],
                    &tasks(c, k, r, n),
                    &dx,
                )
                .map_err(|e| format!("eager case {k} {c:?} rank {r}: {e}"))?;
            }
        }
        Ok::<(), String>(())
    };
    eager(&mut devs, &mut counters, 0)?;
    let group: Vec<Vec<Task>> = (0..n)
        .map(|r| {
            cases
                .iter()
                .enumerate()
                .filter(|&(k, c)| phase(k, c) == 1)
                .flat_map(|(k, c)| tasks(c, k, r, n))
                .collect()
        })
        .collect();
    let region = s.slots as usize * s.chunk;
    let offsets: Vec<Vec<usize>> = (0..n)
        .map(|r| host_only::host_only_offsets(&group[r], r, n, region).ok_or("no fit"))
        .collect::<std::result::Result<_, _>>()?;
    let offers: Vec<Vec<u8>> = (0..n)
        .map(|r| host_only::host_only_offer(0, &group[r], Some(&offsets[r])))
        .collect();
    for r in 0..n {
        let hg = HostOnlyGroup {
            index: 0,
            tasks: &group[r],
            inputs: mirror_base(r),
            reduce_n: seed % 2 == 0,
            offsets: offsets[r].clone(),
            sources: host_only::host_only_sources(r, &offers)?,
        };
        host_only::emit_host_only(&mut devs[r], &layouts[r], &hg).map_err(|e| e.to_string())?;
    }
    eager(&mut devs, &mut counters, 2)?;
    run(&devs, &mut mem, merged, seed)?;
    for (k, case) in cases.iter().enumerate() {
        for r in 0..n {
            let Some(want) = expected(case, r, n) else {
                continue;
            };
            let (_, recv, _, _) = buffers(case, k, r, n);
            let want: Vec<u8> = want.iter().flat_map(|&v| encode(case.dtype, v)).collect();
            if mem.read(recv, want.len()) != want {
                return Err(format!(
                    "case {k} {case:?} (phase {}): rank {r} wrong result",
                    phase(k, case)
                ));
            }
        }
    }
    Ok(())
}

/// The groups a simulation captures, as group -> rank -> tasks: every case in one group, or
/// each case a group of its own.
fn captured_groups(cases: &[Case], n: usize, one_group: bool) -> Vec<Vec<Vec<Task>>> {
    if one_group {
        vec![(0..n)
            .map(|r| {
                cases
                    .iter()
                    .enumerate()
                    .flat_map(|(k, c)| tasks(c, k, r, n))
                    .collect()
            })
            .collect()]
    } else {
        cases
            .iter()
            .enumerate()
            .map(|(k, c)| (0..n).map(|r| tasks(c, k, r, n)).collect())
            .collect()
    }
}

/// Case `k`'s result on rank `r` after `replays` replays.
fn check_captured_case(
    mem: &mut Mem,
    case: &Case,
    k: usize,
    r: usize,
    n: usize,
    replays: usize,
) -> std::result::Result<(), String> {
    // An in-place sum reduces its last result again at every replay.
    let again = case.in_place
        && case.kind == Kind::Coll(Collective::AllReduce)
        && case.red == Reduction::Plain(ReduceKind::Sum);
    let factor = if again { n.pow(replays as u32 - 1) } else { 1 } as f64;
    let Some(mut want) = expected(case, r, n) else {
        return Ok(());
    };
    if case.kind == Kind::Ring && case.in_place {
        // Every replay passes the buffers one rank further round the ring.
        let from = (r + n * replays - replays) % n;
        want = (0..case.count).map(|i| input(from, i) as f64).collect();
    }
    let (_, recv, _, _) = buffers(case, k, r, n);
    let want: Vec<u8> = want
        .iter()
        .flat_map(|&v| encode(case.dtype, v * factor))
        .collect();
    match mem.read(recv, want.len()) == want {
        true => Ok(()),
        false => Err(format!("case {k} {case:?}: rank {r} wrong result")),
    }
}

/// Every captured case's result after `replays` replays, and every captured word of `groups`
/// groups back to 0.
fn check_captured(
    mem: &mut Mem,
    cases: &[Case],
    layouts: &[Layout],
    groups: usize,
    replays: usize,
) -> std::result::Result<(), String> {
    let n = layouts.len();
    for (k, case) in cases.iter().enumerate() {
        for r in 0..n {
            check_captured_case(mem, case, k, r, n, replays)?;
        }
    }
    for g in 0..groups {
        for l in layouts {
            for kind in 0..3 {
                for from in 0..n {
                    let w = mem.word(l.captured_word(l.rank, g, kind, from));
                    if w != 0 {
                        return Err(format!(
                            "group {g}: rank {}'s word {kind} from {from} left at {w}",
                            l.rank
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The cases the captured direct paths take; with several replays, only those whose result a
/// replay reproduces (or, an in-place sum, multiplies by the rank count).
fn captured_cases(n: usize, count: usize, replays: usize) -> Vec<Case> {
    every_case(n, count)
        .into_iter()
        .filter(|c| {
            let t = tasks(c, 0, 0, n);
            t.iter().all(crate::captured::steps::supported)
                && (replays == 1
                    || !c.in_place
                    || matches!(
                        c.kind,
                        // Three all-to-alls in place transpose the blocks as one does.
                        Kind::Coll(
                            Collective::AllReduce | Collective::AllGather | Collective::AlltoAll
                        )
                    )
                    || c.kind == Kind::Ring)
        })
        .collect()
}

/// A simulation of captured groups: (ranks, cases, all in one group, replays, merged queue,
/// seed, tamper).
type CapturedSim = fn(
    usize,
    &[Case],
    bool,
    usize,
    bool,
    u64,
    Option<Tamper<'_>>,
) -> std::result::Result<(), String>;

/// Runs `sim` for every (ranks, count) of `sizes` over `cases_of(ranks, count, replays)` (at
/// least `min_cases` of them): one and three replays, each case alone or all in one group,
/// random and merged orders.
fn replay_every_setting(
    sizes: &[(usize, &[usize])],
    cases_of: &dyn Fn(usize, usize, usize) -> Vec<Case>,
    min_cases: usize,
    sim: CapturedSim,
) {
    for &(n, counts) in sizes {
        for &count in counts {
            for replays in [1usize, 3] {
                let cases = cases_of(n, count, replays);
                assert!(cases.len() >= min_cases, "{} cases", cases.len());
                for one_group in [false, true] {
                    for (merged, seeds) in [(true, 0..2u64), (false, 0..4u64)] {
                        for seed in seeds {
                            if let Err(e) =
                                sim(n, &cases, one_group, replays, merged, seed * 31 + 7, None)
                            {
                                panic!(
                                    "n {n} count {count} replays {replays} one group {one_group} \
                                     merged {merged} seed {seed}: {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A tamper that turns every wait for a partner's `DONE` word of group 0 (`n` ranks) into a
/// wait for nothing.
fn without_done_waits(n: usize) -> impl Fn(&mut SimDevice, usize) {
    let done_words: Vec<u64> = Setup::new(n)
        .layouts()
        .iter()
        .flat_map(|l| (0..n).map(move |from| l.captured_word(l.rank, 0, 2, from)))
        .collect();
    move |d: &mut SimDevice, _r: usize| {
        for q in d.lanes.values_mut() {
            for op in q.iter_mut() {
                if let Op::Wait(a, _) = *op {
                    if done_words.contains(&a) {
                        *op = Op::Wait(a, 0);
                    }
                }
            }
        }
    }
}

/// Every collective the captured direct paths take, alone or all in one group, replayed back to
/// back, under random stream orders and the merged single queue: exact, every word reset.
#[test]
fn captured_groups_replay_exact_and_reset_their_words() {
    replay_every_setting(
        &[
            (2, &[1, 5, 1000]),
            (3, &[5, 1000]),
            (4, &[1, 1000]),
            (9, &[5]),
        ],
        &captured_cases,
        8,
        simulate_captured,
    );
}

/// The checker catches a broken captured program: with the waits for the partners' `DONE`
/// gone, a rank's next replay overwrites what a partner is still reading (or resets a word
/// the partner set for it), and some stream order shows it.
#[test]
fn the_simulation_catches_a_captured_group_that_does_not_wait_for_done() {
    let n = 3;
    let no_done_wait = without_done_waits(n);
    let cases = captured_cases(n, 1000, 3);
    let caught = (0..8u64).any(|seed| {
        simulate_captured(n, &cases, true, 3, false, seed, Some(&no_done_wait)).is_err()
    });
    assert!(caught, "no stream order showed the missing wait");
    for seed in 0..4u64 {
        simulate_captured(n, &cases, true, 3, false, seed, None).unwrap();
    }
}

/// Ranks that copy a group's copies in one kernel (in no order among themselves) meet ranks
/// that queue them on copy engines, exact over every case and replay; and the kernel did run.
#[test]
fn captured_copies_in_one_kernel_meet_copies_on_copy_engines() {
    let launched = std::cell::Cell::new(0usize);
    let count = |d: &mut SimDevice, _r: usize| launched.set(launched.get() + d.copy_kernels);
    for n in [2, 4, 8] {
        let cases = captured_cases(n, 1000, 3);
        for one_group in [false, true] {
            for seed in [5u64, 7, 13, 15] {
                simulate_captured(n, &cases, one_group, 3, false, seed, Some(&count))
                    .unwrap_or_else(|e| panic!("n {n} one group {one_group} seed {seed}: {e}"));
            }
        }
    }
    assert!(launched.get() > 0, "no group copied in one kernel");
}

/// Groups that only copy, above one block's 64 KiB, as one kernel spread over blocks on some
/// ranks (odd seeds: the even ranks) and as parts on the others: exact over every replay, every
/// word reset, and the spread kernel did run.
#[test]
fn captured_copies_spread_over_blocks_meet_the_parts() {
    let spread = std::cell::Cell::new(0usize);
    let count = |d: &mut SimDevice, _r: usize| spread.set(spread.get() + d.spread_kernels);
    for n in [2, 3, 4] {
        // 20000 four-byte elements: 80 KB a rank's block, above what one block takes.
        let cases: Vec<Case> = captured_cases(n, 20_000, 3)
            .into_iter()
            .filter(|c| !reduces_case(c))
            .collect();
        for one_group in [false, true] {
            for seed in [1u64, 3, 5] {
                simulate_captured(n, &cases, one_group, 3, false, seed, Some(&count))
                    .unwrap_or_else(|e| panic!("n {n} one group {one_group} seed {seed}: {e}"));
            }
        }
    }
    assert!(spread.get() > 0, "no group of copies spread over blocks");
}

/// Whether `c` reduces (such groups are never the copies kernel).
fn reduces_case(c: &Case) -> bool {
    matches!(
        c.kind,
        Kind::Coll(Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. })
    )
}

/// Host-only captured collectives (every kind, type, reduction and root the cases hold, in and
/// out of place) and sends and receives round a ring, alone or all in one group, replayed back to back, under random stream orders and
/// the merged single queue: exact, every word reset; without the `DONE` waits some order
/// overwrites an outbox a partner is still reading.
#[test]
fn host_only_captured_groups_replay_exact_and_reset_their_words() {
    let collectives = |n: usize, count: usize, replays: usize| -> Vec<Case> {
        captured_cases(n, count, replays)
            .into_iter()
            .filter(|c| matches!(c.kind, Kind::Coll(_) | Kind::Ring))
            .collect()
    };
    replay_every_setting(
        &[(2, &[1, 5, 1000]), (3, &[5, 1000]), (4, &[1000])],
        &collectives,
        4,
        simulate_captured_host_only,
    );
    let n = 3;
    let no_done_wait = without_done_waits(n);
    let cases = collectives(n, 1000, 3);
    let caught = (0..16u64).any(|seed| {
        simulate_captured_host_only(n, &cases, true, 3, false, seed, Some(&no_done_wait)).is_err()
    });
    assert!(caught, "no stream order showed the missing wait");
}

/// Eager groups through the slots before and after a captured group that uses them as
/// outboxes (host-only), 2-4 ranks, random and merged orders: every result exact. (Unlike the
/// replay test, these orders do not show a missing `DONE` wait: that test is the one that
/// guards it.)
#[test]
fn eager_groups_around_a_host_only_captured_group_stay_exact() {
    for n in [2usize, 3, 4] {
        let cases = every_case(n, 3000);
        for (merged, seeds) in [(true, 0..3u64), (false, 0..6u64)] {
            for seed in seeds {
                if let Err(e) = simulate_eager_around_captured_host_only(n, &cases, merged, seed) {
                    panic!("n {n} merged {merged} seed {seed}: {e}");
                }
            }
        }
    }
}

/// Host-only captured all-reduces, broadcasts and reduces larger than a slot region (8 KiB
/// here, 12 KB operations) go in rounds of pieces: exact after replays, every word reset.
#[test]
fn large_host_only_captured_reductions_go_in_rounds() {
    for n in [2usize, 3, 4] {
        let cases: Vec<Case> = captured_cases(n, 3000, 3)
            .into_iter()
            .filter(|c| {
                matches!(
                    c.kind,
                    Kind::Coll(
                        Collective::AllReduce
                            | Collective::Broadcast { .. }
                            | Collective::Reduce { .. }
                    )
                )
            })
            .collect();
        assert!(cases.len() >= 4, "{} cases", cases.len());
        for one_group in [false, true] {
            for (merged, seeds) in [(true, 0..2u64), (false, 0..4u64)] {
                for seed in seeds {
                    if let Err(e) =
                        simulate_host_only_slots(4096, n, &cases, one_group, 3, merged, seed, None)
                    {
                        panic!("n {n} one group {one_group} merged {merged} seed {seed}: {e}");
                    }
                }
            }
        }
    }
}
