//! Captured groups in host-only mode: no rank reaches another's GPU memory, so every rank's
//! receive slots in shared host memory serve as its outbox (see [`HostOnlyGroup`]).

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;

use super::agree::{signature, RECV, SEND};
use super::steps::{copy_unless_same, handshake, reduce_into, supported};
use crate::device::{Batched, Device};
use crate::error::Result;
use crate::layout::{Lane, Layout, DONE, INPUTS};

/// Host-only mode (`CCL_IPC_HOST_ONLY`): no rank reaches another's GPU memory, so a captured
/// group cannot read its partners' buffers in place. Captured collectives go through each
/// rank's receive slots in shared host memory instead, used as its outbox: every rank copies
/// its inputs there (a broadcast's or scatter's root only, a reduce's or gather's other ranks
/// only), `INPUTS`, copies what it needs of every partner's outbox into its outputs (an
/// all-gather's, gather's or all-to-all's blocks, a broadcast's or scatter's data) or into its
/// own GPU receive area (what it reduces, one region per partner, as the slots), reduces in
/// rank order, `DONE`. Sends go through the outbox too, each receive taking the matching send's
/// bytes; only sends to itself go staged. Each rank lays out its own outbox; the capture
/// exchanges every rank's signatures and offsets, from which each finds what it takes where
/// ([`host_only_sources`]). All on copy engines but the reduction kernels; the same words as
/// the direct captured groups.
///
/// Why the outbox and the GPU regions are free at a replay: the rank's earlier work has ended
/// on its stream (so every chunk a peer sent into its slots for it was consumed), and any rank
/// writes into them again (an outbox copy, an eager chunk) only after its `DONE` wait, which
/// passes once every rank has read every outbox: every rank handshakes with every other, in a
/// group of sends and receives too.
pub(crate) struct HostOnlyGroup<'a> {
    pub index: usize,
    pub tasks: &'a [Task],
    /// This rank's GPU receive area: the partners' inputs, a region of slots x chunk bytes
    /// each, partners in rank order.
    pub inputs: u64,
    pub reduce_n: bool,
    /// Where each task's input sits in this rank's outbox ([`host_only_offsets`]).
    pub offsets: Vec<usize>,
    /// `sources[j][i]`: where in rank `j`'s outbox task `i` finds what it takes from `j` (the
    /// partner's matching collective, or the send a receive from `j` meets), if anything.
    pub sources: Vec<Vec<Option<usize>>>,
}

