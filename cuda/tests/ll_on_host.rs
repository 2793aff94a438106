//! The low-latency exchange and all-reduce kernels' C++ run on the host (CI has no GPU): every
//! rank's blocks and threads as real threads over areas laid out as on the GPU, through
//! sequences that mix both kernels, the flagged and the packed forms, in-place buffers, reduces
//! to a root and reduce-scatters, on 2, 3 and 8 ranks; every output byte checked. And a packed
//! receive from a peer that never came ends once its rank's words move on, as an abort moves
//! them.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod host_cpp;
mod scenario;

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use ccl_cuda::cuda::source::{
    kernel_name, kernel_source_with, ll_area_bytes, ll_data_offset, ll_pack_offset, ll_seq_offset,
    ll_spin_words_bytes, KernelOp, ReduceKindKey, LL_EVERY_RANK, LL_PACK_MAX,
};
use ccl_cuda::cuda::LlTransfers;
use ccl_cuda::{DataType, ReduceKind};
use host_cpp::{build_shared, gxx_here, HOST_INCLUDES, HOST_PRIMITIVES};
use scenario::Xs;

/// Blocks and threads per block of the host runs (the GPU's 32 x 512 would be 16k threads a
/// rank); the protocol only needs a thread per rank in a block. The words are laid out for
/// `2 * BLOCKS` block indices (`LL_MAX_BLOCKS` on the GPU), of which the communicator uses
/// `BLOCKS` (the default grid's 32 of 128 on the GPU); an operation's grid is 1 to `BLOCKS`
/// ([`grid`]).
const BLOCKS: u32 = 4;
const THREADS: u32 = 8;
/// Bytes per sender of each area's flagged buffers.
const LL_MAX: usize = 4096;
/// Operations of at most this many bytes per peer go packed here.
const PACK: usize = 1024;

type ExchangeFn =
    unsafe extern "C" fn(LlTransfers, *const u64, u32, u32, *mut u32, u64, u64, u64, u64, u32, u32);
type ReduceFn = unsafe extern "C" fn(
    *mut i32,
    *const i32,
    u64,
    *const u64,
    u32,
    u32,
    *mut u32,
    u64,
    u64,
    u64,
    u64,
    u32,
    u64,
    u64,
    u32,
    u32,
);
type BindFn = unsafe extern "C" fn(u32, u32, u32, *mut std::ffi::c_void);
type BarrierNewFn = unsafe extern "C" fn(u32) -> *mut std::ffi::c_void;

/// The host stand-ins: per-thread block and thread indices, a barrier per block for
/// `__syncthreads`, fences as full fences, and `BLOCKS` blocks in the protocol.
fn host_source(dt: DataType, op: KernelOp) -> String {
    let prims = HOST_PRIMITIVES.replace(
        "static const ccl_dim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};",
        &format!(
            "static const ccl_dim3 blockDim = {{{THREADS}, 1, 1}};\n\
             static thread_local ccl_dim3 threadIdx = {{0, 0, 0}}, blockIdx = {{0, 0, 0}}, gridDim = {{1, 1, 1}};\n\
             static thread_local pthread_barrier_t* ccl_host_bar = nullptr;\n\
             extern \"C\" void ccl_host_bind(unsigned b, unsigned g, unsigned t, void* bar) {{ blockIdx.x = b; gridDim.x = g; threadIdx.x = t; ccl_host_bar = (pthread_barrier_t*)bar; }}\n\
             extern \"C\" void* ccl_host_barrier_new(unsigned n) {{ auto* b = new pthread_barrier_t; pthread_barrier_init(b, nullptr, n); return b; }}\n"
        ),
    );
    assert!(
        prims.contains("ccl_host_bind"),
        "the primitives' index line moved"
    );
    let stubs = "#define __shared__\n\
                 static inline void __syncthreads() { pthread_barrier_wait(ccl_host_bar); }\n\
                 static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n\
                 static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }\n";
    let src = kernel_source_with(dt, op, &format!("{prims}{stubs}"))
        .replace("extern \"C\" __global__", "extern \"C\"");
    let blocks = format!("#define LL_MAXB {}", ccl_cuda::cuda::source::LL_MAX_BLOCKS);
    assert!(src.contains(&blocks), "the protocol's block count moved");
    format!(
        "{HOST_INCLUDES}#include <pthread.h>\n{}",
        src.replace(&blocks, &format!("#define LL_MAXB {}", 2 * BLOCKS))
    )
}

