//! How the ranks agree at capture: each offers the group's index, what it can do, and per
//! operation its signature and how peers reach its buffers; every rank checks that the groups
//! match and maps what it reads of its partners'.

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;

use super::steps::{reduces, supported};
use crate::error::{Error, Result};
use crate::layout::{groups, POST_WORDS};
use crate::rendezvous::{Post, Reach};

/// One rank's buffers of one operation as this rank reaches them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ends {
    pub send: u64,
    pub recv: u64,
}

/// What one rank says at capture: the group index it would take, whether it can capture the
/// group directly, and per task its signature and how peers reach its buffers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Offer {
    pub(crate) index: u64,
    pub able: bool,
    /// This rank may push: its group only copies, none of its receives is parked, and more
    /// bytes land here or leave from here than its one-kernel limit; its receive buffers are
    /// posted.
    pub push: bool,
    /// This rank's limit of one-shot all-reduces (`CCL_GRAPH_ONE_SHOT_BYTES`).
    pub one_shot: u64,
    pub(crate) tasks: Vec<OfferedTask>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OfferedTask {
    kind: u64,
    /// Root or peer (0 otherwise).
    other: u64,
    count: u64,
    dtype: u64,
    red: u64,
    pub(crate) send: Option<Post>,
    pub(crate) recv: Option<Post>,
}

const MAGIC: u64 = 0x6363_6c67_7261_7068; // "cclgraph"

const TASK_WORDS: usize = 7 + 2 * POST_WORDS;

impl Offer {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = vec![
            MAGIC,
            self.index,
            self.able as u64 | (self.push as u64) << 1,
            self.one_shot,
            self.tasks.len() as u64,
        ];
        for t in &self.tasks {
            w.extend([t.kind, t.other, t.count, t.dtype, t.red]);
            for p in [t.send, t.recv] {
                w.push(p.is_some() as u64);
                w.extend(p.map_or([0; POST_WORDS], Post::to_words));
            }
        }
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    pub fn decode(b: &[u8]) -> Option<Offer> {
        if b.len() % 8 != 0 {
            return None;
        }
        let w: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let (&[magic, index, able, one_shot, ntasks], rest) = w.split_first_chunk::<5>()?;
        if magic != MAGIC || rest.len() != (ntasks as usize).checked_mul(TASK_WORDS)? {
            return None;
        }
        let post = |w: &[u64]| -> Option<Option<Post>> {
            let words: &[u64; POST_WORDS] = w.get(1..1 + POST_WORDS)?.try_into().ok()?;
            Some((w[0] != 0).then(|| Post::from_words(words)))
        };
        let tasks = rest
            .chunks_exact(TASK_WORDS)
            .map(|c| {
                Some(OfferedTask {
                    kind: c[0],
                    other: c[1],
                    count: c[2],
                    dtype: c[3],
                    red: c[4],
                    send: post(&c[5..])?,
                    recv: post(&c[6 + POST_WORDS..])?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Offer {
            index,
            able: able & 1 != 0,
            push: able & 2 != 0,
            one_shot,
            tasks,
        })
    }
}

/// Kinds of [`OfferedTask::kind`] beyond the collectives' codes (which sends and receives
/// share).
pub(crate) const SEND: u64 = 100;

pub(crate) const RECV: u64 = 101;

/// `t` as [`OfferedTask`]'s first five words: a send and a receive pair up by their bytes.
pub(crate) fn signature(t: &Task) -> [u64; 5] {
    match t.kind {
        TaskKind::Send { peer } => [SEND, peer as u64, (t.count * t.dtype.size()) as u64, 0, 0],
        TaskKind::Recv { peer } => [RECV, peer as u64, (t.count * t.dtype.size()) as u64, 0, 0],
        k => [
            u64::from(k.code()),
            k.root().unwrap_or(0) as u64,
            t.count as u64,
            t.dtype as u64,
            if reduces(k) {
                u64::from(t.red.code())
            } else {
                0
            },
        ],
    }
}

/// This rank's offer for `tasks` as group `index`; `able` false if it cannot take the direct
/// path (then the posts are left out). It offers to push ([`Offer::push`]) a group that only
/// copies, parks nothing and moves more than `push_above` bytes in or out here.
pub(crate) fn offer(
    index: usize,
    tasks: &[Task],
    (rank, n): (usize, usize),
    (able, one_shot, push_above): (bool, usize, usize),
    reach: &mut dyn Reach,
) -> Offer {
    let mut able = able && index < groups(n) && tasks.iter().all(supported);
    let mut push = able && pushes(tasks, (rank, n), push_above);
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let [kind, other, count, dtype, red] = signature(t);
        let (send_elems, recv_elems) =
            ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count).unwrap_or((0, 0));
        let bytes = |elems: usize, wanted: bool| match wanted && able {
            true => elems.saturating_mul(t.dtype.size()),
            false => 0,
        };
        let (send_read, recv_read) = read_by_partners(t, rank);
        let recv_written = push && !matches!(t.kind, TaskKind::Send { .. });
        let send = post_buffer(reach, t.send, bytes(send_elems, send_read));
        let recv = post_buffer(reach, t.recv, bytes(recv_elems, recv_read || recv_written));
        // A receive buffer only pushed to that no peer can map: this rank reads instead.
        if send.is_err() || (recv.is_err() && recv_read) {
            able = false;
        } else if recv.is_err() {
            push = false;
        }
        let (send, recv) = (send.unwrap_or(None), recv.unwrap_or(None));
        out.push(OfferedTask {
            kind,
            other,
            count,
            dtype,
            red,
            send,
            recv,
        });
    }
    if !able {
        for t in &mut out {
            (t.send, t.recv) = (None, None);
        }
    }
    Offer {
        index: index as u64,
        able,
        push: push && able,
        one_shot: one_shot as u64,
        tasks: out,
    }
}

/// `ptr`'s post of `bytes` for the peers (None: nothing to post); Err where no peer can map it.
fn post_buffer(
    reach: &mut dyn Reach,
    ptr: usize,
    bytes: usize,
) -> std::result::Result<Option<Post>, ()> {
    if bytes == 0 {
        return Ok(None);
    }
    match reach.export(ptr as u64) {
        Ok(Some(ex)) => Ok(Some(ex.post(reach.pid(), ptr as u64, bytes))),
        _ => Err(()),
    }
}

/// Whether `tasks` of `rank` may push: they only copy, none of their receives is parked (no
/// partner reads what lands here), and more than `above` bytes land here or leave from here.
fn pushes(tasks: &[Task], (rank, n): (usize, usize), above: usize) -> bool {
    let (mut leaving, mut landing) = (0usize, 0usize);
    for t in tasks {
        let (send, recv) =
            ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count).unwrap_or((0, 0));
        leaving = leaving.saturating_add(send.saturating_mul(t.dtype.size()));
        landing = landing.saturating_add(recv.saturating_mul(t.dtype.size()));
    }
    !tasks.iter().any(|t| reduces(t.kind) && t.count > 0)
        && super::steps::parked(tasks, rank, n, 0).1 == 0
        && leaving.max(landing) > above
}

