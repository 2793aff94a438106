use super::plan::{LocalSplit, Plan, Role, Transfer};
use super::posting::Lateness;
use crate::device::Device;
use crate::error::Result;
use crate::layout::{Lane, Layout};

/// The commands a plan queues, in order, one word each; the peer named by the last
/// annotation; the copies queued while one was named, with its peer.
#[derive(Default)]
struct Recorder(Vec<String>, Option<usize>, Vec<(usize, u64)>);

impl Device for Recorder {
    fn wait(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
        self.0.push(format!("wait {lane:?} {addr:#x}"));
        Ok(())
    }
    fn write(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
        self.0.push(format!("write {lane:?} {addr:#x}"));
        Ok(())
    }
    fn copy(&mut self, lane: Lane, dst: u64, _: u64, _: usize) -> Result<()> {
        self.0.push(format!("copy {lane:?} {dst:#x}"));
        if let Some(peer) = self.1 {
            self.2.push((peer, dst));
        }
        Ok(())
    }
    fn annotate(&mut self, peer: Option<usize>) {
        self.1 = peer;
    }
    fn pull(&mut self, lane: Lane, dst: u64, (_, there): (u64, u64), _: usize) -> Result<()> {
        self.0
            .push(format!("copy {lane:?} {dst:#x} from {there:#x} (pull)"));
        Ok(())
    }
    fn kernel(&mut self, lane: Lane, _: crate::device::Kernel) -> Result<()> {
        self.0.push(format!("kernel {lane:?}"));
        Ok(())
    }
    fn mail_copy(
        &mut self,
        lane: Lane,
        (arrive, _): (u64, u32),
        (slot, tag): (u64, u64),
        src: u64,
        bytes: usize,
    ) -> Result<()> {
        self.0.push(format!(
            "mail {lane:?} after {arrive:#x} slot {slot:#x} tag {tag} from {src:#x} {bytes}"
        ));
        Ok(())
    }
    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.0.push(format!("fork {lanes:?}"));
        Ok(())
    }
    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        self.0.push(format!("join {lanes:?}"));
        Ok(())
    }
}

/// Rank 0's layout in a communicator of two, one receive lane.
fn rank0_of_two() -> Layout {
    Layout {
        rank: 0,
        nranks: 2,
        chunk: 1 << 20,
        slots: 4,
        tx_lanes: 2,
        direct_tx: 2,
        rx_lanes: 1,
        flags: vec![0x1000_0000, 0x2000_0000],
        scratch: vec![0x1800_0000, 0x2800_0000],
        host: None,
        mirror: None,
    }
}

/// A small (one-stream) all-gather of two ranks that pulls the peer's block: its own
/// block's local copy is queued after the pull, so it runs while the peer finishes its
/// copy rather than delaying ours; the wait for the peer's copy of our block comes last.
#[test]
fn a_one_stream_plan_queues_its_local_copy_after_its_transfers() {
    let l = rank0_of_two();
    let (own_dst, peer_dst) = (0x9000_0000u64, 0x9000_0004u64);
    let plan = Plan {
        transfers: vec![
            Transfer {
                peer: 1,
                outgoing: true,
                mine: 0x8000_0000,
                bytes: 4,
                seq: 0,
                role: Role::First,
                there: None,
                host: None,
            },
            Transfer {
                peer: 1,
                outgoing: false,
                mine: peer_dst,
                bytes: 4,
                seq: 0,
                role: Role::Second {
                    peer_addr: 0xa000_0000,
                },
                there: None,
                host: None,
            },
        ],
        beside: vec![(own_dst, 0x8000_0000, 4)],
        single: true,
        ..Plan::default()
    };
    let mut dev = Recorder::default();
    plan.begin(&l, &mut dev).unwrap();
    plan.end(&l, &mut dev).unwrap();
    let at = |what: &str| {
        dev.0
            .iter()
            .position(|c| c.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} in {:?}", dev.0))
    };
    let pull = at(&format!("copy User {peer_dst:#x}"));
    let local = at(&format!("copy User {own_dst:#x}"));
    assert!(pull < local, "{:?}", dev.0);
    assert_eq!(
        at("wait"),
        pull - 1,
        "the pull waits for the peer's flag first"
    );
    assert!(
        dev.0[local + 1..].iter().any(|c| c.starts_with("wait")),
        "{:?}",
        dev.0
    );
    assert!(!dev.0.iter().any(|c| c.starts_with("fork")), "{:?}", dev.0);
}

