//! Lowering a group into pieces per peer: what this rank sends to and receives from each
//! peer, which buffers receive reductions, and what it copies within itself. Every rank lowers
//! alike from what it sees alike, so the pieces pair up. The staged protocol ([`crate::protocol`])
//! cuts them into chunks through the receive slots; the direct paths move them straight
//! between user buffers.

use ccl_collectives::task::{buffer_counts, Reduction, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use crate::device::Kernel;
use crate::error::{Error, Result};

/// One group lowered to per-peer transfers.
pub(crate) struct Program {
    pub tx: Vec<Vec<TxPiece>>,
    pub rx: Vec<Vec<RxPiece>>,
    /// Copies within this rank: (dst, src, bytes).
    pub locals: Vec<(u64, u64, usize)>,
    /// Kernels within this rank, after the copies (a one-rank PreMulSum).
    pub local_kernels: Vec<Kernel>,
    pub targets: Vec<Target>,
    pub all_reduce: Vec<bool>,
    /// Per task: the logical times its pieces take, from its start (the same on every rank:
    /// computed from the task alone), and whether it is a send or receive.
    pub spans: Vec<(u64, bool)>,
}

impl Program {
    /// Bytes this rank sends.
    pub fn sent_bytes(&self) -> usize {
        self.tx.iter().flatten().map(|x| x.bytes).sum()
    }

    pub fn bytes(&self) -> usize {
        let rx: usize = self.rx.iter().flatten().map(|x| x.bytes).sum();
        self.sent_bytes() + rx
    }

    /// Whether a receive may overwrite memory a send still has to read. All-reduce's halves
    /// are causally ordered (the peer's second-half chunk exists only after it received ours),
    /// so only other combinations count.
    pub fn aliases(&self) -> bool {
        let writes: Vec<(usize, u64, usize)> = self
            .rx
            .iter()
            .flatten()
            .map(|r| {
                let dst = match r.act {
                    Act::Copy { dst } | Act::Reduce { dst, .. } => dst,
                };
                (r.task, dst, r.bytes)
            })
            .chain(self.locals.iter().map(|&(d, _, b)| (usize::MAX, d, b)))
            .collect();
        self.tx.iter().flatten().any(|s| {
            writes.iter().any(|&(task, dst, bytes)| {
                !(task == s.task && self.all_reduce.get(task).copied().unwrap_or(false))
                    && overlap(s.src, s.bytes, dst, bytes)
            })
        })
    }
}

/// How a received chunk is used.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act {
    Copy {
        dst: u64,
    },
    /// `dst = local (op) incoming` for the first contribution, `dst (op)= incoming` after.
    Reduce {
        target: usize,
        dst: u64,
        local: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct TxPiece {
    pub task: usize,
    pub src: u64,
    pub bytes: usize,
    pub base_t: u64,
    /// Sends reduced data of this target: each chunk waits for its reduction.
    pub after: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RxPiece {
    pub task: usize,
    pub bytes: usize,
    pub base_t: u64,
    pub act: Act,
}

/// A buffer that receives a reduction from several peers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub dtype: DataType,
    pub arith: ReduceKind,
    /// Float Avg (1/n) or PreMulSum: every contribution is scaled, the local one fused.
    pub scalar: Option<[u8; 8]>,
    /// Integer Avg: divide by this once complete.
    pub postdiv: Option<u64>,
    pub contributions: usize,
    /// Some send waits for its chunks (all-reduce's second half).
    pub signals: bool,
}

/// Lowers a group for `rank` of `n`. All-reduces of two ranks moving at most `one_shot_max`
/// bytes in all go one-shot (the caller runs those on one stream: their send and receive
/// ranges alias in place).
pub(crate) fn lower(
    tasks: &[Task],
    rank: usize,
    n: usize,
    chunk: usize,
    one_shot_max: usize,
) -> Result<Program> {
    let mut p = Program {
        tx: vec![Vec::new(); n],
        rx: vec![Vec::new(); n],
        locals: Vec::new(),
        local_kernels: Vec::new(),
        targets: Vec::new(),
        all_reduce: vec![false; tasks.len()],
        spans: Vec::with_capacity(tasks.len()),
    };
    let mut self_sends: Vec<(u64, usize)> = Vec::new();
    let mut self_recvs: Vec<(u64, usize)> = Vec::new();
    for (ti, t) in tasks.iter().enumerate() {
        buffer_counts(t.kind, rank, n, t.count)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let sz = t.dtype.size();
        let b = t
            .count
            .checked_mul(sz)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let (send, recv) = (t.send, t.recv);
        // Every piece of a collective but an all-reduce's second half is one of `b` bytes from
        // its start; the all-reduce says its own below.
        let p2p = matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. });
        p.spans.push((chunks_of(b, chunk), p2p));
        let mut l = TaskLowering {
            p: &mut p,
            ti,
            t,
            rank,
            n,
            sz,
            b,
        };
        let reduces = matches!(
            t.kind,
            TaskKind::Coll(
                Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
            )
        );
        if n == 1 && reduces {
            l.one_rank_reduction();
            continue;
        }
        match t.kind {
            TaskKind::Coll(Collective::AllReduce)
                if n == 2 && b <= one_shot_max / 2 && matches!(t.red, Reduction::Plain(_)) =>
            {
                l.all_reduce_one_shot()
            }
            TaskKind::Coll(Collective::AllReduce) => l.all_reduce(chunk),
            TaskKind::Coll(Collective::ReduceScatter) => l.reduce_scatter(),
            TaskKind::Coll(Collective::Reduce { root }) => l.reduce(root),
            TaskKind::Coll(Collective::Broadcast { root }) => l.broadcast(root),
            TaskKind::Coll(Collective::AllGather) => l.all_gather(),
            TaskKind::Coll(Collective::AlltoAll) => l.all_to_all(),
            TaskKind::Coll(Collective::Gather { root }) => l.gather(root),
            TaskKind::Coll(Collective::Scatter { root }) => l.scatter(root),
            TaskKind::Send { peer } if peer == rank => self_sends.push((send as u64, b)),
            TaskKind::Recv { peer } if peer == rank => self_recvs.push((recv as u64, b)),
            TaskKind::Send { peer } => l.tx(peer, send as u64, b, 0, None),
            TaskKind::Recv { peer } => l.rx(peer, b, 0, Act::Copy { dst: recv as u64 }),
        }
    }
    pair_self_transfers(&mut p, self_sends, self_recvs)?;
    Ok(p)
}

