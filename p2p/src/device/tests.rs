use std::collections::HashMap;

use ccl_cuda::DataType;

use super::*;

/// What reaches a device: one entry per call, flag batches as one entry.
#[derive(Default)]
struct Calls {
    log: Vec<String>,
    kernels: bool,
}

impl Device for Calls {
    fn wait(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
        self.log.push(format!("wait {lane:?} {addr}"));
        Ok(())
    }
    fn wait_long(&mut self, lane: Lane, addr: u64, _: u32, _: LongWait) -> Result<()> {
        self.log.push(format!("wait-kernel {lane:?} {addr}"));
        Ok(())
    }
    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        _: (u64, u32),
        (dst, _, _): (u64, u64, usize),
        _: (u64, u32),
        _: CopyOf,
    ) -> Result<()> {
        self.log.push(format!("copy-kernel {lane:?} {dst}"));
        Ok(())
    }
    fn write(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
        self.log.push(format!("write {lane:?} {addr}"));
        Ok(())
    }
    fn copy(&mut self, lane: Lane, dst: u64, _: u64, _: usize) -> Result<()> {
        self.log.push(format!("copy {lane:?} {dst}"));
        Ok(())
    }
    fn pull(&mut self, lane: Lane, dst: u64, (_, there): (u64, u64), _: usize) -> Result<()> {
        self.log.push(format!("pull {lane:?} {dst} from {there}"));
        Ok(())
    }
    fn kernel(&mut self, lane: Lane, _: Kernel) -> Result<()> {
        self.log.push(format!("kernel {lane:?}"));
        Ok(())
    }
    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.log.push(format!("fork {lanes:?}"));
        Ok(())
    }
    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        self.log.push(format!("join {lanes:?}"));
        Ok(())
    }
    fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
        let ops: Vec<String> = ops
            .iter()
            .map(|op| match op {
                FlagOp::Wait(a, _) => format!("wait {a}"),
                FlagOp::Write(a, _) => format!("write {a}"),
            })
            .collect();
        self.log
            .push(format!("flags {lane:?} [{}]", ops.join(", ")));
        Ok(())
    }
    fn long_wait_is_kernel(&self, _: LongWait) -> bool {
        self.kernels
    }
    fn copy_signal_is_kernel(&self, _: CopyOf) -> bool {
        self.kernels
    }
}

/// A direct transfer's usual calls through [`Batched`]: flag operations next to each other
/// on one lane reach the device as one batch, in order; a copy, a fork or another lane's
/// operation hands over what is held first, so the device sees everything in the order it
/// was queued; a flush (or the end) hands over the rest.
#[test]
fn batched_flag_operations_keep_their_place_among_the_other_calls() {
    let (u, t) = (Lane::User, Lane::Tx(0));
    let mut calls = Calls::default();
    {
        let mut dev = Batched::new(&mut calls);
        dev.write(u, 1, 1).unwrap();
        dev.write(u, 2, 1).unwrap();
        dev.flush().unwrap();
        dev.flush().unwrap(); // nothing held: no call
        dev.wait_copy_signal(u, (3, 1), (100, 200, 8), (4, 1), CopyOf::Transfer)
            .unwrap();
        dev.wait_long(u, 5, 1, LongWait::Transfer).unwrap();
        dev.write(t, 6, 1).unwrap();
        dev.fork(&[t]).unwrap();
        dev.wait(t, 7, 1).unwrap();
        dev.wait(u, 8, 1).unwrap();
        dev.kernel(
            t,
            Kernel::DivInt {
                dtype: DataType::Int32,
                dst: 0,
                n: 0,
                divisor: 1,
            },
        )
        .unwrap();
        dev.write(u, 9, 1).unwrap();
        // dropped with the last write held: it is handed over all the same
    }
    assert_eq!(
        calls.log,
        [
            "flags User [write 1, write 2]",
            "flags User [wait 3]",
            "copy User 100",
            "flags User [write 4, wait 5]",
            "flags Tx(0) [write 6]",
            "fork [Tx(0)]",
            "flags Tx(0) [wait 7]",
            "flags User [wait 8]",
            "kernel Tx(0)",
            "flags User [write 9]",
        ]
    );
}

/// A pull through [`Batched`] reaches the device as a pull (which it may run on the peer
/// GPU), between its wait and its "done" write, each handed over in order; with copies as
/// kernels it is the one wait-copy-signal kernel.
#[test]
fn batched_pulls_reach_the_device_as_pulls() {
    for kernels in [false, true] {
        let mut calls = Calls {
            kernels,
            ..Calls::default()
        };
        {
            let mut dev = Batched::new(&mut calls);
            dev.write(Lane::User, 1, 1).unwrap();
            dev.wait_pull_signal(Lane::Rx(0), (3, 1), (100, 200, 8), 300, (4, 1))
                .unwrap();
        }
        let want: &[&str] = if kernels {
            &["flags User [write 1]", "copy-kernel Rx(0) 100"]
        } else {
            &[
                "flags User [write 1]",
                "flags Rx(0) [wait 3]",
                "pull Rx(0) 100 from 300",
                "flags Rx(0) [write 4]",
            ]
        };
        assert_eq!(calls.log, want, "kernels {kernels}");
    }
}