/// The two kernels built for the host, and their libraries' folders (removed on drop).
struct Kernels {
    dirs: Vec<PathBuf>,
    exchange: libloading::Library,
    reduce: libloading::Library,
}

impl Drop for Kernels {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn build() -> Kernels {
    // Tests run side by side in one process: each builds in folders of its own.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (d1, so1) = build_shared(
        &format!("ll_exchange{k}"),
        &host_source(DataType::Uint8, KernelOp::LlExchange),
        "-O2",
    );
    let sum = KernelOp::LlAllReduce(ReduceKindKey::from(ReduceKind::Sum));
    let (d2, so2) = build_shared(
        &format!("ll_reduce{k}"),
        &host_source(DataType::Int32, sum),
        "-O2",
    );
    // SAFETY: libraries just built from the kernel sources, with no initialisers that matter.
    let (exchange, reduce) = unsafe {
        (
            libloading::Library::new(so1).unwrap(),
            libloading::Library::new(so2).unwrap(),
        )
    };
    Kernels {
        dirs: vec![d1, d2],
        exchange,
        reduce,
    }
}

/// One operation of one rank, with everything its kernel takes (the transfer table is the
/// kernel's by-value parameter, hence the size).
#[derive(Clone, Copy)]
#[allow(clippy::large_enum_variant)]
enum Launch {
    Exchange(LlTransfers, bool),
    Reduce {
        dst: u64,
        src: u64,
        n: u64,
        push_stride: u64,
        own_off: u64,
        root: u32,
        packed: bool,
    },
}

/// The grid and `opts` word of every rank's `i`-th launch: grids of 1 to `BLOCKS` blocks in
/// turn (every index's words move on whatever the grid), every other launch acknowledging
/// without the fence, all `BLOCKS` indices in use.
fn grid(i: usize) -> (u32, u32) {
    (1 + (i as u32 * 3) % BLOCKS, (i % 2) as u32 | BLOCKS << 8)
}

