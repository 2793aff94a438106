//! Ring algorithms over the ring order of [`Ctx`]: the rank at ring position `p` sends to the
//! one at `p+1` and receives from the one at `p-1` (mod n); with the identity order that is
//! rank `r` to `r+1`. AllReduce, AllGather and ReduceScatter move one chunk per step; Broadcast
//! and Reduce are pipelined chains built on the tree machinery (a chain is a tree in which
//! every node has one child) that walk the ring order from the root.
//!
//! The order only decides who talks to whom and which block travels at which step: AllReduce
//! chunks are indexed by ring position (any bijection of chunks works), AllGather and
//! ReduceScatter blocks keep their rank-indexed places.

use crate::plan::{copy, op_recv, op_reduce, op_send, recv, scratch, send, Table};
use crate::tree::{self, Shape};
use crate::{split, Ctx, Schedule};

/// Reduce-scatter over `n` chunks, then all-gather: `2(n-1)` steps. Chunk `c` is the one
/// indexed by ring position `c`. The partial sum of chunk c lives in `Recv[c]` (no scratch):
/// it is written by a receive in one step and sent in the next, and chunk `pos` (read from
/// `Send` in step 0) is the only one never written before the all-gather overwrites it, so
/// in-place calls keep every input until it has been read.
pub(crate) fn all_reduce(ctx: &Ctx) -> Schedule {
    let n = ctx.n;
    let (next, prev) = (ctx.ring_fwd(1), ctx.ring_back(1));
    let chunk = |c: usize| split(ctx.count, n, c);
    let mut t = Table::new();
    for s in 0..n - 1 {
        let (so, sl) = chunk(ctx.pback(s));
        let src = if s == 0 { send(so, sl) } else { recv(so, sl) };
        t.push(s, op_send(next, src));
        let (ro, rl) = chunk(ctx.pback(s + 1));
        t.push(s, op_reduce(prev, send(ro, rl), recv(ro, rl)));
    }
    for s in 0..n - 1 {
        // After reduce-scatter, position p owns the full sum of chunk p+1.
        let (so, sl) = chunk((ctx.pos + 1 + n - s) % n);
        t.push(n - 1 + s, op_send(next, recv(so, sl)));
        let (ro, rl) = chunk(ctx.pback(s));
        t.push(n - 1 + s, op_recv(prev, recv(ro, rl)));
    }
    t.finish(0)
}

/// `n-1` steps; step s forwards the block of the rank s positions back and receives the block
/// of the rank s+1 positions back.
pub(crate) fn all_gather(ctx: &Ctx) -> Schedule {
    let (n, c) = (ctx.n, ctx.count);
    let (next, prev) = (ctx.ring_fwd(1), ctx.ring_back(1));
    let mut t = Table::new();
    // In place this copies onto itself and is skipped; the step-0 send reads `Send` directly so
    // it does not depend on the copy.
    t.push(0, copy(send(0, c), recv(ctx.rank * c, c)));
    for s in 0..n - 1 {
        let src = if s == 0 {
            send(0, c)
        } else {
            recv(ctx.ring_back(s) * c, c)
        };
        t.push(s, op_send(next, src));
        t.push(s, op_recv(prev, recv(ctx.ring_back(s + 1) * c, c)));
    }
    t.finish(0)
}

/// `n-1` steps; step s sends the partial sum of the block of the rank s+1 positions back and
/// folds its own input into the incoming partial of the block s+2 positions back, so this
/// rank's own block arrives last and lands in `Recv`. Partials alternate between two scratch
/// slots: `Recv` cannot hold one because in place it is the caller's own block, which is still
/// needed as the last `local`.
pub(crate) fn reduce_scatter(ctx: &Ctx) -> Schedule {
    let (n, c) = (ctx.n, ctx.count);
    let (next, prev) = (ctx.ring_fwd(1), ctx.ring_back(1));
    let slot = |s: usize| scratch((s % 2) * c, c);
    let mut t = Table::new();
    for s in 0..n - 1 {
        let src = if s == 0 {
            send(ctx.ring_back(1) * c, c)
        } else {
            slot(s - 1)
        };
        t.push(s, op_send(next, src));
        let block = ctx.ring_back(s + 2);
        let dst = if s == n - 2 { recv(0, c) } else { slot(s) };
        t.push(s, op_reduce(prev, send(block * c, c), dst));
    }
    t.finish(n.saturating_sub(2).min(2) * c)
}

/// Pipelined chain from `root` along the ring order: root -> next -> ... -> the rank before
/// root.
pub(crate) fn broadcast(ctx: &Ctx, root: usize) -> Schedule {
    let rp = ctx.pos_of(root);
    let shape = Shape::chain(ctx.n, |k| ctx.at(rp + k));
    tree::broadcast_on(ctx, &shape)
}

/// Pipelined chain along the ring order ending at `root`: the rank after root -> ... -> root.
pub(crate) fn reduce(ctx: &Ctx, root: usize) -> Schedule {
    let (n, rp) = (ctx.n, ctx.pos_of(root));
    let shape = Shape::chain(n, |k| ctx.at(rp + n - k));
    tree::reduce_on(ctx, &shape)
}
