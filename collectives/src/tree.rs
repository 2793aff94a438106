//! Trees and chains with pipelined reduce-up / broadcast-down.
//!
//! Timing (global steps, piece `i`): a node `v` sends piece i to its parent at step
//! `offset(v) + i`. Leaves have offset 0; a node's offset is one more than its children's, and
//! children of one node get *distinct* offsets, because two `RecvReduce`s into the same piece in
//! one step would race (there is no three-input reduce op): the second child's contribution is
//! folded one step after the first. So one piece per step flows on every link, and up the tree a
//! binary level costs two steps, a chain link one.
//!
//! Broadcast from the root starts at step `base`: a node at depth d receives piece i at step
//! `base + i + d - 1` and forwards it at `base + i + d`.
//!
//! In one step a node touches pieces `step - offset(child)` (writes), `step - offset(v)` (read),
//! and on the way down `step - base - d + 1` (write) and `step - base - d` (read); offsets grow
//! by at least one per level, so these are all different pieces: no hazard.

use crate::plan::{copy, op_recv, op_reduce, op_send, recv, scratch, send, Table};
use crate::{split, Ctx, Schedule, Slice};

/// Parent of position `i` in the binary tree over positions `0..m` rooted at 0.
///
/// The tree is the in-order binary tree on bit patterns (the shape NCCL's double binary tree
/// uses): a position whose lowest set bit is `b` hangs below `(i ^ b) | 2b` when that exists,
/// else below `i ^ b`; odd positions are leaves, position 0 has one child, the depth is
/// `1 + floor(log2(m - 1))`.
pub fn btree_parent(m: usize, i: usize) -> Option<usize> {
    if i == 0 || i >= m {
        return None;
    }
    let b = i & i.wrapping_neg();
    let up = b.checked_mul(2).map(|b2| (i ^ b) | b2);
    match up {
        Some(u) if u < m => Some(u),
        _ => Some(i ^ b),
    }
}

/// Children of position `i` in the tree of [`btree_parent`] (smaller first).
pub fn btree_children(m: usize, i: usize) -> [Option<usize>; 2] {
    if i >= m || m < 2 {
        return [None, None];
    }
    if i == 0 {
        // Highest power of two below m.
        let top = 1usize << (usize::BITS - 1 - (m - 1).leading_zeros());
        return [Some(top), None];
    }
    let b = i & i.wrapping_neg();
    let mut low = b >> 1;
    if low == 0 {
        return [None, None];
    }
    let first = Some(i - low);
    while low > 0 {
        if i + low < m {
            return [first, Some(i + low)];
        }
        low >>= 1;
    }
    [first, None]
}

/// A rooted tree over ranks with the pipeline timing of the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub root: usize,
    pub parent: Vec<Option<usize>>,
    /// Children sorted by offset (the first folds `Send` into the piece's home).
    pub children: Vec<Vec<usize>>,
    pub depth: Vec<usize>,
    pub offset: Vec<usize>,
}

impl Shape {
    /// The bit tree with rank `rank_of(pos)` at position `pos`.
    pub fn btree(n: usize, rank_of: impl Fn(usize) -> usize) -> Shape {
        let mut parent = vec![None; n];
        let mut children = vec![Vec::new(); n];
        for pos in 0..n {
            let r = rank_of(pos);
            if let Some(slot) = parent.get_mut(r) {
                *slot = btree_parent(n, pos).map(&rank_of);
            }
            if let Some(slot) = children.get_mut(r) {
                *slot = btree_children(n, pos)
                    .iter()
                    .flatten()
                    .map(|&p| rank_of(p))
                    .collect();
            }
        }
        Shape::timed(rank_of(0), parent, children)
    }

    /// A chain through all ranks: `rank_of(k)` is the rank `k` links from the root
    /// (`rank_of(0)` is the root, `k < n`), and its parent is `rank_of(k - 1)`.
    pub fn chain(n: usize, rank_of: impl Fn(usize) -> usize) -> Shape {
        let mut parent = vec![None; n];
        let mut children = vec![Vec::new(); n];
        for k in 1..n {
            let (r, p) = (rank_of(k), rank_of(k - 1));
            if let Some(slot) = parent.get_mut(r) {
                *slot = Some(p);
            }
            if let Some(slot) = children.get_mut(p) {
                slot.push(r);
            }
        }
        Shape::timed(rank_of(0), parent, children)
    }

