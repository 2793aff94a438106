//! The point-to-point kernel's C++ run on the host by real threads (CI has no GPU): every
//! message where it belongs, and a receive or send left waiting on a dead peer ends once its
//! rank's low-latency words move on, as an abort moves them.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod host_cpp;
mod scenario;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use ccl_cuda::cuda::source::{
    kernel_name, ll_data_offset, ll_p2p_offset, ll_p2p_pack_offset, ll_spin_words_bytes, KernelOp,
    LL_P2P_BLOCKS, LL_P2P_PACK_SLOT, LL_P2P_SLOTS,
};
use ccl_cuda::cuda::LlP2p;
use ccl_cuda::DataType;
use host_cpp::{gxx_here, ll_p2p_host_library, LlP2pFn};
use scenario::P2pTraffic;

/// One run of the host-built kernel over [`P2pTraffic::random`]`(n, rounds, per_pair, seed)`:
/// each rank's launches one after another on a thread of its own, each launch's blocks on
/// threads side by side.
fn run_ll_p2p_on_host(so: &Path, n: usize, rounds: usize, per_pair: usize, seed: u64) {
    let traffic = P2pTraffic::random(n, rounds, per_pair, seed);
    let areas: Vec<Vec<u64>> = (0..n)
        .map(|_| vec![0u64; ll_data_offset(n) / 8 + 8])
        .collect();
    let table: Vec<u64> = areas.iter().map(|a| a.as_ptr() as u64).collect();
    let mut err = 0u32;
    let mut sendbuf: Vec<Vec<u8>> = (0..n).map(|r| traffic.send_data(r)).collect();
    let mut recvbuf: Vec<Vec<u8>> = (0..n)
        .map(|_| vec![P2pTraffic::FILL; traffic.buf_len()])
        .collect();
    let mut probe = [P2pTraffic::FILL; 16];
    let launches = traffic.launches(
        &sendbuf
            .iter_mut()
            .map(|b| b.as_mut_ptr() as u64)
            .collect::<Vec<_>>(),
        &recvbuf
            .iter_mut()
            .map(|b| b.as_mut_ptr() as u64)
            .collect::<Vec<_>>(),
        probe.as_mut_ptr() as u64,
    );

    // SAFETY: the library was just built from the kernel source, with no initialisers.
    let lib = unsafe { libloading::Library::new(so) }.unwrap();
    let name = kernel_name(DataType::Uint8, KernelOp::LlP2p);
    // SAFETY: the symbol is the kernel, whose parameters are those of `LlP2pFn`.
    let kernel: LlP2pFn = unsafe { *lib.get::<LlP2pFn>(name.as_bytes()).unwrap() };
    // SAFETY: the symbol is the block setter of the primitives above, `void(unsigned)`.
    let set_block: unsafe extern "C" fn(u32) = unsafe {
        *lib.get::<unsafe extern "C" fn(u32)>(b"ccl_host_set_block")
            .unwrap()
    };
    let table_at = table.as_ptr() as usize;
    let err_at = &mut err as *mut u32 as usize;
    let off = ll_p2p_offset(n) as u64;
    let (done_tx, done_rx) = mpsc::channel();
    for (r, mine) in launches.into_iter().enumerate() {
        let done = done_tx.clone();
        std::thread::spawn(move || {
            for (x, base) in mine {
                std::thread::scope(|s| {
                    for b in 0..2 * LL_P2P_BLOCKS as u32 {
                        s.spawn(move || {
                            // SAFETY: every address in `x` and the table points into buffers
                            // the caller keeps alive until every rank reports done (or leaks
                            // on timeout); the areas' words start at zero.
                            unsafe {
                                set_block(b);
                                kernel(
                                    x,
                                    table_at as *const u64,
                                    r as u32,
                                    n as u32,
                                    off,
                                    base,
                                    err_at as *mut u32,
                                );
                            }
                        });
                    }
                });
            }
            let _ = done.send(r);
        });
    }
    let finished = (0..n).all(|_| {
        done_rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .is_ok()
    });
    if !finished {
        // Threads still spin on the areas, the buffers and the library's code: unwinding must
        // not free them under the threads (a crash instead of this message).
        std::mem::forget((sendbuf, recvbuf, areas, table, lib));
        assert!(
            finished,
            "n {n} seed {seed:#x}: a rank's launches did not finish (deadlock in the kernel's \
             protocol?)"
        );
        return;
    }
    traffic.check(&sendbuf, &recvbuf, &probe, err);
    // The buffers the kernels wrote through raw addresses live to here.
    drop((sendbuf, recvbuf, areas));
}