/// Whether the ranks of `offers` push their group (every one offered to): each rank writes
/// what its partners receive of it instead of reading what it receives.
pub(crate) fn agreed_push(offers: &[Offer]) -> bool {
    !offers.is_empty() && offers.iter().all(|o| o.push)
}

/// Checks that the ranks captured matching groups; for each of `rank`'s tasks, the index of
/// its counterpart at every rank: the same collective, for a receive from `j` the matching
/// send at `j`, for a send to `j` the matching receive at `j` (`usize::MAX` elsewhere).
pub(crate) fn matching(
    offers: &[Offer],
    rank: usize,
) -> std::result::Result<Vec<Vec<usize>>, String> {
    let n = offers.len();
    let colls = |o: &Offer| -> Vec<usize> {
        (0..o.tasks.len())
            .filter(|&i| o.tasks[i].kind < SEND)
            .collect()
    };
    let sig = |t: &OfferedTask| (t.kind, t.other, t.count, t.dtype, t.red);
    let all: Vec<Vec<usize>> = offers.iter().map(colls).collect();
    for (r, (o, c)) in offers.iter().zip(&all).enumerate() {
        let differs = c.len() != all[0].len()
            || c.iter()
                .zip(&all[0])
                .any(|(&a, &b)| sig(&o.tasks[a]) != sig(&offers[0].tasks[b]));
        if differs {
            return Err(format!(
                "rank {r} captured other collectives than rank 0 in the same group"
            ));
        }
    }
    let p2p = |o: &Offer, kind: u64, other: usize| -> Vec<usize> {
        (0..o.tasks.len())
            .filter(|&i| o.tasks[i].kind == kind && o.tasks[i].other == other as u64)
            .collect()
    };
    for (i, oi) in offers.iter().enumerate() {
        for (j, oj) in offers.iter().enumerate() {
            let (sends, recvs) = (p2p(oi, SEND, j), p2p(oj, RECV, i));
            if sends.len() != recvs.len() {
                return Err(format!(
                    "rank {i} captured {} sends to rank {j}, which captured {} receives from it",
                    sends.len(),
                    recvs.len()
                ));
            }
            for (&s, &r) in sends.iter().zip(&recvs) {
                if oi.tasks[s].count != oj.tasks[r].count {
                    return Err(format!(
                        "rank {i} captured a send of {} bytes to rank {j}, which captured a \
                         receive of {} bytes from it",
                        oi.tasks[s].count, oj.tasks[r].count
                    ));
                }
            }
        }
    }
    let mine = &offers[rank];
    let (mut recvs_seen, mut sends_seen) = (vec![0usize; n], vec![0usize; n]);
    let mut coll_k = 0;
    let mut out = Vec::with_capacity(mine.tasks.len());
    for t in &mine.tasks {
        let mut row = vec![usize::MAX; n];
        if t.kind < SEND {
            for (k, c) in all.iter().enumerate() {
                row[k] = c[coll_k];
            }
            coll_k += 1;
        } else if t.kind == RECV {
            let j = t.other as usize;
            let k = recvs_seen[j];
            recvs_seen[j] += 1;
            row[j] = p2p(&offers[j], SEND, rank)[k];
        } else {
            let j = t.other as usize;
            let k = sends_seen[j];
            sends_seen[j] += 1;
            row[j] = p2p(&offers[j], RECV, rank)[k];
        }
        out.push(row);
    }
    Ok(out)
}

