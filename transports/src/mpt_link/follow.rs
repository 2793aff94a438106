//! An engine's paths follow a renumbered NIC, on both ends ([`Follow`], looked at every
//! [`LOOK_EVERY`] by the engine's progress).
//!
//! A path is *down* at a look when it lost chunks and delivered none since, or when it heard
//! nothing since the last look while the engine's other paths heard at least [`WITNESS`]
//! datagrams: a side that only receives on a link loses nothing of its own, and its dead
//! paths just go quiet while the peer's chunks arrive on the others. (An idle link's
//! keep-alive probes, one path at a time, are too few to make the rest look down; a run of
//! small messages, which keep to one path, can, and then the idle paths are made loose until
//! they hear again -- a few system calls per path, no change to what they carry.)
//!
//! * A path down at two looks in a row is made loose (see
//!   [`crate::mpt::udp::UdpPaths::loosen`]): the peer path may come back from another
//!   address. A loose path that is no longer down without having heard from its peer (its
//!   chunks acknowledged on other paths, or the whole link idle) is connected back to its
//!   known peer.
//! * A NIC with a path down and none of whose paths had a chunk acknowledged since the last
//!   look is looked up by name (as the socket failover link looks up its primary): when its
//!   address changed, every path of that NIC is rebound on the new address, connected to
//!   the same peer paths, and announced: a probe goes out on each at once and at every look
//!   while it is down, so that the peer's loose path follows it even when this side has no
//!   data of its own to send there (its answer, an acknowledgement, comes back on the path).
//!
//! Healthy paths are never touched, and between looks the cost is one comparison per round
//! of progress and one store per batch received.

use std::net::IpAddr;

use crate::mpt::{Instant, PathView};
use crate::socket_failover::{PrimaryNic, LOOK_EVERY};

/// Datagrams the other paths must have received since the last look for a quiet path to be
/// down.
const WITNESS: u32 = 32;

/// Looks in a row a path must be down before it is made loose: a path that lost a chunk to
/// congestion and is revived at once stays connected.
const LOOSEN_AFTER: u8 = 2;

/// What the engine is to do with its paths after a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Make path `.0` loose.
    Loosen(u16),
    /// Connect loose path `.0` to its known peer again.
    Tighten(u16),
    /// Rebind the paths of NIC `nic` on `ip`; [`Follow::rebound`] confirms it.
    Rebind { nic: usize, ip: IpAddr },
    /// Send a probe on rebound path `.0`, which is still down.
    Announce(u16),
}

/// One of the engine's local NICs.
struct Nic {
    /// Where its address comes from (`None`: not looked up; no interface held it).
    lookup: Option<PrimaryNic>,
    /// The address its paths are bound to.
    ip: IpAddr,
    /// Chunks acknowledged on its paths, as of the last look.
    acked: u64,
}

/// One path, as the looks see it.
#[derive(Clone, Copy, Debug, Default)]
struct PathMark {
    /// Looks in a row at which it was down.
    down_looks: u8,
    /// Whether it was down at the last look.
    down: bool,
    /// Datagrams it received since the last look.
    heard: u32,
    /// Rebound and not heard from since: announced while down.
    announce: bool,
}

/// What the engine knows to follow renumbered NICs; path `i` is on NIC `i % nics`.
pub(super) struct Follow {
    nics: Vec<Nic>,
    paths: Vec<PathMark>,
    next: Instant,
}

impl Follow {
    /// `nics`: each local NIC's address and where to look it up, in path order.
    pub(super) fn new(paths: u16, nics: Vec<(IpAddr, Option<PrimaryNic>)>) -> Follow {
        Follow {
            nics: nics
                .into_iter()
                .map(|(ip, lookup)| Nic {
                    lookup,
                    ip,
                    acked: 0,
                })
                .collect(),
            paths: vec![PathMark::default(); usize::from(paths)],
            next: Instant::ZERO,
        }
    }

    /// Whether a look is due at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// The NIC of path `path`.
    pub(super) fn nic_of(&self, path: usize) -> usize {
        path % self.nics.len().max(1)
    }

    /// Path `path` received `n` datagrams.
    pub(super) fn heard(&mut self, path: usize, n: usize) {
        if let Some(m) = self.paths.get_mut(path) {
            m.heard = m.heard.saturating_add(n as u32);
        }
    }

