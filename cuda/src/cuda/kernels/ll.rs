//! The low-latency kernels over the ranks' low-latency areas: the all-reduce (and
//! reduce-scatter), the exchange ([`LlTransfers`]) and the point-to-point kernel ([`LlP2p`]).

use std::ffi::c_void;

use crate::cuda::error::{CudaError, Result};
use crate::cuda::source::{
    ll_data_offset, ll_p2p_offset, ll_pack_offset, KernelOp, LL_DEFAULT_BLOCKS, LL_EVERY_RANK,
    LL_EXCHANGE_MAX_RANKS, LL_MAX_BLOCKS, LL_P2P_BLOCKS, LL_P2P_BYTES, LL_P2P_MAX_OPS, LL_PACK_MAX,
    LL_THREADS,
};
use crate::cuda::stream::Stream;
use crate::cuda::sys::*;
use crate::dtype::{DataType, ReduceKind};

use super::load::Kernels;

impl Kernels {
    /// The low-latency all-reduce of `n` elements (see [`crate::cuda::source::ll_area_bytes`] for
    /// the areas' layout): blocks that each push their part of `src` into every peer's area,
    /// wait for the peers' same part and write the reduction in rank order to `dst`. With
    /// `scatter`, a reduce-scatter: `src` holds `nranks * n` elements, part `q` goes to rank
    /// `q`, and `dst` gets the reduction of this rank's part. With `root`, a reduce: only rank
    /// `root` writes `dst` (the others' `dst` is not touched). Inputs of at most `launch.pack_max`
    /// bytes go in packed lines (see [`crate::cuda::source::LL_PACK_MAX`]).
    ///
    /// # Safety
    /// `src`/`dst` hold `n` elements (`dst` equal to or disjoint from `src`); `areas` is a
    /// device array of `nranks` area addresses valid in this context, each area laid out for
    /// `nranks` and `ll_max`, with `n * size <= ll_max`; `seqs` is this rank's operation
    /// numbers in its own area ([`crate::cuda::source::ll_seq_offset`]); every rank launches
    /// the same low-latency operations in the same order, each after its previous one ended.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn ll_all_reduce(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        n: usize,
        areas: CUdeviceptr,
        nranks: u32,
        rank: u32,
        seqs: CUdeviceptr,
        ll_max: usize,
        scatter: bool,
        root: Option<u32>,
        launch: &LlLaunch,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if n.saturating_mul(dt.size()) > ll_max || dst % dt.size() as u64 != 0 {
            return Err(CudaError::InvalidArgument(format!(
                "low-latency all-reduce of {n} elements at {dst:#x} does not fit {ll_max} bytes"
            )));
        }
        let func = self.function(dt, KernelOp::LlAllReduce(op.into()))?;
        let (mut dst, mut src, mut n64, mut areas) = (dst, src, n as u64, areas);
        let (mut nranks, mut rank, mut seqs) = (nranks, rank, seqs);
        let mut llmax = ll_max as u64;
        let mut data_off = ll_data_offset(nranks as usize) as u64;
        // Reduce-scatter: peer q's part of the input is at q * n elements, ours at rank * n.
        let part = (n * dt.size()) as u64;
        let mut push_stride = if scatter { part } else { 0 };
        let mut own_off = if scatter { rank as u64 * part } else { 0 };
        let mut root = root.unwrap_or(LL_EVERY_RANK);
        let (mut pk_off, mut pk_max, mut packed) = packing(nranks, part, launch.pack_max);
        let mut opts = launch.opts();
        let mut params: [*mut c_void; 16] = [
            (&mut dst as *mut u64).cast(),
            (&mut src as *mut u64).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut areas as *mut u64).cast(),
            (&mut nranks as *mut u32).cast(),
            (&mut rank as *mut u32).cast(),
            (&mut seqs as *mut u64).cast(),
            (&mut llmax as *mut u64).cast(),
            (&mut data_off as *mut u64).cast(),
            (&mut push_stride as *mut u64).cast(),
            (&mut own_off as *mut u64).cast(),
            (&mut root as *mut u32).cast(),
            (&mut pk_off as *mut u64).cast(),
            (&mut pk_max as *mut u64).cast(),
            (&mut packed as *mut u32).cast(),
            (&mut opts as *mut u32).cast(),
        ];
        let blocks = launch.blocks(part);
        // SAFETY: the parameters match the kernel's signature in order and size; the memory
        // is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, launch.threads, &mut params) }
    }
}

