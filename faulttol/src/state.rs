//! Where a link, a NIC and a connection stand: the states the machines of [`crate::nic`] and
//! [`crate::failover`] move between, and that their [transition records](crate::event) name.

/// Where a link stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// Carries traffic.
    Ok,
    /// Owed traffic did not come within the chunk timeout; a probe decides.
    Suspect,
    /// Carries no traffic; probed with a backoff.
    Failed,
    /// Answered a probe after failing; carries no traffic until the hold-down ends.
    Recovering,
}

/// Whether a NIC has a usable link left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NicState {
    /// At least one of its links is Ok or Suspect (or it has none yet).
    Up,
    /// All of its links are Failed (Recovering counts as failed: it carries no traffic).
    Down,
}

/// Where a connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Traffic on the primary link.
    OnPrimary,
    /// Traffic on the backup link.
    OnBackup,
    /// The sender gave up on its link and waits for the receiver's rollback on the other.
    RollingBack,
    /// Both links down; terminal.
    Failed,
}