/// A transfer this rank pulls goes to the device as a pull (which it may have the peer
/// GPU's engine run, from the source as that GPU maps it) only when settling found it can
/// (`Transfer::there`); a push never does.
#[test]
fn only_pulls_of_plain_memory_are_offered_to_the_peer_gpu() {
    let l = rank0_of_two();
    for there in [Some(0xb000_0000u64), None] {
        let t = |outgoing: bool, mine: u64| Transfer {
            peer: 1,
            outgoing,
            mine,
            bytes: 64 << 20,
            seq: 3,
            role: Role::Second {
                peer_addr: 0xa000_0000,
            },
            there,
            host: None,
        };
        let plan = Plan {
            transfers: vec![t(true, 0x8000_0000), t(false, 0x9000_0000)],
            ..Plan::default()
        };
        let mut dev = Recorder::default();
        plan.begin(&l, &mut dev).unwrap();
        plan.end(&l, &mut dev).unwrap();
        let pulls: Vec<&String> = dev.0.iter().filter(|c| c.ends_with("(pull)")).collect();
        if there.is_some() {
            assert_eq!(
                pulls,
                [&format!(
                    "copy Rx(0) {:#x} from {:#x} (pull)",
                    0x9000_0000u64, 0xb000_0000u64
                )]
            );
        } else {
            assert!(pulls.is_empty(), "{:?}", dev.0);
        }
        let push = format!("copy {:?} {:#x}", l.push_lane(1), 0xa000_0000u64);
        assert!(dev.0.contains(&push), "{:?}", dev.0);
    }
}

/// A local copy's parts cover it exactly, in order, 4 KiB-aligned, one per lane at most,
/// none under the minimum unless the copy itself is.
#[test]
fn local_copy_parts_cover_the_copy_once() {
    let split = |lanes, min_part| LocalSplit { lanes, min_part };
    assert_eq!(split(1, 1 << 20).parts(64 << 20), vec![(0, 64 << 20)]);
    assert_eq!(split(4, 1 << 20).parts(1 << 20), vec![(0, 1 << 20)]);
    assert_eq!(
        split(4, 1 << 20).parts(2 << 20),
        vec![(0, 1 << 20), (1 << 20, 1 << 20)]
    );
    for (lanes, bytes) in [
        (3usize, 10_000_000usize),
        (4, 4096 * 3 + 1),
        (8, 1 << 27),
        (2, 5),
    ] {
        let p = split(lanes, 4096).parts(bytes);
        assert!(p.len() <= lanes && !p.is_empty(), "{lanes} {bytes}: {p:?}");
        let mut at = 0;
        for &(off, len) in &p {
            assert_eq!(off, at);
            assert!(len > 0 && off % 4096 == 0);
            at += len;
        }
        assert_eq!(at, bytes);
    }
}
/// A late receiver: after each wait that runs out, twice as many sends skip the wait
/// (up to 64); a push resets it; peers are counted apart.
#[test]
fn late_receivers_make_later_sends_skip_the_wait_for_a_while() {
    let mut l = Lateness::default();
    assert!(!l.skip_wait(1));
    let mut skipped = Vec::new();
    for _ in 0..8 {
        l.waited(1, false);
        let mut n = 0;
        while l.skip_wait(1) {
            n += 1;
        }
        skipped.push(n);
    }
    assert_eq!(skipped, [2, 4, 8, 16, 32, 64, 64, 64]);
    assert!(!l.skip_wait(0), "another peer");
    l.waited(1, false);
    l.waited(1, true);
    // A push resets the streak, not the skips already granted.
    let mut n = 0;
    while l.skip_wait(1) {
        n += 1;
    }
    assert_eq!(n, 64);
    l.waited(1, false);
    let mut n = 0;
    while l.skip_wait(1) {
        n += 1;
    }
    assert_eq!(n, 2);
}

