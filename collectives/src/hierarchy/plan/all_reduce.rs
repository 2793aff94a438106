//! An all-reduce's stages: on even hosts a host reduce-scatter, an all-reduce of each share
//! across the hosts and a host all-gather (the last few elements beside them); on uneven hosts
//! through each host's first rank.

use crate::Collective;

use super::parts::split_reduction;
use crate::task::{Reduction, Task, TaskKind};

/// `t` as the part of its count that splits evenly over `per` ranks and, if anything is left,
/// an all-reduce of the rest (the same operation on the last elements).
pub fn split_count(t: &Task, per: usize) -> (Task, Option<Task>) {
    let left = t.count % per;
    let head = Task {
        count: t.count - left,
        ..*t
    };
    let at = (t.count - left) * t.dtype.size();
    let tail = (left > 0).then_some(Task {
        send: t.send + at,
        recv: t.recv + at,
        count: left,
        ..*t
    });
    (head, tail)
}

/// The stages of all-reduce `t` over `per` ranks a host on `hosts` hosts, this rank `local`-th
/// on its host: its share of the output (`count / per` elements at `local`) gets the host's
/// reduction of that share of the inputs, then the all-reduce of it across the hosts, then
/// every share is gathered; the reduction split as [`split_reduction`] says.
pub fn stages(t: &Task, per: usize, hosts: usize, local: usize) -> [Task; 3] {
    let share = t.count / per;
    let at = t.recv + local * share * t.dtype.size();
    let sum = Reduction::Plain(crate::dtype::ReduceKind::Sum);
    let (first, second) = split_reduction(t, per * hosts);
    let rs = Task {
        kind: TaskKind::Coll(Collective::ReduceScatter),
        recv: at,
        count: share,
        red: first,
        ..*t
    };
    let ar = Task {
        kind: TaskKind::Coll(Collective::AllReduce),
        send: at,
        recv: at,
        count: share,
        red: second,
        ..*t
    };
    let ag = Task {
        kind: TaskKind::Coll(Collective::AllGather),
        send: at,
        count: share,
        red: sum,
        ..*t
    };
    [rs, ar, ag]
}

/// An all-reduce's stages where hosts hold different numbers of ranks (of `nranks` in all; this
/// rank `local`-th on its host): a reduce on every host to its first rank, in place in that
/// rank's receive buffer; an all-reduce of those across the hosts; a broadcast on every host
/// from its first rank. The network carries what a flat ring would across each host's
/// boundary; the host's links the rest.
pub fn leader_all_reduce(t: &Task, nranks: usize, local: usize) -> [Vec<Task>; 3] {
    let (first, second) = split_reduction(t, nranks);
    let reduce = Task {
        kind: TaskKind::Coll(Collective::Reduce { root: 0 }),
        red: first,
        ..*t
    };
    let cross = Task {
        send: t.recv,
        red: second,
        ..*t
    };
    let broadcast = Task {
        kind: TaskKind::Coll(Collective::Broadcast { root: 0 }),
        send: t.recv,
        red: Reduction::Plain(crate::dtype::ReduceKind::Sum),
        ..*t
    };
    let cross = if local == 0 { vec![cross] } else { Vec::new() };
    [vec![reduce], cross, vec![broadcast]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Scalar;

    /// A count that does not split evenly: the even part goes as the three stages, the last
    /// elements as an all-reduce of their own.
    #[test]
    fn an_uneven_count_splits_off_its_last_elements() {
        let t = crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 14);
        let (head, tail) = split_count(&t, 4);
        assert_eq!((head.send, head.recv, head.count), (0x1000, 0x9000, 12));
        let tail = tail.unwrap();
        assert_eq!((tail.send, tail.recv, tail.count), (0x1030, 0x9030, 2));
        assert_eq!(tail.kind, t.kind);
        let (even, none) = split_count(&Task { count: 12, ..t }, 4);
        assert_eq!((even.count, none.is_none()), (12, true));
    }

    /// Hosts of different sizes: reduce on each host to its first rank, all-reduce among the
    /// first ranks, broadcast on each host; the scaling of an average in the first stage, by
    /// every rank of the communicator.
    #[test]
    fn an_all_reduce_over_uneven_hosts_goes_through_each_hosts_first_rank() {
        let t = Task {
            red: Reduction::Avg,
            ..crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 12)
        };
        let [reduce, cross, bcast] = leader_all_reduce(&t, 5, 0);
        assert_eq!(reduce.len(), 1);
        let r = reduce[0];
        assert_eq!(
            (r.kind, r.send, r.recv, r.count),
            (
                TaskKind::Coll(Collective::Reduce { root: 0 }),
                0x1000,
                0x9000,
                12
            )
        );
        assert!(matches!(r.red, Reduction::PreMulSum(Scalar::Immediate(_))));
        assert_eq!(cross.len(), 1);
        let c = cross[0];
        assert_eq!(
            (c.kind, c.send, c.recv, c.red),
            (
                TaskKind::Coll(Collective::AllReduce),
                0x9000,
                0x9000,
                Reduction::Plain(crate::dtype::ReduceKind::Sum)
            )
        );
        let b = bcast[0];
        assert_eq!(
            (b.kind, b.send, b.recv),
            (
                TaskKind::Coll(Collective::Broadcast { root: 0 }),
                0x9000,
                0x9000
            )
        );
        // A host's other ranks take no part across the hosts.
        let [_, cross, _] = leader_all_reduce(&t, 5, 1);
        assert!(cross.is_empty());
    }

    /// The three stages cover the output in shares, in place as NCCL's in-place reduce-scatter
    /// and all-gather, with each reduction's arithmetic split across them.
    #[test]
    fn an_all_reduce_becomes_a_host_reduce_scatter_a_cross_all_reduce_and_a_host_all_gather() {
        use crate::dtype::DataType;
        let t = crate::task::float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x9000, 12);
        let [rs, ar, ag] = stages(&t, 3, 2, 1);
        // Share 1 of 3: 4 floats at 16 bytes into the output.
        assert_eq!(rs.kind, TaskKind::Coll(Collective::ReduceScatter));
        assert_eq!((rs.send, rs.recv, rs.count), (0x1000, 0x9010, 4));
        assert_eq!(ar.kind, TaskKind::Coll(Collective::AllReduce));
        assert_eq!((ar.send, ar.recv, ar.count), (0x9010, 0x9010, 4));
        assert_eq!(ag.kind, TaskKind::Coll(Collective::AllGather));
        assert_eq!((ag.send, ag.recv, ag.count), (0x9010, 0x9000, 4));
        let reds = |dtype, red| {
            let [a, b, _] = stages(&Task { dtype, red, ..t }, 3, 2, 0);
            (a.red, b.red)
        };
        let sum = Reduction::Plain(crate::dtype::ReduceKind::Sum);
        let max = Reduction::Plain(crate::dtype::ReduceKind::Max);
        assert_eq!(reds(DataType::Float32, max), (max, max));
        let sixth = crate::dtype::from_f64(DataType::Float32, 1.0 / 6.0);
        assert_eq!(
            reds(DataType::Float32, Reduction::Avg),
            (Reduction::PreMulSum(Scalar::Immediate(sixth)), sum)
        );
        let s = Reduction::PreMulSum(Scalar::Immediate([3, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(reds(DataType::Int32, s), (s, sum));
    }
}
