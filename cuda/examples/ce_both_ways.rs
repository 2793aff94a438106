//! Can one GPU move both directions of an exchange at full speed? With no library: GPUs 0 and
//! 1 each hold a source and a destination of BYTES; every mode moves GPU 0's source into GPU
//! 1's destination and GPU 1's source into GPU 0's, timed from queueing to both GPUs idle
//! (median of REPS after a warm-up), and prints GB/s each way and the ratio to `each-pushes`.
//!
//! * `each-pushes`: each GPU's stream pushes its own source (what libccl's push wait buys).
//! * `later-lanes`: GPU 1 alone, its push and its pull on two streams (libccl's no-wait mode
//!   where GPU 0 called first: halved busbw from 128 MiB on two H200s, 2026-11-29).
//! * `later-batch`: GPU 1 alone, push and pull as one `cuMemcpyBatchAsync` (the driver picks
//!   the copy engines: `CCL_IPC_BATCH_COPIES=1` with the no-wait settings).
//! * `later-batch-4`: the same with each direction cut into four copies.
//! * `later-serial`: GPU 1 alone, push then pull on one stream (the serialised bound).
//! * `each-batch`: each GPU's push as a one-copy batch (a batch's cost against a plain copy).
//! * `push-only`, `pull-only`, `pull-batch`: one direction, GPU 0 pushing or GPU 1 pulling.
//!
//! One process holds both GPUs here, where libccl's ranks are two processes with IPC mappings:
//! on two H200s (2026-11-30) `later-lanes` ran at 0.99 of `each-pushes` but libccl's no-wait
//! mode at 0.51-0.68, so a copy between two GPUs of one process may run on either GPU's
//! engines; `tests/gpu/ipc_bench.c` (`MODE=bothipc` of `docs/device-runs/next/next_x2.sh`)
//! asks the same of two processes.
//!
//! `cargo build --release -p ccl-cuda --example ce_both_ways`, then on two GPUs with peer
//! access: `BYTES=134217728 REPS=10 target/release/examples/ce_both_ways` (BYTES may list
//! several sizes, comma-separated).

use std::error::Error;
use std::sync::Arc;
use std::time::Instant;

use ccl_cuda::cuda::{Context, DeviceBuffer, Stream};

type Res<T> = Result<T, Box<dyn Error>>;
type Copy = (u64, u64, usize);

struct Gpu {
    src: DeviceBuffer,
    dst: DeviceBuffer,
    a: Stream,
    b: Stream,
}

impl Gpu {
    fn new(ctx: &Arc<Context>, bytes: usize, fill: u8) -> Res<Gpu> {
        let g = Gpu {
            src: DeviceBuffer::new(ctx, bytes)?,
            dst: DeviceBuffer::new(ctx, bytes)?,
            a: Stream::with_flags(ctx, true)?,
            b: Stream::with_flags(ctx, true)?,
        };
        // SAFETY: the range is this buffer's own.
        unsafe { g.a.memset_d8(g.src.ptr(), fill, bytes) }?;
        g.a.synchronize()?;
        Ok(g)
    }

    fn sync(&self) -> Res<()> {
        self.a.synchronize()?;
        self.b.synchronize()?;
        Ok(())
    }
}

/// `c` cut into `k` copies of whole parts (the last takes the rest).
fn pieces(c: Copy, k: usize) -> Vec<Copy> {
    let part = c.2 / k;
    (0..k)
        .map(|i| {
            let off = (i * part) as u64;
            let len = if i + 1 == k { c.2 - i * part } else { part };
            (c.0 + off, c.1 + off, len)
        })
        .collect()
}

/// Queues one run of `mode` moving `n` bytes.
fn queue(mode: &str, g: &[Gpu; 2], n: usize) -> Res<()> {
    let to1: Copy = (g[1].dst.ptr(), g[0].src.ptr(), n);
    let to0: Copy = (g[0].dst.ptr(), g[1].src.ptr(), n);
    // SAFETY: every copy stays inside buffers of `n` or more bytes that no other copy of the
    // run writes; peer access is on both ways.
    unsafe {
        match mode {
            "each-pushes" => {
                g[0].a.memcpy(to1.0, to1.1, n)?;
                g[1].a.memcpy(to0.0, to0.1, n)?;
            }
            "later-lanes" => {
                g[1].a.memcpy(to0.0, to0.1, n)?;
                g[1].b.memcpy(to1.0, to1.1, n)?;
            }
            "later-batch" => g[1].a.memcpy_batch(&[to0, to1])?,
            "later-batch-4" => {
                let mut v = pieces(to0, 4);
                v.extend(pieces(to1, 4));
                g[1].a.memcpy_batch(&v)?;
            }
            "later-serial" => {
                g[1].a.memcpy(to0.0, to0.1, n)?;
                g[1].a.memcpy(to1.0, to1.1, n)?;
            }
            "each-batch" => {
                g[0].a.memcpy_batch(&[to1])?;
                g[1].a.memcpy_batch(&[to0])?;
            }
            "push-only" => g[0].a.memcpy(to1.0, to1.1, n)?,
            "pull-only" => g[1].a.memcpy(to1.0, to1.1, n)?,
            "pull-batch" => g[1].a.memcpy_batch(&[to1])?,
            _ => return Err(format!("no mode {mode}").into()),
        }
    }
    Ok(())
}

/// Median seconds of `reps` runs of `mode`, after one run not counted.
fn time(mode: &str, g: &[Gpu; 2], n: usize, reps: usize) -> Res<f64> {
    let mut t = Vec::with_capacity(reps);
    for i in 0..=reps {
        let t0 = Instant::now();
        queue(mode, g, n)?;
        g[0].sync()?;
        g[1].sync()?;
        if i > 0 {
            t.push(t0.elapsed().as_secs_f64());
        }
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn env_list(name: &str, dflt: &str) -> Res<Vec<usize>> {
    let v = std::env::var(name).unwrap_or_else(|_| dflt.into());
    v.split(',')
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .map_err(|e| format!("{name}: {e}").into())
        })
        .collect()
}

fn main() -> Res<()> {
    let sizes = env_list("BYTES", "16777216,134217728,536870912")?;
    let reps = env_list("REPS", "10")?[0].max(1);
    let most = sizes.iter().copied().max().unwrap_or(0);
    let (c0, c1) = (Context::new(0)?, Context::new(1)?);
    c0.enable_peer_access(&c1)?;
    c1.enable_peer_access(&c0)?;
    let g = [Gpu::new(&c0, most, 1)?, Gpu::new(&c1, most, 2)?];
    let both = [
        "each-pushes",
        "later-lanes",
        "later-batch",
        "later-batch-4",
        "later-serial",
        "each-batch",
    ];
    let one = ["push-only", "pull-only", "pull-batch"];
    println!("| bytes | mode | us | GB/s each way | / each-pushes (one way: / push-only) |");
    println!("|---:|---|---:|---:|---:|");
    for &n in &sizes {
        for set in [&both[..], &one[..]] {
            let base = time(set[0], &g, n, reps)?;
            for &mode in set {
                let s = time(mode, &g, n, reps)?;
                let gbs = n as f64 / s / 1e9;
                println!(
                    "| {n} | {mode} | {:.1} | {gbs:.1} | {:.3} |",
                    s * 1e6,
                    base / s
                );
            }
        }
    }
    Ok(())
}