/// The point-to-point kernel's C++ run on the host by real threads: a thread per block (the
/// send blocks and the receive blocks side by side as on the GPU), each rank's launches one
/// after another as on its stream. Two ranks with up to 12 messages a round between them (past
/// the 8 slots, so sends wait for credits the peer's receive blocks return meanwhile), and four
/// ranks with up to 4 messages per pair (every rank's slots and credits per peer); some
/// receives in place; a size mismatch at the end names its sender.
#[test]
fn ll_p2p_kernel_runs_on_host_threads_exactly() {
    if !gxx_here("skipping: no g++ to compile the kernel source for the host") {
        return;
    }
    let (dir, so) = ll_p2p_host_library();
    run_ll_p2p_on_host(&so, 2, 300, 12, 0x9E37_79B9_7F4A_7C15);
    run_ll_p2p_on_host(&so, 4, 150, 4, 0xD1B5_4A32_D192_ED03);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One launch of the host-built kernel for `rank` of two with `x`, both blocks on threads of
/// their own; the sender of the returned channel's message is that launch ending.
fn launch(
    so: &Path,
    table: &'static [u64],
    rank: u32,
    x: LlP2p,
    err: &'static mut u32,
) -> mpsc::Receiver<()> {
    let so = so.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: the library was just built from the kernel source, with no initialisers.
        let lib = unsafe { libloading::Library::new(&so) }.unwrap();
        let name = kernel_name(DataType::Uint8, KernelOp::LlP2p);
        // SAFETY: the symbol is the kernel, whose parameters are those of `LlP2pFn`.
        let kernel: LlP2pFn = unsafe { *lib.get::<LlP2pFn>(name.as_bytes()).unwrap() };
        // SAFETY: the symbol is the block setter of the host primitives, `void(unsigned)`.
        let set_block: unsafe extern "C" fn(u32) = unsafe {
            *lib.get::<unsafe extern "C" fn(u32)>(b"ccl_host_set_block")
                .unwrap()
        };
        let err_at = err as *mut u32 as usize;
        let off = ll_p2p_offset(2) as u64;
        std::thread::scope(|s| {
            for b in 0..2 * LL_P2P_BLOCKS as u32 {
                s.spawn(move || {
                    // SAFETY: sets this thread's block index, a thread-local of the library.
                    unsafe { set_block(b) };
                    // SAFETY: the table, the areas and every buffer in `x` are leaked by the
                    // caller (they outlive any thread still spinning); the words start at zero.
                    unsafe { kernel(x, table.as_ptr(), rank, 2, off, 0, err_at as *mut u32) };
                });
            }
        });
        let _ = tx.send(());
        std::mem::forget(lib);
    });
    rx
}