/// Queues host-only group `g` of `l.rank` on [`Lane::User`].
pub(crate) fn emit_host_only(dev: &mut dyn Device, l: &Layout, g: &HostOnlyGroup) -> Result<()> {
    let (me, n) = (l.rank, l.nranks);
    let region = l.slots as usize * l.chunk;
    // Every other rank, even in a group of sends and receives: an outbox is this rank's slots,
    // which any rank's later eager chunks may fill, so it is free only once every rank has read
    // every outbox (a peer's `DONE` alone would not say that a third rank is done with it).
    let partners: Vec<usize> = (0..n).filter(|&j| j != me).collect();
    // Partner j's inputs in this rank's GPU area (own skipped, as the slots), each task's at
    // its offset in this rank's outbox (room for at least what it takes from j).
    let input_of = |j: usize| g.inputs + (if j < me { j } else { j - 1 } * region) as u64;
    let live = || {
        g.tasks
            .iter()
            .zip(&g.offsets)
            .enumerate()
            .filter(|(_, (t, _))| t.count > 0)
    };
    let block = |t: &Task| (t.count * t.dtype.size()) as u64;
    let mut dev = Batched::new(dev);
    for (_, (t, &o)) in live() {
        let writes = match t.kind {
            TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
                root == me
            }
            TaskKind::Coll(Collective::Reduce { root } | Collective::Gather { root }) => root != me,
            TaskKind::Recv { .. } => false,
            _ => true,
        };
        if writes {
            let bytes = outbox_bytes(t, me, n).unwrap_or(0);
            dev.copy(Lane::User, l.scratch[me] + o as u64, t.send as u64, bytes)?;
        }
    }
    handshake(&mut dev, l, g.index, &partners, INPUTS)?;
    for &j in &partners {
        for (i, (t, &o)) in live() {
            let Some(src) = g.sources.get(j).and_then(|r| r.get(i)).copied().flatten() else {
                continue;
            };
            let (src, b) = (l.scratch[j] + src as u64, block(t));
            let (dst, from, bytes) = match t.kind {
                TaskKind::Coll(Collective::AllReduce) => (input_of(j) + o as u64, src, b),
                TaskKind::Coll(Collective::ReduceScatter) => {
                    (input_of(j) + o as u64, src + me as u64 * b, b)
                }
                TaskKind::Coll(Collective::AllGather) => (t.recv as u64 + j as u64 * b, src, b),
                TaskKind::Coll(Collective::Broadcast { root }) if root == j => {
                    (t.recv as u64, src, b)
                }
                TaskKind::Coll(Collective::Reduce { root }) if root == me => {
                    (input_of(j) + o as u64, src, b)
                }
                TaskKind::Coll(Collective::Gather { root }) if root == me => {
                    (t.recv as u64 + j as u64 * b, src, b)
                }
                TaskKind::Coll(Collective::Scatter { root }) if root == j => {
                    (t.recv as u64, src + me as u64 * b, b)
                }
                TaskKind::Coll(Collective::AlltoAll) => {
                    (t.recv as u64 + j as u64 * b, src + me as u64 * b, b)
                }
                TaskKind::Recv { peer } if peer == j => (t.recv as u64, src, b),
                _ => continue,
            };
            dev.copy(Lane::User, dst, from, bytes as usize)?;
        }
    }
    for (_, (t, &o)) in live() {
        let b = block(t);
        // Every rank's operand in rank order: this rank's from its own buffer.
        let srcs = |own: u64| -> Vec<u64> {
            (0..n)
                .map(|r| if r == me { own } else { input_of(r) + o as u64 })
                .collect()
        };
        let (send, recv) = (t.send as u64, t.recv as u64);
        let reduce = |dev: &mut Batched, own: u64| {
            reduce_into(dev, t, recv, &srcs(own), me, t.count, g.reduce_n)
        };
        match t.kind {
            TaskKind::Coll(Collective::AllReduce) => reduce(&mut dev, send)?,
            TaskKind::Coll(Collective::ReduceScatter) => reduce(&mut dev, send + me as u64 * b)?,
            TaskKind::Coll(Collective::Reduce { root }) if root == me => reduce(&mut dev, send)?,
            // This rank's own block or data, input to output (nothing to copy in place).
            TaskKind::Coll(Collective::AllGather) => {
                copy_unless_same(&mut dev, recv + me as u64 * b, send, b)?
            }
            TaskKind::Coll(Collective::Broadcast { root }) if root == me => {
                copy_unless_same(&mut dev, recv, send, b)?
            }
            TaskKind::Coll(Collective::Gather { root }) if root == me => {
                copy_unless_same(&mut dev, recv + me as u64 * b, send, b)?
            }
            TaskKind::Coll(Collective::Scatter { root }) if root == me => {
                copy_unless_same(&mut dev, recv, send + me as u64 * b, b)?
            }
            TaskKind::Coll(Collective::AlltoAll) => {
                copy_unless_same(&mut dev, recv + me as u64 * b, send + me as u64 * b, b)?
            }
            _ => {}
        }
    }
    handshake(&mut dev, l, g.index, &partners, DONE)?;
    dev.flush()
}

/// One round of a host-only capture: its operations, their outbox offsets and where each
/// finds what it takes from each rank (see [`HostOnlyGroup`]).
pub(crate) type HostOnlyRound = (Vec<Task>, Vec<usize>, Vec<Vec<Option<usize>>>);

/// This rank's offer for a host-only capture of `tasks` as group `index` (ability, index, and
/// per operation its signature and, when the group is one round, its outbox offset).
pub(crate) fn host_only_offer_of(
    index: usize,
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
    able: bool,
) -> Vec<u8> {
    let rounds = host_only_rounds(tasks, rank, n, region).filter(|_| able);
    match rounds.as_deref() {
        Some([(_, offsets)]) => host_only_offer(index, tasks, Some(offsets)),
        // Several rounds: collectives only, laid out alike on every rank.
        Some(_) => host_only_offer(index, tasks, Some(&vec![0; tasks.len()])),
        None => host_only_offer(index, tasks, None),
    }
}