/// Runs every rank's launches in order (ranks side by side, each launch as [`grid`] x
/// `THREADS` threads), the kernels numbering them from 1 in each rank's area as on the GPU;
/// panics if they do not all
/// finish within a minute.
fn run(k: &Kernels, areas: &[Vec<u64>], launches: Vec<Vec<Launch>>) {
    let n = areas.len();
    let table: Vec<u64> = areas.iter().map(|a| a.as_ptr() as u64).collect();
    // SAFETY: the symbols are the kernels and host helpers, of exactly these signatures.
    let (xf, rf, bind_x, bind_r, bar_new) = unsafe {
        (
            *k.exchange
                .get::<ExchangeFn>(kernel_name(DataType::Uint8, KernelOp::LlExchange).as_bytes())
                .unwrap(),
            *k.reduce
                .get::<ReduceFn>(
                    kernel_name(
                        DataType::Int32,
                        KernelOp::LlAllReduce(ReduceKindKey::from(ReduceKind::Sum)),
                    )
                    .as_bytes(),
                )
                .unwrap(),
            *k.exchange.get::<BindFn>(b"ccl_host_bind").unwrap(),
            *k.reduce.get::<BindFn>(b"ccl_host_bind").unwrap(),
            *k.exchange
                .get::<BarrierNewFn>(b"ccl_host_barrier_new")
                .unwrap(),
        )
    };
    let table_at = table.as_ptr() as usize;
    let (data_off, pk_off) = (ll_data_offset(n) as u64, ll_pack_offset(n) as u64);
    let expected: Vec<Vec<u32>> = (0..n)
        .map(|r| {
            let ops = launches[r].len() as u32;
            seq_words(&areas[r], n).iter().map(|w| w + ops).collect()
        })
        .collect();
    let (done_tx, done_rx) = mpsc::channel();
    for (r, mine) in launches.into_iter().enumerate() {
        let done = done_tx.clone();
        // The rank's operation numbers, in its own area: the kernels count on from them.
        let seqs = (table[r] + ll_seq_offset(n) as u64) as usize;
        std::thread::spawn(move || {
            for (i, l) in mine.into_iter().enumerate() {
                let (g, opts) = grid(i);
                std::thread::scope(|s| {
                    for b in 0..g {
                        // SAFETY: a barrier for THREADS threads, used only by this block's
                        // threads below and leaked (a few bytes a block).
                        let bar = unsafe { bar_new(THREADS) } as usize;
                        for t in 0..THREADS {
                            s.spawn(move || {
                                let table = table_at as *const u64;
                                // SAFETY: every address in `l` and the table points into
                                // buffers the test keeps alive until every rank reports done;
                                // the areas are laid out for `n` ranks and LL_MAX, their words
                                // and packed buffers zeroed; each rank's numbers go on by one.
                                unsafe {
                                    match l {
                                        Launch::Exchange(x, packed) => {
                                            bind_x(b, g, t, bar as *mut _);
                                            xf(
                                                x,
                                                table,
                                                n as u32,
                                                r as u32,
                                                seqs as *mut u32,
                                                LL_MAX as u64,
                                                data_off,
                                                pk_off,
                                                LL_PACK_MAX as u64,
                                                packed as u32,
                                                opts,
                                            );
                                        }
                                        Launch::Reduce {
                                            dst,
                                            src,
                                            n: count,
                                            push_stride,
                                            own_off,
                                            root,
                                            packed,
                                        } => {
                                            bind_r(b, g, t, bar as *mut _);
                                            rf(
                                                dst as *mut i32,
                                                src as *const i32,
                                                count,
                                                table,
                                                n as u32,
                                                r as u32,
                                                seqs as *mut u32,
                                                LL_MAX as u64,
                                                data_off,
                                                push_stride,
                                                own_off,
                                                root,
                                                pk_off,
                                                LL_PACK_MAX as u64,
                                                packed as u32,
                                                opts,
                                            );
                                        }
                                    }
                                }
                            });
                        }
                    }
                });
            }
            let _ = done.send(r);
        });
    }
    for _ in 0..n {
        assert!(
            done_rx.recv_timeout(Duration::from_secs(60)).is_ok(),
            "a rank's launches did not finish (deadlock in the low-latency protocol?)"
        );
    }
    // Every block index's number moved on by one per operation, whatever each one's grid.
    for (r, want) in expected.iter().enumerate() {
        assert_eq!(
            &seq_words(&areas[r], n),
            want,
            "rank {r}'s operation numbers"
        );
    }
}

/// The operation number of every block index in an area laid out for `n` ranks.
fn seq_words(area: &[u64], n: usize) -> Vec<u32> {
    let at = area.as_ptr() as usize + ll_seq_offset(n);
    (0..BLOCKS as usize)
        // SAFETY: the words lie inside the area (before its data regions), 4-byte aligned; no
        // kernel thread of this area runs any more.
        .map(|i| unsafe { std::ptr::read_volatile((at as *const u32).add(i)) })
        .collect()
}

fn areas(n: usize) -> Vec<Vec<u64>> {
    (0..n)
        .map(|_| vec![0u64; ll_area_bytes(n, LL_MAX) / 8])
        .collect()
}

