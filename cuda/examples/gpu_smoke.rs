//! GPU smoke test of the CUDA backend (`ccl_cuda::cuda`). Run on a machine with GPUs:
//! `cargo build --release -p ccl-cuda --example gpu_smoke && target/release/examples/gpu_smoke`.
//!
//! Prints one `PASS` / `FAIL` line per check and `SUMMARY pass=N fail=M` at the end (exit
//! status 1 on any failure):
//! * every (type x op) reduction, premul, premul_add and div_int on the GPU equals
//!   `ccl_cuda::host::reduce` bit for bit (random inputs with NaN/inf/subnormals/ties, every
//!   fp8 pair, every fp16/bf16 value; aligned, misaligned, in place, odd lengths);
//! * stream flags: host write -> `cuStreamWaitValue32` -> `cuStreamWriteValue32` -> host
//!   sees the ack, with the round-trip time;
//! * a 256 MiB peer copy GPU0 -> GPU1 (`cuMemcpyPeerAsync`) and its GB/s, and reduction
//!   kernel bandwidth (local, and reading the peer GPU's memory);
//! * an IPC handle opened in a child process (this program re-run with `ipc-child`);
//! * the kernel disk cache: a second `Kernels` loads every image from disk (timed), a corrupt
//!   file or an unusable directory only costs a recompile.

use std::error::Error;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccl_cuda::cuda::{
    current_device, pointer_info, Context, DeviceBuffer, Driver, Event, Flag, IpcHandle,
    IpcMapping, KernelOp, Kernels, MemoryKind, Nvrtc, PinnedBuffer, Stream, WaitCond,
};
use ccl_cuda::host::reduce as host;
use ccl_cuda::{DataType, ReduceKind};

type Res<T> = Result<T, Box<dyn Error>>;

/// Element offsets of (a, b, dst); dst `None` means in place into `a`.
type Offsets = (usize, usize, Option<usize>);

const OPS: [ReduceKind; 4] = [
    ReduceKind::Sum,
    ReduceKind::Prod,
    ReduceKind::Max,
    ReduceKind::Min,
];

#[derive(Default)]
struct Report {
    pass: u32,
    fail: u32,
}