/// The rounds `rank` captures from every rank's offer ([`host_only_offer_of`], all able, same
/// group): one round takes its sources from the offers ([`host_only_sources`]); several, all
/// collectives of the same operations on every rank, find every partner's inputs where their
/// own are.
pub(crate) fn host_only_plan(
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
    offers: &[Vec<u8>],
) -> std::result::Result<Vec<HostOnlyRound>, String> {
    let mine = offers.get(rank).ok_or("no offer of this rank")?;
    if offers.iter().any(|o| o.get(1..9) != mine.get(1..9)) {
        return Err("another group index".into());
    }
    let mut rounds = host_only_rounds(tasks, rank, n, region).ok_or("the group is not taken")?;
    if rounds.len() == 1 {
        let (one, offsets) = rounds.remove(0);
        return Ok(vec![(one, offsets, host_only_sources(rank, offers)?)]);
    }
    if let Some(r) = offers.iter().position(|o| o != mine) {
        return Err(format!("rank {r}'s collectives are not rank {rank}'s"));
    }
    Ok(rounds
        .into_iter()
        .map(|(round, offsets)| {
            let sources = (0..n)
                .map(|j| offsets.iter().map(|&o| (j != rank).then_some(o)).collect())
                .collect();
            (round, offsets, sources)
        })
        .collect())
}

/// The rounds a host-only capture takes `tasks` in, if it takes them: the group as it is when
/// it fits one slot region of `region` bytes; else, a group of all-reduces, broadcasts and
/// reduces cut into pieces of at most a region each, packed in order into rounds of at most a
/// region (each round a handshake cycle of its own on the group's words). Each round with its
/// operations' outbox offsets ([`host_only_offsets`]).
pub(crate) fn host_only_rounds(
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
) -> Option<Vec<(Vec<Task>, Vec<usize>)>> {
    if let Some(offsets) = host_only_offsets(tasks, rank, n, region) {
        return Some(vec![(tasks.to_vec(), offsets)]);
    }
    if !tasks.iter().all(|t| t.elementwise() && supported(t)) {
        return None;
    }
    let mut rounds: Vec<(Vec<Task>, Vec<usize>)> = vec![(Vec::new(), Vec::new())];
    let mut used = 0usize;
    for t in tasks {
        let size = t.dtype.size();
        let most = (region / size).max(1);
        let mut done = 0usize;
        while done < t.count {
            let count = (t.count - done).min(most);
            let bytes = (count * size).next_multiple_of(256);
            if used + bytes > region {
                rounds.push((Vec::new(), Vec::new()));
                used = 0;
            }
            let at = done * size;
            let (round, offsets) = rounds.last_mut()?;
            round.push(Task {
                send: t.send.wrapping_add(at),
                recv: t.recv.wrapping_add(at),
                count,
                ..*t
            });
            offsets.push(used);
            used += bytes;
            done += count;
        }
    }
    Some(rounds)
}

/// Where each of `tasks`' inputs sits in this rank's outbox, if host-only capture takes every
/// task and all fit in `region` bytes.
pub(crate) fn host_only_offsets(
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
) -> Option<Vec<usize>> {
    let mut at = 0usize;
    let mut offsets = Vec::with_capacity(tasks.len());
    for t in tasks {
        offsets.push(at);
        at = at
            .checked_add(outbox_bytes(t, rank, n)?)?
            .next_multiple_of(256);
    }
    (at <= region).then_some(offsets)
}

/// Bytes of `t` a rank's outbox holds (its whole input; a broadcast's or scatter's root's),
/// if host-only capture takes `t`.
fn outbox_bytes(t: &Task, rank: usize, n: usize) -> Option<usize> {
    let elems = match t.kind {
        TaskKind::Coll(
            Collective::AllReduce
            | Collective::AllGather
            | Collective::Broadcast { .. }
            | Collective::Reduce { .. }
            | Collective::Gather { .. },
        ) => t.count,
        TaskKind::Coll(
            Collective::ReduceScatter | Collective::AlltoAll | Collective::Scatter { .. },
        ) => t.count.checked_mul(n)?,
        // To itself: staged (its own outbox is not what it reads).
        TaskKind::Send { peer } | TaskKind::Recv { peer } if peer == rank => return None,
        TaskKind::Send { .. } => t.count,
        TaskKind::Recv { .. } => 0,
    };
    supported(t).then_some(())?;
    elems.checked_mul(t.dtype.size())
}