/// One data collective of `c` bytes per peer as each rank's transfer table: all-gather (kind
/// 0), all-to-all (1), broadcast from `root` (2) or gather to `root` (3), out of place from
/// `input[r]` (`n * c` bytes) into `output[r]` (`n * c` bytes); and what each output must then
/// hold.
fn exchange_case(
    kind: u64,
    n: usize,
    c: usize,
    root: usize,
    input: &[Vec<u8>],
    output: &mut [Vec<u8>],
) -> (Vec<LlTransfers>, Vec<Vec<u8>>) {
    let mut want: Vec<Vec<u8>> = output.to_vec();
    let mut xs = vec![LlTransfers::default(); n];
    // (sender, receiver) -> (sender's block, receiver's slot), for the pairs that move data;
    // a rank's pair with itself is its local copy.
    let pair = |s: usize, r: usize| -> Option<(usize, usize)> {
        match kind {
            0 => Some((0, s)),
            1 => Some((r, s)),
            2 => (s == root).then_some((0, 0)),
            _ => (r == root).then_some((0, s)),
        }
    };
    for s in 0..n {
        for r in 0..n {
            let Some((block, slot)) = pair(s, r) else {
                continue;
            };
            let from = input[s].as_ptr() as u64 + (block * c) as u64;
            let to = output[r].as_mut_ptr() as u64 + (slot * c) as u64;
            if s == r {
                (xs[s].src[s], xs[s].dst[s], xs[s].sbytes[s]) = (from, to, c as u64);
            } else {
                (xs[s].src[r], xs[s].sbytes[r]) = (from, c as u64);
                (xs[r].dst[s], xs[r].rbytes[s]) = (to, c as u64);
            }
            want[r][slot * c..(slot + 1) * c]
                .copy_from_slice(&input[s][block * c..(block + 1) * c]);
        }
    }
    (xs, want)
}

/// An all-reduce of about `c` bytes in two shots, as the engine launches it with more than two
/// ranks: the reduce-scatter into each rank's part of the output, then the all-gather of the
/// parts in place. Returns the inputs, the outputs (empty in place: the inputs hold the
/// result) and the sums every rank must hold.
#[allow(clippy::type_complexity)] // three per-rank buffer lists, named at the caller
fn two_shot_op(
    op: usize,
    n: usize,
    c: usize,
    in_place: bool,
    launches: &mut [Vec<Launch>],
) -> (Vec<Vec<i32>>, Vec<Vec<i32>>, Vec<Vec<i32>>) {
    let part = c.div_ceil(4 * n).max(1);
    let count = part * n;
    let mut input: Vec<Vec<i32>> = (0..n)
        .map(|r| {
            (0..count)
                .map(|i| i as i32 * 5 - r as i32 * 77 + op as i32)
                .collect()
        })
        .collect();
    let want: Vec<Vec<i32>> = (0..n)
        .map(|_| {
            (0..count)
                .map(|i| (0..n).map(|r| input[r][i]).sum())
                .collect()
        })
        .collect();
    let mut output: Vec<Vec<i32>> = (0..n).map(|_| vec![-5; count]).collect();
    let packed = part * 4 <= PACK;
    let pb = (part * 4) as u64;
    for r in 0..n {
        let src = input[r].as_mut_ptr() as u64;
        let buf = if in_place {
            src
        } else {
            output[r].as_mut_ptr() as u64
        };
        launches[r].push(Launch::Reduce {
            dst: buf + r as u64 * pb,
            src,
            n: part as u64,
            push_stride: pb,
            own_off: r as u64 * pb,
            root: LL_EVERY_RANK,
            packed,
        });
        let mut x = LlTransfers::default();
        for q in (0..n).filter(|&q| q != r) {
            (x.src[q], x.sbytes[q]) = (buf + r as u64 * pb, pb);
            (x.dst[q], x.rbytes[q]) = (buf + q as u64 * pb, pb);
        }
        launches[r].push(Launch::Exchange(x, packed));
    }
    let output = if in_place { Vec::new() } else { output };
    (input, output, want)
}

