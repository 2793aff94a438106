//! Direct reductions queued before every rank posted (`CCL_IPC_DIRECT_REDUCE_MAILED`): the
//! rank's plan leaves the peers' buffers to the mail thread ([`crate::mail::ReduceJob`]) and
//! its kernel waits on a mailbox slot; and the bounce buffer standing in for a rank's buffers
//! its peers cannot map, so that no rank lets the others go staged.

use super::*;

/// One buffer of a mailed reduction, as its kernel will use it: rank `rank`'s input or
/// output, `offset` bytes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub rank: usize,
    pub output: bool,
    pub offset: u64,
}

/// One look, without waiting or marking anything, at a [`SymOutcome::Pending`] post: `Direct`
/// if every rank has posted since, `Staged` if one marked it failed, else still `Pending`
/// (then a rank that mails its reductions does so, while one posting first in a `-g N` group,
/// where one thread posts for every communicator before settling any, finds the others there).
pub(crate) fn sym_peek(board: &dyn Words, n: usize, seq: u64) -> Result<SymOutcome> {
    let (e, w) = pending_entry(board, n, seq)?;
    e.finish(w)
}

/// Entry `seq`, which this rank posted to and found pending, and its state word.
fn pending_entry(board: &dyn Words, n: usize, seq: u64) -> Result<(SymEntry<'_>, u64)> {
    let e = SymEntry::new(board, n, seq);
    let w = e.word(0)?.load(Ordering::Acquire);
    if w >> GEN_SHIFT != e.gen {
        return Err(Error::internal(format!(
            "cuda-ipc: direct reduction {seq}'s rendezvous moved on before every rank posted"
        )));
    }
    Ok((e, w))
}

/// What the mail thread finds at a mailed reduction's entry ([`sym_poll`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SymPoll {
    /// Not every rank has posted yet.
    Waiting,
    /// Every rank posted (the entry is left): (input, output) of every rank.
    Posted(Vec<(Post, Post)>),
    /// Some rank marked the entry failed or left it to its peer, which a rank that mailed its
    /// reduction cannot follow (the setting must be agreed; the entry is left).
    Abandoned,
}

/// The mail thread's look at the entry of reduction `seq`, which this rank posted to and found
/// pending: it never waits and never marks the entry (the rank's kernel is already queued).
pub(crate) fn sym_poll(board: &dyn Words, n: usize, seq: u64) -> Result<SymPoll> {
    let (e, w) = pending_entry(board, n, seq)?;
    if w & FAILED != 0 {
        e.leave()?;
        return Ok(SymPoll::Abandoned);
    }
    if w & PASSIVE != 0 {
        // The rank that set it has left already.
        return Ok(SymPoll::Abandoned);
    }
    match e.finish(w)? {
        SymOutcome::Direct(posts) => Ok(SymPoll::Posted(posts)),
        _ => Ok(SymPoll::Waiting),
    }
}

/// The mailbox slot a mailed reduction's kernel waits on: its device address, the tag, and
/// the slot's mirror in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mailed {
    pub slot: u64,
    pub tag: u64,
    pub mirror: u64,
}

/// Where a rank's direct reduction goes through its bounce buffer: its own input and output
/// (`send`, `recv`), their stand-ins in the bounce buffer, and their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SymBounce {
    pub send: u64,
    pub recv: u64,
    pub b_in: u64,
    pub b_out: u64,
    pub in_bytes: usize,
    pub out_bytes: usize,
}

impl SymBounce {
    /// The stand-ins in a bounce buffer at `base`: the input first, the output 256-byte
    /// aligned after it (as kernels like their buffers).
    pub fn at(base: u64, send: u64, recv: u64, in_bytes: usize, out_bytes: usize) -> SymBounce {
        SymBounce {
            send,
            recv,
            b_in: base,
            b_out: base + in_bytes.next_multiple_of(256) as u64,
            in_bytes,
            out_bytes,
        }
    }

    /// Bytes of bounce buffer the stand-ins of `in_bytes` and `out_bytes` take.
    pub fn bytes(in_bytes: usize, out_bytes: usize) -> usize {
        in_bytes.next_multiple_of(256) + out_bytes
    }
}

impl SymPlan {
    /// The plan of a rank whose peers have not all posted: every peer's buffer is left for
    /// the mail thread to name, an all-reduce writes every output from its kernel.
    pub fn mailed(
        t: &Task,
        rank: usize,
        n: usize,
        seq: u64,
        piece_bytes: usize,
        mailed: Mailed,
    ) -> Result<SymPlan> {
        let posts = vec![(NO_POST, NO_POST); n];
        let mut p = SymPlan::new(t, rank, n, seq, &posts, &mut |_, _| Ok(0), piece_bytes)?;
        p.write_all = p.push;
        p.mailed = Some(mailed);
        Ok(p)
    }

    /// This rank's buffers are stood in for by its bounce buffer.
    pub fn through(&mut self, rank: usize, b: SymBounce) {
        self.inputs[rank] = b.b_in;
        self.outputs[rank] = b.b_out;
        self.bounce = Some(b);
    }

    /// What the mail thread writes into a mailed reduction's slot, as parts of the ranks'
    /// posted buffers: this rank's destination, the sources in fold order, the further
    /// destinations (an all-reduce's peers' outputs).
    pub fn mail_parts(&self, me: usize, n: usize) -> (Part, Vec<Part>, Vec<Part>) {
        let sz = self.dtype.size() as u64;
        let (in_at, out_at) = (self.in_off as u64 * sz, self.out_off as u64 * sz);
        let (peers, order) = self.order(me, n);
        let part = |rank, output, offset| Part {
            rank,
            output,
            offset,
        };
        let srcs = order.iter().map(|&q| part(q, false, in_at)).collect();
        let also = if self.push {
            peers.iter().map(|&q| part(q, true, out_at)).collect()
        } else {
            Vec::new()
        };
        (part(me, true, out_at), srcs, also)
    }

    /// A mailed reduction's kernel (every address from its slot, the slice written into every
    /// output for an all-reduce), then "done" to every peer as [`SymPlan::end_written`].
    pub(super) fn end_mailed(
        &self,
        l: &Layout,
        peers: &[usize],
        m: Mailed,
        dev: &mut dyn Device,
    ) -> Result<()> {
        // Even an empty slice runs the kernel: it marks the slot seen.
        let k = Kernel::ReduceNMail {
            dtype: self.dtype,
            op: self.op,
            k: l.nranks,
            nalso: if self.push { peers.len() } else { 0 },
            n: self.count,
            slot: m.slot,
            tag: m.tag,
            mirror: m.mirror,
        };
        dev.kernel(Lane::User, k)?;
        for &q in peers {
            dev.write(Lane::User, l.sym_word(q, l.rank, true), self.flag())?;
        }
        self.wait_done(l, dev)
    }
}
