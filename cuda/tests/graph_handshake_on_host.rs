//! The captured groups' handshake kernel's C++ run on the host by real threads (CI has no
//! GPU): rounds of handshakes among 2 to 8 ranks are barriers (no rank leaves round `k` before
//! every partner has entered it), replayed back to back without losing a write, and every
//! word is 0 again at the end. As in a captured group, each round is two handshakes on two
//! kinds of words (its "inputs" and its "done"): a rank sets a partner's word of one kind
//! again only after the other kind's handshake, by which time the partner has reset it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

mod host_cpp;

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use ccl_cuda::cuda::source::{kernel_name, kernel_source_with, KernelOp, REDUCE_N_MAX};
use ccl_cuda::DataType;
use host_cpp::{build_shared, gxx_here, HOST_INCLUDES, HOST_PRIMITIVES};

/// `ccl_gwords` by value: remote and local "inputs" words, then the "done" words (unused).
#[repr(C)]
struct Words([[u64; REDUCE_N_MAX]; 4]);

type HandshakeFn = unsafe extern "C" fn(Words, u32);

fn handshake_library() -> (std::path::PathBuf, std::path::PathBuf) {
    // The spin's back-off as the GPU's (compiled for sm_70 and later), yielding the CPU here:
    // the test's threads outnumber the cores.
    let stubs = "static inline void __syncthreads() {}\n\
                 static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n\
                 #define __CUDA_ARCH__ 900\n\
                 static inline void __nanosleep(unsigned) { sched_yield(); }\n";
    let src = format!(
        "{HOST_INCLUDES}{}",
        kernel_source_with(
            DataType::Uint8,
            KernelOp::GraphHandshake,
            &format!("{HOST_PRIMITIVES}{stubs}")
        )
        .replace("extern \"C\" __global__", "extern \"C\"")
    );
    build_shared("graph_handshake", &src, "-O2")
}

/// `n` ranks, `rounds` rounds of two handshakes (word kinds 0 and 1): rank `r` notes its round
/// before it and, after the first handshake, checks that every partner has entered that round.
fn run_rounds(so: &Path, n: usize, rounds: usize) {
    // words[kind][r][j]: rank r's word of `kind` for partner j (set by j, waited on and reset
    // by r).
    let words: Vec<Vec<Vec<AtomicU32>>> = (0..2)
        .map(|_| {
            (0..n)
                .map(|_| (0..n).map(|_| AtomicU32::new(0)).collect())
                .collect()
        })
        .collect();
    let entered: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for r in 0..n {
            let (words, entered, tx) = (&words, &entered, tx.clone());
            s.spawn(move || {
                // SAFETY: the library lives until the scope ends; the symbol is the kernel's.
                let lib = unsafe { libloading::Library::new(so) }.unwrap();
                let name = kernel_name(DataType::Uint8, KernelOp::GraphHandshake);
                // SAFETY: the kernel's host build has exactly this signature.
                let f: libloading::Symbol<HandshakeFn> =
                    unsafe { lib.get(name.as_bytes()) }.unwrap();
                let partners: Vec<usize> = (0..n).filter(|&j| j != r).collect();
                let mut late = Vec::new();
                let handshake = |kind: usize| {
                    let mut w = Words([[0; REDUCE_N_MAX]; 4]);
                    for (i, &j) in partners.iter().enumerate() {
                        w.0[0][i] = words[kind][j][r].as_ptr() as u64;
                        w.0[1][i] = words[kind][r][j].as_ptr() as u64;
                    }
                    // SAFETY: every word pointer is a live AtomicU32 of `words`, which outlives
                    // the threads; the kernel only reads and writes those words.
                    unsafe { f(w, partners.len() as u32) };
                };
                for k in 1..=rounds {
                    entered[r].store(k, Ordering::SeqCst);
                    handshake(0);
                    late.extend(
                        partners
                            .iter()
                            .filter(|&&j| entered[j].load(Ordering::SeqCst) < k)
                            .map(|&j| (k, j)),
                    );
                    handshake(1);
                }
                tx.send((r, late)).unwrap();
            });
        }
        drop(tx);
        for _ in 0..n {
            let (r, late) = rx
                .recv_timeout(Duration::from_secs(120))
                .expect("a rank's handshakes did not finish (a lost write?)");
            assert!(
                late.is_empty(),
                "rank {r} left rounds before partners entered them: {late:?}"
            );
        }
    });
    for (kind, table) in words.iter().enumerate() {
        for (r, row) in table.iter().enumerate() {
            for (j, w) in row.iter().enumerate() {
                let left = w.load(Ordering::SeqCst);
                assert_eq!(left, 0, "word {kind} of rank {r} for {j} left set");
            }
        }
    }
}

#[test]
fn handshakes_are_barriers_and_leave_every_word_reset() {
    if !gxx_here("skipping: no g++ to build the handshake kernel for the host") {
        return;
    }
    let (dir, so) = handshake_library();
    for (n, rounds) in [(2, 500), (3, 200), (4, 100), (8, 20)] {
        run_rounds(&so, n, rounds);
    }
    let _ = std::fs::remove_dir_all(dir);
}
