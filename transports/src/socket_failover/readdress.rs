//! A primary NIC that comes back with another address (renumbered by DHCP or an operator
//! while it was down): while the primary is failed, each side looks up its primary NIC's
//! address again by the interface's name; when it moved, the accepting side listens at the
//! new one, and either side tells its peer over the backup connection, so the dialing side
//! dials the new listener and the accepting side takes connections from the new address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::redial::Redialer;

/// How often a failed primary's NIC is looked up again (and its new address told); the
/// multipath engine looks up a NIC whose paths failed as often.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Where this side's primary NIC's address comes from.
#[derive(Clone)]
pub struct PrimaryNic(Arc<dyn Fn() -> Option<IpAddr> + Send + Sync>);

impl std::fmt::Debug for PrimaryNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrimaryNic")
    }
}

impl PrimaryNic {
    /// The interface that holds `ip` now, looked up again by its name each time (None: no
    /// interface holds `ip`).
    pub fn holding(ip: IpAddr) -> Option<PrimaryNic> {
        let name = crate::ifaddr::name_of(ip)?;
        Some(PrimaryNic(Arc::new(move || {
            crate::ifaddr::address_on(&name, ip)
        })))
    }

    /// An address from `f` (tests move it at will).
    pub fn from_fn(f: impl Fn() -> Option<IpAddr> + Send + Sync + 'static) -> PrimaryNic {
        PrimaryNic(Arc::new(f))
    }

    /// The NIC's address now (`None`: it holds none of the kind it had).
    pub fn address(&self) -> Option<IpAddr> {
        (self.0)()
    }
}

/// Follows this side's primary address while the primary is failed.
pub(super) struct Readdress {
    nic: PrimaryNic,
    /// The address the primary uses now.
    ip: IpAddr,
    /// Where the primary moved (its new listener, or the address it dials from), told to
    /// the peer while the primary is down.
    moved: Option<SocketAddr>,
    next: Instant,
}

impl Readdress {
    pub(super) fn new(nic: PrimaryNic, ip: IpAddr) -> Readdress {
        Readdress {
            nic,
            ip,
            moved: None,
            next: Instant::now(),
        }
    }

    /// Called on each drive while the primary is failed: every [`LOOK_EVERY`], looks the NIC
    /// up and, when its address moved, has `redial` follow it; returns what to tell the
    /// peer then (again at each look, until the primary is back: the word is small, and a
    /// backup connection that went down with it would have lost it).
    pub(super) fn poll(
        &mut self,
        now: Instant,
        redial: &mut Redialer,
        id: u64,
    ) -> Option<SocketAddr> {
        if now < self.next {
            return None;
        }
        self.next = now + LOOK_EVERY;
        if let Some(ip) = self.nic.address().filter(|&ip| ip != self.ip) {
            match redial.moved_to(ip) {
                Ok(at) => {
                    tracing::info!(
                        "failover link {id}: primary NIC renumbered {} -> {ip}; telling the peer {at}",
                        self.ip
                    );
                    self.ip = ip;
                    self.moved = Some(at);
                }
                Err(e) => tracing::debug!("failover link {id}: primary NIC at {ip}: {e}"),
            }
        }
        self.moved
    }
}
