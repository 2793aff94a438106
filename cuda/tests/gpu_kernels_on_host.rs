//! The generated GPU kernel sources, compiled as host C++ and run on the CPU, against
//! `ccl_cuda::host::reduce`: CI has no GPU, so this is where it checks the kernels' C++.
//!
//! Only the inline-PTX primitives are replaced (by host C++ with the same rounding); the rest
//! of each kernel (narrow-float codecs, round-to-odd, NaN rules, vector/head/tail loops) is
//! exactly the source NVRTC compiles. A launch becomes one "thread" covering every element.
//! Skipped, with a message, where no `g++` is found.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod host_cpp;

use std::path::{Path, PathBuf};
use std::process::Command;

use ccl_cuda::cuda::source::{
    batch_source_with, kernel_name, kernel_source_with, KernelOp, ReduceKindKey,
};
use ccl_cuda::host::reduce as host;
use ccl_cuda::{DataType, ReduceKind};
use host_cpp::{build_shared, gxx, gxx_here, HOST_INCLUDES, HOST_PRIMITIVES};

/// Block-level CUDA built-ins as no-ops, for kernels run as one host thread.
const BLOCK_STUBS: &str =
    "#define __shared__\nstatic inline void __syncthreads() {}\nstatic inline void __threadfence() {}\n\
                           static inline void __threadfence_system() {}\n";

type Zip = unsafe extern "C" fn(*mut u8, *const u8, *const u8, u64, u64);
type Map = unsafe extern "C" fn(*mut u8, *const u8, u64, u64);