/// A mailed send is queued on its push lane as the mail copy (waiting for the receiver's
/// "here" word) followed by the "done" write the receiver waits on; the receive beside it, left
/// to the peer, waits for the peer's "done" on the caller's stream after the join.
#[test]
fn a_mailed_send_queues_its_mail_copy_then_done_on_its_push_lane() {
    use crate::layout::DirectWord;
    let l = rank0_of_two();
    let t = |outgoing: bool, mine: u64, role: Role| Transfer {
        peer: 1,
        outgoing,
        mine,
        bytes: 8 << 20,
        seq: 5,
        role,
        there: None,
        host: None,
    };
    let mailed = Role::Mailed {
        slot: 0xc000,
        tag: 9,
    };
    let plan = Plan {
        transfers: vec![
            t(true, 0x8000_0000, mailed),
            t(false, 0x9000_0000, Role::First),
        ],
        ..Plan::default()
    };
    let mut dev = Recorder::default();
    plan.begin(&l, &mut dev).unwrap();
    plan.end(&l, &mut dev).unwrap();
    let lane = l.push_lane(1);
    let arrive = l.direct_word(0, 1, true, DirectWord::Arrive);
    let done = l.direct_word(1, 0, false, DirectWord::Done);
    let mail = format!(
        "mail {lane:?} after {arrive:#x} slot 0xc000 tag 9 from {:#x} {}",
        0x8000_0000u64,
        8 << 20
    );
    let i = dev
        .0
        .iter()
        .position(|c| *c == mail)
        .unwrap_or_else(|| panic!("{:?}", dev.0));
    assert_eq!(
        dev.0[i + 1],
        format!("write {lane:?} {done:#x}"),
        "{:?}",
        dev.0
    );
    assert!(
        dev.0[..i].iter().any(|c| c.starts_with("fork")),
        "{:?}",
        dev.0
    );
    let join = dev.0.iter().position(|c| c.starts_with("join")).unwrap();
    let peer_done = l.direct_word(0, 1, false, DirectWord::Done);
    assert_eq!(
        dev.0[join + 1],
        format!("wait User {peer_done:#x}"),
        "{:?}",
        dev.0
    );
    assert!(!dev.0.iter().any(|c| c.starts_with("copy")), "{:?}", dev.0);
}

/// The copies the monitor may time ([`crate::copy_monitor`]) are exactly those that move a
/// transfer's data, each named with its transfer's peer: a push and a pull of this rank are,
/// its own block's local copy and the transfer the peer copies are not, and nothing is left
/// named once the plan is queued.
#[test]
fn only_the_transfers_copies_are_named_with_their_peer() {
    let mut l = rank0_of_two();
    l.nranks = 3;
    l.flags.push(0x3000_0000);
    l.scratch.push(0x3800_0000);
    let transfer = |peer, outgoing, mine, role| Transfer {
        peer,
        outgoing,
        mine,
        bytes: 4 << 20,
        seq: 0,
        role,
        there: None,
        host: None,
    };
    let plan = Plan {
        transfers: vec![
            transfer(
                1,
                true,
                0x8000_0000,
                Role::Second {
                    peer_addr: 0xa000_0000,
                },
            ),
            transfer(
                2,
                false,
                0x9000_0000,
                Role::Second {
                    peer_addr: 0xb000_0000,
                },
            ),
            transfer(2, true, 0x8000_0000, Role::First),
        ],
        beside: vec![(0x9100_0000, 0x8000_0000, 4 << 20)],
        ..Plan::default()
    };
    let mut dev = Recorder::default();
    plan.begin(&l, &mut dev).unwrap();
    plan.end(&l, &mut dev).unwrap();
    assert_eq!(dev.2, [(1, 0xa000_0000), (2, 0x9000_0000)], "{:?}", dev.0);
    assert_eq!(dev.1, None);
    assert!(
        dev.0.iter().any(|c| c.ends_with("0x91000000")),
        "{:?}",
        dev.0
    );
}