/// A group's sends to this rank itself meet its receives from itself, in order and of equal
/// sizes: each pair is a local copy.
fn pair_self_transfers(
    p: &mut Program,
    sends: Vec<(u64, usize)>,
    recvs: Vec<(u64, usize)>,
) -> Result<()> {
    if sends.len() != recvs.len() {
        return Err(Error::invalid_usage(format!(
            "{} sends to self but {} receives from self in one group",
            sends.len(),
            recvs.len()
        )));
    }
    for ((src, sb), (dst, rb)) in sends.into_iter().zip(recvs) {
        if sb != rb {
            return Err(Error::invalid_usage(format!(
                "a send to self of {sb} bytes meets a receive from self of {rb} bytes"
            )));
        }
        if dst != src && sb > 0 {
            p.locals.push((dst, src, sb));
        }
    }
    Ok(())
}

/// Every rank of `n` but `rank`, in rank order.
fn peers(rank: usize, n: usize) -> impl Iterator<Item = usize> + Clone {
    (0..n).filter(move |&q| q != rank)
}

/// One task of a group as [`lower`] cuts it into pieces for `rank` of `n`.
struct TaskLowering<'a> {
    p: &'a mut Program,
    /// The task's index in its group.
    ti: usize,
    t: &'a Task,
    rank: usize,
    n: usize,
    /// The element size, and the bytes of `count` elements.
    sz: usize,
    b: usize,
}

