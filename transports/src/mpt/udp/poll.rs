//! Which paths have datagrams waiting: [`PollSet`] polls the busy paths every round and every
//! path every few rounds; [`wait_readable`] sleeps until one is readable.

use std::os::fd::RawFd;

/// `readable` polls every path only every [`FULL_POLL_EVERY`]th round (and after the caller
/// slept: [`UdpPaths::poll_all_next`]); in the others only the paths that sent or received
/// within the last [`HOT_ROUNDS`] rounds -- unless they are half the paths or more. A small
/// operation's datagrams use one of a link's paths (small messages keep to one path, and
/// acknowledgements return on the path of what they acknowledge), and the per-socket cost of `poll` over all of them was most of a quarter of a
/// four-rank small operation's CPU (`fdget`, `fput`, `sock_poll`, `udp_poll`). A datagram on
/// a path gone quiet waits at most `FULL_POLL_EVERY - 1` rounds more.
pub(super) struct PollSet {
    /// One entry per path, in path order (the kernel rewrites only `revents`).
    all: Vec<libc::pollfd>,
    /// The round in which each path last sent or received.
    active: Vec<u32>,
    /// The entries polled this round when not all, and the path of each.
    some: Vec<libc::pollfd>,
    some_path: Vec<u16>,
    round: u32,
    pub(super) full_next: bool,
}

/// See [`PollSet`].
pub(super) const FULL_POLL_EVERY: u32 = 8;
/// See [`PollSet`].
pub(super) const HOT_ROUNDS: u32 = 4096;

// SAFETY: `pollfd` holds only a descriptor number and flags; the set is reached only through
// `&mut UdpPaths`.
unsafe impl Send for PollSet {}

impl PollSet {
    pub(super) fn new(fds: impl Iterator<Item = RawFd>) -> Self {
        let all: Vec<libc::pollfd> = fds
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let n = all.len();
        PollSet {
            all,
            // `round - active >= HOT_ROUNDS`: every path starts quiet.
            active: vec![0; n],
            some: Vec::with_capacity(n),
            some_path: Vec::with_capacity(n),
            round: HOT_ROUNDS,
            full_next: true,
        }
    }

    pub(super) fn touch(&mut self, path: usize) {
        if let Some(a) = self.active.get_mut(path) {
            *a = self.round;
        }
    }

    /// Polls (without blocking) and writes the readable paths into `out`; returns how many.
    pub(super) fn poll(&mut self, out: &mut [u16]) -> usize {
        self.round = self.round.wrapping_add(1);
        let mut full = std::mem::take(&mut self.full_next) || self.round % FULL_POLL_EVERY == 0;
        if !full {
            self.some.clear();
            self.some_path.clear();
            for (p, &a) in self.active.iter().enumerate() {
                if self.round.wrapping_sub(a) < HOT_ROUNDS {
                    self.some.push(self.all[p]);
                    self.some_path.push(p as u16);
                }
            }
            full = self.some.len() * 2 >= self.all.len();
        }
        let set = if full { &mut self.all } else { &mut self.some };
        let n = set.len().min(out.len());
        if n == 0 {
            return 0;
        }
        // SAFETY: `set[..n]` are initialised pollfds; a zero timeout never blocks.
        let r = unsafe { libc::poll(set.as_mut_ptr(), n as libc::nfds_t, 0) };
        if r <= 0 {
            return 0;
        }
        let mut k = 0;
        for (i, p) in set.iter().enumerate().take(n) {
            // POLLERR too: reading clears a pending ICMP error.
            if p.revents & (libc::POLLIN | libc::POLLERR) != 0 {
                let path = if full {
                    i
                } else {
                    usize::from(self.some_path[i])
                };
                out[k] = path as u16;
                k += 1;
            }
        }
        for &p in &out[..k] {
            self.touch(usize::from(p));
        }
        k
    }
}

/// Waits until one of `fds` is readable or `timeout` passes.
pub fn wait_readable(fds: &[RawFd], timeout: std::time::Duration) {
    const MAX: usize = 256;
    // SAFETY: all-zero pollfd is valid.
    let mut pfd: [libc::pollfd; MAX] = unsafe { std::mem::zeroed() };
    let n = fds.len().min(MAX);
    for (p, &fd) in pfd.iter_mut().zip(fds).take(n) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd[..n]` is initialised, `ts` lives across the call, no signal mask is
    // passed. The result does not matter: the caller re-polls the sockets either way.
    unsafe {
        libc::ppoll(pfd.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null());
    }
}
