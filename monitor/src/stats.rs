//! Where an executor's time went: plain counters, filled by the executor that owns them and
//! read when its communicator goes away.

use std::time::Duration;

/// Smallest frame [`ExecStats`] times.
pub const TIMED_BYTES: usize = 64 << 10;

/// Where an executor's time went, over the communicator's life (libccl logs it at destroy with
/// `NCCL_DEBUG=INFO`): which side of the network path is the bottleneck shows here without a
/// profiler. Only frames of at least [`TIMED_BYTES`] are timed and counted, so operations
/// of a few bytes read no clock on their busy path.
#[derive(Debug, Default, Clone, Copy)]
pub struct ExecStats {
    /// Copying or reducing received frames out of the links.
    pub recv_busy: Duration,
    pub recv_bytes: u64,
    /// Handing frames to the links (their copy into send slots included).
    pub send_busy: Duration,
    pub send_bytes: u64,
    /// Time with nothing to do: waiting for frames, link room or gates.
    pub idle: Duration,
    /// Received bytes the links wrote straight into their destinations (no copy here).
    pub placed_bytes: u64,
    /// Time steps spent with nothing left but their sends' wait for the links to have every
    /// queued byte acknowledged (zero-copy sends end only then), and how many steps waited.
    pub settle: Duration,
    pub settle_steps: u64,
}

impl ExecStats {
    /// One line for the log.
    pub fn describe(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rate = |b: u64, d: Duration| {
            if d.is_zero() {
                0.0
            } else {
                b as f64 / d.as_secs_f64() / 1e9
            }
        };
        format!(
            "(frames >= {} KiB) received {} B in {:.1} ms of copies/reductions ({:.2} GB/s), queued {} B in {:.1} ms of sends ({:.2} GB/s), idle {:.1} ms; {} B received in place (no copy); {} steps waited {:.1} ms for acknowledgements alone",
            TIMED_BYTES >> 10,
            self.recv_bytes,
            ms(self.recv_busy),
            rate(self.recv_bytes, self.recv_busy),
            self.send_bytes,
            ms(self.send_busy),
            rate(self.send_bytes, self.send_busy),
            ms(self.idle),
            self.placed_bytes,
            self.settle_steps,
            ms(self.settle)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes over their busy time as GB/s, times in milliseconds, every counter named.
    #[test]
    fn describe_names_every_counter_and_its_rate() {
        let s = ExecStats {
            recv_busy: Duration::from_millis(2),
            recv_bytes: 4_000_000,
            send_busy: Duration::from_millis(4),
            send_bytes: 2_000_000,
            idle: Duration::from_micros(1500),
            placed_bytes: 123,
            settle: Duration::from_millis(3),
            settle_steps: 7,
        };
        assert_eq!(
            s.describe(),
            "(frames >= 64 KiB) received 4000000 B in 2.0 ms of copies/reductions (2.00 GB/s), \
             queued 2000000 B in 4.0 ms of sends (0.50 GB/s), idle 1.5 ms; 123 B received in \
             place (no copy); 7 steps waited 3.0 ms for acknowledgements alone"
        );
    }

    /// Nothing timed: rates of zero, not a division by zero.
    #[test]
    fn describe_of_nothing_timed_gives_zero_rates() {
        let d = ExecStats {
            recv_bytes: 10,
            ..ExecStats::default()
        }
        .describe();
        assert!(
            d.contains("received 10 B in 0.0 ms of copies/reductions (0.00 GB/s)"),
            "{d}"
        );
        assert!(d.contains("(0.00 GB/s), idle 0.0 ms"), "{d}");
    }
}