/// Which of `rank`'s buffers of `t` its partners read: the input of everything but a
/// receive (a broadcast's at its root only), an all-reduce's output too (its second phase).
fn read_by_partners(t: &Task, rank: usize) -> (bool, bool) {
    if t.count == 0 {
        return (false, false);
    }
    match t.kind {
        TaskKind::Recv { .. } => (false, false),
        TaskKind::Coll(Collective::AllReduce) => (true, true),
        TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
            (rank == root, false)
        }
        _ => (true, false),
    }
}

/// Which of rank `k`'s buffers this rank's `t` writes when the group pushes (`rank` != `k`):
/// the receive buffer of every partner its data lands at.
fn writes_of(t: &Task, rank: usize, k: usize) -> (bool, bool) {
    let writes = t.count > 0
        && match t.kind {
            TaskKind::Coll(Collective::AllGather | Collective::AlltoAll) => true,
            TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
                rank == root
            }
            TaskKind::Coll(Collective::Gather { root }) => k == root,
            TaskKind::Send { peer } => k == peer,
            _ => false,
        };
    (false, writes)
}

/// Which of rank `k`'s buffers this rank's `t` reads (`rank` != `k`).
fn reads_of(t: &Task, rank: usize, k: usize) -> (bool, bool) {
    if t.count == 0 {
        return (false, false);
    }
    match t.kind {
        TaskKind::Coll(Collective::AllReduce) => (true, true),
        TaskKind::Coll(Collective::Reduce { root } | Collective::Gather { root }) => {
            (rank == root, false)
        }
        TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
            (k == root, false)
        }
        TaskKind::Send { .. } => (false, false),
        _ => (true, false),
    }
}

/// Every rank's buffers of each of `rank`'s tasks as this rank reaches them.
pub(crate) fn ends_of(
    offers: &[Offer],
    rank: usize,
    tasks: &[Task],
    rows: &[Vec<usize>],
    reach: &mut dyn Reach,
) -> Result<Vec<Vec<Ends>>> {
    let (n, push) = (offers.len(), agreed_push(offers));
    let mut out = Vec::with_capacity(tasks.len());
    for (t, row) in tasks.iter().zip(rows) {
        let mut e = vec![Ends::default(); n];
        for (k, &at) in row.iter().enumerate() {
            if k == rank {
                // A receive from this rank itself reads the matching send's buffer.
                let send = match (t.kind, tasks.get(at)) {
                    (TaskKind::Recv { .. }, Some(s)) => s.send,
                    _ => t.send,
                };
                e[k] = Ends {
                    send: send as u64,
                    recv: t.recv as u64,
                };
                continue;
            }
            let (send, recv) = match push {
                true => writes_of(t, rank, k),
                false => reads_of(t, rank, k),
            };
            let Some(theirs) = offers[k].tasks.get(at) else {
                continue;
            };
            let mut resolve = |wanted: bool, post: Option<Post>| -> Result<u64> {
                if !wanted {
                    return Ok(0);
                }
                let p = post.ok_or_else(|| {
                    Error::internal(format!("cuda-ipc: rank {k} posted no buffer for a graph"))
                })?;
                reach.resolve(&p)
            };
            e[k] = Ends {
                send: resolve(send, theirs.send)?,
                recv: resolve(recv, theirs.recv)?,
            };
        }
        out.push(e);
    }
    Ok(out)
}