    /// Looks at every path (`view(i)`: path `i`'s view, `loose(i)`: whether it is loose)
    /// and writes what to do into `out` (which it does not clear).
    pub(super) fn look(
        &mut self,
        now: Instant,
        view: impl Fn(usize) -> PathView,
        loose: impl Fn(usize) -> bool,
        out: &mut Vec<Step>,
    ) {
        self.next = now + LOOK_EVERY;
        let witnessed = self
            .paths
            .iter()
            .fold(0u32, |t, m| t.saturating_add(m.heard))
            >= WITNESS;
        for (i, m) in self.paths.iter_mut().enumerate() {
            m.down = view(i).consecutive_losses > 0 || (witnessed && m.heard == 0);
            m.down_looks = if m.down {
                m.down_looks.saturating_add(1)
            } else {
                0
            };
            let is_loose = loose(i);
            if m.down && !is_loose && m.down_looks >= LOOSEN_AFTER {
                out.push(Step::Loosen(i as u16));
            } else if !m.down && is_loose {
                out.push(Step::Tighten(i as u16));
            }
            if m.heard > 0 || !m.down {
                m.announce = false;
            } else if m.announce {
                out.push(Step::Announce(i as u16));
            }
            m.heard = 0;
        }
        let n = self.nics.len().max(1);
        let paths = self.paths.len();
        for (k, nic) in self.nics.iter_mut().enumerate() {
            let acked: u64 = (k..paths).step_by(n).map(|i| view(i).chunks_acked).sum();
            let quiet = acked == nic.acked;
            nic.acked = acked;
            if !quiet || !self.paths.iter().skip(k).step_by(n).any(|m| m.down) {
                continue;
            }
            let Some(lookup) = &nic.lookup else { continue };
            if let Some(ip) = lookup.address().filter(|&ip| ip != nic.ip) {
                out.push(Step::Rebind { nic: k, ip });
            }
        }
    }

    /// The paths of NIC `nic` were rebound on `ip`: they are announced while down, and
    /// start counting their looks down afresh, so their probes get to reach the peer before
    /// they are made loose.
    pub(super) fn rebound(&mut self, nic: usize, ip: IpAddr) {
        let n = self.nics.len().max(1);
        if let Some(x) = self.nics.get_mut(nic) {
            x.ip = ip;
        }
        for m in self.paths.iter_mut().skip(nic).step_by(n) {
            m.down_looks = 0;
            m.announce = true;
        }
    }

    /// Path `path` connected again (it heard from its peer): it starts counting its looks
    /// down afresh.
    pub(super) fn reconnected(&mut self, path: usize) {
        if let Some(m) = self.paths.get_mut(path) {
            m.down_looks = 0;
        }
    }
}

