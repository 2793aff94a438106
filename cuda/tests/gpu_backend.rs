//! The CUDA backend on a real GPU: a reduction and a flag round trip. Where no driver (or no
//! device, or no NVRTC) is found — CI — the test prints why and passes.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

mod scenario;

use ccl_cuda::cuda::source::{KernelOp, ReduceKindKey};
use ccl_cuda::cuda::{
    Context, DeviceBuffer, Driver, Flag, Kernels, Nvrtc, PinnedBuffer, Stream, WaitCond,
};
use ccl_cuda::host::reduce as host;
use ccl_cuda::{DataType, ReduceKind};

/// One test on the GPU at a time: a kernel that waits for a launch this process makes next
/// (two ranks on one GPU) would wait forever if another test's module load, which can wait
/// for the whole device, took the driver in between.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn gpu() -> Option<std::sync::Arc<Context>> {
    match Driver::get().and_then(|d| d.device_count()) {
        Ok(n) if n > 0 => {}
        Ok(_) => {
            eprintln!("skipping: no CUDA device");
            return None;
        }
        Err(e) => {
            eprintln!("skipping: {e}");
            return None;
        }
    }
    if let Err(e) = Nvrtc::get() {
        eprintln!("skipping: {e}");
        return None;
    }
    Some(Context::new(0).unwrap())
}

#[test]
fn reduce_matches_host() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    for dt in [
        DataType::Float32,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Int64,
    ] {
        let n = 10_001;
        let bytes = n * dt.size();
        let a: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
        let b: Vec<u8> = (0..bytes).map(|i| (i * 13 + 1) as u8).collect();
        let (da, db, dd) = (
            DeviceBuffer::new(&ctx, bytes).unwrap(),
            DeviceBuffer::new(&ctx, bytes).unwrap(),
            DeviceBuffer::new(&ctx, bytes).unwrap(),
        );
        da.write(0, &a).unwrap();
        db.write(0, &b).unwrap();
        // SAFETY: three buffers of n elements, synchronised before they are read or dropped.
        unsafe {
            kernels
                .reduce(
                    &stream,
                    dt,
                    ReduceKind::Sum,
                    dd.ptr(),
                    da.ptr(),
                    db.ptr(),
                    n,
                )
                .unwrap()
        };
        stream.synchronize().unwrap();
        let mut got = vec![0u8; bytes];
        dd.read(0, &mut got).unwrap();
        let mut want = vec![0u8; bytes];
        // SAFETY: host buffers of n elements.
        unsafe {
            host::reduce(
                dt,
                ReduceKind::Sum,
                want.as_mut_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                n,
            )
        };
        assert_eq!(got, want, "{dt:?}");
    }
}

/// `memcpy_batch` copies every block of a batch (more than one call's worth) exactly, and the
/// legacy default stream says it takes no batch.
#[test]
fn a_batch_of_copies_moves_every_block() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let stream = Stream::new(&ctx).unwrap();
    assert!(!Stream::legacy_default(&ctx).batches_copies());
    if !stream.batches_copies() {
        eprintln!("skipping: the driver has no cuMemcpyBatchAsync");
        return;
    }
    let blocks = ccl_cuda::cuda::stream::MAX_COPIES_PER_BATCH + 5;
    let block = 4096 + 12;
    let src: Vec<u8> = (0..blocks * block).map(|i| (i * 31 + 7) as u8).collect();
    let (ds, dd) = (
        DeviceBuffer::new(&ctx, src.len()).unwrap(),
        DeviceBuffer::new(&ctx, src.len()).unwrap(),
    );
    ds.write(0, &src).unwrap();
    // Block i lands in slot blocks-1-i.
    let copies: Vec<(u64, u64, usize)> = (0..blocks)
        .map(|i| {
            let to = (blocks - 1 - i) * block;
            (dd.ptr() + to as u64, ds.ptr() + (i * block) as u64, block)
        })
        .collect();
    // SAFETY: disjoint blocks of two live buffers, synchronised before they are read.
    unsafe { stream.memcpy_batch(&copies) }.unwrap();
    stream.synchronize().unwrap();
    let mut got = vec![0u8; src.len()];
    dd.read(0, &mut got).unwrap();
    for i in 0..blocks {
        let to = (blocks - 1 - i) * block;
        assert_eq!(
            got[to..to + block],
            src[i * block..(i + 1) * block],
            "block {i}"
        );
    }
}

