//! One-way throughput of two `MptLink`s over loopback UDP, printed (a measurement, not a
//! check):
//!
//! ```text
//! cargo run --release -p ccl-transports --example mpt_udp_throughput -- \
//!     [paths] [--engines 1,2,4] [--frame BYTES] [--mib TOTAL] [--split BYTES] [--chunk BYTES] [--spin US]
//! ```
//!
//! `paths` is per engine (default 8); `--engines` lists the engine counts to compare, one
//! run each (default: `CCL_MPT_ENGINES` if set, else 1); `--frame` is the frame size
//! (default 512 KiB, which several engines split); `--mib` the data sent per run (default
//! 512 MiB); `--spin` how long an idle engine polls before it parks (default 0).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::Link;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn pair(cfg: MptLinkConfig) -> Res<(MptLink, MptLink)> {
    let mut ca = cfg.clone();
    ca.seed ^= 1;
    let a = MptEndpoint::bind(LO, ca)?;
    let b = MptEndpoint::bind(LO, cfg)?;
    let (ha, hb) = (a.hello()?, b.hello()?);
    Ok((a.connect(LO, &hb, None)?, b.connect(LO, &ha, None)?))
}

struct Opts {
    paths: u16,
    engines: Vec<usize>,
    frame: usize,
    total: usize,
    split: usize,
    chunk: u32,
    spin_us: u64,
}

fn parse() -> Res<Opts> {
    let default_engines = std::env::var("CCL_MPT_ENGINES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1);
    let mut o = Opts {
        paths: 8,
        engines: vec![default_engines],
        frame: 512 * 1024,
        total: 512 << 20,
        split: MptLinkConfig::default().split_bytes,
        chunk: MptLinkConfig::default().chunk_size,
        spin_us: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--engines" => {
                o.engines = val()?
                    .split(',')
                    .map(|s| s.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            "--frame" => o.frame = val()?.parse()?,
            "--mib" => o.total = val()?.parse::<usize>()? << 20,
            "--split" => o.split = val()?.parse()?,
            "--chunk" => o.chunk = val()?.parse()?,
            "--spin" => o.spin_us = val()?.parse()?,
            p => o.paths = p.parse().map_err(|e| format!("paths {p:?}: {e}"))?,
        }
    }
    Ok(o)
}

fn run(o: &Opts, engines: usize) -> Res<()> {
    let cfg = MptLinkConfig {
        paths: o.paths,
        max_frame: o.frame,
        slots: 16,
        engines,
        split_bytes: o.split,
        chunk_size: o.chunk,
        spin: std::time::Duration::from_micros(o.spin_us),
        ..MptLinkConfig::default()
    };
    let (mut a, mut b) = pair(cfg)?;
    let frame = vec![7u8; o.frame];
    let total = (o.total / o.frame.max(1)).max(1);
    let t0 = Instant::now();
    // Bytes, not frames: several engines deliver a split frame as pieces.
    let (mut sent, mut got) = (0, 0usize);
    while got < total * frame.len() {
        while sent < total && a.try_send(&frame)? {
            sent += 1;
        }
        while let Some(f) = b.peek()? {
            got += f.len();
            b.pop();
        }
        // With several engines the threads move the bytes; do not starve them of a core.
        if engines > 1 {
            std::thread::yield_now();
        }
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{engines} engine(s) x {} paths, {} KiB frames, {} B chunks: {:.2} GB/s one way, {} \
         retransmits, messages per engine {:?}",
        o.paths,
        o.frame / 1024,
        o.chunk,
        (total * frame.len()) as f64 / s / 1e9,
        a.retransmits(),
        a.messages_per_engine()
    );
    Ok(())
}

fn main() -> Res<()> {
    let o = parse()?;
    for &e in &o.engines {
        run(&o, e)?;
    }
    Ok(())
}