/// A receive whose sender never sends, a ninth send to a receiver that never receives (past
/// the eight slots it waits for a credit), and a receive whose sender died after the packed
/// header landed, followed by a receive on the same slot (number 9): each spins on a peer
/// that is gone until the words of its rank's low-latency area that kernels spin on
/// ([`ll_spin_words_bytes`]) move a quarter of the u32 circle ahead, as an abort moves them;
/// then the launch ends (the first receive must not move its slot's line back).
#[test]
fn spins_on_a_dead_peer_end_once_the_spin_words_move_on() {
    if !gxx_here("skipping: no g++ to compile the kernel source for the host") {
        return;
    }
    let (dir, so) = ll_p2p_host_library();
    for case in ["receive", "send", "header only"] {
        // Leaked: a thread that never ends would still read them.
        let areas: &'static mut [Vec<u64>] = Vec::leak(
            (0..2)
                .map(|_| vec![0u64; ll_data_offset(2) / 8 + 8])
                .collect(),
        );
        let table: &'static [u64] = Vec::leak(areas.iter().map(|a| a.as_ptr() as u64).collect());
        let buf: &'static mut [u8] = Vec::leak(vec![7u8; 64 * LL_P2P_SLOTS]);
        let mut x = LlP2p::default();
        let rank = if case != "send" {
            (x.nrecv, x.rpeer[0], x.rseq[0], x.rbytes[0]) = (1, 0, 1, 16);
            x.dst[0] = buf.as_mut_ptr() as u64;
            if case == "header only" {
                (x.nrecv, x.rpeer[1], x.rseq[1], x.rbytes[1]) = (2, 0, 1 + LL_P2P_SLOTS as u32, 16);
                x.dst[1] = buf.as_mut_ptr() as u64 + 64;
                // Sender 0's packed header of send 1 in slot 1 of rank 1's area: 16 bytes.
                let at = ll_p2p_pack_offset(2) + LL_P2P_PACK_SLOT;
                let header = [16u32, 1, 0, 1];
                // SAFETY: the area holds ll_data_offset(2) bytes, past the packed slots; no
                // kernel runs on it yet.
                unsafe {
                    let w = (areas[1].as_mut_ptr() as *mut u8).add(at) as *mut u32;
                    std::ptr::copy_nonoverlapping(header.as_ptr(), w, 4);
                }
            }
            1
        } else {
            for i in 0..=LL_P2P_SLOTS {
                (x.speer[i], x.sseq[i], x.sbytes[i]) = (1, i as u32 + 1, 16);
                x.src[i] = buf.as_ptr() as u64 + 64 * i as u64;
            }
            x.nsend = LL_P2P_SLOTS as u32 + 1;
            0
        };
        let done = launch(&so, table, rank, x, Box::leak(Box::new(0u32)));
        assert!(
            done.recv_timeout(Duration::from_millis(300)).is_err(),
            "{case}: the launch ended with its peer gone"
        );
        let words = table[rank as usize] as *const AtomicU32;
        for i in 0..ll_spin_words_bytes(2) / 4 {
            // SAFETY: the area holds ll_data_offset(2) > ll_spin_words_bytes(2) bytes, 8-aligned.
            unsafe { &*words.add(i) }.fetch_add(1 << 30, Ordering::SeqCst);
        }
        assert!(
            done.recv_timeout(Duration::from_secs(10)).is_ok(),
            "{case}: still spinning after the words moved on"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends at the slot's size and around the blocks' runs land whole, each slot's header line
/// holding the send's byte count and number (read back from the receiver's area); a receive
/// smaller or larger than its send takes the bytes both have and names the sender.
#[test]
fn sends_up_to_a_slot_land_whole_and_mismatches_name_the_sender() {
    use ccl_cuda::cuda::source::LL_P2P_BYTES;
    if !gxx_here("skipping: no g++ to compile the kernel source for the host") {
        return;
    }
    let (dir, so) = ll_p2p_host_library();
    let pk = LL_P2P_BYTES;
    let run = 8 * LL_P2P_BLOCKS;
    // (sent, expected): a whole slot, one line short of it, one byte past a run per block,
    // into a smaller receive (a tail of 13 bytes: not whole lines) and into a larger one.
    let pairs = [
        (pk, pk),
        (pk - 8, pk - 8),
        (run + 1, run + 1),
        (pk, 1000),
        (100, 13),
        (24, pk),
    ];
    let span = pairs.len() * 2 * pk;
    let areas: &'static mut [Vec<u64>] = Vec::leak(
        (0..2)
            .map(|_| vec![0u64; ll_data_offset(2) / 8 + 8])
            .collect(),
    );
    let table: &'static [u64] = Vec::leak(areas.iter().map(|a| a.as_ptr() as u64).collect());
    let src: &'static [u8] = Vec::leak((0..span).map(|i| (i * 13 + 5) as u8).collect());
    let dst: &'static mut [u8] = Vec::leak(vec![0xEEu8; span]);
    let (mut x, mut y) = (LlP2p::default(), LlP2p::default());
    for (i, &(s, r)) in pairs.iter().enumerate() {
        let at = (i * 2 * pk) as u64;
        (x.src[i], x.sbytes[i], x.speer[i], x.sseq[i]) =
            (src.as_ptr() as u64 + at, s as u64, 1, i as u32 + 1);
        (y.dst[i], y.rbytes[i], y.rpeer[i], y.rseq[i]) =
            (dst.as_mut_ptr() as u64 + at, r as u64, 0, i as u32 + 1);
    }
    (x.nsend, y.nrecv) = (pairs.len() as u32, pairs.len() as u32);
    let err: &'static mut u32 = Box::leak(Box::new(0u32));
    let err_at = err as *mut u32 as usize;
    let sender = launch(&so, table, 0, x, Box::leak(Box::new(0u32)));
    let receiver = launch(&so, table, 1, y, err);
    for (who, done) in [("sender", sender), ("receiver", receiver)] {
        assert!(
            done.recv_timeout(Duration::from_secs(20)).is_ok(),
            "the {who} hung"
        );
    }
    for (i, &(s, r)) in pairs.iter().enumerate() {
        let at = i * 2 * pk;
        let n = s.min(r);
        assert_eq!(
            &dst[at..at + n],
            &src[at..at + n],
            "pair {i}: the bytes that fit"
        );
        assert!(
            dst[at + n..at + 2 * pk].iter().all(|&b| b == 0xEE),
            "pair {i}: nothing past them"
        );
    }
    // SAFETY: the leaked word above; both launches ended, so nothing writes it any more.
    let named = unsafe { *(err_at as *const u32) };
    assert_eq!(named, 1, "a mismatch names rank 0 (+1)");
    // Each send's header line, from rank 1's area: sender 0's slot `seq` (numbers 1.. fit in
    // the slots without wrapping) holds {bytes, seq, 0, seq}; the slot's line word the number.
    let words = |at: usize| {
        let a = &areas[1];
        // SAFETY: reads u32s of a leaked area that no thread writes any more.
        unsafe { std::slice::from_raw_parts((a.as_ptr() as *const u8).add(at) as *const u32, 4) }
    };
    for (i, &(s, _)) in pairs.iter().enumerate() {
        let seq = i as u32 + 1;
        let header = words(ll_p2p_pack_offset(2) + seq as usize * LL_P2P_PACK_SLOT);
        let line = words(ll_p2p_offset(2) + 64 * seq as usize);
        assert_eq!(header, &[s as u32, seq, 0, seq][..], "pair {i}: the header");
        assert_eq!(line[0], seq, "pair {i}: the slot's line");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