/// `preload` compiles what the disk cache lacks on several threads, loads what it has, and
/// leaves nothing for a launch to load (a launch after it compiles nothing more).
#[test]
fn preload_compiles_in_parallel_then_comes_from_disk() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let dir = std::env::temp_dir().join(format!("ccl-preload-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let keys = [
        (DataType::Float32, KernelOp::Reduce(ReduceKindKey::Sum)),
        (DataType::Bfloat16, KernelOp::Reduce(ReduceKindKey::Sum)),
        (DataType::Int64, KernelOp::Reduce(ReduceKindKey::Max)),
        (DataType::Float32, KernelOp::LlAllReduce(ReduceKindKey::Sum)),
        (DataType::Float32, KernelOp::Reduce(ReduceKindKey::Sum)),
    ];
    let cold = Kernels::with_cache_dir(&ctx, Some(dir.clone())).unwrap();
    assert!(cold.preload(&keys, 4).failed.is_empty());
    assert_eq!(
        cold.stats().compiled,
        4,
        "the repeated key is compiled once"
    );
    assert_eq!(cold.stats().from_disk, 0);
    let warm = Kernels::with_cache_dir(&ctx, Some(dir.clone())).unwrap();
    assert!(warm.preload(&keys, 4).failed.is_empty());
    assert_eq!((warm.stats().compiled, warm.stats().from_disk), (0, 4));
    let stream = Stream::new(&ctx).unwrap();
    let (a, d) = (
        DeviceBuffer::new(&ctx, 64).unwrap(),
        DeviceBuffer::new(&ctx, 64).unwrap(),
    );
    a.write(0, &[0u8; 64]).unwrap();
    // SAFETY: 16 floats in each buffer, synchronised before they are dropped.
    unsafe {
        warm.reduce(
            &stream,
            DataType::Float32,
            ReduceKind::Sum,
            d.ptr(),
            a.ptr(),
            a.ptr(),
            16,
        )
        .unwrap()
    };
    stream.synchronize().unwrap();
    assert_eq!((warm.stats().compiled, warm.stats().from_disk), (0, 4));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One kernel over k sources gives the bits of a chain of two-input kernels (3, 4 and 8
/// sources; in place on source 0, as a direct reduce-scatter runs, and out of place).
#[test]
fn reduce_n_matches_a_chain_of_reduces() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    for dt in [DataType::Float32, DataType::Bfloat16, DataType::Int32] {
        for k in [3usize, 4, 8] {
            let n = 300_007;
            let bytes = n * dt.size();
            let srcs: Vec<Vec<u8>> = (0..k)
                .map(|m| (0..bytes).map(|i| (i * (7 + 2 * m) + m) as u8).collect())
                .collect();
            let (bufs, want) = on_device_and_summed(&ctx, dt, &srcs);
            let dd = DeviceBuffer::new(&ctx, bytes).unwrap();
            let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr()).collect();
            for in_place in [false, true] {
                let dst = if in_place { ptrs[0] } else { dd.ptr() };
                // SAFETY: k + 1 buffers of n elements, synchronised before they are read or
                // dropped; dst is the first source exactly or disjoint.
                unsafe {
                    kernels
                        .reduce_n(&stream, dt, ReduceKind::Sum, dst, &ptrs, n)
                        .unwrap()
                };
                stream.synchronize().unwrap();
                let mut got = vec![0u8; bytes];
                if in_place { &bufs[0] } else { &dd }
                    .read(0, &mut got)
                    .unwrap();
                assert_eq!(got, want, "{dt:?} k {k} in place {in_place}");
            }
        }
    }
}

/// The many-source kernel writing its result to several destinations (a direct all-reduce's
/// slice into every rank's output): two and four sources, the result in every destination,
/// one of them the first source (in place), one misaligned against the others (the scalar
/// path).
#[test]
fn reduce_n_to_writes_every_destination() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let dt = DataType::Float32;
    for k in [2usize, 4] {
        for shift in [0usize, 4] {
            let n = 100_003;
            let bytes = n * dt.size();
            let srcs: Vec<Vec<u8>> = (0..k)
                .map(|m| {
                    (0..n)
                        .flat_map(|i| ((i % 1000 + m) as f32).to_le_bytes())
                        .collect()
                })
                .collect();
            let (bufs, want) = on_device_and_summed(&ctx, dt, &srcs);
            let outs: Vec<DeviceBuffer> = (0..2)
                .map(|_| DeviceBuffer::new(&ctx, bytes + 16).unwrap())
                .collect();
            let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr()).collect();
            let dsts = [ptrs[0], outs[0].ptr(), outs[1].ptr() + shift as u64];
            // SAFETY: k sources and two outputs of n elements (the second at `shift` bytes
            // into n + 4 elements), synchronised before they are read or dropped; the first
            // destination is the first source.
            unsafe {
                kernels
                    .reduce_n_to(&stream, dt, ReduceKind::Sum, &dsts, &ptrs, n)
                    .unwrap()
            };
            stream.synchronize().unwrap();
            for (d, (b, off)) in [(&bufs[0], 0), (&outs[0], 0), (&outs[1], shift)]
                .into_iter()
                .enumerate()
            {
                let mut got = vec![0u8; bytes];
                b.read(off, &mut got).unwrap();
                assert_eq!(got, want, "k {k} shift {shift} destination {d}");
            }
        }
    }
}