impl TaskLowering<'_> {
    /// A buffer that receives `contributions` pieces to reduce; `signals`: a send waits for
    /// its chunks. Returns its index.
    fn target(&mut self, contributions: usize, signals: bool) -> usize {
        let (t, n) = (self.t, self.n);
        let scalar = ccl_cuda::host::reduce::premul_scalar(t, n);
        let postdiv = (matches!(t.red, Reduction::Avg) && !t.dtype.is_float()).then_some(n as u64);
        self.p.targets.push(Target {
            dtype: t.dtype,
            arith: t.red.arithmetic(),
            scalar,
            postdiv,
            contributions,
            signals,
        });
        self.p.targets.len() - 1
    }

    fn tx(&mut self, peer: usize, src: u64, bytes: usize, base_t: u64, after: Option<usize>) {
        if bytes > 0 {
            self.p.tx[peer].push(TxPiece {
                task: self.ti,
                src,
                bytes,
                base_t,
                after,
            });
        }
    }

    fn rx(&mut self, peer: usize, bytes: usize, base_t: u64, act: Act) {
        if bytes > 0 {
            self.p.rx[peer].push(RxPiece {
                task: self.ti,
                bytes,
                base_t,
                act,
            });
        }
    }

    fn local(&mut self, dst: u64, src: u64, bytes: usize) {
        if bytes > 0 && dst != src {
            self.p.locals.push((dst, src, bytes));
        }
    }

    /// `base` plus `elems` elements of this task's type.
    fn at(&self, base: usize, elems: usize) -> u64 {
        addr(base, elems, self.sz)
    }

    /// One rank: the result is the input, scaled for PreMulSum (and float Avg by 1/1, which
    /// the kernel keeps exact); integer Avg divides by one.
    fn one_rank_reduction(&mut self) {
        let t = self.t;
        let g = self.target(0, false);
        match self.p.targets[g].scalar {
            Some(scalar) if self.b > 0 => self.p.local_kernels.push(Kernel::PreMul {
                dtype: t.dtype,
                dst: t.recv as u64,
                src: t.send as u64,
                n: t.count,
                scalar,
            }),
            _ => self.local(t.recv as u64, t.send as u64, self.b),
        }
    }

    /// Small, two ranks: each sends everything and reduces everything (one copy and one
    /// kernel each instead of two of each). `a (op) b` is symmetric, so both ranks compute
    /// the same bits; Avg and PreMulSum are not (the local input is fused, the peer's rounded
    /// first), so they keep one owner per element.
    fn all_reduce_one_shot(&mut self) {
        let (t, b) = (self.t, self.b);
        self.p.all_reduce[self.ti] = true;
        let g = self.target(1, false);
        for q in peers(self.rank, self.n) {
            self.tx(q, t.send as u64, b, 0, None);
            let act = Act::Reduce {
                target: g,
                dst: t.recv as u64,
                local: t.send as u64,
            };
            self.rx(q, b, 0, act);
        }
    }

    /// Each rank reduces its slice from every peer's (first half), then sends the result to
    /// every peer (second half, each chunk after its reduction).
    fn all_reduce(&mut self, chunk: usize) {
        let (t, sz, rank, n) = (self.t, self.sz, self.rank, self.n);
        self.p.all_reduce[self.ti] = true;
        let (lo_r, len_r) = slice(t.count, n, rank);
        let max_chunks = (0..n)
            .map(|i| chunks_of(slice(t.count, n, i).1 * sz, chunk))
            .max()
            .unwrap_or(0);
        self.p.spans[self.ti].0 = 2 * max_chunks;
        let g = self.target(n - 1, true);
        for q in peers(rank, n) {
            let (lo_q, len_q) = slice(t.count, n, q);
            self.tx(q, self.at(t.send, lo_q), len_q * sz, 0, None);
            let act = Act::Reduce {
                target: g,
                dst: self.at(t.recv, lo_r),
                local: self.at(t.send, lo_r),
            };
            self.rx(q, len_r * sz, 0, act);
        }
        for q in peers(rank, n) {
            let (lo_q, len_q) = slice(t.count, n, q);
            self.tx(q, self.at(t.recv, lo_r), len_r * sz, max_chunks, Some(g));
            let dst = self.at(t.recv, lo_q);
            self.rx(q, len_q * sz, max_chunks, Act::Copy { dst });
        }
    }

    fn reduce_scatter(&mut self) {
        let (t, b, rank) = (self.t, self.b, self.rank);
        let g = self.target(self.n - 1, false);
        for q in peers(rank, self.n) {
            self.tx(q, self.at(t.send, q * t.count), b, 0, None);
            let act = Act::Reduce {
                target: g,
                dst: t.recv as u64,
                local: self.at(t.send, rank * t.count),
            };
            self.rx(q, b, 0, act);
        }
    }

    fn reduce(&mut self, root: usize) {
        let (t, b) = (self.t, self.b);
        if self.rank != root {
            self.tx(root, t.send as u64, b, 0, None);
            return;
        }
        let g = self.target(self.n - 1, false);
        for q in peers(self.rank, self.n) {
            let act = Act::Reduce {
                target: g,
                dst: t.recv as u64,
                local: t.send as u64,
            };
            self.rx(q, b, 0, act);
        }
    }

    fn broadcast(&mut self, root: usize) {
        let (t, b) = (self.t, self.b);
        if self.rank != root {
            self.rx(root, b, 0, Act::Copy { dst: t.recv as u64 });
            return;
        }
        for q in peers(self.rank, self.n) {
            self.tx(q, t.send as u64, b, 0, None);
        }
        self.local(t.recv as u64, t.send as u64, b);
    }

    fn all_gather(&mut self) {
        let (t, b) = (self.t, self.b);
        for q in peers(self.rank, self.n) {
            self.tx(q, t.send as u64, b, 0, None);
            let dst = self.at(t.recv, q * t.count);
            self.rx(q, b, 0, Act::Copy { dst });
        }
        self.local(self.at(t.recv, self.rank * t.count), t.send as u64, b);
    }

    fn all_to_all(&mut self) {
        let (t, b) = (self.t, self.b);
        for q in peers(self.rank, self.n) {
            self.tx(q, self.at(t.send, q * t.count), b, 0, None);
            let dst = self.at(t.recv, q * t.count);
            self.rx(q, b, 0, Act::Copy { dst });
        }
        let own = self.rank * t.count;
        self.local(self.at(t.recv, own), self.at(t.send, own), b);
    }

    fn gather(&mut self, root: usize) {
        let (t, b) = (self.t, self.b);
        if self.rank != root {
            self.tx(root, t.send as u64, b, 0, None);
            return;
        }
        for q in peers(self.rank, self.n) {
            let dst = self.at(t.recv, q * t.count);
            self.rx(q, b, 0, Act::Copy { dst });
        }
        self.local(self.at(t.recv, self.rank * t.count), t.send as u64, b);
    }

    fn scatter(&mut self, root: usize) {
        let (t, b) = (self.t, self.b);
        if self.rank != root {
            self.rx(root, b, 0, Act::Copy { dst: t.recv as u64 });
            return;
        }
        for q in peers(self.rank, self.n) {
            self.tx(q, self.at(t.send, q * t.count), b, 0, None);
        }
        self.local(t.recv as u64, self.at(t.send, self.rank * t.count), b);
    }
}

