//! The kernels captured into CUDA graphs: a small all-reduce and a small group of copies,
//! between handshakes on the words of [`GraphWords`].

use std::ffi::c_void;

use crate::cuda::error::{CudaError, Result};
use crate::cuda::source::{
    KernelOp, GRAPH_AR_MAX_ELEMS, GRAPH_AR_THREADS, GRAPH_COPIES_MAX, REDUCE_N_MAX,
};
use crate::cuda::stream::Stream;
use crate::cuda::sys::*;
use crate::dtype::{DataType, ReduceKind};

use super::load::Kernels;
use super::reduce::SourceArray;

impl Kernels {
    /// A small all-reduce of a CUDA graph in one kernel ([`KernelOp::GraphAllReduce`]):
    /// `dst = srcs[0] (op) srcs[1] ...` over `n` elements, between a handshake on
    /// `words.inputs` and one on `words.done` (per peer: this rank's word there, the peer's
    /// word here). `inplace`: `dst` is one of the sources (at most [`GRAPH_AR_MAX_ELEMS`]).
    ///
    /// # Safety
    /// Every source and `dst` hold `n` elements of `dt` and stay valid until the stream has
    /// passed the launch; the words are device words (ours, or peers' mapped here) that only
    /// this protocol writes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn graph_all_reduce(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        srcs: &[CUdeviceptr],
        n: usize,
        words: &GraphWords,
        inplace: bool,
    ) -> Result<()> {
        let k = srcs.len();
        let np = words.inputs.len();
        if !(2..=REDUCE_N_MAX).contains(&k)
            || np >= REDUCE_N_MAX
            || words.done.len() != np
            || (inplace && n > GRAPH_AR_MAX_ELEMS)
        {
            return Err(CudaError::InvalidArgument(format!(
                "graph_all_reduce: {k} sources, {np} peers, {n} elements (in place {inplace})"
            )));
        }
        self.check_sources(stream, dt, dst, srcs)?;
        let func = self.function(dt, KernelOp::GraphAllReduce(op.into(), k as u8))?;
        let mut arr = SourceArray::new(srcs);
        let mut w = words.by_value();
        let (mut dst, mut n64, mut raw) = (dst, n as u64, 0u64);
        let (mut np32, mut inplace32) = (np as u32, u32::from(inplace));
        let mut params: [*mut c_void; 7] = [
            (&mut dst as *mut u64).cast(),
            (&mut arr as *mut SourceArray).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut raw as *mut u64).cast(),
            (&mut w as *mut WordArrays).cast(),
            (&mut np32 as *mut u32).cast(),
            (&mut inplace32 as *mut u32).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (dst, the pointer array and the
        // word arrays by value, n, raw, np, inplace) and live until the call returns; memory
        // and words are the caller's contract.
        unsafe { self.launch_raw(func, stream, 1, GRAPH_AR_THREADS, &mut params) }
    }

    /// A small group of copies of a CUDA graph in one kernel ([`KernelOp::GraphCopies`]):
    /// `first` (dst, src, bytes) between the handshakes of [`Self::graph_all_reduce`]; with
    /// `words.halfway` (non-empty), a handshake on those words, then `second`.
    ///
    /// # Safety
    /// Each copy's ranges are device-accessible, disjoint, and valid until the stream has
    /// passed the launch; the words as [`Self::graph_all_reduce`]'s.
    pub unsafe fn graph_copies(
        &self,
        stream: &Stream,
        first: &[(CUdeviceptr, CUdeviceptr, usize)],
        second: &[(CUdeviceptr, CUdeviceptr, usize)],
        words: &GraphWords,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.graph_copies_form(stream, first, second, words, CopiesForm::OneBlock) }
    }

    /// [`Self::graph_copies`] without a halfway handshake, spread over as many blocks as the
    /// copies fill (one per 32 KiB, up to `max_blocks`): block 0 does the "inputs"
    /// handshake and lets the others go through `go`; the last block to finish (counted in
    /// `arrived`) does the "done" handshake and sets both words back to 0.
    ///
    /// # Safety
    /// As [`Self::graph_copies`]; `go` and `arrived` are device-accessible words that are 0
    /// and that nothing else touches while a launch of this group may run.
    pub unsafe fn graph_copies_spread(
        &self,
        stream: &Stream,
        copies: &[(CUdeviceptr, CUdeviceptr, usize)],
        words: &GraphWords,
        go: CUdeviceptr,
        arrived: CUdeviceptr,
        max_blocks: u32,
    ) -> Result<()> {
        if !words.halfway.is_empty() {
            return Err(CudaError::InvalidArgument(
                "graph_copies_spread: a halfway handshake".into(),
            ));
        }
        let form = CopiesForm::Spread {
            go,
            arrived,
            max_blocks,
        };
        // SAFETY: the caller's contract.
        unsafe { self.graph_copies_form(stream, copies, &[], words, form) }
    }

    /// `copies` (dst, src, bytes) as one kernel of as many blocks as they fill (one per 32 KiB,
    /// up to `max_blocks`), with no handshake: for a captured group's parts, between its
    /// handshake kernels, where one node replaces a copy-engine node per copy.
    ///
    /// # Safety
    /// As [`Self::graph_copies`]'s copies.
    pub unsafe fn graph_copies_wide(
        &self,
        stream: &Stream,
        copies: &[(CUdeviceptr, CUdeviceptr, usize)],
        max_blocks: u32,
    ) -> Result<()> {
        let (w, form) = (GraphWords::default(), CopiesForm::Wide { max_blocks });
        // SAFETY: the caller's contract; no words are touched.
        unsafe { self.graph_copies_form(stream, copies, &[], &w, form) }
    }

    /// [`Self::graph_copies`] in `form`.
    unsafe fn graph_copies_form(
        &self,
        stream: &Stream,
        first: &[(CUdeviceptr, CUdeviceptr, usize)],
        second: &[(CUdeviceptr, CUdeviceptr, usize)],
        words: &GraphWords,
        form: CopiesForm,
    ) -> Result<()> {
        let np = words.inputs.len();
        let halfway = !words.halfway.is_empty();
        if first.len() + second.len() > GRAPH_COPIES_MAX
            || np > REDUCE_N_MAX
            || words.done.len() != np
            || (halfway && words.halfway.len() != np)
            || (!halfway && !second.is_empty())
        {
            return Err(CudaError::InvalidArgument(format!(
                "graph_copies: {} + {} copies, {np} peers, {} halfway words",
                first.len(),
                second.len(),
                words.halfway.len()
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::GraphCopies)?;
        #[repr(C)]
        struct Copies([[u64; GRAPH_COPIES_MAX]; 3]);
        let mut c = Copies([[0; GRAPH_COPIES_MAX]; 3]);
        for (m, &(dst, src, bytes)) in first.iter().chain(second).enumerate() {
            c.0[0][m] = dst;
            c.0[1][m] = src;
            c.0[2][m] = bytes as u64;
        }
        let mut w = words.by_value();
        // The halfway words in the first two arrays of a second `ccl_gwords`.
        let mut h = GraphWords {
            inputs: words.halfway.clone(),
            ..GraphWords::default()
        }
        .by_value();
        let (mut ncopies, mut nfirst) = ((first.len() + second.len()) as u32, first.len() as u32);
        let (mut np32, mut half32) = (np as u32, u32::from(halfway));
        let (mut wide32, mut go, mut arrived, blocks) = match form {
            CopiesForm::OneBlock => (0u32, 0, 0, 1),
            CopiesForm::Wide { max_blocks } => (1, 0, 0, wide_blocks(first, max_blocks)),
            CopiesForm::Spread {
                go,
                arrived,
                max_blocks,
            } => (2, go, arrived, wide_blocks(first, max_blocks)),
        };
        let mut params: [*mut c_void; 10] = [
            (&mut c as *mut Copies).cast(),
            (&mut ncopies as *mut u32).cast(),
            (&mut nfirst as *mut u32).cast(),
            (&mut w as *mut WordArrays).cast(),
            (&mut h as *mut WordArrays).cast(),
            (&mut np32 as *mut u32).cast(),
            (&mut half32 as *mut u32).cast(),
            (&mut wide32 as *mut u32).cast(),
            (&mut go as *mut CUdeviceptr).cast(),
            (&mut arrived as *mut CUdeviceptr).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (the copies and two word arrays by
        // value, the counts, the halfway flag, the form and its two words) and live until the
        // call returns; memory and words are the caller's contract. The one-block form waits
        // on its own; the others have blocks that wait only for block 0 (spread) or nothing.
        unsafe { self.launch_raw(func, stream, blocks, GRAPH_AR_THREADS, &mut params) }
    }
}

/// How [`Kernels::graph_copies_form`] runs its copies.
#[derive(Debug, Clone, Copy)]
enum CopiesForm {
    /// One block, with the handshakes.
    OneBlock,
    /// Many blocks, no handshake.
    Wide { max_blocks: u32 },
    /// Many blocks, with the handshakes, through these two words.
    Spread {
        go: CUdeviceptr,
        arrived: CUdeviceptr,
        max_blocks: u32,
    },
}

/// Blocks for `copies`: one per 32 KiB, at least one, at most `max_blocks`.
fn wide_blocks(copies: &[(CUdeviceptr, CUdeviceptr, usize)], max_blocks: u32) -> u32 {
    let bytes: usize = copies.iter().map(|c| c.2).sum();
    u32::try_from(bytes.div_ceil(32 << 10))
        .unwrap_or(u32::MAX)
        .clamp(1, max_blocks.max(1))
}

impl Kernels {
    /// One handshake as a one-thread kernel ([`KernelOp::GraphHandshake`]): per peer, set
    /// this rank's word there (`words[j].0`) to 1, then wait until the peer's word here
    /// (`words[j].1`) is 1 and reset it.
    ///
    /// # Safety
    /// The words are device words (ours, or peers' mapped here) that only this protocol
    /// writes, valid until the stream has passed the launch.
    pub unsafe fn graph_handshake(
        &self,
        stream: &Stream,
        words: &[(CUdeviceptr, CUdeviceptr)],
    ) -> Result<()> {
        let np = words.len();
        if np > REDUCE_N_MAX {
            return Err(CudaError::InvalidArgument(format!(
                "graph_handshake: {np} peers"
            )));
        }
        let func = self.function(DataType::Uint8, KernelOp::GraphHandshake)?;
        let mut w = GraphWords {
            inputs: words.to_vec(),
            ..GraphWords::default()
        }
        .by_value();
        let mut np32 = np as u32;
        let mut params: [*mut c_void; 2] = [
            (&mut w as *mut WordArrays).cast(),
            (&mut np32 as *mut u32).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (the word arrays by value, the
        // number of peers) and live until the call returns; the words are the caller's
        // contract.
        unsafe { self.launch_raw(func, stream, 1, 1, &mut params) }
    }
}

/// The words of a [`Kernels::graph_all_reduce`]: per peer, (this rank's word at the peer, the
/// peer's word here), for the handshake before the reduction and the one after.
#[derive(Debug, Clone, Default)]
pub struct GraphWords {
    pub inputs: Vec<(CUdeviceptr, CUdeviceptr)>,
    pub done: Vec<(CUdeviceptr, CUdeviceptr)>,
    /// [`Kernels::graph_copies`] only: the middle handshake's words (empty: none).
    pub halfway: Vec<(CUdeviceptr, CUdeviceptr)>,
}

/// The kernels' `ccl_gwords` by value: remote and local "inputs" words, remote and local
/// "done" words, [`REDUCE_N_MAX`] each.
#[repr(C)]
struct WordArrays([[u64; REDUCE_N_MAX]; 4]);

impl GraphWords {
    fn by_value(&self) -> WordArrays {
        let mut w = WordArrays([[0; REDUCE_N_MAX]; 4]);
        for (j, &(remote, local)) in self.inputs.iter().take(REDUCE_N_MAX).enumerate() {
            w.0[0][j] = remote;
            w.0[1][j] = local;
        }
        for (j, &(remote, local)) in self.done.iter().take(REDUCE_N_MAX).enumerate() {
            w.0[2][j] = remote;
            w.0[3][j] = local;
        }
        w
    }
}