/// How a communicator launches its low-latency kernels: the same on every rank where it
/// decides the protocol (the packed limit, the grid), this rank's own choice otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlLaunch {
    /// Operations moving at most this many bytes per peer go in packed lines (agreed).
    pub pack_max: usize,
    /// Payload bytes per peer a block takes: an operation moving `b` bytes per peer runs
    /// `ceil(b / block_bytes)` blocks, at least one and at most [`LL_MAX_BLOCKS`] (0: always
    /// [`LL_DEFAULT_BLOCKS`]). Agreed: the grid decides which block moves which bytes.
    pub block_bytes: usize,
    /// Threads per block (a multiple of 32, 32 - 1024).
    pub threads: u32,
    /// Acknowledge a peer's data without a system fence first: every value read was consumed
    /// before the block's barrier, so the reads are complete (see the kernels' `ccl_ll_ack`).
    pub ack_unfenced: bool,
}

impl Default for LlLaunch {
    fn default() -> Self {
        LlLaunch {
            pack_max: 0,
            block_bytes: 0,
            threads: LL_THREADS,
            ack_unfenced: false,
        }
    }
}

impl LlLaunch {
    /// The grid of an operation moving `peer_bytes` to or from each peer (a value every rank
    /// computes alike: what an operation moves per peer is the same on every rank).
    pub fn blocks(&self, peer_bytes: u64) -> u32 {
        if self.block_bytes == 0 {
            return LL_DEFAULT_BLOCKS as u32;
        }
        peer_bytes
            .div_ceil(self.block_bytes as u64)
            .clamp(1, LL_MAX_BLOCKS as u64) as u32
    }

    /// The block indices the communicator's operations use: its largest grid.
    pub fn indices(&self) -> u32 {
        if self.block_bytes == 0 {
            LL_DEFAULT_BLOCKS as u32
        } else {
            LL_MAX_BLOCKS as u32
        }
    }

    /// The kernels' `opts` word: the acknowledgement without a fence (bit 0), the block
    /// indices in use (from bit 8).
    fn opts(&self) -> u32 {
        self.ack_unfenced as u32 | self.indices() << 8
    }
}

/// The packed buffers' offset and size, and whether an operation moving `peer_bytes` to or
/// from a peer goes in packed lines: at most `pack_max` bytes (every rank's agreed limit, so
/// every rank decides alike from what it moves to its peers).
fn packing(nranks: u32, peer_bytes: u64, pack_max: usize) -> (u64, u64, u32) {
    let off = ll_pack_offset(nranks as usize) as u64;
    let packed = pack_max > 0 && peer_bytes <= pack_max.min(LL_PACK_MAX) as u64;
    (off, LL_PACK_MAX as u64, packed as u32)
}

/// The transfer table of a low-latency exchange (the kernel's `ccl_xfer`, passed by value):
/// per rank `q`, what goes to `q` (`src`, `sbytes`) and where what comes from `q` lands
/// (`dst`, `rbytes`); entry `rank` is a local copy of `sbytes` bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LlTransfers {
    pub src: [u64; LL_EXCHANGE_MAX_RANKS],
    pub dst: [u64; LL_EXCHANGE_MAX_RANKS],
    pub sbytes: [u64; LL_EXCHANGE_MAX_RANKS],
    pub rbytes: [u64; LL_EXCHANGE_MAX_RANKS],
}