/// Smallest chunk a piece is cut into, unless the piece itself is smaller.
pub(crate) const MIN_CHUNK: usize = 1 << 20;

/// Chunk size for a piece of `bytes`: about a quarter of the piece (so even a mid-sized piece
/// pipelines), between [`MIN_CHUNK`] and the slot size. Both sides compute it from the piece
/// alone, which they agree on.
pub(crate) fn piece_chunk(bytes: usize, slot: usize) -> usize {
    (bytes / 4)
        .clamp(MIN_CHUNK.min(slot), slot)
        .next_multiple_of(4096)
        .min(slot)
}

/// How many chunks a piece of `bytes` is cut into.
fn chunks_of(bytes: usize, chunk: usize) -> u64 {
    bytes.div_ceil(piece_chunk(bytes, chunk)) as u64
}

fn slice(count: usize, n: usize, i: usize) -> (usize, usize) {
    let lo = (count as u128 * i as u128 / n as u128) as usize;
    let hi = (count as u128 * (i as u128 + 1) / n as u128) as usize;
    (lo, hi - lo)
}

fn addr(base: usize, off_elems: usize, size: usize) -> u64 {
    (base as u64).wrapping_add((off_elems as u64).wrapping_mul(size as u64))
}

/// Does `[a, a+al)` overlap `[b, b+bl)`?
pub(crate) fn overlap(a: u64, al: usize, b: u64, bl: usize) -> bool {
    a < b.saturating_add(bl as u64) && b < a.saturating_add(al as u64)
}