/// `srcs` in device buffers of their own, and their sum folded in order on the host.
fn on_device_and_summed(
    ctx: &Arc<Context>,
    dt: DataType,
    srcs: &[Vec<u8>],
) -> (Vec<DeviceBuffer>, Vec<u8>) {
    let bufs: Vec<DeviceBuffer> = srcs
        .iter()
        .map(|s| {
            let b = DeviceBuffer::new(ctx, s.len()).unwrap();
            b.write(0, s).unwrap();
            b
        })
        .collect();
    let n = srcs[0].len() / dt.size();
    let mut want = srcs[0].clone();
    for s in &srcs[1..] {
        let prev = want.clone();
        // SAFETY: host buffers of n elements.
        unsafe {
            host::reduce(
                dt,
                ReduceKind::Sum,
                want.as_mut_ptr(),
                prev.as_ptr(),
                s.as_ptr(),
                n,
            )
        };
    }
    (bufs, want)
}

#[test]
fn flag_round_trip() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let stream = Stream::with_flags(&ctx, true).unwrap();
    let (go, ack) = (Flag::new(&ctx).unwrap(), Flag::new(&ctx).unwrap());
    for i in 1..=10 {
        // SAFETY: the flags outlive the stream work (synchronised below); each wait is
        // released right after it is queued.
        unsafe {
            go.stream_wait(&stream, i, WaitCond::Geq).unwrap();
            ack.stream_write(&stream, i).unwrap();
        }
        go.store(i);
        ack.wait_host(Duration::from_secs(5), |v| v >= i).unwrap();
    }
    stream.synchronize().unwrap();
}

/// The wait kernel holds its stream until the flag reaches the value (wrap-safe), and lets a
/// second stream's work through meanwhile: the second stream's flag write lands while the
/// first still waits.
#[test]
fn wait_flag_kernel_holds_its_stream_only() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let (waiting, other) = (
        Stream::with_flags(&ctx, true).unwrap(),
        Stream::with_flags(&ctx, true).unwrap(),
    );
    let (go, after, beside) = (
        Flag::new(&ctx).unwrap(),
        Flag::new(&ctx).unwrap(),
        Flag::new(&ctx).unwrap(),
    );
    for (i, start) in [
        (1u32, 0u32),
        (2, 1),
        (u32::MAX, u32::MAX - 1),
        (0, u32::MAX),
    ] {
        go.store(start);
        // SAFETY: the flags outlive the stream work (synchronised below); the wait is released
        // by the store below.
        unsafe {
            kernels.wait_flag(&waiting, go.device_ptr(), i).unwrap();
            after.stream_write(&waiting, i).unwrap();
            beside.stream_write(&other, i).unwrap();
        }
        beside
            .wait_host(Duration::from_secs(5), |v| v == i)
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_ne!(
            after.load(),
            i,
            "the wait kernel let its stream go before the flag"
        );
        go.store(i);
        after.wait_host(Duration::from_secs(5), |v| v == i).unwrap();
    }
    waiting.synchronize().unwrap();
    other.synchronize().unwrap();
}