impl Kernels {
    /// Queues the low-latency exchange of `xfer` (see [`LlTransfers`]), in packed lines when
    /// no peer's part is over `launch.pack_max` bytes.
    ///
    /// # Safety
    /// Every range in `xfer` is device-accessible and valid until the stream has run the
    /// kernel, each `sbytes`/`rbytes` at most `ll_max`; `areas` and `seqs` as for
    /// [`Kernels::ll_all_reduce`]; every rank launches its side of the same exchange at the
    /// same place in its sequence of low-latency operations.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn ll_exchange(
        &self,
        stream: &Stream,
        xfer: &LlTransfers,
        areas: CUdeviceptr,
        nranks: u32,
        rank: u32,
        seqs: CUdeviceptr,
        ll_max: usize,
        launch: &LlLaunch,
    ) -> Result<()> {
        if nranks as usize > LL_EXCHANGE_MAX_RANKS
            || xfer
                .sbytes
                .iter()
                .chain(&xfer.rbytes)
                .any(|&b| b > ll_max as u64)
        {
            return Err(CudaError::InvalidArgument(format!(
                "low-latency exchange of {nranks} ranks does not fit (at most \
                 {LL_EXCHANGE_MAX_RANKS} ranks and {ll_max} bytes per peer)"
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::LlExchange)?;
        let mut x = *xfer;
        let mut areas = areas;
        let (mut nranks, mut rank, mut seqs) = (nranks, rank, seqs);
        let mut llmax = ll_max as u64;
        let mut data_off = ll_data_offset(nranks as usize) as u64;
        let peer_bytes = (0..nranks as usize)
            .filter(|&q| q != rank as usize)
            .map(|q| xfer.sbytes[q].max(xfer.rbytes[q]))
            .max()
            .unwrap_or(0);
        let (mut pk_off, mut pk_max, mut packed) = packing(nranks, peer_bytes, launch.pack_max);
        let mut opts = launch.opts();
        let mut params: [*mut c_void; 11] = [
            (&mut x as *mut LlTransfers).cast(),
            (&mut areas as *mut u64).cast(),
            (&mut nranks as *mut u32).cast(),
            (&mut rank as *mut u32).cast(),
            (&mut seqs as *mut u64).cast(),
            (&mut llmax as *mut u64).cast(),
            (&mut data_off as *mut u64).cast(),
            (&mut pk_off as *mut u64).cast(),
            (&mut pk_max as *mut u64).cast(),
            (&mut packed as *mut u32).cast(),
            (&mut opts as *mut u32).cast(),
        ];
        let blocks = launch.blocks(peer_bytes);
        // SAFETY: the parameters match the kernel's signature (`ccl_xfer` has this struct's
        // C layout); the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, launch.threads, &mut params) }
    }
}

/// One launch of the point-to-point kernel (its `ccl_p2p`, passed by value): `nsend` sends
/// (to `speer[i]`, that pair's sequence number `sseq[i]`, counted from 1, of `sbytes[i]` from
/// `src[i]`) and `nrecv` receives (from `rpeer[j]`, sequence `rseq[j]`, at most `rbytes[j]`
/// into `dst[j]`, after the first `rafter[j]` sends of this launch when non-zero).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlP2p {
    pub src: [u64; LL_P2P_MAX_OPS],
    pub sbytes: [u64; LL_P2P_MAX_OPS],
    pub dst: [u64; LL_P2P_MAX_OPS],
    pub rbytes: [u64; LL_P2P_MAX_OPS],
    pub speer: [u32; LL_P2P_MAX_OPS],
    pub sseq: [u32; LL_P2P_MAX_OPS],
    pub rpeer: [u32; LL_P2P_MAX_OPS],
    pub rseq: [u32; LL_P2P_MAX_OPS],
    pub rafter: [u32; LL_P2P_MAX_OPS],
    pub nsend: u32,
    pub nrecv: u32,
}

impl Default for LlP2p {
    fn default() -> Self {
        LlP2p {
            src: [0; LL_P2P_MAX_OPS],
            sbytes: [0; LL_P2P_MAX_OPS],
            dst: [0; LL_P2P_MAX_OPS],
            rbytes: [0; LL_P2P_MAX_OPS],
            speer: [0; LL_P2P_MAX_OPS],
            sseq: [0; LL_P2P_MAX_OPS],
            rpeer: [0; LL_P2P_MAX_OPS],
            rseq: [0; LL_P2P_MAX_OPS],
            rafter: [0; LL_P2P_MAX_OPS],
            nsend: 0,
            nrecv: 0,
        }
    }
}

impl Kernels {
    /// Queues one launch of the point-to-point kernel (see [`LlP2p`]); `ticket_base` is the
    /// number of sends this rank's earlier launches made (the ticket word counts on from it);
    /// a receive whose size differs from its send's writes 1 + the sender's rank to the word
    /// at `err` if it holds 0.
    ///
    /// # Safety
    /// Every range in `x` is device-accessible and valid until the stream has run the kernel;
    /// `areas` is a device array of `nranks` low-latency area addresses as this device maps
    /// them, each laid out by [`crate::cuda::source::ll_data_offset`] with its point-to-point words
    /// and packed slots (everything before that offset) zeroed before first use; each pair's sequence numbers and this rank's ticket base count
    /// on from the previous launch on the same stream order; the peers launch the matching
    /// receives and sends, or the kernel never ends; `err` is a 4-byte-aligned word the device
    /// can write, valid until the kernel has run.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn ll_p2p(
        &self,
        stream: &Stream,
        x: &LlP2p,
        areas: CUdeviceptr,
        rank: u32,
        nranks: u32,
        ticket_base: u32,
        err: CUdeviceptr,
    ) -> Result<()> {
        let n = |k: u32| k as usize;
        let bad_peer = |p: &u32| *p >= nranks || *p == rank;
        if n(x.nsend) > LL_P2P_MAX_OPS
            || n(x.nrecv) > LL_P2P_MAX_OPS
            || rank >= nranks
            || x.speer[..n(x.nsend)].iter().any(bad_peer)
            || x.rpeer[..n(x.nrecv)].iter().any(bad_peer)
            || x.sbytes[..n(x.nsend)]
                .iter()
                .chain(&x.rbytes[..n(x.nrecv)])
                .any(|&b| b > LL_P2P_BYTES as u64)
            || x.rafter[..n(x.nrecv)].iter().any(|&a| a > x.nsend)
        {
            return Err(CudaError::InvalidArgument(format!(
                "point-to-point kernel launch out of bounds ({} sends, {} receives of at most \
                 {LL_P2P_MAX_OPS}, {LL_P2P_BYTES} bytes each, to other ranks of {nranks})",
                x.nsend, x.nrecv
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::LlP2p)?;
        let mut x = *x;
        let (mut areas, mut rank, mut nranks, mut base) = (areas, rank, nranks, ticket_base);
        let mut off = ll_p2p_offset(nranks as usize) as u64;
        let mut err = err;
        let mut params: [*mut c_void; 7] = [
            (&mut x as *mut LlP2p).cast(),
            (&mut areas as *mut u64).cast(),
            (&mut rank as *mut u32).cast(),
            (&mut nranks as *mut u32).cast(),
            (&mut off as *mut u64).cast(),
            (&mut base as *mut u32).cast(),
            (&mut err as *mut CUdeviceptr).cast(),
        ];
        // The send blocks, then as many receive blocks, side by side (see the kernel's source).
        let grid = 2 * LL_P2P_BLOCKS as u32;
        // SAFETY: the parameters match the kernel's signature (`ccl_p2p` has this struct's C
        // layout); the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, grid, 256, &mut params) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block per `block_bytes` per peer, at least one and at most the protocol's indices;
    /// with 0 always the default grid.
    #[test]
    fn a_grid_takes_a_block_per_block_bytes() {
        let l = LlLaunch {
            block_bytes: 4096,
            ..LlLaunch::default()
        };
        let grids: Vec<u32> = [0, 8, 4096, 4097, 65536, 1 << 30]
            .iter()
            .map(|&b| l.blocks(b))
            .collect();
        assert_eq!(grids, [1, 1, 1, 2, 16, LL_MAX_BLOCKS as u32]);
        // Sized grids use every index; the default grid only its own.
        assert_eq!(l.opts(), (LL_MAX_BLOCKS as u32) << 8);
        let unfenced = LlLaunch {
            ack_unfenced: true,
            ..LlLaunch::default()
        };
        assert_eq!(unfenced.opts(), 1 | (LL_DEFAULT_BLOCKS as u32) << 8);
        assert_eq!(LlLaunch::default().blocks(8), LL_DEFAULT_BLOCKS as u32);
        assert_eq!(
            LlLaunch::default().blocks(1 << 30),
            LL_DEFAULT_BLOCKS as u32
        );
    }

    /// Packed when every peer's part fits the agreed limit (and the packed buffers); never with
    /// the limit at 0; the buffers' place and size do not depend on the operation.
    #[test]
    fn an_operation_is_packed_up_to_the_agreed_limit() {
        let off = ll_pack_offset(4) as u64;
        assert_eq!(packing(4, 16384, 16384), (off, LL_PACK_MAX as u64, 1));
        assert_eq!(packing(4, 16385, 16384), (off, LL_PACK_MAX as u64, 0));
        assert_eq!(packing(4, 8, 0).2, 0);
        assert_eq!(packing(4, LL_PACK_MAX as u64, usize::MAX).2, 1);
        assert_eq!(packing(4, LL_PACK_MAX as u64 + 1, usize::MAX).2, 0);
    }
}
