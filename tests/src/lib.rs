//! Integration tests live in `tests/tests/`; `src/bin/ccl-testrank.rs` is the per-rank driver
//! they launch as separate processes.

use std::sync::atomic::{AtomicU16, Ordering};

/// A TCP port for a test's `NCCL_COMM_ID` that nothing else in this run will take.
///
/// Asking the kernel for port 0 and closing it races: the rank processes' own listeners and
/// connections draw from the same ephemeral range, so one of them can take the port before rank
/// 0 binds it (CI saw "Address already in use"). Ports just below the ephemeral range are never
/// handed out by the kernel; a per-process counter starting at a pid-derived offset keeps tests
/// running in parallel (and test binaries run side by side) apart, and each candidate is checked
/// free before it is returned.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const SPAN: u16 = 8000;
    if ephemeral_low < 1024 + SPAN {
        return kernel_port();
    }
    let base = ephemeral_low - SPAN;
    let offset = (std::process::id() % u32::from(SPAN)) as u16;
    for _ in 0..SPAN {
        let step = NEXT.fetch_add(7, Ordering::Relaxed);
        let port = base + (offset.wrapping_add(step) % SPAN);
        let free = std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free {
            return port;
        }
    }
    kernel_port()
}

fn kernel_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(29500)
}