#[cfg(test)]
#[path = "follow_link_tests.rs"]
mod link_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpt::PathId;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    fn view(i: u16, losses: u32, acked: u64) -> PathView {
        PathView {
            id: PathId(i),
            srtt: None,
            effective_rtt: Duration::ZERO,
            inflight_chunks: 0,
            consecutive_losses: losses,
            chunks_sent: acked,
            chunks_acked: acked,
            chunks_lost: 0,
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// Four paths over two NICs (0, 2 on NIC 0; 1, 3 on NIC 1). NIC 1 is renumbered while
    /// its paths are healthy: nothing moves. Its paths fail: they are made loose at the
    /// second look, and NIC 1 is rebound once it is silent (nothing acknowledged since the
    /// last look); NIC 0, healthy all along, is never looked up nor touched.
    #[test]
    fn only_failed_paths_loosen_and_only_a_silent_failed_nic_is_rebound() {
        let nic1 = Arc::new(Mutex::new(Some("10.0.1.1".parse::<IpAddr>().unwrap())));
        let lookups0 = Arc::new(Mutex::new(0u32));
        let l0 = Arc::clone(&lookups0);
        let l1 = Arc::clone(&nic1);
        let mut f = Follow::new(
            4,
            vec![
                (
                    "10.0.0.1".parse().unwrap(),
                    Some(PrimaryNic::from_fn(move || {
                        *l0.lock().unwrap() += 1;
                        Some("10.0.0.9".parse().unwrap())
                    })),
                ),
                (
                    "10.0.1.1".parse().unwrap(),
                    Some(PrimaryNic::from_fn(move || *l1.lock().unwrap())),
                ),
            ],
        );
        let mut out = Vec::new();
        let mut look = |f: &mut Follow, t: u64, v: &[PathView], loose: &[bool]| {
            out.clear();
            assert!(f.due(at(t)));
            f.look(at(t), |i| v[i], |i| loose[i], &mut out);
            assert!(!f.due(at(t + 99)));
            out.clone()
        };
        let healthy = [
            view(0, 0, 10),
            view(1, 0, 10),
            view(2, 0, 10),
            view(3, 0, 10),
        ];
        *nic1.lock().unwrap() = Some("10.0.1.7".parse().unwrap());
        assert_eq!(look(&mut f, 0, &healthy, &[false; 4]), []);
        // NIC 1's paths fail; path 3 still had a chunk acknowledged since the last look.
        let failing = [
            view(0, 0, 20),
            view(1, 1, 10),
            view(2, 0, 20),
            view(3, 2, 11),
        ];
        assert_eq!(look(&mut f, 100, &failing, &[false; 4]), []);
        let failed = [
            view(0, 0, 30),
            view(1, 3, 10),
            view(2, 0, 30),
            view(3, 4, 11),
        ];
        let ip7: IpAddr = "10.0.1.7".parse().unwrap();
        assert_eq!(
            look(&mut f, 200, &failed, &[false; 4]),
            [
                Step::Loosen(1),
                Step::Loosen(3),
                Step::Rebind { nic: 1, ip: ip7 }
            ]
        );
        f.rebound(1, ip7);
        // Rebound: announced while down, loose again only after two more looks down; no
        // second rebind.
        let (a1, a3) = (Step::Announce(1), Step::Announce(3));
        assert_eq!(look(&mut f, 300, &failed, &[false; 4]), [a1, a3]);
        assert_eq!(
            look(&mut f, 400, &failed, &[false; 4]),
            [Step::Loosen(1), a1, Step::Loosen(3), a3]
        );
        // Path 1 delivers again while loose: connected back to its known peer, and no
        // longer announced.
        let back = [
            view(0, 0, 40),
            view(1, 0, 12),
            view(2, 0, 40),
            view(3, 4, 11),
        ];
        assert_eq!(
            look(&mut f, 500, &back, &[false, true, false, true]),
            [Step::Tighten(1), a3]
        );
        // Path 3 hears from its peer: no longer announced either.
        for p in [0, 2, 3] {
            f.heard(p, 20);
        }
        assert_eq!(look(&mut f, 600, &back, &[false, false, false, true]), []);
        assert_eq!(
            *lookups0.lock().unwrap(),
            0,
            "a healthy NIC is never looked up"
        );
        *nic1.lock().unwrap() = None;
        let down = [
            view(0, 0, 50),
            view(1, 1, 12),
            view(2, 0, 50),
            view(3, 5, 11),
        ];
        // Path 1 was quiet at 600 while the others heard, and lost a chunk since: down at two
        // looks, loose; NIC 1 holds no address to move to.
        assert_eq!(
            look(&mut f, 700, &down, &[false, false, false, true]),
            [Step::Loosen(1)]
        );
        assert_eq!(look(&mut f, 800, &down, &[false, true, false, true]), []);
    }

    /// A side that only receives: NIC 1's paths go quiet while NIC 0's hear (no losses of
    /// its own, nothing acknowledged ever): they are down, loose at the second look, and NIC
    /// 1 is looked up at each. A link quiet on every path, or hearing only a probe or two,
    /// is not down anywhere.
    #[test]
    fn quiet_paths_are_down_while_others_hear() {
        let nic1 = PrimaryNic::from_fn(|| Some("10.0.1.9".parse().unwrap()));
        let mut f = Follow::new(
            4,
            vec![
                ("10.0.0.1".parse().unwrap(), None),
                ("10.0.1.1".parse().unwrap(), Some(nic1)),
            ],
        );
        let mut out = Vec::new();
        let idle = |i: usize| view(i as u16, 0, 0);
        let connected = |_| false;
        for t in [0, 100, 200] {
            f.look(at(t), idle, connected, &mut out);
        }
        assert_eq!(out, [], "an idle link");
        let rebind = Step::Rebind {
            nic: 1,
            ip: "10.0.1.9".parse().unwrap(),
        };
        // Two keep-alive probes are no witness.
        f.heard(0, 1);
        f.heard(2, 1);
        f.look(at(300), idle, connected, &mut out);
        assert_eq!(out, []);
        f.heard(0, 16);
        f.heard(2, 16);
        f.look(at(400), idle, connected, &mut out);
        assert_eq!(out, [rebind]);
        out.clear();
        // Path 2 goes quiet too.
        f.heard(0, 32);
        f.look(at(500), idle, connected, &mut out);
        assert_eq!(out, [Step::Loosen(1), Step::Loosen(3), rebind]);
    }

    /// A path heard from again counts its failures afresh.
    #[test]
    fn a_path_that_heard_from_its_peer_waits_two_looks_again() {
        let mut f = Follow::new(1, vec![("10.0.0.1".parse().unwrap(), None)]);
        let mut out = Vec::new();
        let failed = [view(0, 1, 0)];
        let (view, loose) = (|_| failed[0], |_| false);
        f.look(at(0), view, loose, &mut out);
        f.reconnected(0);
        f.look(at(100), view, loose, &mut out);
        assert_eq!(out, []);
        f.look(at(200), view, loose, &mut out);
        assert_eq!(out, [Step::Loosen(0)]);
        assert_eq!(f.nic_of(0), 0);
    }
}
