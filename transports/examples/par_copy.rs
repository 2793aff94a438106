//! Throughput of copies split over the copy threads (`ccl_transports::par`), printed (a
//! measurement, not a check): the executor's receive and send copies go through it, a piece
//! (one engine's part of a frame) at a time.
//!
//! ```text
//! cargo run --release -p ccl-transports --example par_copy -- [threads] [piece KiB] [total MiB]
//! ```
//!
//! Copies `total` MiB (default 1024) from one 128 MiB buffer to another in pieces of
//! `piece` KiB (default 1024), once on the calling thread alone and once split over
//! `threads` helpers (default 1), and prints GB/s of each.

use std::time::Instant;

/// Runs a copy of `n` bytes given as a function of its part ranges, one way or another.
type Splitter<'a> = dyn Fn(usize, &(dyn Fn(std::ops::Range<usize>) + Sync)) + 'a;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let threads = args.first().copied().unwrap_or(1);
    let piece = args.get(1).copied().unwrap_or(1024) << 10;
    let total = args.get(2).copied().unwrap_or(1024) << 20;
    let len = 128usize << 20;
    let src = vec![7u8; len];
    let mut dst = vec![0u8; len];
    let d = dst.as_mut_ptr() as usize;
    let run = |label: &str, split: &Splitter<'_>| {
        let t = Instant::now();
        let mut off = 0usize;
        let mut moved = 0usize;
        while moved < total {
            if off + piece > len {
                off = 0;
            }
            let at = off;
            split(piece, &|r: std::ops::Range<usize>| {
                // SAFETY: [at + r.start, at + r.end) lies inside both 128 MiB buffers, and
                // the parts of one call are disjoint.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr().add(at + r.start),
                        (d as *mut u8).add(at + r.start),
                        r.len(),
                    )
                }
            });
            off += piece;
            moved += piece;
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{label}: {:.2} GB/s ({} KiB pieces)",
            moved as f64 / s / 1e9,
            piece >> 10
        );
    };
    run("one thread", &|n, f| f(0..n));
    ccl_transports::par::configure(threads, 1);
    run(&format!("{threads} helpers + caller"), &|n, f| {
        ccl_transports::par::for_parts(n, 1, f)
    });
    drop(dst);
}
