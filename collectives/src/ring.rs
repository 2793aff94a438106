//! Ring algorithms. Rank `r` sends to `r+1` and receives from `r-1` (mod n). AllReduce,
//! AllGather and ReduceScatter move one chunk per step; Broadcast and Reduce are pipelined chains
//! built on the tree machinery (a chain is a tree in which every node has one child).

use crate::plan::{copy, op_recv, op_reduce, op_send, recv, scratch, send, Table};
use crate::tree::{self, Shape};
use crate::{split, Ctx, Schedule};

/// Reduce-scatter over `n` chunks, then all-gather: `2(n-1)` steps. The partial sum of chunk c
/// lives in `Recv[c]` (no scratch): it is written by a receive in one step and sent in the next,
/// and chunk `r` (read from `Send` in step 0) is the only one never written before the
/// all-gather overwrites it, so in-place calls keep every input until it has been read.
pub(crate) fn all_reduce(ctx: &Ctx) -> Schedule {
    let n = ctx.n;
    let (next, prev) = (ctx.fwd(1), ctx.back(1));
    let chunk = |c: usize| split(ctx.count, n, c);
    let mut t = Table::new();
    for s in 0..n - 1 {
        let (so, sl) = chunk(ctx.back(s));
        let src = if s == 0 { send(so, sl) } else { recv(so, sl) };
        t.push(s, op_send(next, src));
        let (ro, rl) = chunk(ctx.back(s + 1));
        t.push(s, op_reduce(prev, send(ro, rl), recv(ro, rl)));
    }
    for s in 0..n - 1 {
        // After reduce-scatter, rank r owns the full sum of chunk r+1.
        let (so, sl) = chunk((ctx.rank + 1 + n - s) % n);
        t.push(n - 1 + s, op_send(next, recv(so, sl)));
        let (ro, rl) = chunk(ctx.back(s));
        t.push(n - 1 + s, op_recv(prev, recv(ro, rl)));
    }
    t.finish(0)
}

/// `n-1` steps; step s forwards block `r-s` and receives block `r-s-1`.
pub(crate) fn all_gather(ctx: &Ctx) -> Schedule {
    let (n, c) = (ctx.n, ctx.count);
    let (next, prev) = (ctx.fwd(1), ctx.back(1));
    let mut t = Table::new();
    // In place this copies onto itself and is skipped; the step-0 send reads `Send` directly so
    // it does not depend on the copy.
    t.push(0, copy(send(0, c), recv(ctx.rank * c, c)));
    for s in 0..n - 1 {
        let src = if s == 0 {
            send(0, c)
        } else {
            recv(ctx.back(s) * c, c)
        };
        t.push(s, op_send(next, src));
        t.push(s, op_recv(prev, recv(ctx.back(s + 1) * c, c)));
    }
    t.finish(0)
}

/// `n-1` steps; step s sends the partial sum of block `r-s-1` and folds its own input into the
/// incoming partial of block `r-s-2`, so block r arrives last and lands in `Recv`. Partials
/// alternate between two scratch slots: `Recv` cannot hold one because in place it is the
/// caller's block r, which is still needed as the last `local`.
pub(crate) fn reduce_scatter(ctx: &Ctx) -> Schedule {
    let (n, c) = (ctx.n, ctx.count);
    let (next, prev) = (ctx.fwd(1), ctx.back(1));
    let slot = |s: usize| scratch((s % 2) * c, c);
    let mut t = Table::new();
    for s in 0..n - 1 {
        let src = if s == 0 {
            send(ctx.back(1) * c, c)
        } else {
            slot(s - 1)
        };
        t.push(s, op_send(next, src));
        let block = ctx.back(s + 2);
        let dst = if s == n - 2 { recv(0, c) } else { slot(s) };
        t.push(s, op_reduce(prev, send(block * c, c), dst));
    }
    t.finish(n.saturating_sub(2).min(2) * c)
}

/// Pipelined chain root -> root+1 -> ... -> root-1.
pub(crate) fn broadcast(ctx: &Ctx, root: usize) -> Schedule {
    let shape = Shape::chain(ctx.n, root, true);
    tree::broadcast_on(ctx, &shape)
}

/// Pipelined chain root+1 -> root+2 -> ... -> root.
pub(crate) fn reduce(ctx: &Ctx, root: usize) -> Schedule {
    let shape = Shape::chain(ctx.n, root, false);
    tree::reduce_on(ctx, &shape)
}
