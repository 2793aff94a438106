//! Fresh primary connections for a failover link whose primary failed.
//!
//! A TCP connection that lost its path for a few seconds is slow to come back even once
//! the path is up: the kernel backs off its retransmissions exponentially (after a 4 s
//! outage the next one can be 2 s away), and both directions wait on their own timers.
//! So while the primary is failed, one side (the one that dialed at setup) opens a new
//! connection to the other's primary listener every [`DIAL_EVERY`], each attempt given
//! [`DIAL_WAIT`] (a SYN lost on a dead path is re-sent only after a second, so a new
//! attempt beats waiting); the other side accepts it. Each side then swaps it in for
//! the old one and probes it at once.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Time between the starts of two connection attempts.
pub const DIAL_EVERY: Duration = Duration::from_millis(100);
/// How long one attempt may take.
pub const DIAL_WAIT: Duration = Duration::from_millis(100);
/// Time between two looks for a connection waiting on the listener.
const ACCEPT_EVERY: Duration = Duration::from_millis(5);

/// How a failover link gets a fresh primary connection.
#[derive(Debug)]
pub enum Redial {
    /// It does not: the primary is only ever the connection the link was built with.
    Never,
    /// This side connects to the peer's primary listener at this address.
    Dial(SocketAddr),
    /// This side accepts on its primary listener, connections from `peer` only.
    Accept { listener: TcpListener, peer: IpAddr },
}

/// What the dialing thread and the link share.
struct Slot {
    /// The peer's primary listener: moves when the peer's primary NIC is renumbered.
    target: Mutex<SocketAddr>,
    /// The link wants a fresh primary connection.
    want: AtomicBool,
    /// The newest connection made and not yet taken.
    made: Mutex<Option<TcpStream>>,
    stop: AtomicBool,
}

/// The link's end of redialing: asks for connections and hands over the new ones.
pub struct Redialer {
    kind: Kind,
}

enum Kind {
    Never,
    Dial {
        slot: Arc<Slot>,
        thread: Option<JoinHandle<()>>,
    },
    Accept {
        listener: TcpListener,
        peer: IpAddr,
        next: Instant,
    },
}

impl Redialer {
    /// Starts redialing as `how` says (a thread for the dialing side).
    pub fn new(how: Redial, id: u64) -> Result<Self> {
        let kind = match how {
            Redial::Never => Kind::Never,
            Redial::Dial(addr) => {
                let slot = Arc::new(Slot {
                    target: Mutex::new(addr),
                    want: AtomicBool::new(false),
                    made: Mutex::new(None),
                    stop: AtomicBool::new(false),
                });
                let s = Arc::clone(&slot);
                let thread = std::thread::Builder::new()
                    .name("ccl-sockfo-dial".into())
                    .spawn(move || dial_loop(&s, id))
                    .map_err(|e| Error::io("spawn failover dial thread", e))?;
                Kind::Dial {
                    slot,
                    thread: Some(thread),
                }
            }
            Redial::Accept { listener, peer } => {
                listener
                    .set_nonblocking(true)
                    .map_err(|e| Error::io("failover link: listener", e))?;
                Kind::Accept {
                    listener,
                    peer,
                    next: Instant::now(),
                }
            }
        };
        Ok(Redialer { kind })
    }

    /// A fresh primary connection, if one was made; `want` says whether the primary is
    /// failed (the dialing side connects only then; the accepting side takes whatever
    /// its peer dialed).
    pub fn poll(&mut self, now: Instant, want: bool) -> Option<TcpStream> {
        match &mut self.kind {
            Kind::Never => None,
            Kind::Dial { slot, .. } => {
                slot.want.store(want, Ordering::Relaxed);
                slot.made.try_lock().ok()?.take()
            }
            Kind::Accept {
                listener,
                peer,
                next,
            } => {
                if now < *next {
                    return None;
                }
                *next = now + ACCEPT_EVERY;
                let mut newest = None;
                // Several may wait (the peer redialed before this side looked): the
                // newest is the one the peer uses.
                while let Ok((s, from)) = listener.accept() {
                    match from.ip() == *peer {
                        true => newest = Some(s),
                        false => tracing::warn!(
                            "failover link: connection from {from} on the primary listener refused"
                        ),
                    }
                }
                newest
            }
        }
    }

    /// The peer's primary moved to `to` (its NIC renumbered): the dialing side dials there
    /// from now on, the accepting side takes connections from its new address.
    pub fn peer_moved(&mut self, to: SocketAddr, id: u64) {
        match &mut self.kind {
            Kind::Never => {}
            Kind::Dial { slot, .. } => {
                let mut target = slot.target.lock().unwrap_or_else(|p| p.into_inner());
                if *target != to {
                    *target = to;
                    tracing::info!("failover link {id}: the peer's primary listens at {to} now");
                }
            }
            Kind::Accept { peer, .. } => {
                if *peer != to.ip() {
                    *peer = to.ip();
                    tracing::info!("failover link {id}: the peer's primary dials from {peer} now");
                }
            }
        }
    }

    /// This side's primary NIC holds `ip` now: the accepting side listens there instead
    /// (the old address is gone with the old listener) and returns where; the dialing side
    /// returns `ip` itself (connections leave from it).
    pub fn moved_to(&mut self, ip: IpAddr) -> Result<SocketAddr> {
        match &mut self.kind {
            Kind::Accept { listener, .. } => {
                let l = TcpListener::bind(SocketAddr::new(ip, 0))
                    .map_err(|e| Error::io(format!("failover link: listen on {ip}"), e))?;
                l.set_nonblocking(true)
                    .map_err(|e| Error::io("failover link: listener", e))?;
                let at = l
                    .local_addr()
                    .map_err(|e| Error::io("failover link: listener address", e))?;
                *listener = l;
                Ok(at)
            }
            _ => Ok(SocketAddr::new(ip, 0)),
        }
    }
}

impl Drop for Redialer {
    fn drop(&mut self) {
        if let Kind::Dial { slot, thread } = &mut self.kind {
            slot.stop.store(true, Ordering::Relaxed);
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn dial_loop(slot: &Slot, id: u64) {
    let mut last: Option<Instant> = None;
    while !slot.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
        let due = last.map_or(true, |t| t.elapsed() >= DIAL_EVERY);
        if !due || !slot.want.load(Ordering::Relaxed) {
            continue;
        }
        last = Some(Instant::now());
        let addr = *slot.target.lock().unwrap_or_else(|p| p.into_inner());
        match TcpStream::connect_timeout(&addr, DIAL_WAIT) {
            Ok(s) => {
                tracing::info!("failover link {id}: new primary connection to {addr}");
                // Taken by the link's next drive; until then it wants no other.
                slot.want.store(false, Ordering::Relaxed);
                *slot.made.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
            }
            Err(e) => tracing::debug!("failover link {id}: redial {addr}: {e}"),
        }
    }
}