/// Every rank's output buffers of one operation, what they must hold, and what it was.
type Checked<T> = (Vec<Vec<T>>, Vec<Vec<T>>, String);

/// Sequences of data collectives on the exchange kernel and reductions on the all-reduce
/// kernel, both forms, every output byte as it must be.
fn sequence(n: usize, ops: usize, seed: u64) {
    let k = build();
    let a = areas(n);
    let mut rng = Xs(seed);
    let mut launches: Vec<Vec<Launch>> = vec![Vec::new(); n];
    // Buffers of every operation, kept until the run ends: (outputs, what they must hold).
    let mut checks: Vec<Checked<u8>> = Vec::new();
    let mut ints: Vec<Checked<i32>> = Vec::new();
    let mut inputs: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut int_inputs: Vec<Vec<Vec<i32>>> = Vec::new();
    for op in 0..ops {
        // Sizes around the packed limit, odd ones included.
        let c = [1, 7, 8, 100, PACK, PACK + 8, 3000, LL_MAX][rng.below(8) as usize];
        let packed = c <= PACK;
        let root = rng.below(n as u64) as usize;
        if rng.below(2) == 0 {
            let kind = rng.below(4);
            let input: Vec<Vec<u8>> = (0..n)
                .map(|r| (0..n * c).map(|i| (i * 7 + r * 31 + op) as u8).collect())
                .collect();
            let mut output: Vec<Vec<u8>> = (0..n).map(|_| vec![0xEE; n * c]).collect();
            let (xs, want) = exchange_case(kind, n, c, root, &input, &mut output);
            for (r, x) in xs.into_iter().enumerate() {
                launches[r].push(Launch::Exchange(x, packed));
            }
            checks.push((
                output,
                want,
                format!("op {op}: exchange kind {kind}, {c} B, root {root}"),
            ));
            inputs.push(input);
        } else {
            // all-reduce (0), in place (1), reduce to root (2), reduce-scatter (3), all-reduce
            // in two shots (4), in place (5)
            let kind = rng.below(6);
            if kind >= 4 {
                let (input, output, want) = two_shot_op(op, n, c, kind == 5, &mut launches);
                let what = format!("op {op}: two-shot all-reduce, in place {}", kind == 5);
                ints.push((output, want, what));
                int_inputs.push(input);
                continue;
            }
            let count = c.div_ceil(4);
            let packed = count * 4 <= PACK;
            let parts = if kind == 3 { n } else { 1 };
            let mut input: Vec<Vec<i32>> = (0..n)
                .map(|r| {
                    (0..parts * count)
                        .map(|i| i as i32 * 3 - r as i32 * 1000 + op as i32)
                        .collect()
                })
                .collect();
            let sum = |i: usize| (0..n).map(|r| input[r][i]).sum::<i32>();
            let want: Vec<Vec<i32>> = (0..n)
                .map(|r| match kind {
                    3 => (0..count).map(|i| sum(r * count + i)).collect(),
                    2 if r != root => vec![-5; count],
                    _ => (0..count).map(sum).collect(),
                })
                .collect();
            let mut output: Vec<Vec<i32>> = (0..n).map(|_| vec![-5; count]).collect();
            for r in 0..n {
                let src = input[r].as_mut_ptr();
                let dst = if kind == 1 {
                    src
                } else {
                    output[r].as_mut_ptr()
                };
                launches[r].push(Launch::Reduce {
                    dst: dst as u64,
                    src: src as u64,
                    n: count as u64,
                    push_stride: if kind == 3 { (count * 4) as u64 } else { 0 },
                    own_off: if kind == 3 { (r * count * 4) as u64 } else { 0 },
                    root: if kind == 2 {
                        root as u32
                    } else {
                        LL_EVERY_RANK
                    },
                    packed,
                });
            }
            let what = format!("op {op}: reduction kind {kind}, {count} ints, root {root}");
            if kind == 1 {
                // In place: the result is read from the input buffers after the run.
                int_inputs.push(input);
                ints.push((Vec::new(), want, what));
            } else {
                ints.push((output, want, what));
                int_inputs.push(input);
            }
        }
    }
    run(&k, &a, launches);
    for (out, want, what) in &checks {
        for r in 0..n {
            assert!(
                out[r] == want[r],
                "n {n}, {what}: rank {r}'s output differs"
            );
        }
    }
    for ((out, want, what), input) in ints.iter().zip(&int_inputs) {
        for r in 0..n {
            let got = if out.is_empty() { &input[r] } else { &out[r] };
            assert!(
                got == &want[r],
                "n {n}, {what}: rank {r} holds {:?}",
                &got[..got.len().min(8)]
            );
        }
    }
}

