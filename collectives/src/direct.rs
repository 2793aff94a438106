//! Direct algorithms: every pair of ranks exchanges its data itself. Sends and receives to
//! different peers share one step; reductions into one buffer are serialised one peer per step
//! because a step may not write the same memory twice.

use crate::plan::{copy, op_recv, op_reduce, op_send, recv, scratch, send, Table};
use crate::{split, Ctx, Schedule};

/// Direct reduce-scatter over `n` chunks of the buffer (`n-1` steps, step k exchanging with
/// ranks r±(k+1)) followed by one all-to-all broadcast step of the reduced chunk.
pub(crate) fn all_reduce(ctx: &Ctx) -> Schedule {
    let n = ctx.n;
    let chunk = |c: usize| split(ctx.count, n, c);
    let (mo, ml) = chunk(ctx.rank);
    let mut t = Table::new();
    for k in 0..n - 1 {
        let to = ctx.fwd(k + 1);
        let (to_o, to_l) = chunk(to);
        t.push(k, op_send(to, send(to_o, to_l)));
        let local = if k == 0 { send(mo, ml) } else { recv(mo, ml) };
        t.push(k, op_reduce(ctx.back(k + 1), local, recv(mo, ml)));
    }
    for k in 1..n {
        t.push(n - 1, op_send(ctx.fwd(k), recv(mo, ml)));
    }
    for k in 1..n {
        let from = ctx.back(k);
        let (o, l) = chunk(from);
        t.push(n - 1, op_recv(from, recv(o, l)));
    }
    t.finish(0)
}

pub(crate) fn all_gather(ctx: &Ctx) -> Schedule {
    let c = ctx.count;
    let mut t = Table::new();
    t.push(0, copy(send(0, c), recv(ctx.rank * c, c)));
    for k in 1..ctx.n {
        t.push(0, op_send(ctx.fwd(k), send(0, c)));
    }
    for k in 1..ctx.n {
        let from = ctx.back(k);
        t.push(0, op_recv(from, recv(from * c, c)));
    }
    t.finish(0)
}

/// `n-1` steps; in step k rank r sends block `r+k+1` to its owner and folds the block it gets
/// from `r-k-1` into `Recv`. Block r of `Send` is never sent, so in place (where it is `Recv`)
/// nothing still to be sent is overwritten.
pub(crate) fn reduce_scatter(ctx: &Ctx) -> Schedule {
    let c = ctx.count;
    let mut t = Table::new();
    for k in 0..ctx.n - 1 {
        let to = ctx.fwd(k + 1);
        t.push(k, op_send(to, send(to * c, c)));
        let local = if k == 0 {
            send(ctx.rank * c, c)
        } else {
            recv(0, c)
        };
        t.push(k, op_reduce(ctx.back(k + 1), local, recv(0, c)));
    }
    t.finish(0)
}

pub(crate) fn broadcast(ctx: &Ctx, root: usize) -> Schedule {
    let c = ctx.count;
    let mut t = Table::new();
    if ctx.rank == root {
        t.push(0, copy(send(0, c), recv(0, c)));
        for k in 1..ctx.n {
            t.push(0, op_send(ctx.fwd(k), send(0, c)));
        }
    } else {
        t.push(0, op_recv(root, recv(0, c)));
    }
    t.finish(0)
}

/// The root folds one peer per step (`n-1` steps): only good for small n.
pub(crate) fn reduce(ctx: &Ctx, root: usize) -> Schedule {
    let (n, c) = (ctx.n, ctx.count);
    let mut t = Table::new();
    if ctx.rank == root {
        for k in 0..n - 1 {
            let local = if k == 0 { send(0, c) } else { recv(0, c) };
            t.push(k, op_reduce(ctx.fwd(k + 1), local, recv(0, c)));
        }
    } else {
        // This rank is root + k + 1 and is folded in at the root's step k.
        let k = (ctx.rank + n - root) % n - 1;
        t.push(k, op_send(root, send(0, c)));
    }
    t.finish(0)
}

/// One step of all sends and receives beside the own block's copy. In place a receive's
/// target may still hold a block to send, so the receives go to scratch and a second step
/// copies them into place (scratch `(n-1) * count`); with buffers known apart
/// (`ctx.disjoint`) they go straight into place and every received byte lands once.
pub(crate) fn all_to_all(ctx: &Ctx) -> Schedule {
    let (n, c, r) = (ctx.n, ctx.count, ctx.rank);
    let mut t = Table::new();
    t.push(0, copy(send(r * c, c), recv(r * c, c)));
    for k in 1..n {
        let to = ctx.fwd(k);
        t.push(0, op_send(to, send(to * c, c)));
    }
    for k in 1..n {
        let from = ctx.back(k);
        if ctx.disjoint {
            t.push(0, op_recv(from, recv(from * c, c)));
        } else {
            t.push(0, op_recv(from, scratch((k - 1) * c, c)));
            t.push(1, copy(scratch((k - 1) * c, c), recv(from * c, c)));
        }
    }
    t.finish(if ctx.disjoint { 0 } else { (n - 1) * c })
}

pub(crate) fn gather(ctx: &Ctx, root: usize) -> Schedule {
    let c = ctx.count;
    let mut t = Table::new();
    if ctx.rank == root {
        t.push(0, copy(send(0, c), recv(root * c, c)));
        for k in 1..ctx.n {
            let from = ctx.fwd(k);
            t.push(0, op_recv(from, recv(from * c, c)));
        }
    } else {
        t.push(0, op_send(root, send(0, c)));
    }
    t.finish(0)
}

pub(crate) fn scatter(ctx: &Ctx, root: usize) -> Schedule {
    let c = ctx.count;
    let mut t = Table::new();
    if ctx.rank == root {
        t.push(0, copy(send(root * c, c), recv(0, c)));
        for k in 1..ctx.n {
            let to = ctx.fwd(k);
            t.push(0, op_send(to, send(to * c, c)));
        }
    } else {
        t.push(0, op_recv(root, recv(0, c)));
    }
    t.finish(0)
}