    fn timed(root: usize, parent: Vec<Option<usize>>, mut children: Vec<Vec<usize>>) -> Shape {
        let n = parent.len();
        // Breadth-first order from the root: parents before children.
        let mut order = Vec::with_capacity(n);
        let mut depth = vec![0; n];
        if root < n {
            order.push(root);
        }
        let mut head = 0;
        while let Some(&v) = order.get(head) {
            head += 1;
            let d = depth.get(v).copied().unwrap_or(0);
            for &c in children.get(v).map(Vec::as_slice).unwrap_or(&[]) {
                if let Some(slot) = depth.get_mut(c) {
                    *slot = d + 1;
                }
                order.push(c);
            }
        }
        let mut offset = vec![0usize; n];
        for &v in order.iter().rev() {
            let Some(kids) = children.get_mut(v) else {
                continue;
            };
            if kids.is_empty() {
                continue;
            }
            kids.sort_by_key(|&c| offset.get(c).copied().unwrap_or(0));
            // Delay a child's sends when its offset collides with a sibling's.
            let mut last: Option<usize> = None;
            for &c in kids.iter() {
                if let Some(o) = offset.get_mut(c) {
                    if let Some(l) = last {
                        if *o <= l {
                            *o = l + 1;
                        }
                    }
                    last = Some(*o);
                }
            }
            if let (Some(l), Some(o)) = (last, offset.get_mut(v)) {
                *o = l + 1;
            }
        }
        Shape {
            root,
            parent,
            children,
            depth,
            offset,
        }
    }

    fn kids(&self, v: usize) -> &[usize] {
        self.children.get(v).map(Vec::as_slice).unwrap_or(&[])
    }
    fn off(&self, v: usize) -> usize {
        self.offset.get(v).copied().unwrap_or(0)
    }
    fn dep(&self, v: usize) -> usize {
        self.depth.get(v).copied().unwrap_or(0)
    }
    fn up(&self, v: usize) -> Option<usize> {
        self.parent.get(v).copied().flatten()
    }

    /// Step at which the root holds piece 0 fully reduced (and may send it down).
    pub fn root_offset(&self) -> usize {
        self.off(self.root)
    }
}

/// `(offset, len)` of the pieces of the range `[base, base + len)`.
pub(crate) fn pieces(base: usize, len: usize, ctx: &Ctx) -> Vec<(usize, usize)> {
    let p = ctx.pipeline.pieces(len);
    (0..p)
        .map(|i| {
            let (o, l) = split(len, p, i);
            (base + o, l)
        })
        .collect()
}

/// Pushes `v`'s reduce-up operations; `home(i)` is where piece i is accumulated.
fn reduce_up(
    t: &mut Table,
    shape: &Shape,
    v: usize,
    pieces: &[(usize, usize)],
    home: impl Fn(usize) -> Slice,
) {
    let kids = shape.kids(v);
    for (i, &(o, l)) in pieces.iter().enumerate() {
        for (j, &c) in kids.iter().enumerate() {
            let local = if j == 0 { send(o, l) } else { home(i) };
            t.push(shape.off(c) + i, op_reduce(c, local, home(i)));
        }
        if let Some(p) = shape.up(v) {
            let src = if kids.is_empty() { send(o, l) } else { home(i) };
            t.push(shape.off(v) + i, op_send(p, src));
        }
    }
}

/// Pushes `v`'s broadcast-down operations starting at global step `base`; the root sends from
/// `Send` when `root_from_send`, else from its `Recv`.
fn broadcast_down(
    t: &mut Table,
    shape: &Shape,
    v: usize,
    pieces: &[(usize, usize)],
    base: usize,
    root_from_send: bool,
) {
    let d = shape.dep(v);
    for (i, &(o, l)) in pieces.iter().enumerate() {
        if let Some(p) = shape.up(v) {
            t.push(base + i + d - 1, op_recv(p, recv(o, l)));
        }
        let src = if v == shape.root && root_from_send {
            send(o, l)
        } else {
            recv(o, l)
        };
        for &c in shape.kids(v) {
            t.push(base + i + d, op_send(c, src));
        }
    }
}