/// The wait-copy-signal kernel copies nothing and signals nothing before its flag, then
/// copies exactly its bytes (a 16-byte-aligned run and an odd one) and writes the done word.
#[test]
fn wait_copy_kernel_copies_after_its_flag_then_signals() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let stream = Stream::with_flags(&ctx, true).unwrap();
    let (go, done) = (Flag::new(&ctx).unwrap(), Flag::new(&ctx).unwrap());
    let bytes = (8 << 20) + 3;
    let src: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
    let (ds, dd) = (
        DeviceBuffer::new(&ctx, bytes + 64).unwrap(),
        DeviceBuffer::new(&ctx, bytes + 64).unwrap(),
    );
    ds.write(0, &src).unwrap();
    for (round, (off, len)) in [(0usize, bytes), (1, 1000)].into_iter().enumerate() {
        let v = round as u32 + 1;
        dd.write(0, &vec![0xEE; bytes + 64]).unwrap();
        go.store(v - 1);
        // SAFETY: both buffers hold `off + len` bytes and outlive the work (synchronised
        // below); the flags are released by the store below.
        unsafe {
            kernels
                .wait_copy(
                    &stream,
                    go.device_ptr(),
                    v,
                    dd.ptr() + off as u64,
                    ds.ptr(),
                    len as u64,
                    done.device_ptr(),
                    v,
                )
                .unwrap()
        };
        std::thread::sleep(Duration::from_millis(20));
        assert_ne!(done.load(), v, "signalled before its flag");
        go.store(v);
        done.wait_host(Duration::from_secs(5), |x| x == v).unwrap();
        stream.synchronize().unwrap();
        let mut got = vec![0u8; bytes + 64];
        dd.read(0, &mut got).unwrap();
        assert!(got[..off].iter().all(|&b| b == 0xEE));
        assert_eq!(&got[off..off + len], &src[..len], "round {round}");
        assert!(got[off + len..].iter().all(|&b| b == 0xEE));
    }
}

/// A mailbox slot in pinned, device-mapped memory, zeroed, as the engine's mail thread keeps them.
struct PinnedSlot(PinnedBuffer);

impl PinnedSlot {
    fn new(ctx: &Arc<Context>) -> PinnedSlot {
        use ccl_cuda::cuda::source::MAIL_SLOT_WORDS;
        let s = PinnedSlot(PinnedBuffer::new(ctx, MAIL_SLOT_WORDS * 8).unwrap());
        for i in 0..MAIL_SLOT_WORDS {
            s.word(i).store(0, std::sync::atomic::Ordering::Relaxed);
        }
        s
    }

    fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(i < ccl_cuda::cuda::source::MAIL_SLOT_WORDS);
        // SAFETY: the pinned buffer holds MAIL_SLOT_WORDS aligned words (checked index) and
        // lives as long as `self`; host and kernel touch them only as whole 8-byte words.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.0.as_ptr().cast::<u64>().add(i)) }
    }

    fn device_ptr(&self) -> u64 {
        self.0.device_ptr()
    }
}

/// The mail-copy kernel copies nothing before its slot holds its tag, then every block marks
/// the slot seen and the grid copies exactly the bytes the slot names (capped at the send's).
#[test]
fn mail_copy_kernel_waits_for_its_slot_then_copies() {
    use ccl_cuda::cuda::source::{MAIL_BYTES, MAIL_DST, MAIL_SEEN, MAIL_TAG};
    use std::sync::atomic::Ordering;
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let stream = Stream::with_flags(&ctx, true).unwrap();
    let slot = PinnedSlot::new(&ctx);
    let word = |i: usize| slot.word(i);
    let bytes = (8 << 20) + 3;
    let src: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
    let (ds, dd) = (
        DeviceBuffer::new(&ctx, bytes + 64).unwrap(),
        DeviceBuffer::new(&ctx, bytes + 64).unwrap(),
    );
    ds.write(0, &src).unwrap();
    for (round, (named, blocks)) in [(bytes, 16u32), (1000, 3)].into_iter().enumerate() {
        let tag = 7 + round as u64;
        dd.write(0, &vec![0xEE; bytes + 64]).unwrap();
        // SAFETY: the slot is pinned and device-mapped, written below; both buffers hold
        // `bytes` and outlive the work (finished below).
        unsafe {
            kernels
                .mail_copy(
                    &stream,
                    slot.device_ptr(),
                    tag,
                    ds.ptr(),
                    bytes as u64,
                    (blocks, 256),
                )
                .unwrap()
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!stream.query().unwrap(), "ran before its slot was filled");
        word(MAIL_DST).store(dd.ptr(), Ordering::Relaxed);
        word(MAIL_BYTES).store(named as u64, Ordering::Relaxed);
        word(MAIL_TAG).store(tag, Ordering::Release);
        finish(&stream, "mail copy");
        for b in 0..blocks as usize {
            assert_eq!(
                word(MAIL_SEEN + b).load(Ordering::Acquire),
                tag,
                "block {b}"
            );
        }
        let mut got = vec![0u8; bytes + 64];
        dd.read(0, &mut got).unwrap();
        assert_eq!(&got[..named], &src[..named], "round {round}");
        assert!(got[named..].iter().all(|&b| b == 0xEE));
    }
}