/// A long run of flag operations (a group of many sends, each flagging "here") goes over
/// in batches of at most [`MAX_FLAG_BATCH`], in order.
#[test]
fn batched_flag_operations_go_in_batches_of_at_most_the_limit() {
    let mut calls = Calls::default();
    let n = 2 * MAX_FLAG_BATCH + 3;
    {
        let mut dev = Batched::new(&mut calls);
        for i in 0..n {
            dev.write(Lane::User, i as u64, 1).unwrap();
        }
    }
    let sizes: Vec<usize> = calls
        .log
        .iter()
        .map(|c| c.matches("write").count())
        .collect();
    assert_eq!(sizes, [MAX_FLAG_BATCH, MAX_FLAG_BATCH, 3]);
    let order: Vec<u64> = calls
        .log
        .iter()
        .flat_map(|c| {
            c.split("write ")
                .skip(1)
                .map(|w| w.trim_end_matches([',', ' ', ']']).parse::<u64>().unwrap())
        })
        .collect();
    assert_eq!(order, (0..n as u64).collect::<Vec<_>>());
}

/// Each call a device sees: its number and what it did; a batch's operations share one.
#[derive(Default)]
struct Flat {
    calls: usize,
    ops: Vec<(usize, Lane, String)>,
}

impl Flat {
    fn one(&mut self, lane: Lane, what: String) {
        self.calls += 1;
        self.ops.push((self.calls, lane, what));
    }
}

impl Device for Flat {
    fn wait(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
        self.one(lane, format!("wait {addr}"));
        Ok(())
    }
    fn write(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
        self.one(lane, format!("write {addr}"));
        Ok(())
    }
    fn copy(&mut self, lane: Lane, dst: u64, _: u64, _: usize) -> Result<()> {
        self.one(lane, format!("copy {dst}"));
        Ok(())
    }
    fn kernel(&mut self, lane: Lane, _: Kernel) -> Result<()> {
        self.one(lane, "kernel".into());
        Ok(())
    }
    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.one(Lane::User, format!("fork {lanes:?}"));
        Ok(())
    }
    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        self.one(Lane::User, format!("join {lanes:?}"));
        Ok(())
    }
    fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
        self.calls += 1;
        for op in ops {
            let what = match op {
                FlagOp::Wait(a, _) => format!("wait {a}"),
                FlagOp::Write(a, _) => format!("write {a}"),
            };
            self.ops.push((self.calls, lane, what));
        }
        Ok(())
    }
}

/// Random call sequences (seeded) through [`Batched`] reach the device as the same
/// operations in the same order as without it; a batch holds one lane's flag operations
/// only, at most [`MAX_FLAG_BATCH`] of them; after a flush nothing is held back.
#[test]
fn batched_random_sequences_arrive_unchanged() {
    use rand::{Rng, SeedableRng};
    let lanes = [Lane::User, Lane::Tx(0), Lane::Tx(1), Lane::Rx(0)];
    for seed in 0..300u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let n = rng.gen_range(1..600);
        let script: Vec<(u8, Lane, u64)> = (0..n)
            .map(|i| (rng.gen_range(0..20u8), lanes[rng.gen_range(0..4)], i as u64))
            .collect();
        let run = |dev: &mut dyn Device| {
            for &(k, lane, a) in &script {
                match k {
                    0..=7 => dev.wait(lane, a, 1).unwrap(),
                    8..=15 => dev.write(lane, a, 1).unwrap(),
                    16 => dev.copy(lane, a, 0, 8).unwrap(),
                    17 => {
                        let k = Kernel::DivInt {
                            dtype: DataType::Int32,
                            dst: a,
                            n: 1,
                            divisor: 2,
                        };
                        dev.kernel(lane, k).unwrap()
                    }
                    18 => dev.fork(&[lane]).unwrap(),
                    _ => dev.join(&[lane]).unwrap(),
                }
            }
        };
        let mut plain = Flat::default();
        run(&mut plain);
        let mut batched = Flat::default();
        {
            let mut dev = Batched::new(&mut batched);
            run(&mut dev);
            dev.flush().unwrap();
            // After a flush the device has everything queued so far.
            assert!(dev.held.is_empty());
        }
        let strip = |f: &Flat| {
            f.ops
                .iter()
                .map(|(_, l, w)| (*l, w.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&batched), strip(&plain), "seed {seed}");
        let mut per_call: HashMap<usize, (Lane, usize, bool)> = HashMap::new();
        for (c, l, w) in &batched.ops {
            let flag = w.starts_with("wait") || w.starts_with("write");
            let e = per_call.entry(*c).or_insert((*l, 0, flag));
            assert_eq!(e.0, *l, "seed {seed}: one batch, one lane");
            assert_eq!(
                e.2, flag,
                "seed {seed}: flag operations batched with nothing else"
            );
            e.1 += 1;
        }
        assert!(
            per_call.values().all(|&(_, k, _)| k <= MAX_FLAG_BATCH),
            "seed {seed}"
        );
        // Fewer calls than operations whenever flag operations came in runs on one lane.
        assert!(batched.calls <= plain.calls, "seed {seed}");
    }
}

/// Where the device runs the long wait and the wait-copy-signal as kernels, those are not
/// flag operations: what is held goes first, then the kernel call itself.
#[test]
fn batched_hands_kernel_waits_to_the_device_as_they_are() {
    let u = Lane::User;
    let mut calls = Calls {
        kernels: true,
        ..Calls::default()
    };
    let mut dev = Batched::new(&mut calls);
    dev.write(u, 1, 1).unwrap();
    dev.wait_copy_signal(u, (2, 1), (100, 200, 8), (3, 1), CopyOf::Transfer)
        .unwrap();
    dev.write(u, 4, 1).unwrap();
    dev.wait_long(u, 5, 1, LongWait::Transfer).unwrap();
    dev.flush().unwrap();
    drop(dev);
    assert_eq!(
        calls.log,
        [
            "flags User [write 1]",
            "copy-kernel User 100",
            "flags User [write 4]",
            "wait-kernel User 5",
        ]
    );
}