/// One rank's part of a host-only capture as its peers see it: its ability, the group's index,
/// and per task its signature and outbox offset.
pub(crate) fn host_only_offer(index: usize, tasks: &[Task], offsets: Option<&[usize]>) -> Vec<u8> {
    let mut b = vec![offsets.is_some() as u8];
    b.extend_from_slice(&(index as u64).to_le_bytes());
    for (i, t) in tasks.iter().enumerate() {
        b.extend(signature(t).iter().flat_map(|w| w.to_le_bytes()));
        let at = offsets.and_then(|o| o.get(i)).copied().unwrap_or(0) as u64;
        b.extend_from_slice(&at.to_le_bytes());
    }
    b
}

/// An offer's tasks as (signature, outbox offset).
fn host_only_tasks(b: &[u8]) -> Option<Vec<([u64; 5], usize)>> {
    let body = b.get(9..)?;
    if body.len() % 48 != 0 {
        return None;
    }
    let word = |c: &[u8], k: usize| {
        c.get(k * 8..k * 8 + 8)
            .and_then(|w| w.try_into().ok())
            .map(u64::from_le_bytes)
    };
    body.chunks(48)
        .map(|c| {
            let mut sig = [0u64; 5];
            for (k, w) in sig.iter_mut().enumerate() {
                *w = word(c, k)?;
            }
            Some((sig, word(c, 5)? as usize))
        })
        .collect()
}

/// `sources` of [`HostOnlyGroup`] for `rank` from every rank's offer (all able, same index):
/// the m-th collective of a group meets every partner's m-th collective, which must be the
/// same operation; the k-th receive from `j` meets `j`'s k-th send to this rank, of as many
/// bytes.
pub(crate) fn host_only_sources(
    rank: usize,
    offers: &[Vec<u8>],
) -> std::result::Result<Vec<Vec<Option<usize>>>, String> {
    let all: Vec<Vec<([u64; 5], usize)>> = offers
        .iter()
        .enumerate()
        .map(|(r, b)| host_only_tasks(b).ok_or(format!("rank {r}'s offer is malformed")))
        .collect::<std::result::Result<_, _>>()?;
    let is_p2p = |sig: &[u64; 5]| sig[0] == SEND || sig[0] == RECV;
    let colls = |r: usize| -> Vec<([u64; 5], usize)> {
        all[r].iter().copied().filter(|(s, _)| !is_p2p(s)).collect()
    };
    let mine = &all[rank];
    let my_colls = colls(rank);
    let mut sources = vec![vec![None; mine.len()]; all.len()];
    for (j, row) in sources.iter_mut().enumerate().filter(|&(j, _)| j != rank) {
        let theirs = colls(j);
        if theirs.len() != my_colls.len() || theirs.iter().zip(&my_colls).any(|(a, b)| a.0 != b.0) {
            return Err(format!("rank {j}'s collectives are not rank {rank}'s"));
        }
        let mut their_colls = theirs.iter();
        let mut sends = all[j]
            .iter()
            .filter(|(s, _)| s[0] == SEND && s[1] == rank as u64);
        for (i, (sig, _)) in mine.iter().enumerate() {
            row[i] = match sig[0] {
                SEND => None,
                RECV if sig[1] == j as u64 => {
                    let (send, at) = sends.next().ok_or(format!(
                        "rank {rank} receives from rank {j}, which sends no more"
                    ))?;
                    if send[2] != sig[2] {
                        return Err(format!(
                            "rank {j} sends {} bytes to rank {rank}, which receives {}",
                            send[2], sig[2]
                        ));
                    }
                    Some(*at)
                }
                RECV => None,
                _ => their_colls.next().map(|&(_, at)| at),
            };
        }
        if sends.next().is_some() {
            return Err(format!("rank {j} sends rank {rank} more than it receives"));
        }
    }
    Ok(sources)
}
