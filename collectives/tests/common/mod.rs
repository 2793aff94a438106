//! Shorthands the hand-written schedules of the tests share.

use ccl_collectives::{BufId, Op, Slice, Step};

pub fn s(buf: BufId, offset: usize, count: usize) -> Slice {
    Slice { buf, offset, count }
}
pub fn snd(o: usize, c: usize) -> Slice {
    s(BufId::Send, o, c)
}
pub fn rcv(o: usize, c: usize) -> Slice {
    s(BufId::Recv, o, c)
}
pub fn steps(ops: Vec<Vec<Op>>) -> Vec<Step> {
    ops.into_iter().map(|ops| Step { ops }).collect()
}