/// The mailed reduction kernel reduces nothing before its slot holds its tag (the host fills
/// it while the kernel spins, as the mail thread does), then reduces the sources the slot names
/// into every destination it names; the slot is mirrored in device memory, the last block
/// marks the slot seen and leaves the arrival count at 0, so the slot and mirror serve the next
/// round (two and four sources; a large grid and a one-block one).
#[test]
fn mailed_reduce_n_kernel_waits_for_its_slot_then_reduces() {
    use ccl_cuda::cuda::source::MAIL_TAG;
    use ccl_cuda::cuda::source::{MAIL_ALSO, MAIL_DST, MAIL_SEEN, MAIL_SLOT_WORDS, MAIL_SRCS};
    use std::sync::atomic::Ordering;
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let stream = Stream::with_flags(&ctx, true).unwrap();
    let slot = PinnedSlot::new(&ctx);
    let word = |i: usize| slot.word(i);
    let mirror = DeviceBuffer::new(&ctx, MAIL_SLOT_WORDS * 8).unwrap();
    mirror.write(0, &[0u8; MAIL_SLOT_WORDS * 8]).unwrap();
    let dt = DataType::Float32;
    for (round, (k, n)) in [(2usize, 3_000_017usize), (4, 1000)]
        .into_iter()
        .enumerate()
    {
        let tag = 11 + round as u64;
        let bytes = n * dt.size();
        let srcs: Vec<Vec<u8>> = (0..k)
            .map(|m| {
                (0..n)
                    .flat_map(|i| ((i % 997 + m) as f32).to_le_bytes())
                    .collect()
            })
            .collect();
        let (bufs, want) = on_device_and_summed(&ctx, dt, &srcs);
        let outs: Vec<DeviceBuffer> = (0..k)
            .map(|_| DeviceBuffer::new(&ctx, bytes).unwrap())
            .collect();
        for o in &outs {
            o.write(0, &vec![0xEE; bytes]).unwrap();
        }
        let nalso = k - 1;
        // SAFETY: the slot is pinned and device-mapped, filled below with k sources and k
        // destinations of n elements each, which outlive the work (finished below).
        unsafe {
            kernels
                .reduce_n_mail(
                    &stream,
                    dt,
                    ReduceKind::Sum,
                    k,
                    nalso,
                    (slot.device_ptr(), tag, mirror.ptr()),
                    n,
                )
                .unwrap()
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!stream.query().unwrap(), "ran before its slot was filled");
        for (m, b) in bufs.iter().enumerate() {
            word(MAIL_SRCS + m).store(b.ptr(), Ordering::Relaxed);
        }
        for (a, o) in outs[1..].iter().enumerate() {
            word(MAIL_ALSO + a).store(o.ptr(), Ordering::Relaxed);
        }
        word(MAIL_DST).store(outs[0].ptr(), Ordering::Relaxed);
        word(MAIL_TAG).store(tag, Ordering::Release);
        finish(&stream, "mailed reduction");
        assert_eq!(
            word(MAIL_SEEN).load(Ordering::Acquire),
            tag,
            "round {round}: seen"
        );
        let mut count = [0u8; 4];
        mirror.read(MAIL_SEEN * 8, &mut count).unwrap();
        assert_eq!(count, [0; 4], "round {round}: arrival count");
        let mut copied = [0u8; 8];
        mirror.read(MAIL_TAG * 8, &mut copied).unwrap();
        assert_eq!(
            u64::from_le_bytes(copied),
            tag,
            "round {round}: slot not mirrored"
        );
        for (d, o) in outs.iter().enumerate() {
            let mut got = vec![0u8; bytes];
            o.read(0, &mut got).unwrap();
            assert_eq!(got, want, "round {round} destination {d}");
        }
    }
}