impl Report {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            self.pass += 1;
            println!("PASS {what}");
        } else {
            self.fail += 1;
            println!("FAIL {what}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random inputs.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const F32_SPECIALS: [u32; 16] = [
    0x0000_0000,
    0x8000_0000,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0xffc0_0000,
    0x7f80_0001,
    0x7fff_ffff,
    0x7f7f_ffff,
    0x0000_0001,
    0x007f_ffff,
    0x0080_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x8000_0001,
    0x3380_0000,
];
const F64_SPECIALS: [u64; 14] = [
    0,
    0x8000_0000_0000_0000,
    0x7ff0_0000_0000_0000,
    0xfff0_0000_0000_0000,
    0x7ff8_0000_0000_0000,
    0xfff8_0000_0000_0000,
    0x7ff0_0000_0000_0001,
    0x7fef_ffff_ffff_ffff,
    1,
    0x000f_ffff_ffff_ffff,
    0x0010_0000_0000_0000,
    0x3ff0_0000_0000_0000,
    0xbff0_0000_0000_0000,
    0x3ca0_0000_0000_0000,
];

/// One element of `dt` as a u64 (low bytes), drawn from a mix of classes that exercises
/// rounding, specials and subnormals; `other` is the partner element (for "near" values).
fn gen_elem(dt: DataType, rng: &mut Rng, other: u64) -> u64 {
    let class = rng.below(8);
    match dt {
        DataType::Float32 => {
            let o = other as u32;
            let v: u32 = match class {
                0 => rng.next() as u32,
                1 => F32_SPECIALS[rng.below(16) as usize],
                2 => (rng.next() as u32) & 0x807f_ffff, // subnormal
                3 => {
                    // Half an ulp of the partner times a small odd number: ties and near-ties.
                    let e = (o >> 23) & 0xff;
                    let e = e.saturating_sub(24 + rng.below(3) as u32).max(1);
                    (e << 23) | ((rng.next() as u32) & 0x7) | ((rng.next() as u32) & 0x8000_0000)
                }
                4 => o ^ ((rng.next() as u32) & 0xf), // close to the partner
                _ => {
                    // Moderate magnitudes.
                    let e = 127 - 12 + rng.below(24) as u32;
                    ((rng.next() as u32) & 0x807f_ffff) | (e << 23)
                }
            };
            u64::from(v)
        }
        DataType::Float64 => match class {
            0 => rng.next(),
            1 => F64_SPECIALS[rng.below(14) as usize],
            2 => rng.next() & 0x800f_ffff_ffff_ffff,
            3 => {
                let e = (other >> 52) & 0x7ff;
                let e = e.saturating_sub(53 + rng.below(3)).max(1);
                (e << 52) | (rng.next() & 0x7) | (rng.next() & 0x8000_0000_0000_0000)
            }
            4 => other ^ (rng.next() & 0xf),
            _ => {
                let e = 1023 - 20 + rng.below(40);
                (rng.next() & 0x800f_ffff_ffff_ffff) | (e << 52)
            }
        },
        DataType::Float16 | DataType::Bfloat16 => {
            let o = other as u16;
            let v: u16 = match class {
                0 | 1 => rng.next() as u16,
                2 => o ^ (rng.next() as u16 & 0x7),
                3 => (rng.next() as u16) & 0x83ff,
                _ => {
                    // Values within a few binades of the partner: sums that round.
                    let shift = if dt == DataType::Float16 { 10 } else { 7 };
                    let e =
                        ((o >> shift) & if dt == DataType::Float16 { 0x1f } else { 0xff }) as i32;
                    let e = (e - rng.below(12) as i32).max(1) as u16;
                    ((rng.next() as u16) & (0x8000 | ((1 << shift) - 1))) | (e << shift)
                }
            };
            u64::from(v)
        }
        _ => {
            let bytes = dt.size() as u32 * 8;
            let mask = if bytes == 64 {
                u64::MAX
            } else {
                (1u64 << bytes) - 1
            };
            let v = match class {
                0 => 0,
                1 => mask,            // -1 / max unsigned
                2 => mask >> 1,       // signed max
                3 => (mask >> 1) + 1, // signed min
                4 => rng.below(8),    // small
                _ => rng.next(),
            };
            v & mask
        }
    }
}

fn put(buf: &mut [u8], i: usize, size: usize, v: u64) {
    buf[i * size..(i + 1) * size].copy_from_slice(&v.to_le_bytes()[..size]);
}

fn get(buf: &[u8], i: usize, size: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(&buf[i * size..(i + 1) * size]);
    u64::from_le_bytes(b)
}

/// Two input arrays of `n` elements. 1-byte floats start with every (a, b) pair; 2-byte
/// floats start with every `a` encoding.
fn gen_inputs(dt: DataType, n: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let size = dt.size();
    let mut rng = Rng(seed ^ (dt as u64).wrapping_mul(0x1234_5678_9abc));
    let (mut a, mut b) = (vec![0u8; n * size], vec![0u8; n * size]);
    for i in 0..n {
        let (x, y) = match dt {
            DataType::Float8E4M3 | DataType::Float8E5M2 | DataType::Int8 | DataType::Uint8
                if i < 65536 =>
            {
                ((i & 0xff) as u64, (i >> 8) as u64)
            }
            DataType::Float8E4M3 | DataType::Float8E5M2 => (rng.next() & 0xff, rng.next() & 0xff),
            DataType::Float16 | DataType::Bfloat16 if i < 65536 => {
                let x = i as u64;
                (x, gen_elem(dt, &mut rng, x))
            }
            _ => {
                let seed = rng.0;
                let x = gen_elem(dt, &mut rng, seed);
                (x, gen_elem(dt, &mut rng, x))
            }
        };
        put(&mut a, i, size, x);
        put(&mut b, i, size, y);
    }
    (a, b)
}

/// Compares GPU and host results; f64 NaN results compare as NaN only (the host's f64 NaN
/// payload is whatever its FPU gives). Returns a description of the first mismatch.
fn compare(dt: DataType, gpu: &[u8], want: &[u8], a: &[u8], b: Option<&[u8]>) -> Option<String> {
    let size = dt.size();
    let n = want.len() / size;
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..n {
        let (g, w) = (get(gpu, i, size), get(want, i, size));
        if g == w {
            continue;
        }
        if dt == DataType::Float64 && f64::from_bits(g).is_nan() && f64::from_bits(w).is_nan() {
            continue;
        }
        bad += 1;
        if first.is_none() {
            let bv = b
                .map(|b| format!(" b={:#x}", get(b, i, size)))
                .unwrap_or_default();
            first = Some(format!(
                "elem {i}: a={:#x}{bv} gpu={g:#x} host={w:#x}",
                get(a, i, size)
            ));
        }
    }
    first.map(|f| format!("{bad}/{n} differ, first {f}"))
}

// ---------------------------------------------------------------------------------------------
// Kernel correctness.

/// One reduction case: inputs at element offsets (oa, ob, od) of three buffers (`od == None`:
/// in place into `a`). Returns a mismatch description.
#[allow(clippy::too_many_arguments)]
fn run_case(
    k: &Kernels,
    s: &Stream,
    bufs: &[DeviceBuffer; 3],
    dt: DataType,
    op: KernelOp,
    a: &[u8],
    b: &[u8],
    offs: Offsets,
    param: u64,
) -> Res<Option<String>> {
    let size = dt.size();
    let n = a.len() / size;
    let (oa, ob, od) = (offs.0 * size, offs.1 * size, offs.2.map(|o| o * size));
    bufs[0].write(oa, a)?;
    bufs[1].write(ob, b)?;
    let pa = bufs[0].at(oa);
    let pb = bufs[1].at(ob);
    let pd = od.map(|o| bufs[2].at(o)).unwrap_or(pa);
    let scalar = param.to_le_bytes();
    // Host reference.
    let mut want = a.to_vec();
    let dp = want.as_mut_ptr();
    // SAFETY: every host slice holds n elements; in-place calls pass dst == src exactly.
    unsafe {
        match op {
            KernelOp::Reduce(r) => host::reduce(dt, OPS[r as usize], dp, dp, b.as_ptr(), n),
            KernelOp::PreMul => host::premul(dt, dp, dp, n, scalar.as_ptr()),
            KernelOp::PreMulAdd => host::premul_add(dt, dp, dp, b.as_ptr(), n, scalar.as_ptr()),
            KernelOp::DivInt => host::div_int(dt, dp, n, param),
            KernelOp::LlAllReduce(_)
            | KernelOp::ReduceN(..)
            | KernelOp::ReduceNMail(..)
            | KernelOp::GraphAllReduce(..)
            | KernelOp::GraphCopies
            | KernelOp::GraphHandshake
            | KernelOp::LlExchange
            | KernelOp::WaitFlag
            | KernelOp::WaitCopy
            | KernelOp::MailCopy
            | KernelOp::LlP2p => return Err("not an element-wise kernel".into()),
        }
    }
    // GPU.
    // SAFETY: each pointer addresses n elements inside its buffer (offsets are small and the
    // buffers have slack); dst is disjoint from or equal to each input.
    unsafe {
        match op {
            KernelOp::Reduce(r) => k.reduce(s, dt, OPS[r as usize], pd, pa, pb, n)?,
            KernelOp::PreMul => k.premul(s, dt, pd, pa, n, scalar)?,
            KernelOp::PreMulAdd => k.premul_add(s, dt, pd, pa, pb, n, scalar)?,
            KernelOp::DivInt => {
                if od.is_some() {
                    s.memcpy_dtod(pd, pa, a.len())?;
                }
                k.div_int(s, dt, pd, n, param)?
            }
            KernelOp::LlAllReduce(_)
            | KernelOp::ReduceN(..)
            | KernelOp::ReduceNMail(..)
            | KernelOp::GraphAllReduce(..)
            | KernelOp::GraphCopies
            | KernelOp::GraphHandshake
            | KernelOp::LlExchange
            | KernelOp::WaitFlag
            | KernelOp::WaitCopy
            | KernelOp::MailCopy
            | KernelOp::LlP2p => return Err("not an element-wise kernel".into()),
        }
    }
    s.synchronize()?;
    let mut got = vec![0u8; a.len()];
    match od {
        Some(o) => bufs[2].read(o, &mut got)?,
        None => bufs[0].read(oa, &mut got)?,
    }
    let bin = op.is_binary().then_some(b);
    Ok(compare(dt, &got, &want, a, bin))
}

fn kernel_correctness(r: &mut Report, ctx: &Arc<Context>, k: &Kernels) -> Res<()> {
    let s = Stream::with_flags(ctx, true)?;
    const N: usize = (1 << 20) + 3;
    let bufs = [
        DeviceBuffer::new(ctx, N * 8 + 256)?,
        DeviceBuffer::new(ctx, N * 8 + 256)?,
        DeviceBuffer::new(ctx, N * 8 + 256)?,
    ];
    // (offset a, offset b, offset dst or in place, length)
    let cases: [(Offsets, usize); 7] = [
        ((0, 0, Some(0)), N),
        ((0, 0, None), N),
        ((1, 1, Some(1)), 100_003),
        ((1, 3, Some(2)), 100_003),
        ((3, 0, Some(5)), 37),
        ((0, 0, Some(0)), 1),
        ((2, 2, None), 5),
    ];
    for dt in DataType::ALL {
        let (a_all, b_all) = gen_inputs(dt, N, 42);
        let size = dt.size();
        let mut ops: Vec<(KernelOp, u64, String)> = OPS
            .iter()
            .map(|&o| (KernelOp::reduce(o), 0u64, format!("reduce {o:?}")))
            .collect();
        let scalars: Vec<u64> = if dt.is_float() {
            [1.0 / 3.0, -2.5, 1e-3]
                .iter()
                .map(|&v| u64::from_le_bytes(host::from_f64(dt, v)))
                .collect()
        } else {
            vec![3, u64::MAX, 0x8000_0001]
        };
        for &sc in &scalars {
            ops.push((KernelOp::PreMul, sc, format!("premul s={sc:#x}")));
            ops.push((KernelOp::PreMulAdd, sc, format!("premul_add s={sc:#x}")));
        }
        for d in [1u64, 2, 3, 7, 255, 1 << 31, 1 << 63, u64::MAX] {
            ops.push((KernelOp::DivInt, d, format!("div_int n={d}")));
        }
        for (op, param, label) in ops {
            let mut fails = Vec::new();
            let mut elems = 0;
            for (offs, len) in cases {
                let a = &a_all[..len * size];
                let b = &b_all[..len * size];
                elems += len;
                match run_case(k, &s, &bufs, dt, op, a, b, offs, param) {
                    Ok(None) => {}
                    Ok(Some(m)) => fails.push(format!("offs {offs:?} len {len}: {m}")),
                    Err(e) => fails.push(format!("offs {offs:?} len {len}: error {e}")),
                }
            }
            let what = format!(
                "kernel {} {label} ({} cases, {elems} elems)",
                dt.name(),
                cases.len()
            );
            if fails.is_empty() {
                r.check(true, &what);
            } else {
                r.check(false, &format!("{what}: {}", fails.join(" | ")));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Kernel cache.

fn all_kernels() -> Vec<(DataType, KernelOp)> {
    DataType::ALL
        .iter()
        .flat_map(|&dt| KernelOp::ALL.iter().map(move |&op| (dt, op)))
        .collect()
}

fn prepare_all(r: &mut Report, k: &Kernels, label: &str) -> f64 {
    let t = Instant::now();
    let mut errors = Vec::new();
    for (dt, op) in all_kernels() {
        if let Err(e) = k.prepare(dt, op) {
            errors.push(format!("{} {op:?}: {e}", dt.name()));
        }
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if let Some(first) = errors.first() {
        let mut first = first.clone();
        first.truncate(4000);
        r.check(
            false,
            &format!("{label}: {} kernels failed; first: {first}", errors.len()),
        );
    }
    ms
}

fn kernel_cache(r: &mut Report, ctx: &Arc<Context>, dir: &PathBuf) -> Res<Kernels> {
    let _ = std::fs::remove_dir_all(dir);
    let n = all_kernels().len() as u64;
    let cold = Kernels::with_cache_dir(ctx, Some(dir.clone()))?;
    println!(
        "INFO nvrtc target {:?}, nvrtc {:?} at {}",
        cold.target(),
        cold.nvrtc().version(),
        cold.nvrtc().path()
    );
    let ms_cold = prepare_all(r, &cold, "cold compile");
    let st = cold.stats();
    r.check(
        st.compiled == n && st.from_disk == 0,
        &format!(
            "cache cold: {n} kernels compiled in {ms_cold:.0} ms ({:.1} ms each) {st:?}",
            ms_cold / n as f64
        ),
    );
    drop(cold);
    let warm = Kernels::with_cache_dir(ctx, Some(dir.clone()))?;
    let ms_warm = prepare_all(r, &warm, "warm load");
    let st = warm.stats();
    r.check(
        st.from_disk == n && st.compiled == 0,
        &format!(
            "cache warm: {n} kernels loaded from disk in {ms_warm:.0} ms ({:.2} ms each) {st:?}",
            ms_warm / n as f64
        ),
    );
    // Corrupt every cached file: everything recompiles, nothing fails.
    let mut corrupted = 0;
    for e in std::fs::read_dir(dir)?.flatten() {
        let p = e.path();
        if let Ok(mut bytes) = std::fs::read(&p) {
            if bytes.len() > 100 {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0xff;
                bytes.truncate(bytes.len() - 7);
                if std::fs::write(&p, &bytes).is_ok() {
                    corrupted += 1;
                }
            }
        }
    }
    let k3 = Kernels::with_cache_dir(ctx, Some(dir.clone()))?;
    let dt_op = (DataType::Float32, KernelOp::reduce(ReduceKind::Sum));
    let ok = k3.prepare(dt_op.0, dt_op.1).is_ok();
    let st = k3.stats();
    r.check(
        ok && st.compiled == 1 && st.from_disk == 0 && corrupted > 0,
        &format!("cache corrupt files ({corrupted}) recompiled: {st:?}"),
    );
    let k4 = Kernels::with_cache_dir(ctx, Some(PathBuf::from("/proc/ccl-no-such-dir/x")))?;
    let ok = k4
        .prepare(DataType::Bfloat16, KernelOp::reduce(ReduceKind::Max))
        .is_ok();
    r.check(ok, "cache unwritable dir: compile still succeeds");
    Ok(warm)
}

// ---------------------------------------------------------------------------------------------
// Flags, copies, IPC.

fn flags(r: &mut Report, ctx: &Arc<Context>) -> Res<()> {
    let s = Stream::with_flags(ctx, true)?;
    let go = Flag::new(ctx)?;
    let ack = Flag::new(ctx)?;
    const ITERS: u32 = 2000;
    let mut times = Vec::with_capacity(ITERS as usize);
    let mut ok = true;
    for i in 1..=ITERS {
        // SAFETY: both flags outlive the stream work (synchronised below); each wait is
        // released by the store right after (one wait queued at a time).
        unsafe {
            go.stream_wait(&s, i, WaitCond::Geq)?;
            ack.stream_write(&s, i)?;
        }
        let t = Instant::now();
        go.store(i);
        if ack.wait_host(Duration::from_secs(2), |v| v >= i).is_err() {
            ok = false;
            break;
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    s.synchronize()?;
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        times
            .get(((times.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    r.check(
        ok && times.len() == ITERS as usize,
        &format!(
            "flag round trip host->waitValue32->writeValue32->host x{ITERS}: median {:.2} us, mean {mean:.2} us, p99 {:.2} us, min {:.2} us",
            pct(0.5),
            pct(0.99),
            pct(0.0)
        ),
    );
    // Device-to-device ordering through a flag: stream B waits for stream A's write.
    let a = Stream::with_flags(ctx, true)?;
    let b = Stream::with_flags(ctx, true)?;
    let f = Flag::new(ctx)?;
    let done = Flag::new(ctx)?;
    // SAFETY: flags outlive both streams' work (synchronised below); the wait is satisfied
    // by the write queued right after on the other stream.
    unsafe {
        f.stream_wait(&b, 7, WaitCond::Eq)?;
        done.stream_write(&b, 1)?;
        f.stream_write(&a, 7)?;
    }
    let ok = done.wait_host(Duration::from_secs(2), |v| v == 1).is_ok();
    a.synchronize()?;
    b.synchronize()?;
    r.check(
        ok,
        "flag stream->stream ordering (write on A releases wait on B)",
    );
    Ok(())
}

fn peer_copy(
    r: &mut Report,
    c0: &Arc<Context>,
    c1: &Arc<Context>,
    k1: &Kernels,
    k0: &Kernels,
) -> Res<()> {
    let can = c0.can_access_peer(c1)? && c1.can_access_peer(c0)?;
    r.check(can, "peer access possible GPU0 <-> GPU1");
    c0.enable_peer_access(c1)?;
    c1.enable_peer_access(c0)?;
    c0.enable_peer_access(c1)?; // twice is fine
    const BYTES: usize = 256 << 20;
    let src = DeviceBuffer::new(c0, BYTES)?;
    let dst = DeviceBuffer::new(c1, BYTES)?;
    let pattern: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let s0 = Stream::with_flags(c0, true)?;
    // SAFETY: both ranges are inside the buffers, synchronised before they are dropped.
    unsafe {
        s0.memset_d8(src.ptr(), 0x5a, BYTES)?;
    }
    s0.synchronize()?;
    src.write(0, &pattern)?;
    src.write(BYTES - pattern.len(), &pattern)?;
    let (e0, e1) = (Event::timing(c0)?, Event::timing(c0)?);
    const ITERS: usize = 10;
    // SAFETY: as above.
    unsafe {
        s0.memcpy_peer(dst.ptr(), c1, src.ptr(), c0, BYTES)?;
        e0.record(&s0)?;
        for _ in 0..ITERS {
            s0.memcpy_peer(dst.ptr(), c1, src.ptr(), c0, BYTES)?;
        }
        e1.record(&s0)?;
    }
    e1.synchronize()?;
    let ms = Event::elapsed_ms(&e0, &e1)?;
    let gbs = (BYTES * ITERS) as f64 / (f64::from(ms) * 1e-3) / 1e9;
    let mut back = vec![0u8; pattern.len()];
    dst.read(0, &mut back)?;
    let mut ok = back == pattern;
    dst.read(BYTES - pattern.len(), &mut back)?;
    ok &= back == pattern;
    let mut mid = vec![0u8; 4096];
    dst.read(BYTES / 2, &mut mid)?;
    ok &= mid.iter().all(|&b| b == 0x5a);
    r.check(
        ok,
        &format!("peer copy GPU0->GPU1 256 MiB x{ITERS}: {gbs:.1} GB/s (cuMemcpyPeerAsync)"),
    );

    // Reduction bandwidth: local on GPU0, and on GPU1 reading one input from GPU0.
    let n = BYTES / 4;
    let a0 = DeviceBuffer::new(c0, BYTES)?;
    let d0 = DeviceBuffer::new(c0, BYTES)?;
    let b1 = DeviceBuffer::new(c1, BYTES)?;
    let d1 = DeviceBuffer::new(c1, BYTES)?;
    let s1 = Stream::with_flags(c1, true)?;
    for (dt, label) in [
        (DataType::Float32, "f32"),
        (DataType::Bfloat16, "bf16"),
        (DataType::Float8E4M3, "e4m3"),
    ] {
        let n = BYTES / dt.size();
        // Local: d0 = a0 + src (all on GPU0).
        let (e0, e1) = (Event::timing(c0)?, Event::timing(c0)?);
        // SAFETY: all ranges are BYTES long inside their buffers, synchronised below.
        unsafe {
            k0.reduce(&s0, dt, ReduceKind::Sum, d0.ptr(), a0.ptr(), src.ptr(), n)?;
            e0.record(&s0)?;
            for _ in 0..ITERS {
                k0.reduce(&s0, dt, ReduceKind::Sum, d0.ptr(), a0.ptr(), src.ptr(), n)?;
            }
            e1.record(&s0)?;
        }
        e1.synchronize()?;
        let ms = Event::elapsed_ms(&e0, &e1)?;
        let gbs = (3 * BYTES * ITERS) as f64 / (f64::from(ms) * 1e-3) / 1e9;
        println!("INFO reduce sum {label} local 256 MiB: {gbs:.0} GB/s of HBM traffic (2 reads + 1 write)");
        // Peer: d1 = src(GPU0, over NVLink) + b1 (GPU1).
        let (e0, e1) = (Event::timing(c1)?, Event::timing(c1)?);
        // SAFETY: as above; peer access GPU1 -> GPU0 is enabled.
        unsafe {
            k1.reduce(&s1, dt, ReduceKind::Sum, d1.ptr(), src.ptr(), b1.ptr(), n)?;
            e0.record(&s1)?;
            for _ in 0..ITERS {
                k1.reduce(&s1, dt, ReduceKind::Sum, d1.ptr(), src.ptr(), b1.ptr(), n)?;
            }
            e1.record(&s1)?;
        }
        e1.synchronize()?;
        let ms = Event::elapsed_ms(&e0, &e1)?;
        let gbs = (BYTES * ITERS) as f64 / (f64::from(ms) * 1e-3) / 1e9;
        println!(
            "INFO reduce sum {label} on GPU1 reading GPU0 256 MiB: {gbs:.0} GB/s of peer reads"
        );
    }
    let _ = n;
    // Spot check of the peer-read result against the host.
    let m = 4096;
    let mut x = vec![0u8; m * 4];
    let mut y = vec![0u8; m * 4];
    let mut z = vec![0u8; m * 4];
    src.read(0, &mut x)?;
    b1.read(0, &mut y)?;
    // SAFETY: d1 holds at least m floats; synchronised.
    unsafe {
        k1.reduce(
            &s1,
            DataType::Float32,
            ReduceKind::Sum,
            d1.ptr(),
            src.ptr(),
            b1.ptr(),
            m,
        )?
    };
    s1.synchronize()?;
    d1.read(0, &mut z)?;
    let mut want = vec![0u8; m * 4];
    // SAFETY: host slices of m floats.
    unsafe {
        host::reduce(
            DataType::Float32,
            ReduceKind::Sum,
            want.as_mut_ptr(),
            x.as_ptr(),
            y.as_ptr(),
            m,
        )
    };
    r.check(
        compare(DataType::Float32, &z, &want, &x, Some(&y)).is_none(),
        "peer-read reduce result equals host",
    );
    Ok(())
}

fn pointer_checks(r: &mut Report, ctx: &Arc<Context>) -> Res<()> {
    let buf = DeviceBuffer::new(ctx, 1 << 20)?;
    let pi = pointer_info(buf.ptr() + 100)?;
    r.check(
        pi.kind == MemoryKind::Device
            && pi.is_device
            && pi.device == Some(ctx.ordinal())
            && pi.base == buf.ptr()
            && pi.size == buf.len(),
        &format!("pointer_info device buffer+100: {pi:?}"),
    );
    let pinned = PinnedBuffer::new(ctx, 4096)?;
    let pi = pointer_info(pinned.as_ptr() as u64)?;
    r.check(
        pi.kind == MemoryKind::Host && !pi.is_device,
        &format!("pointer_info pinned: {pi:?}"),
    );
    let local = [0u8; 64];
    let pi = pointer_info(local.as_ptr() as u64)?;
    r.check(
        pi.kind == MemoryKind::Unregistered && !pi.is_device,
        &format!("pointer_info stack: {pi:?}"),
    );
    // Streams: the caller's NULL stream, capture status.
    let legacy = Stream::legacy_default(ctx);
    r.check(
        legacy.synchronize().is_ok() && legacy.query()?,
        "legacy default (NULL) stream sync/query",
    );
    let own = Stream::new(ctx)?;
    // SAFETY: a live stream of this context, outliving `wrapped`.
    let wrapped = unsafe { Stream::from_raw(ctx, own.raw()) };
    r.check(
        wrapped.capture_status()? == ccl_cuda::cuda::CaptureStatus::None
            && wrapped.synchronize().is_ok(),
        "wrapped raw stream: not capturing, sync ok",
    );
    drop(wrapped);
    r.check(
        own.query()?,
        "owned stream still valid after its wrapper is dropped",
    );
    Ok(())
}

fn ipc(r: &mut Report, ctx: &Arc<Context>, ndev: i32) -> Res<()> {
    const BYTES: usize = 64 << 20;
    let buf = DeviceBuffer::new(ctx, BYTES)?;
    let data: Vec<u8> = (0..BYTES)
        .map(|i| (i.wrapping_mul(131) >> 3) as u8 ^ 0x3c)
        .collect();
    buf.write(0, &data)?;
    let h = IpcHandle::of(ctx, buf.ptr())?;
    let exe = std::env::current_exe()?;
    for dev in if ndev > 1 { vec![1, 0] } else { vec![0] } {
        // Reset the marker the child writes.
        buf.write(0, &data[..16])?;
        let t = Instant::now();
        let mut child = Command::new(&exe)
            .args([
                "ipc-child",
                &h.to_hex(),
                &BYTES.to_string(),
                &dev.to_string(),
            ])
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let mut head = [0u8; 16];
        buf.read(0, &mut head)?;
        let ok = status.map(|s| s.success()).unwrap_or(false) && head == [0xab; 16];
        r.check(
            ok,
            &format!("ipc: child process opened GPU0 memory on GPU{dev}, read 64 MiB correctly and wrote back ({ms:.0} ms incl. process start) status={status:?}"),
        );
    }
    Ok(())
}

/// The child side of the IPC check: `ipc-child HEX BYTES DEVICE`.
fn ipc_child(args: &[String]) -> Res<()> {
    let (Some(hex), Some(bytes), Some(dev)) = (args.first(), args.get(1), args.get(2)) else {
        return Err("usage: ipc-child HEX BYTES DEVICE".into());
    };
    let h = IpcHandle::from_hex(hex)?;
    let bytes: usize = bytes.parse()?;
    let ctx = Context::new(dev.parse()?)?;
    let map = IpcMapping::open(&ctx, &h)?;
    let pi = pointer_info(map.ptr())?;
    let mut got = vec![0u8; bytes];
    let s = Stream::with_flags(&ctx, true)?;
    // SAFETY: the mapping holds `bytes` bytes; synchronised before `got` is read.
    unsafe { s.memcpy_dtoh(got.as_mut_ptr(), map.ptr(), bytes)? };
    s.synchronize()?;
    let want: Vec<u8> = (0..bytes)
        .map(|i| (i.wrapping_mul(131) >> 3) as u8 ^ 0x3c)
        .collect();
    if got != want {
        return Err("ipc child: data mismatch".into());
    }
    // SAFETY: 16 bytes inside the mapping; synchronised before the mapping closes.
    unsafe { s.memset_d8(map.ptr(), 0xab, 16)? };
    s.synchronize()?;
    println!(
        "INFO ipc child on GPU{dev}: mapped at {:#x}, pointer_info {pi:?}",
        map.ptr()
    );
    Ok(())
}

fn run(r: &mut Report) -> Res<()> {
    let drv = Driver::get()?;
    let ndev = drv.device_count()?;
    println!(
        "INFO driver {} version {} devices {ndev}",
        drv.path(),
        drv.version()
    );
    for i in 0..ndev {
        let d = drv.device(i)?;
        println!(
            "INFO GPU{i}: {} cc {:?} pci {}",
            drv.device_name(d)?,
            drv.compute_capability(d)?,
            drv.pci_bus_id(d)?
        );
    }
    let nv = Nvrtc::get()?;
    println!("INFO nvrtc {} version {:?}", nv.path(), nv.version());
    let c0 = Context::new(0)?;
    let c1 = if ndev > 1 {
        Some(Context::new(1)?)
    } else {
        None
    };
    c0.bind()?;
    r.check(
        current_device()? == Some(0),
        "current_device after binding GPU0",
    );
    if let Some(c1) = &c1 {
        let g = c1.scope()?;
        let inside = current_device()?;
        drop(g);
        r.check(
            inside == Some(1) && current_device()? == Some(0),
            "context scope switches and restores",
        );
    }

    let dir = std::env::temp_dir().join(format!("ccl-smoke-kcache-{}", std::process::id()));
    let k0 = kernel_cache(r, &c0, &dir)?;
    pointer_checks(r, &c0)?;
    flags(r, &c0)?;
    kernel_correctness(r, &c0, &k0)?;
    if let Some(c1) = &c1 {
        let k1 = Kernels::with_cache_dir(c1, Some(dir.clone()))?;
        peer_copy(r, &c0, c1, &k1, &k0)?;
    }
    ipc(r, &c0, ndev)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("ipc-child") {
        match ipc_child(&args[2..]) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                println!("FAIL ipc child: {e}");
                std::process::exit(1);
            }
        }
    }
    let mut r = Report::default();
    let t = Instant::now();
    if let Err(e) = run(&mut r) {
        r.check(false, &format!("fatal: {e}"));
    }
    println!(
        "SUMMARY pass={} fail={} ({:.1} s)",
        r.pass,
        r.fail,
        t.elapsed().as_secs_f64()
    );
    std::process::exit(if r.fail == 0 { 0 } else { 1 });
}