/// Pipelined broadcast of the whole buffer from `shape.root`.
pub(crate) fn broadcast_on(ctx: &Ctx, shape: &Shape) -> Schedule {
    let mut t = Table::new();
    let v = ctx.rank;
    if v == shape.root {
        t.push(0, copy(send(0, ctx.count), recv(0, ctx.count)));
    }
    broadcast_down(&mut t, shape, v, &pieces(0, ctx.count, ctx), 0, true);
    t.finish(0)
}

/// Pipelined reduce of the whole buffer to `shape.root`. Non-roots have no `Recv`, so interior
/// nodes keep partials in a ring of scratch slots: piece i lives from its first child's step
/// `offset(c0) + i` to its own send at `offset(v) + i`, so `offset(v) - offset(c0) + 1` slots
/// never overlap a live piece.
pub(crate) fn reduce_on(ctx: &Ctx, shape: &Shape) -> Schedule {
    let mut t = Table::new();
    let v = ctx.rank;
    let ps = pieces(0, ctx.count, ctx);
    let kids = shape.kids(v);
    if v == shape.root {
        reduce_up(&mut t, shape, v, &ps, |i| {
            let (o, l) = ps.get(i).copied().unwrap_or((0, 0));
            recv(o, l)
        });
        return t.finish(0);
    }
    let Some(&first) = kids.first() else {
        reduce_up(&mut t, shape, v, &ps, |_| recv(0, 0));
        return t.finish(0);
    };
    let slots = (shape.off(v) - shape.off(first) + 1).min(ps.len()).max(1);
    let width = ps.iter().map(|&(_, l)| l).max().unwrap_or(0);
    reduce_up(&mut t, shape, v, &ps, |i| {
        let l = ps.get(i).map(|&(_, l)| l).unwrap_or(0);
        scratch((i % slots) * width, l)
    });
    t.finish(slots * width)
}

/// The two trees of the double binary tree, over ring positions (`ctx.at`): tree 0 is the bit
/// tree on positions, tree 1 mirrors it (even n) or shifts it by one (odd n), so that a rank
/// interior in one tree is a leaf in the other (for odd n position 0 is interior in both) and
/// no rank forwards both halves.
pub(crate) fn double_trees(ctx: &Ctx) -> [Shape; 2] {
    let n = ctx.n;
    let a = Shape::btree(n, |p| ctx.at(p));
    let b = if n % 2 == 0 {
        Shape::btree(n, |p| ctx.at(n - 1 - p))
    } else {
        Shape::btree(n, |p| ctx.at(p + 1))
    };
    [a, b]
}

/// Double binary tree AllReduce: half the data per tree, each half reduced up its tree into
/// `Recv` and broadcast back down, pieces pipelined, both trees and both directions at once.
pub(crate) fn all_reduce(ctx: &Ctx) -> Schedule {
    let mut t = Table::new();
    let trees = double_trees(ctx);
    // Operations of tree 0 are pushed before tree 1's, so two messages between one pair in
    // one step keep the same order at both ends.
    for (k, shape) in trees.iter().enumerate() {
        let (base, len) = split(ctx.count, 2, k);
        let ps = pieces(base, len, ctx);
        reduce_up(&mut t, shape, ctx.rank, &ps, |i| {
            let (o, l) = ps.get(i).copied().unwrap_or((0, 0));
            recv(o, l)
        });
        broadcast_down(&mut t, shape, ctx.rank, &ps, shape.root_offset(), false);
    }
    t.finish(0)
}

/// The bit tree over ring positions counted from the root's position, so position 0 is
/// `root`.
fn rooted(ctx: &Ctx, root: usize) -> Shape {
    let rp = ctx.pos_of(root);
    Shape::btree(ctx.n, |p| ctx.at(p + rp))
}

/// Single bit tree rooted at `root`.
pub(crate) fn broadcast(ctx: &Ctx, root: usize) -> Schedule {
    broadcast_on(ctx, &rooted(ctx, root))
}

pub(crate) fn reduce(ctx: &Ctx, root: usize) -> Schedule {
    reduce_on(ctx, &rooted(ctx, root))
}