/// A stream stuck on a device-memory word that nobody will write (a dead peer's "done") is
/// released by this process writing the word from another stream, as an abort would, with
/// a stream memory write (`by_copy` false) or a copy from host memory (true). Run alone
/// with `CUDA_DEVICE_MAX_CONNECTIONS=1` too: then every stream shares one hardware queue.
fn release_stuck_wait(by_copy: bool) {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let stuck = Stream::with_flags(&ctx, true).unwrap();
    let word = DeviceBuffer::new(&ctx, 64).unwrap();
    word.write(0, &[0u8; 64]).unwrap();
    let after = Flag::new(&ctx).unwrap();
    // SAFETY: the word and the flag outlive the streams' work (the test waits for it below,
    // or leaks the process's GPU state on failure, which ends the test binary's use of it).
    unsafe {
        stuck.wait_value32(word.ptr(), 5, WaitCond::Geq).unwrap();
        after.stream_write(&stuck, 1).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(after.load(), 0, "the wait did not hold");
    let release = Stream::with_flags(&ctx, true).unwrap();
    let five = 5u32.to_le_bytes();
    // SAFETY: the word is 4-byte aligned device memory of 64 bytes; `five` lives until the
    // stream is synchronised below (or the test fails, leaving the copy queued).
    unsafe {
        if by_copy {
            release.memcpy_htod(word.ptr(), five.as_ptr(), 4).unwrap();
        } else {
            release.write_value32(word.ptr(), 5).unwrap();
        }
    }
    let released = after.wait_host(Duration::from_secs(5), |v| v == 1);
    assert!(
        released.is_ok(),
        "the write from another stream did not release the stuck wait"
    );
    release.synchronize().unwrap();
    stuck.synchronize().unwrap();
}

#[test]
fn a_stream_write_from_another_stream_releases_a_stuck_wait() {
    release_stuck_wait(false);
}

#[test]
fn a_host_copy_from_another_stream_releases_a_stuck_wait() {
    release_stuck_wait(true);
}

/// Waits for a stream with a deadline, so a kernel that never ends fails the test instead of
/// hanging it.
fn finish(stream: &Stream, what: &str) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !stream.query().unwrap() {
        assert!(
            std::time::Instant::now() < end,
            "{what}: still running after 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Two ranks on one GPU (two areas, two streams): an in-place exchange reads each buffer
/// before the peer's data lands in it, and a sender that runs several launches of sends
/// (more than the slots) ahead of a receiver that starts late delivers every message, each
/// size exact (1, 17, 4096 bytes), on ring slots recycled by credits. One scenario read top to
/// bottom, hence its length.
#[test]
fn ll_p2p_kernel_exchanges_in_place_and_recycles_slots() {
    let _serial = serial();
    use ccl_cuda::cuda::source::{ll_data_offset, LL_P2P_SLOTS};
    use ccl_cuda::cuda::LlP2p;
    let Some(ctx) = gpu() else { return };
    let kernels = Kernels::new(&ctx).unwrap();
    let streams = [
        Stream::with_flags(&ctx, true).unwrap(),
        Stream::with_flags(&ctx, true).unwrap(),
    ];
    let area_bytes = ll_data_offset(2) + 4096;
    let areas = [
        DeviceBuffer::new(&ctx, area_bytes).unwrap(),
        DeviceBuffer::new(&ctx, area_bytes).unwrap(),
    ];
    for a in &areas {
        a.write(0, &vec![0u8; area_bytes]).unwrap();
    }
    let table: Vec<u8> = areas.iter().flat_map(|a| a.ptr().to_le_bytes()).collect();
    let dev_table = DeviceBuffer::new(&ctx, table.len()).unwrap();
    dev_table.write(0, &table).unwrap();
    let err = Flag::new(&ctx).unwrap();

    // In place: each rank sends its 8 bytes and receives the peer's into the same buffer.
    let bufs = [
        DeviceBuffer::new(&ctx, 8).unwrap(),
        DeviceBuffer::new(&ctx, 8).unwrap(),
    ];
    let vals = [
        [1u8, 2, 3, 4, 5, 6, 7, 8],
        [11u8, 12, 13, 14, 15, 16, 17, 18],
    ];
    for r in 0..2 {
        bufs[r].write(0, &vals[r]).unwrap();
        let mut x = LlP2p::default();
        (x.nsend, x.nrecv) = (1, 1);
        (x.src[0], x.sbytes[0], x.speer[0], x.sseq[0]) = (bufs[r].ptr(), 8, 1 - r as u32, 1);
        (x.dst[0], x.rbytes[0], x.rpeer[0], x.rseq[0], x.rafter[0]) =
            (bufs[r].ptr(), 8, 1 - r as u32, 1, 1);
        // SAFETY: the buffers and areas outlive the work (waited for below); the areas'
        // words are zeroed; rank 1 - r launches the matching side.
        unsafe {
            kernels
                .ll_p2p(
                    &streams[r],
                    &x,
                    dev_table.ptr(),
                    r as u32,
                    2,
                    0,
                    err.device_ptr(),
                )
                .unwrap()
        };
    }
    for (r, s) in streams.iter().enumerate() {
        finish(s, "in-place exchange");
        let mut got = [0u8; 8];
        bufs[r].read(0, &mut got).unwrap();
        assert_eq!(got, vals[1 - r], "rank {r} after the in-place exchange");
    }

    // Rank 0 sends 3 messages a launch for several launches (more than the slots) before
    // rank 1 receives anything; sequence numbers go on from the exchange above (1).
    let sizes = [1usize, 17, 4096];
    let launches = 2 * LL_P2P_SLOTS / sizes.len() + 1;
    let msgs = launches * sizes.len();
    let src = DeviceBuffer::new(&ctx, msgs * 4096).unwrap();
    let dst = DeviceBuffer::new(&ctx, msgs * 4096).unwrap();
    let data: Vec<u8> = (0..msgs * 4096).map(|i| (i * 31 + 7) as u8).collect();
    src.write(0, &data).unwrap();
    dst.write(0, &vec![0xEE; msgs * 4096]).unwrap();
    let mut ticket = 1; // rank 0 made one send above
    for l in 0..launches {
        let mut x = LlP2p {
            nsend: sizes.len() as u32,
            ..LlP2p::default()
        };
        for (i, &b) in sizes.iter().enumerate() {
            let m = l * sizes.len() + i;
            (x.src[i], x.sbytes[i], x.speer[i], x.sseq[i]) =
                (src.ptr() + (m * 4096) as u64, b as u64, 1, 2 + m as u32);
        }
        // SAFETY: as above; rank 1's receives are launched below (the sends block on
        // credits until then, on their own stream).
        unsafe {
            kernels
                .ll_p2p(
                    &streams[0],
                    &x,
                    dev_table.ptr(),
                    0,
                    2,
                    ticket,
                    err.device_ptr(),
                )
                .unwrap()
        };
        ticket += x.nsend;
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !streams[0].query().unwrap(),
        "the sender ran more than {LL_P2P_SLOTS} sends ahead of its receiver"
    );
    for l in 0..launches {
        let mut x = LlP2p {
            nrecv: sizes.len() as u32,
            ..LlP2p::default()
        };
        for (j, &b) in sizes.iter().enumerate() {
            let m = l * sizes.len() + j;
            (x.dst[j], x.rbytes[j], x.rpeer[j], x.rseq[j]) =
                (dst.ptr() + (m * 4096) as u64, b as u64, 0, 2 + m as u32);
        }
        // SAFETY: as above.
        unsafe {
            kernels
                .ll_p2p(&streams[1], &x, dev_table.ptr(), 1, 2, 1, err.device_ptr())
                .unwrap()
        };
    }
    finish(&streams[1], "receiver");
    finish(&streams[0], "sender");
    let mut got = vec![0u8; msgs * 4096];
    dst.read(0, &mut got).unwrap();
    for m in 0..msgs {
        let b = sizes[m % sizes.len()];
        let at = m * 4096;
        assert_eq!(&got[at..at + b], &data[at..at + b], "message {m}");
        assert!(
            got[at + b..at + 4096].iter().all(|&v| v == 0xEE),
            "message {m} overran"
        );
    }
    assert_eq!(
        err.load(),
        0,
        "a size mismatch reported where sizes matched"
    );

    // A receive of 16 bytes meets a send of 8: the 8 land, the rest stays, and the mismatch
    // is reported as 1 + the sender's rank.
    let seq = 2 + msgs as u32;
    dst.write(0, &[0xEE; 16]).unwrap();
    let mut x = LlP2p::default();
    (x.nsend, x.src[0], x.sbytes[0], x.speer[0], x.sseq[0]) = (1, src.ptr(), 8, 1, seq);
    let mut y = LlP2p::default();
    (y.nrecv, y.dst[0], y.rbytes[0], y.rpeer[0], y.rseq[0]) = (1, dst.ptr(), 16, 0, seq);
    // SAFETY: as above.
    unsafe {
        kernels
            .ll_p2p(
                &streams[0],
                &x,
                dev_table.ptr(),
                0,
                2,
                ticket,
                err.device_ptr(),
            )
            .unwrap();
        kernels
            .ll_p2p(&streams[1], &y, dev_table.ptr(), 1, 2, 1, err.device_ptr())
            .unwrap();
    }
    finish(&streams[1], "mismatched receiver");
    finish(&streams[0], "mismatched sender");
    let mut got = [0u8; 16];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got[..8], &data[..8]);
    assert!(got[8..].iter().all(|&v| v == 0xEE));
    assert_eq!(err.load(), 1, "the mismatch names rank 0 (+1)");
}

/// The host-thread test's random traffic ([`scenario::P2pTraffic`]) on real GPUs: rank r on
/// GPU r modulo the GPUs there are (with two or more, messages cross NVLink; with one, the
/// ranks share it on streams of their own), each rank's launches queued on its stream, every
/// message checked where it landed and around it. Two ranks with up to 12 messages a round
/// between them (past the 8 slots), four with up to 4 per pair.
#[test]
fn ll_p2p_kernel_random_traffic_on_gpus() {
    let _serial = serial();
    let Some(first) = gpu() else { return };
    let devices = Driver::get().unwrap().device_count().unwrap() as usize;
    let ctxs: Vec<_> = (0..devices)
        .map(|d| match d {
            0 => first.clone(),
            _ => Context::new(d as i32).unwrap(),
        })
        .collect();
    for a in &ctxs {
        for b in &ctxs {
            if !Arc::ptr_eq(a, b) && a.can_access_peer(b).unwrap() {
                a.enable_peer_access(b).unwrap();
            }
        }
    }
    let kernels: Vec<Kernels> = ctxs.iter().map(|c| Kernels::new(c).unwrap()).collect();
    for (n, rounds, per_pair, seed) in [
        (2, 300, 12, 0x9E37_79B9_7F4A_7C15u64),
        (4, 150, 4, 0xD1B5_4A32_D192_ED03),
    ] {
        p2p_traffic_on_gpus(&ctxs, &kernels, n, rounds, per_pair, seed);
    }
}

/// One run of [`ll_p2p_kernel_random_traffic_on_gpus`] with `n` ranks.
fn p2p_traffic_on_gpus(
    ctxs: &[Arc<Context>],
    kernels: &[Kernels],
    n: usize,
    rounds: usize,
    per_pair: usize,
    seed: u64,
) {
    use ccl_cuda::cuda::source::ll_data_offset;
    use scenario::P2pTraffic;
    let t = P2pTraffic::random(n, rounds, per_pair, seed);
    let dev = |r: usize| r % ctxs.len();
    let ctx = |r: usize| &ctxs[dev(r)];
    let area_bytes = ll_data_offset(n);
    let areas: Vec<DeviceBuffer> = (0..n)
        .map(|r| DeviceBuffer::new(ctx(r), area_bytes).unwrap())
        .collect();
    let table: Vec<u8> = areas.iter().flat_map(|a| a.ptr().to_le_bytes()).collect();
    let tables: Vec<DeviceBuffer> = ctxs
        .iter()
        .map(|c| DeviceBuffer::new(c, table.len()).unwrap())
        .collect();
    for tb in &tables {
        tb.write(0, &table).unwrap();
    }
    let fill = vec![P2pTraffic::FILL; t.buf_len()];
    let (mut send, mut recv) = (Vec::new(), Vec::new());
    for (r, a) in areas.iter().enumerate() {
        a.write(0, &vec![0u8; area_bytes]).unwrap();
        send.push(DeviceBuffer::new(ctx(r), t.buf_len()).unwrap());
        send[r].write(0, &t.send_data(r)).unwrap();
        recv.push(DeviceBuffer::new(ctx(r), t.buf_len()).unwrap());
        recv[r].write(0, &fill).unwrap();
    }
    let probe = DeviceBuffer::new(ctx(1), 16).unwrap();
    probe.write(0, &[P2pTraffic::FILL; 16]).unwrap();
    let errs: Vec<Flag> = (0..n).map(|r| Flag::new(ctx(r)).unwrap()).collect();
    let streams: Vec<Stream> = (0..n)
        .map(|r| Stream::with_flags(ctx(r), true).unwrap())
        .collect();
    let ptrs = |v: &[DeviceBuffer]| v.iter().map(DeviceBuffer::ptr).collect::<Vec<_>>();
    let launches = t.launches(&ptrs(&send), &ptrs(&recv), probe.ptr());
    for (r, mine) in launches.iter().enumerate() {
        for (x, base) in mine {
            // SAFETY: every address in `x` and the table is a buffer above, alive until the
            // streams finish (or the test fails, ending the process); the areas start zeroed.
            unsafe {
                kernels[dev(r)]
                    .ll_p2p(
                        &streams[r],
                        x,
                        tables[dev(r)].ptr(),
                        r as u32,
                        n as u32,
                        *base,
                        errs[r].device_ptr(),
                    )
                    .unwrap()
            };
        }
    }
    for (r, s) in streams.iter().enumerate() {
        finish(s, &format!("n {n}: rank {r}'s launches"));
    }
    let read = |b: &DeviceBuffer| {
        let mut v = vec![0u8; b.len()];
        b.read(0, &mut v).unwrap();
        v
    };
    let (send, recv): (Vec<_>, Vec<_>) = (
        send.iter().map(read).collect(),
        recv.iter().map(read).collect(),
    );
    for (r, e) in errs.iter().enumerate().filter(|(r, _)| *r != 1) {
        assert_eq!(e.load(), 0, "n {n}: rank {r} reported a mismatch");
    }
    t.check(&send, &recv, &read(&probe), errs[1].load());
}