/// Removes the build folder, then fails listing every failure if there were any.
fn finish(dir: &Path, failures: &[String]) {
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn compile_all(dir: &Path) -> Option<PathBuf> {
    let all: Vec<(DataType, KernelOp)> = DataType::ALL
        .into_iter()
        .flat_map(|dt| KernelOp::ALL.into_iter().map(move |op| (dt, op)))
        .collect();
    compile_kernels(dir, &all)
}

/// Builds one shared library of the given kernels' host versions (None: no g++ here).
fn compile_kernels(dir: &Path, kernels: &[(DataType, KernelOp)]) -> Option<PathBuf> {
    if !gxx_here("skipping: no g++ to compile the kernel sources for the host") {
        return None;
    }
    let mut files = Vec::new();
    {
        for &(dt, op) in kernels {
            let name = kernel_name(dt, op);
            let src = format!(
                "{HOST_INCLUDES}namespace ns_{name} {{\n{}\n}}\n",
                kernel_source_with(dt, op, HOST_PRIMITIVES)
            );
            let path = dir.join(format!("{name}.cpp"));
            std::fs::write(&path, src).unwrap();
            files.push(path);
        }
    }
    Some(build_library(dir, &files))
}

/// Compiles the C++ `files` in parallel, one object each, and links one shared library.
fn build_library(dir: &Path, files: &[PathBuf]) -> PathBuf {
    let jobs = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let chunks: Vec<Vec<PathBuf>> = files
        .chunks(files.len().div_ceil(jobs))
        .map(|c| c.to_vec())
        .collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            std::thread::spawn(move || {
                for f in chunk {
                    let out = Command::new("g++")
                        .args([
                            "-std=c++17",
                            "-O1",
                            "-fPIC",
                            "-ffp-contract=off",
                            "-fno-fast-math",
                        ])
                        .args([
                            "-Wall",
                            "-Wno-unknown-pragmas",
                            "-Wno-unused-function",
                            "-c",
                        ])
                        .arg(&f)
                        .arg("-o")
                        .arg(f.with_extension("o"))
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{}: {}",
                        f.display(),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let lib = dir.join("libkernels.so");
    gxx(Command::new("g++")
        .arg("-shared")
        .args(files.iter().map(|f| f.with_extension("o")))
        .arg("-o")
        .arg(&lib));
    lib
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Random elements with specials: every fp8 pair, every 16-bit value, and for 32/64-bit
/// floats random bits mixed with specials, subnormals, and partners half an ulp away.
fn inputs(dt: DataType, n: usize) -> (Vec<u8>, Vec<u8>) {
    let size = dt.size();
    let mut rng = Rng(dt as u64 + 1);
    let (mut a, mut b) = (vec![0u8; n * size], vec![0u8; n * size]);
    for i in 0..n {
        let r = rng.next();
        let (x, y): (u64, u64) = match size {
            1 if i < 65536 => ((i & 0xff) as u64, (i >> 8) as u64),
            2 if i < 65536 => (i as u64, r & 0xffff),
            4 => {
                let x = match r % 4 {
                    0 => rng.next(),
                    1 => [
                        0u64,
                        0x8000_0000,
                        0x7f80_0000,
                        0xff80_0000,
                        0x7fc0_0000,
                        0x7f80_0001,
                        1,
                        0x0080_0000,
                        0x7f7f_ffff,
                    ][(r >> 8) as usize % 9],
                    _ => (rng.next() & 0x807f_ffff) | ((100 + (r >> 8) % 50) << 23),
                } & 0xffff_ffff;
                let e = ((x >> 23) & 0xff).saturating_sub(24).max(1);
                let y = match (r >> 16) % 3 {
                    0 => rng.next() & 0xffff_ffff,
                    1 => (e << 23) | (rng.next() & 0x8000_0003),
                    _ => x ^ (rng.next() & 0xf),
                };
                (x, y)
            }
            8 => {
                let x = match r % 4 {
                    0 => rng.next(),
                    1 => [
                        0u64,
                        1 << 63,
                        0x7ff0 << 48,
                        0xfff0 << 48,
                        0x7ff8 << 48,
                        1,
                        0x0010 << 48,
                    ][(r >> 8) as usize % 7],
                    _ => (rng.next() & 0x800f_ffff_ffff_ffff) | ((1000 + (r >> 8) % 50) << 52),
                };
                let e = ((x >> 52) & 0x7ff).saturating_sub(53).max(1);
                let y = match (r >> 16) % 3 {
                    0 => rng.next(),
                    1 => (e << 52) | (rng.next() & 0x8000_0000_0000_0003),
                    _ => x ^ (rng.next() & 0xf),
                };
                (x, y)
            }
            _ => (r, rng.next()),
        };
        a[i * size..(i + 1) * size].copy_from_slice(&x.to_le_bytes()[..size]);
        b[i * size..(i + 1) * size].copy_from_slice(&y.to_le_bytes()[..size]);
    }
    (a, b)
}

fn same(dt: DataType, got: &[u8], want: &[u8]) -> Result<(), String> {
    let size = dt.size();
    for (i, (g, w)) in got.chunks(size).zip(want.chunks(size)).enumerate() {
        if g == w {
            continue;
        }
        if dt == DataType::Float64 {
            let f = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap());
            if f(g).is_nan() && f(w).is_nan() {
                continue;
            }
        }
        return Err(format!("elem {i}: got {g:02x?} want {w:02x?}"));
    }
    Ok(())
}

#[test]
fn generated_kernels_match_the_host_reference() {
    let dir = std::env::temp_dir().join(format!("ccl-kernels-on-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(lib_path) = compile_all(&dir) else {
        return;
    };
    check_against_host(&dir, &lib_path);
}

/// The kernels loaded ahead compile as one program per type (`batch_source`): built that
/// way, every kernel still matches the host reference bit for bit.
#[test]
fn batched_kernels_match_the_host_reference() {
    if !gxx_here("skipping: no g++ to compile the kernel sources for the host") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ccl-batched-on-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<PathBuf> = DataType::ALL
        .into_iter()
        .map(|dt| {
            let f = dir.join(format!("batch_{}.cpp", dt.name()));
            let src = batch_source_with(dt, &KernelOp::ALL, HOST_PRIMITIVES);
            std::fs::write(&f, format!("{HOST_INCLUDES}{src}")).unwrap();
            f
        })
        .collect();
    let lib = build_library(&dir, &files);
    check_against_host(&dir, &lib);
}

/// The batch of every kernel loaded ahead (the one-shot all-reduces, the many-input
/// reductions of a communicator size, the captured all-reduce) is valid C++ with the block
/// built-ins stubbed: the macros and helpers of one kernel do not clash with the next's.
#[test]
fn a_batch_of_every_typed_kernel_compiles() {
    if !gxx_here("skipping: no g++ to check the kernel sources") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ccl-batch-src-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for dt in [DataType::Float32, DataType::Bfloat16, DataType::Int64] {
        let ops: Vec<KernelOp> = KernelOp::ALL
            .into_iter()
            .chain(ReduceKindKey::ALL.map(KernelOp::LlAllReduce))
            .chain(ReduceKindKey::ALL.map(|r| KernelOp::ReduceN(r, 3)))
            .chain(ReduceKindKey::ALL.map(|r| KernelOp::ReduceN(r, 8)))
            .chain([KernelOp::GraphAllReduce(ReduceKindKey::Sum, 4)])
            .collect();
        let prims = format!("{HOST_PRIMITIVES}{BLOCK_STUBS}");
        let src =
            batch_source_with(dt, &ops, &prims).replace("extern \"C\" __global__", "extern \"C\"");
        for op in &ops {
            let name = kernel_name(dt, *op);
            assert_eq!(src.matches(&format!(" {name}(")).count(), 1, "{name}");
        }
        let f = dir.join(format!("batch_{}.cpp", dt.name()));
        std::fs::write(&f, format!("{HOST_INCLUDES}{src}")).unwrap();
        if let Err(e) = syntax_check(&f) {
            failures.push(format!("{dt:?}: {e}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs every kernel of `KernelOp::ALL` of every type from the library at `lib_path` against
/// the host reference (three alignments each), then removes `dir`.
fn check_against_host(dir: &Path, lib_path: &Path) {
    // SAFETY: a library just built from our sources; its initialisers do nothing.
    let lib = unsafe { libloading::Library::new(lib_path) }.unwrap();
    let n = 70_003;
    let mut failures = Vec::new();
    for dt in DataType::ALL {
        let size = dt.size();
        let (a, b) = inputs(dt, n);
        let scalar = if dt.is_float() {
            u64::from_le_bytes(host::from_f64(dt, 1.0 / 3.0))
        } else {
            0x8000_0003
        };
        for op in KernelOp::ALL {
            let name = kernel_name(dt, op);
            // Three layouts: aligned, dst one element off (scalar path), all one off (head).
            for (oa, ob, od) in [(0usize, 0usize, 0usize), (0, 0, 1), (1, 1, 1)] {
                let mut ab = vec![0u8; (n + 4) * size];
                let mut bb = vec![0u8; (n + 4) * size];
                let mut db = vec![0u8; (n + 4) * size];
                // 16-byte aligned bases: Vec<u8> from the system allocator is; check it.
                assert_eq!(ab.as_ptr() as usize % 16, 0);
                ab[oa * size..(oa + n) * size].copy_from_slice(&a);
                bb[ob * size..(ob + n) * size].copy_from_slice(&b);
                let (pa, pb) = (ab[oa * size..].as_ptr(), bb[ob * size..].as_ptr());
                let pd = db[od * size..].as_mut_ptr();
                let mut want = vec![0u8; n * size];
                let wp = want.as_mut_ptr();
                let sc = scalar.to_le_bytes();
                // SAFETY: every buffer holds n elements past its offset; `want` is disjoint.
                unsafe {
                    match op {
                        KernelOp::Reduce(_) => {
                            let k = match kernel_name(dt, op).split('_').nth(2) {
                                Some("sum") => ReduceKind::Sum,
                                Some("prod") => ReduceKind::Prod,
                                Some("max") => ReduceKind::Max,
                                _ => ReduceKind::Min,
                            };
                            host::reduce(dt, k, wp, pa, pb, n);
                            let f: libloading::Symbol<Zip> = lib.get(name.as_bytes()).unwrap();
                            f(pd, pa, pb, n as u64, 0);
                        }
                        KernelOp::PreMul => {
                            host::premul(dt, wp, pa, n, sc.as_ptr());
                            let f: libloading::Symbol<Map> = lib.get(name.as_bytes()).unwrap();
                            f(pd, pa, n as u64, scalar);
                        }
                        KernelOp::PreMulAdd => {
                            host::premul_add(dt, wp, pa, pb, n, sc.as_ptr());
                            let f: libloading::Symbol<Zip> = lib.get(name.as_bytes()).unwrap();
                            f(pd, pa, pb, n as u64, scalar);
                        }
                        KernelOp::DivInt => {
                            std::ptr::copy_nonoverlapping(pa, wp, n * size);
                            host::div_int(dt, wp, n, 7);
                            std::ptr::copy_nonoverlapping(pa, pd, n * size);
                            let f: libloading::Symbol<Map> = lib.get(name.as_bytes()).unwrap();
                            f(pd, pd, n as u64, 7);
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
                        | KernelOp::LlP2p => {
                            unreachable!("not in KernelOp::ALL")
                        }
                    }
                }
                if let Err(e) = same(dt, &db[od * size..(od + n) * size], &want) {
                    failures.push(format!("{name} offsets ({oa},{ob},{od}): {e}"));
                }
            }
        }
    }
    finish(dir, &failures);
}

/// The one-pass reduction of k sources equals a chain of binary reductions in source order,
/// bit for bit, for every type (sums over 3, 4 and 8 sources; every operation over 4), with
/// aligned pointers, a misaligned destination, all pointers one element off, and one
/// misaligned source (the scalar path).
#[test]
fn reduce_n_kernels_match_a_chain_of_binary_reductions() {
    use ccl_cuda::cuda::source::REDUCE_N_MAX;
    #[repr(C)]
    struct Srcs([*const u8; REDUCE_N_MAX]);
    type ReduceN = unsafe extern "C" fn(*mut u8, Srcs, u64, u64, Srcs, u64);
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Prod,
        ReduceKind::Max,
        ReduceKind::Min,
    ];
    let mut cases = Vec::new();
    for dt in DataType::ALL {
        for k in [3u8, 4, 8] {
            cases.push((dt, ReduceKind::Sum, k));
        }
        for &op in &kinds[1..] {
            cases.push((dt, op, 4));
        }
    }
    let kernels: Vec<(DataType, KernelOp)> = cases
        .iter()
        .map(|&(dt, op, k)| (dt, KernelOp::ReduceN(op.into(), k)))
        .collect();
    let dir = std::env::temp_dir().join(format!("ccl-reduce-n-on-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(lib_path) = compile_kernels(&dir, &kernels) else {
        return;
    };
    // SAFETY: a library just built from our sources; its initialisers do nothing.
    let lib = unsafe { libloading::Library::new(lib_path) }.unwrap();
    let n = 20_011;
    let mut failures = Vec::new();
    for (&(dt, op, k), &(_, kop)) in cases.iter().zip(&kernels) {
        let size = dt.size();
        let (a, b) = inputs(dt, n + 64);
        // Source m: a or b, shifted by 7m elements, so every source pairs differently.
        let src = |m: usize| -> Vec<u8> {
            let base = if m % 2 == 0 { &a } else { &b };
            base[7 * m * size..(7 * m + n) * size].to_vec()
        };
        let k = k as usize;
        let srcs: Vec<Vec<u8>> = (0..k).map(src).collect();
        let mut want = srcs[0].clone();
        for s in &srcs[1..] {
            let prev = want.clone();
            // SAFETY: three buffers of n elements.
            unsafe { host::reduce(dt, op, want.as_mut_ptr(), prev.as_ptr(), s.as_ptr(), n) };
        }
        let name = kernel_name(dt, kop);
        // (offset of every source, offset of source 1, offset of dst), in elements.
        for (os, o1, od) in [(0usize, 0usize, 0usize), (0, 0, 1), (1, 1, 1), (0, 1, 0)] {
            let bufs: Vec<Vec<u8>> = srcs
                .iter()
                .enumerate()
                .map(|(m, s)| {
                    let off = if m == 1 { o1 } else { os };
                    let mut v = vec![0u8; (n + 4) * size];
                    v[off * size..(off + n) * size].copy_from_slice(s);
                    v
                })
                .collect();
            let mut ptrs = [std::ptr::null::<u8>(); REDUCE_N_MAX];
            for (m, v) in bufs.iter().enumerate() {
                let off = if m == 1 { o1 } else { os };
                ptrs[m] = v[off * size..].as_ptr();
            }
            let mut db = vec![0u8; (n + 4) * size];
            // SAFETY: k sources of n elements past their offsets, dst likewise; the symbol is
            // the kernel of this signature.
            unsafe {
                let f: libloading::Symbol<ReduceN> = lib.get(name.as_bytes()).unwrap();
                let none = Srcs([std::ptr::null(); REDUCE_N_MAX]);
                f(
                    db[od * size..].as_mut_ptr(),
                    Srcs(ptrs),
                    n as u64,
                    0,
                    none,
                    0,
                );
            }
            if let Err(e) = same(dt, &db[od * size..(od + n) * size], &want) {
                failures.push(format!("{name} offsets ({os},{o1},{od}): {e}"));
            }
        }
    }
    finish(&dir, &failures);
}

/// The low-latency all-reduce kernels need a GPU to run (they spin on peers' flags), but
/// their generated source must at least be valid C++ for every type and reduction: checked
/// here with g++ and stand-ins for the CUDA built-ins.
#[test]
fn low_latency_kernel_sources_compile() {
    if !gxx_here("skipping: no g++ to check the kernel sources") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ccl-ll-src-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    let ops = [
        ReduceKind::Sum,
        ReduceKind::Prod,
        ReduceKind::Max,
        ReduceKind::Min,
    ]
    .map(|k| KernelOp::LlAllReduce(k.into()));
    for dt in DataType::ALL {
        for op in ops.into_iter().chain([
            KernelOp::LlExchange,
            KernelOp::WaitFlag,
            KernelOp::WaitCopy,
            KernelOp::MailCopy,
            KernelOp::LlP2p,
        ]) {
            let prims = format!("{HOST_PRIMITIVES}{BLOCK_STUBS}");
            let src = format!(
                "{HOST_INCLUDES}{}",
                kernel_source_with(dt, op, &prims)
                    .replace("extern \"C\" __global__", "extern \"C\"")
            );
            let f = dir.join(format!("{}.cpp", kernel_name(dt, op)));
            std::fs::write(&f, src).unwrap();
            if let Err(e) = syntax_check(&f) {
                failures.push(format!("{}: {e}", kernel_name(dt, op)));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// g++'s syntax check of a kernel source (block built-ins stubbed): its errors, if any.
fn syntax_check(f: &Path) -> Result<(), String> {
    let out = Command::new("g++")
        .args([
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wno-unknown-pragmas",
        ])
        .args(["-Wno-unused-function", "-Wno-unused-variable"])
        .arg(f)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

type MailCopyFn = unsafe extern "C" fn(*mut u64, u64, *const u8, u64);

/// The mail-copy kernel's C++, run on the host as one thread of one block (the slot already
/// filled): copies the bytes the slot names, capped at the send's own length, marks the slot
/// seen with the tag, and copies nothing when the slot names no destination.
#[test]
fn mail_copy_kernel_copies_what_its_slot_names() {
    use ccl_cuda::cuda::source::{MAIL_BYTES, MAIL_DST, MAIL_SEEN, MAIL_SLOT_WORDS, MAIL_TAG};
    if !gxx_here("skipping: no g++ to compile the kernel source for the host") {
        return;
    }
    let name = kernel_name(DataType::Uint8, KernelOp::MailCopy);
    let src = format!(
        "{HOST_INCLUDES}{}",
        kernel_source_with(
            DataType::Uint8,
            KernelOp::MailCopy,
            &format!("{HOST_PRIMITIVES}{BLOCK_STUBS}")
        )
        .replace("extern \"C\" __global__", "extern \"C\"")
    );
    let (dir, so) = build_shared("mail_copy", &src, "-O1");
    // SAFETY: the library was just built from the kernel source, with no initialisers.
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    // SAFETY: the symbol is the kernel, whose parameters are those of `MailCopyFn`.
    let f: libloading::Symbol<MailCopyFn> = unsafe { lib.get(name.as_bytes()) }.unwrap();
    // (slot's bytes, the send's bytes, destination named, offsets): the copy is the smaller.
    for (named, max, to_dst, src_off, dst_off) in [
        (4096usize, 4096usize, true, 0usize, 0usize),
        (5000, 4099, true, 0, 0),
        (77, 1000, true, 1, 3),
        (640, 640, true, 16, 48),
        (640, 640, false, 0, 0),
    ] {
        let src: Vec<u8> = (0..8192).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0xEEu8; 8192];
        let (sa, da) = (
            src.as_ptr().align_offset(16) + src_off,
            dst.as_ptr().align_offset(16) + dst_off,
        );
        let mut slot = [0u64; MAIL_SLOT_WORDS];
        let tag = 0x1234_5678_9abc;
        slot[MAIL_TAG] = tag;
        slot[MAIL_DST] = if to_dst {
            dst[da..].as_mut_ptr() as u64
        } else {
            0
        };
        slot[MAIL_BYTES] = named as u64;
        // SAFETY: the slot holds the tag (the call returns) and names a range inside `dst`
        // of at most `named` bytes, capped at `max`, which `src` holds from `sa`.
        unsafe { f(slot.as_mut_ptr(), tag, src[sa..].as_ptr(), max as u64) };
        assert_eq!(slot[MAIL_SEEN], tag, "slot not marked seen");
        let n = if to_dst { named.min(max) } else { 0 };
        assert!(dst[..da].iter().all(|&b| b == 0xEE), "written before");
        assert_eq!(&dst[da..da + n], &src[sa..sa + n], "copy of {n} bytes");
        assert!(dst[da + n..].iter().all(|&b| b == 0xEE), "written after");
    }
    drop(lib);
    let _ = std::fs::remove_dir_all(dir);
}

type ReduceNMailFn = unsafe extern "C" fn(*mut u64, u64, *mut u64, u64, u64, u64);

/// The mailed reduction kernel's C++, run on the host as one thread of one block (the slot
/// already filled): reduces the sources the slot names in their order into its destination
/// and every further destination it names, bit for bit a chain of binary reductions; marks the
/// slot seen and leaves its arrival count at 0; writes nothing when the slot names no
/// destination.
#[test]
fn mailed_reduce_n_kernel_reduces_what_its_slot_names() {
    use ccl_cuda::cuda::source::{MAIL_ALSO, MAIL_DST, MAIL_SEEN, MAIL_SLOT_WORDS, MAIL_SRCS};
    use ccl_cuda::cuda::source::{MAIL_TAG, REDUCE_N_MAX};
    if !gxx_here("skipping: no g++ to compile the kernel source for the host") {
        return;
    }
    let atomics = "static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p = o + v; return o; }\n\
                   static inline unsigned atomicExch(unsigned* p, unsigned v) { unsigned o = *p; *p = v; return o; }\n";
    let dt = DataType::Float32;
    let n = 1001;
    for (k, nalso, named) in [
        (2usize, 1usize, true),
        (3, 2, true),
        (8, 7, true),
        (3, 2, false),
    ] {
        let op = KernelOp::ReduceNMail(ReduceKind::Sum.into(), k as u8);
        let name = kernel_name(dt, op);
        let src = format!(
            "{HOST_INCLUDES}{}",
            kernel_source_with(dt, op, &format!("{HOST_PRIMITIVES}{BLOCK_STUBS}{atomics}"))
                .replace("extern \"C\" __global__", "extern \"C\"")
        );
        let (dir, so) = build_shared(&format!("reduce_n_mail{k}"), &src, "-O1");
        // SAFETY: the library was just built from the kernel source, with no initialisers.
        let lib = unsafe { libloading::Library::new(&so) }.unwrap();
        // SAFETY: the symbol is the kernel, whose parameters are those of `ReduceNMailFn`.
        let f: libloading::Symbol<ReduceNMailFn> = unsafe { lib.get(name.as_bytes()) }.unwrap();
        let srcs: Vec<Vec<f32>> = (0..k)
            .map(|m| {
                (0..n)
                    .map(|i| ((i * 7 + m * 13) % 101) as f32 * 0.37)
                    .collect()
            })
            .collect();
        let mut want = srcs[0].clone();
        for s in &srcs[1..] {
            for (w, x) in want.iter_mut().zip(s) {
                *w += x;
            }
        }
        let mut outs = vec![vec![-1.0f32; n + 1]; 1 + nalso];
        let mut slot = [0u64; MAIL_SLOT_WORDS];
        let tag = 0x0bad_cafe_0042;
        slot[MAIL_TAG] = tag;
        slot[MAIL_DST] = if named {
            outs[0].as_mut_ptr() as u64
        } else {
            0
        };
        for (m, s) in srcs.iter().enumerate() {
            slot[MAIL_SRCS + m] = s.as_ptr() as u64;
        }
        for a in 0..nalso {
            slot[MAIL_ALSO + a] = outs[1 + a].as_mut_ptr() as u64;
        }
        const { assert!(MAIL_ALSO + REDUCE_N_MAX <= MAIL_SLOT_WORDS) };
        let mut mirror = [0u64; MAIL_SLOT_WORDS];
        // SAFETY: the slot holds the tag (the call returns) and names k sources and 1 + nalso
        // destinations of n elements (the destinations one longer, to see overruns).
        unsafe {
            f(
                slot.as_mut_ptr(),
                tag,
                mirror.as_mut_ptr(),
                n as u64,
                0,
                nalso as u64,
            )
        };
        assert_eq!(slot[MAIL_SEEN], tag, "k {k}: slot not marked seen");
        assert_eq!(mirror[MAIL_SEEN], 0, "k {k}: arrival count not reset");
        assert_eq!(mirror[MAIL_TAG], tag, "k {k}: slot not mirrored");
        assert_eq!(
            mirror[MAIL_DST], slot[MAIL_DST],
            "k {k}: destination not mirrored"
        );
        for (i, o) in outs.iter().enumerate() {
            let expect: Vec<f32> = if named { want.clone() } else { vec![-1.0; n] };
            assert_eq!(&o[..n], &expect[..], "k {k} destination {i}");
            assert_eq!(o[n], -1.0, "k {k} destination {i}: written past its end");
        }
        drop(lib);
        let _ = std::fs::remove_dir_all(dir);
    }
}

type WaitCopyFn = unsafe extern "C" fn(*const u32, u32, *mut u8, *const u8, u64, *mut u32, u32);

/// The wait-copy-signal kernel's C++, run on the host with each block as one thread, one
/// block after another (the flag already set), in grids of one block and of three: copies
/// exactly the bytes asked for, aligned (16-byte vectors and a tail) or not, touches nothing
/// around them; one block then writes the done word, a larger grid (given no word) does not.
#[test]
fn wait_copy_kernel_copies_then_signals() {
    if !gxx_here("skipping: no g++ to compile the kernel source for the host") {
        return;
    }
    let name = kernel_name(DataType::Uint8, KernelOp::WaitCopy);
    let one = "static const ccl_dim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};";
    assert!(
        HOST_PRIMITIVES.contains(one),
        "the primitives' index line moved"
    );
    let prims = HOST_PRIMITIVES.replace(
        one,
        "static const ccl_dim3 blockDim = {1, 1, 1}, threadIdx = {0, 0, 0};\n\
         static ccl_dim3 gridDim = {1, 1, 1}, blockIdx = {0, 0, 0};\n\
         extern \"C\" void ccl_host_grid(unsigned b, unsigned g) { blockIdx.x = b; gridDim.x = g; }\n",
    );
    let src = format!(
        "{HOST_INCLUDES}{}",
        kernel_source_with(
            DataType::Uint8,
            KernelOp::WaitCopy,
            &format!("{prims}{BLOCK_STUBS}")
        )
        .replace("extern \"C\" __global__", "extern \"C\"")
    );
    let (dir, so) = build_shared("wait_copy", &src, "-O1");
    // SAFETY: the library was just built from the kernel source, with no initialisers.
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    // SAFETY: the symbols are the kernel, whose parameters are those of `WaitCopyFn`, and the
    // grid setter.
    let (f, grid): (
        libloading::Symbol<WaitCopyFn>,
        libloading::Symbol<unsafe extern "C" fn(u32, u32)>,
    ) = unsafe {
        (
            lib.get(name.as_bytes()).unwrap(),
            lib.get(b"ccl_host_grid").unwrap(),
        )
    };
    for blocks in [1u32, 3] {
        wait_copy_cases(&f, &grid, blocks);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`wait_copy_kernel_copies_then_signals`]'s cases in a grid of `blocks`.
fn wait_copy_cases(f: &WaitCopyFn, grid: &unsafe extern "C" fn(u32, u32), blocks: u32) {
    for (src_off, dst_off, bytes) in [
        (0usize, 0usize, 4096usize),
        (0, 0, 4099),
        (16, 32, 100),
        (1, 0, 77),
        (3, 5, 1000),
        (0, 0, 0),
    ] {
        let mut src = vec![0u8; 8192];
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let mut dst = vec![0xEEu8; 8192];
        let (arrive, mut done) = (5u32, 0u32);
        // Align the buffers' starts so the offsets decide the alignment.
        let sa = src.as_ptr().align_offset(16);
        let da = dst.as_ptr().align_offset(16);
        let done_ptr: *mut u32 = if blocks == 1 {
            &mut done
        } else {
            std::ptr::null_mut()
        };
        for b in 0..blocks {
            // SAFETY: the ranges lie inside the vectors (offsets and sizes above are small);
            // the flag is already at the value, so the call returns; the grid setter only
            // sets the kernel's indices.
            unsafe {
                grid(b, blocks);
                f(
                    &arrive,
                    5,
                    dst.as_mut_ptr().add(da + dst_off),
                    src.as_ptr().add(sa + src_off),
                    bytes as u64,
                    done_ptr,
                    9,
                )
            };
        }
        let want_done = if blocks == 1 { 9 } else { 0 };
        assert_eq!(
            done, want_done,
            "done word for {bytes} bytes, {blocks} blocks"
        );
        let d0 = da + dst_off;
        assert!(
            dst[..d0].iter().all(|&b| b == 0xEE),
            "written before the range"
        );
        assert!(
            dst[d0 + bytes..].iter().all(|&b| b == 0xEE),
            "written after the range"
        );
        assert_eq!(
            &dst[d0..d0 + bytes],
            &src[sa + src_off..sa + src_off + bytes]
        );
    }
}
