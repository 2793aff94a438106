//! The captured-group copies kernel spread over several blocks (`wide` 2), its C++ run on the
//! host by real threads, one per block (CI has no GPU): ranks replaying one group back to
//! back, each rank's launches in order as on its stream, every byte of every replay where it
//! belongs, and the handshake words and the blocks' two words back at 0 after each.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod host_cpp;

use std::sync::atomic::{AtomicU32, Ordering};

use ccl_cuda::cuda::source::{
    kernel_name, kernel_source_with, KernelOp, GRAPH_COPIES_MAX, REDUCE_N_MAX,
};
use ccl_cuda::DataType;
use host_cpp::{build_shared, gxx_here, HOST_INCLUDES, HOST_PRIMITIVES};

#[repr(C)]
#[derive(Clone, Copy)]
struct Copies {
    dst: [u64; GRAPH_COPIES_MAX],
    src: [u64; GRAPH_COPIES_MAX],
    bytes: [u64; GRAPH_COPIES_MAX],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Words {
    rin: [u64; REDUCE_N_MAX],
    lin: [u64; REDUCE_N_MAX],
    rdone: [u64; REDUCE_N_MAX],
    ldone: [u64; REDUCE_N_MAX],
}

type CopiesFn =
    unsafe extern "C" fn(Copies, u32, u32, Words, Words, u32, u32, u32, *mut u32, *mut u32);

/// The kernel built for the host: a block index per thread, a grid size set once, and the
/// atomics and fences of the GPU as the host's.
fn library() -> (std::path::PathBuf, std::path::PathBuf) {
    let prims = HOST_PRIMITIVES.replace(
        "static const ccl_dim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};",
        "static ccl_dim3 gridDim = {1, 1, 1};\n\
         static const ccl_dim3 blockDim = {1, 1, 1}, threadIdx = {0, 0, 0};\n\
         static thread_local ccl_dim3 blockIdx = {0, 0, 0};\n\
         extern \"C\" void ccl_host_set_block(unsigned b) { blockIdx.x = b; }\n\
         extern \"C\" void ccl_host_set_grid(unsigned g) { gridDim.x = g; }",
    );
    assert_ne!(
        prims, HOST_PRIMITIVES,
        "the primitives' dimensions line changed"
    );
    let stubs = "static inline void __syncthreads() {}\n\
                 static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n\
                 static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n\
                 static inline u32 atomicAdd(u32* p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }\n";
    let src = format!(
        "{HOST_INCLUDES}{}",
        kernel_source_with(
            DataType::Uint8,
            KernelOp::GraphCopies,
            &format!("{prims}{stubs}")
        )
        .replace("extern \"C\" __global__", "extern \"C\"")
    );
    build_shared("graph_copies", &src, "-O2")
}

/// `n` ranks, `blocks` blocks each, `replays` launches of one group in which every rank pulls
/// `bytes` from each partner's send buffer into its own receive buffer.
fn run(so: &std::path::Path, n: usize, blocks: u32, replays: usize, bytes: usize) {
    // SAFETY: the library was just built from the kernel source, with no initialisers.
    let lib = unsafe { libloading::Library::new(so) }.unwrap();
    let name = kernel_name(DataType::Uint8, KernelOp::GraphCopies);
    // SAFETY: the symbol is the kernel, whose parameters are those of `CopiesFn`.
    let kernel: CopiesFn = unsafe { *lib.get::<CopiesFn>(name.as_bytes()).unwrap() };
    // SAFETY: both symbols are the setters above, `void(unsigned)`.
    let (set_block, set_grid) = unsafe {
        (
            *lib.get::<unsafe extern "C" fn(u32)>(b"ccl_host_set_block")
                .unwrap(),
            *lib.get::<unsafe extern "C" fn(u32)>(b"ccl_host_set_grid")
                .unwrap(),
        )
    };
    // SAFETY: a plain store, before any kernel thread runs.
    unsafe { set_grid(blocks) };
    // inputs[owner][from], done[owner][from]: `from`'s word in `owner`'s area.
    let words = |_| {
        (0..n)
            .map(|_| (0..n).map(|_| AtomicU32::new(0)).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let (inputs, done): (Vec<Vec<AtomicU32>>, Vec<Vec<AtomicU32>>) = (words(0), words(1));
    let own: Vec<[AtomicU32; 2]> = (0..n)
        .map(|_| [AtomicU32::new(0), AtomicU32::new(0)])
        .collect();
    // Written and read only through these addresses (the kernel's threads write the
    // receive buffers), the vectors kept alive to the end.
    let mut send: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; bytes]).collect();
    let mut recv: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; bytes * n]).collect();
    let send_at: Vec<usize> = send.iter_mut().map(|v| v.as_mut_ptr() as usize).collect();
    let recv_at: Vec<usize> = recv.iter_mut().map(|v| v.as_mut_ptr() as usize).collect();
    let value = |r: usize, k: usize, i: usize| (i * 7 + r * 31 + k * 13 + 1) as u8;
    let ptr = |a: &AtomicU32| a.as_ptr() as u64;
    std::thread::scope(|s| {
        for r in 0..n {
            let (inputs, done, own, send_at, recv_at) = (&inputs, &done, &own, &send_at, &recv_at);
            s.spawn(move || {
                let partners: Vec<usize> = (0..n).filter(|&j| j != r).collect();
                let mut w = Words::default();
                for (k, &j) in partners.iter().enumerate() {
                    (w.rin[k], w.lin[k]) = (ptr(&inputs[j][r]), ptr(&inputs[r][j]));
                    (w.rdone[k], w.ldone[k]) = (ptr(&done[j][r]), ptr(&done[r][j]));
                }
                let mut c = Copies {
                    dst: [0; GRAPH_COPIES_MAX],
                    src: [0; GRAPH_COPIES_MAX],
                    bytes: [0; GRAPH_COPIES_MAX],
                };
                for (m, &j) in partners.iter().enumerate() {
                    c.dst[m] = (recv_at[r] + j * bytes) as u64;
                    c.src[m] = send_at[j] as u64;
                    c.bytes[m] = bytes as u64;
                }
                for k in 0..replays {
                    // This rank's input for replay k: written once its launch k - 1 is over
                    // (its "done" handshake saw every partner finish reading it).
                    let mine = send_at[r] as *mut u8;
                    for i in 0..bytes {
                        // SAFETY: only this rank writes its send buffer, and no partner reads
                        // it between replays (see above).
                        unsafe { *mine.add(i) = value(r, k, i) };
                    }
                    std::thread::scope(|b| {
                        for block in 0..blocks {
                            let (go, arrived) =
                                (own[r][0].as_ptr() as usize, own[r][1].as_ptr() as usize);
                            let np = partners.len() as u32;
                            b.spawn(move || {
                                // SAFETY: the kernel's parameters: copies between live buffers
                                // of this test, words that outlive the scope.
                                unsafe {
                                    set_block(block);
                                    let (go, arrived) = (go as *mut u32, arrived as *mut u32);
                                    kernel(c, np, np, w, Words::default(), np, 0, 2, go, arrived)
                                }
                            });
                        }
                    });
                    for &j in &partners {
                        // SAFETY: this rank's receive buffer, which no thread writes between
                        // its launches.
                        let got = unsafe {
                            std::slice::from_raw_parts((recv_at[r] + j * bytes) as *const u8, bytes)
                        };
                        let bad = (0..bytes).find(|&i| got[i] != value(j, k, i));
                        assert_eq!(bad, None, "rank {r} replay {k}: from {j}");
                    }
                    assert_eq!(
                        own[r][0].load(Ordering::SeqCst),
                        0,
                        "rank {r} replay {k}: go"
                    );
                    assert_eq!(
                        own[r][1].load(Ordering::SeqCst),
                        0,
                        "rank {r} replay {k}: arrived"
                    );
                }
            });
        }
    });
    for (r, (i, d)) in inputs.iter().zip(&done).enumerate() {
        for j in 0..n {
            let left = (i[j].load(Ordering::SeqCst), d[j].load(Ordering::SeqCst));
            assert_eq!(left, (0, 0), "rank {r}'s words from {j}");
        }
    }
    drop((send, recv));
}

#[test]
fn spread_copies_land_and_reset_their_words_over_back_to_back_replays() {
    if !gxx_here("graph_copies_on_host: no g++, skipped") {
        return;
    }
    let (dir, so) = library();
    // A kernel that waits for a word nobody sets would hang the run: a watchdog fails it.
    let (tx, rx) = std::sync::mpsc::channel();
    let lib = so.clone();
    std::thread::spawn(move || {
        let cases = [
            (2, 4, 20, 50_001),
            (3, 7, 12, 4096 + 3),
            (4, 32, 6, 100_000),
        ];
        for (n, blocks, replays, bytes) in cases {
            run(&lib, n, blocks, replays, bytes);
        }
        tx.send(()).ok();
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the spread copies kernel did not finish in 120 s")
        }
        Err(e) => panic!("a run failed (its panic is above): {e}"),
    }
    std::fs::remove_dir_all(dir).ok();
}
