//! The simulated operations: every collective and a ring of sends and receives, each rank's
//! buffers and inputs, and what every output must hold.

use ccl_collectives::task::{Reduction, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use super::device::Mem;

/// One collective (or p2p ring) with every rank's buffers, for `simulate`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Case {
    pub(super) kind: Kind,
    pub(super) count: usize,
    pub(super) dtype: DataType,
    pub(super) red: Reduction,
    pub(super) in_place: bool,
}

impl Case {
    /// `count` 32-bit integers summed (exact in any order), in place or not.
    pub(super) fn int_sum(kind: Kind, count: usize, in_place: bool) -> Case {
        Case {
            kind,
            count,
            dtype: DataType::Int32,
            red: Reduction::Plain(ReduceKind::Sum),
            in_place,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    Coll(Collective),
    /// Each rank sends to rank + 1 and receives from rank - 1, in one group.
    Ring,
}

pub(super) fn every_case(n: usize, count: usize) -> Vec<Case> {
    let plain = |kind, in_place| Case::int_sum(kind, count, in_place);
    let mut v = vec![
        plain(Kind::Coll(Collective::AllReduce), false),
        plain(Kind::Coll(Collective::AllReduce), true),
        plain(Kind::Coll(Collective::ReduceScatter), false),
        plain(Kind::Coll(Collective::ReduceScatter), true),
        plain(Kind::Coll(Collective::AllGather), false),
        plain(Kind::Coll(Collective::AllGather), true),
        plain(Kind::Coll(Collective::AlltoAll), false),
        plain(Kind::Coll(Collective::AlltoAll), true),
        plain(Kind::Coll(Collective::Broadcast { root: 1 % n }), false),
        plain(Kind::Coll(Collective::Reduce { root: n - 1 }), false),
        plain(Kind::Coll(Collective::Gather { root: 0 }), false),
        plain(Kind::Coll(Collective::Scatter { root: n - 1 }), false),
        plain(Kind::Ring, false),
        plain(Kind::Ring, true),
    ];
    v.push(Case {
        red: Reduction::Plain(ReduceKind::Max),
        ..plain(Kind::Coll(Collective::AllReduce), false)
    });
    v.push(Case {
        red: Reduction::Avg,
        ..plain(Kind::Coll(Collective::AllReduce), true)
    });
    let mut three = [0u8; 8];
    three[..4].copy_from_slice(&3i32.to_le_bytes());
    for kind in [
        Kind::Coll(Collective::AllReduce),
        Kind::Coll(Collective::ReduceScatter),
        Kind::Coll(Collective::Reduce { root: 0 }),
    ] {
        v.push(Case {
            red: Reduction::PreMulSum(ccl_collectives::task::Scalar::Immediate(three)),
            ..plain(kind, false)
        });
    }
    if n.is_power_of_two() {
        // Float Avg scales by 1/n: exact for powers of two with these inputs.
        v.push(Case {
            dtype: DataType::Float32,
            red: Reduction::Avg,
            ..plain(Kind::Coll(Collective::AllReduce), false)
        });
        v.push(Case {
            dtype: DataType::Float32,
            red: Reduction::Avg,
            ..plain(Kind::Coll(Collective::ReduceScatter), false)
        });
    }
    v
}

pub(super) const BUF: u64 = 0x0100_0000;

pub(super) fn base(rank: usize) -> u64 {
    0x1_0000_0000 * (rank as u64 + 1)
}

/// Send and receive addresses of `case` number `k` on `rank`, and the sizes in elements.
pub(super) fn buffers(case: &Case, k: usize, rank: usize, n: usize) -> (u64, u64, usize, usize) {
    let sz = case.dtype.size() as u64;
    let c = case.count;
    let (se, re) = match case.kind {
        Kind::Ring => (c, c),
        Kind::Coll(coll) => {
            ccl_collectives::task::buffer_counts(TaskKind::Coll(coll), rank, n, c).unwrap()
        }
    };
    let send = base(rank) + 0x1000_0000 + k as u64 * BUF * 2;
    let mut recv = send + BUF;
    let mut s = send;
    if case.in_place {
        match case.kind {
            Kind::Coll(Collective::AllGather) => s = recv + rank as u64 * c as u64 * sz,
            Kind::Coll(Collective::ReduceScatter) => recv = s + rank as u64 * c as u64 * sz,
            _ => recv = s,
        }
    }
    (s, recv, se, re)
}

pub(super) fn tasks(case: &Case, k: usize, rank: usize, n: usize) -> Vec<Task> {
    let (send, recv, _, _) = buffers(case, k, rank, n);
    let t = |kind| Task {
        kind,
        send: send as usize,
        recv: recv as usize,
        count: case.count,
        dtype: case.dtype,
        red: case.red,
        stream: 0,
        fold: false,
    };
    match case.kind {
        Kind::Coll(c) => vec![t(TaskKind::Coll(c))],
        Kind::Ring => vec![
            t(TaskKind::Send {
                peer: (rank + 1) % n,
            }),
            t(TaskKind::Recv {
                peer: (rank + n - 1) % n,
            }),
        ],
    }
}

/// Input element `i` of `rank`: small integers, so sums in any order are exact in f32 too.
pub(super) fn input(rank: usize, i: usize) -> i64 {
    ((rank * 7 + i * 3) % 23) as i64 - 5
}

pub(super) fn encode(dt: DataType, v: f64) -> Vec<u8> {
    match dt {
        DataType::Int32 => (v as i32).to_le_bytes().to_vec(),
        DataType::Float32 => (v as f32).to_le_bytes().to_vec(),
        _ => unreachable!("the simulation uses int32 and float32"),
    }
}

/// What `rank`'s receive buffer must hold afterwards (`None`: not written).
pub(super) fn expected(case: &Case, rank: usize, n: usize) -> Option<Vec<f64>> {
    let c = case.count;
    let red = |vals: Vec<i64>| -> f64 {
        match case.red {
            Reduction::Plain(ReduceKind::Max) => *vals.iter().max().unwrap() as f64,
            Reduction::Avg if case.dtype == DataType::Int32 => {
                (vals.iter().sum::<i64>() / n as i64) as f64
            }
            Reduction::Avg => vals.iter().sum::<i64>() as f64 / n as f64,
            // The simulation's PreMulSum scalar is 3 (int32).
            Reduction::PreMulSum(_) => vals.iter().map(|v| v * 3).sum::<i64>() as f64,
            _ => vals.iter().sum::<i64>() as f64,
        }
    };
    let all = |i: usize| (0..n).map(|q| input(q, i)).collect::<Vec<_>>();
    Some(match case.kind {
        Kind::Ring => (0..c)
            .map(|i| input((rank + n - 1) % n, i) as f64)
            .collect(),
        Kind::Coll(Collective::AllReduce) => (0..c).map(|i| red(all(i))).collect(),
        Kind::Coll(Collective::ReduceScatter) => (0..c).map(|i| red(all(rank * c + i))).collect(),
        Kind::Coll(Collective::Reduce { root }) if root == rank => {
            (0..c).map(|i| red(all(i))).collect()
        }
        Kind::Coll(Collective::Broadcast { root }) => {
            (0..c).map(|i| input(root, i) as f64).collect()
        }
        Kind::Coll(Collective::AllGather) => {
            (0..n * c).map(|j| input(j / c, j % c) as f64).collect()
        }
        Kind::Coll(Collective::AlltoAll) => (0..n * c)
            .map(|j| input(j / c, rank * c + j % c) as f64)
            .collect(),
        Kind::Coll(Collective::Gather { root }) if root == rank => {
            (0..n * c).map(|j| input(j / c, j % c) as f64).collect()
        }
        Kind::Coll(Collective::Scatter { root }) => {
            (0..c).map(|i| input(root, rank * c + i) as f64).collect()
        }
        _ => return None,
    })
}

/// Every rank's buffers of every case in `mem`, and its inputs in them (an in-place receive
/// buffer starts as the input where they overlap).
pub(super) fn place_inputs(mem: &mut Mem, cases: &[Case], n: usize) {
    for (k, case) in cases.iter().enumerate() {
        for r in 0..n {
            let (send, _, se, re) = buffers(case, k, r, n);
            let base_send = base(r) + 0x1000_0000 + k as u64 * BUF * 2;
            // As much as the buffers need (in place, one lies inside the other's region).
            let need = (se.max(re) * case.dtype.size()).max(1);
            mem.alloc(base_send, need);
            mem.alloc(base_send + BUF, need);
            let bytes: Vec<u8> = (0..se)
                .flat_map(|i| encode(case.dtype, input(r, i) as f64))
                .collect();
            mem.range(send, bytes.len()).copy_from_slice(&bytes);
        }
    }
}
