//! One-way throughput of two `MptLink`s over loopback UDP, printed (a measurement, not a
//! check): `cargo run --release -p ccl-transports --example mpt_udp_throughput [paths]`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::Link;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn pair(cfg: MptLinkConfig) -> Result<(MptLink, MptLink), Box<dyn std::error::Error>> {
    let mut ca = cfg.clone();
    ca.seed ^= 1;
    let a = MptEndpoint::bind(LO, ca)?;
    let b = MptEndpoint::bind(LO, cfg)?;
    let (ha, hb) = (a.hello()?, b.hello()?);
    Ok((a.connect(LO, &hb, None)?, b.connect(LO, &ha, None)?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let paths: u16 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8);
    let cfg = MptLinkConfig {
        paths,
        max_frame: 512 * 1024,
        slots: 16,
        ..MptLinkConfig::default()
    };
    let (mut a, mut b) = pair(cfg)?;
    let frame = vec![7u8; 512 * 1024];
    let total = 256usize;
    let t0 = Instant::now();
    let (mut sent, mut got) = (0, 0);
    while got < total {
        while sent < total && a.try_send(&frame)? {
            sent += 1;
        }
        while let Some(f) = b.peek()? {
            if f.len() != frame.len() {
                return Err(format!("frame of {} bytes, expected {}", f.len(), frame.len()).into());
            }
            b.pop();
            got += 1;
        }
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{paths} paths: {:.2} GB/s one way, {} retransmits",
        (total * frame.len()) as f64 / s / 1e9,
        a.retransmits()
    );
    Ok(())
}