#[test]
fn two_ranks_mix_kernels_forms_and_sizes() {
    if gxx_here("skipping: no g++ to run the low-latency kernels on the host") {
        sequence(2, 24, 7);
    }
}

#[test]
fn three_and_eight_ranks_mix_kernels_forms_and_sizes() {
    if gxx_here("skipping: no g++ to run the low-latency kernels on the host") {
        sequence(3, 16, 11);
        sequence(8, 8, 13);
    }
}

/// A packed receive from a rank that never launched ends once the receiving rank's spin words
/// move a quarter of the u32 circle on (what `ncclCommAbort` does to them).
#[test]
fn a_packed_receive_from_a_dead_peer_ends_when_the_words_move_on() {
    if !gxx_here("skipping: no g++ to run the low-latency kernels on the host") {
        return;
    }
    let k = build();
    let a = areas(2);
    let input = [1u8; 64];
    let mut output = vec![0u8; 64];
    let mut x = LlTransfers::default();
    (x.src[1], x.sbytes[1]) = (input.as_ptr() as u64, 64);
    (x.dst[1], x.rbytes[1]) = (output.as_mut_ptr() as u64, 64);
    let words = a[0].as_ptr() as usize;
    let mover = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        for i in 0..ll_spin_words_bytes(2) / 4 {
            // SAFETY: the area holds more than its spin words, 8-byte aligned; the kernel's
            // threads read these words as volatile u32s.
            unsafe {
                let w = (words as *mut u32).add(i);
                std::ptr::write_volatile(w, std::ptr::read_volatile(w).wrapping_add(1 << 30));
            }
        }
    });
    // Rank 1 never launches: only rank 0's launch runs, and must end.
    run(&k, &a, vec![vec![Launch::Exchange(x, true)], Vec::new()]);
    mover.join().unwrap();
    drop(output);
}

/// All-reduces in two shots on 4 and 8 ranks, packed and flagged, in place and not, one after
/// another on the same areas: every rank ends with every sum.
#[test]
fn two_shot_all_reduces_on_four_and_eight_ranks() {
    if !gxx_here("skipping: no g++ to run the low-latency kernels on the host") {
        return;
    }
    let k = build();
    for n in [4, 8] {
        let a = areas(n);
        let mut launches: Vec<Vec<Launch>> = vec![Vec::new(); n];
        let cases: Vec<(usize, bool)> =
            [(64, false), (4096, true), (PACK * n, false), (12000, true)]
                .into_iter()
                .filter(|&(c, _)| c.div_ceil(4 * n) * 4 <= LL_MAX)
                .collect();
        let done: Vec<_> = cases
            .iter()
            .enumerate()
            .map(|(op, &(c, in_place))| two_shot_op(op, n, c, in_place, &mut launches))
            .collect();
        run(&k, &a, launches);
        for (i, (input, output, want)) in done.iter().enumerate() {
            for r in 0..n {
                let got = if output.is_empty() {
                    &input[r]
                } else {
                    &output[r]
                };
                assert!(
                    got == &want[r],
                    "n {n}, case {:?}: rank {r} differs",
                    cases[i]
                );
            }
        }
    }
}
