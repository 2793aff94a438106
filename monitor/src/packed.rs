//! The form records take in the rings: 48 bytes instead of the 80 of a [`Record`] (whose
//! transitions hold three string slices), so a producer stores and the collector loads
//! fewer cache lines per record. Transition names are interned: they are few and
//! `'static`, and a transition is rare enough to take a lock.

use parking_lot::Mutex;

use crate::event::{CollId, Engine, Record, Scope, Transition, Unit, Work};

const ENGINES: [Engine; 6] = [
    Engine::Host,
    Engine::Mpt,
    Engine::Socket,
    Engine::Shm,
    Engine::CopyEngine,
    Engine::StagedGpu,
];
const UNITS: [Unit; 3] = [Unit::Chunk, Unit::Frame, Unit::Copy];

const POST: u8 = 0;
const COMPLETE: u8 = 1;
const TRANSITION: u8 = 2;

/// A record as the rings carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packed {
    ts_ns: u64,
    bytes: u64,
    /// Work: the communicator; a transition: its scope's id.
    comm: u64,
    /// Work: [`CollId::pack`]; a transition: its three interned names, 16 bits each.
    op_seq: u64,
    peer: u32,
    /// Completions (or posts) it stands for.
    count: u32,
    /// Work: path and NIC; a transition: its scope's kind in `path`.
    path: u16,
    nic: u16,
    kind: u8,
    engine: u8,
    unit: u8,
}

/// Names transitions use, by index (a few dozen at most).
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

fn intern(name: &'static str) -> u64 {
    let mut names = NAMES.lock();
    let i = match names.iter().position(|&n| n == name) {
        Some(i) => i,
        None => {
            names.push(name);
            names.len() - 1
        }
    };
    (i as u64) & 0xffff
}

fn name(i: u64) -> &'static str {
    NAMES.lock().get(i as usize).copied().unwrap_or("?")
}

fn index<T: PartialEq>(all: &[T], v: &T) -> u8 {
    all.iter().position(|x| x == v).unwrap_or(0) as u8
}

impl Packed {
    /// `count` posts or completions of `w` (its bytes their total).
    pub(crate) fn work(w: &Work, count: u32, complete: bool) -> Self {
        Packed {
            ts_ns: w.ts_ns,
            bytes: w.bytes,
            comm: w.coll.comm,
            op_seq: CollId::pack(w.coll.op, w.coll.seq),
            peer: w.peer,
            count,
            path: w.path,
            nic: w.nic,
            kind: if complete { COMPLETE } else { POST },
            engine: index(&ENGINES, &w.engine),
            unit: index(&UNITS, &w.unit),
        }
    }

    pub(crate) fn transition(t: &Transition) -> Self {
        let (kind, id) = match t.scope {
            Scope::Peer(p) => (0, u64::from(p)),
            Scope::Path(p) => (1, u64::from(p)),
            Scope::Nic(n) => (2, u64::from(n)),
            Scope::Comm(c) => (3, c),
        };
        Packed {
            ts_ns: t.ts_ns,
            bytes: 0,
            comm: id,
            op_seq: intern(t.from) | intern(t.to) << 16 | intern(t.reason) << 32,
            peer: 0,
            count: 0,
            path: kind,
            nic: 0,
            kind: TRANSITION,
            engine: 0,
            unit: 0,
        }
    }

    pub(crate) fn ts_ns(&self) -> u64 {
        self.ts_ns
    }

    /// The record, and how many posts or completions it stands for.
    pub(crate) fn unpack(&self) -> (Record, u32) {
        if self.kind == TRANSITION {
            let scope = match self.path {
                0 => Scope::Peer(self.comm as u32),
                1 => Scope::Path(self.comm as u16),
                2 => Scope::Nic(self.comm as u16),
                _ => Scope::Comm(self.comm),
            };
            let t = Transition {
                ts_ns: self.ts_ns,
                scope,
                from: name(self.op_seq & 0xffff),
                to: name(self.op_seq >> 16 & 0xffff),
                reason: name(self.op_seq >> 32 & 0xffff),
            };
            return (Record::Transition(t), 0);
        }
        let w = Work {
            ts_ns: self.ts_ns,
            bytes: self.bytes,
            peer: self.peer,
            path: self.path,
            nic: self.nic,
            engine: ENGINES[usize::from(self.engine).min(ENGINES.len() - 1)],
            unit: UNITS[usize::from(self.unit).min(UNITS.len() - 1)],
            coll: CollId::unpack(self.comm, self.op_seq),
        };
        let r = if self.kind == POST {
            Record::Post(w)
        } else {
            Record::Complete(w)
        };
        (r, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Op;

    #[test]
    fn is_48_bytes_and_round_trips() {
        assert_eq!(std::mem::size_of::<Packed>(), 48);
        let w = Work {
            ts_ns: 1,
            bytes: 1 << 40,
            peer: 3,
            path: 4,
            nic: 5,
            engine: Engine::StagedGpu,
            unit: Unit::Frame,
            coll: CollId {
                comm: 6,
                op: Op::ReduceScatter,
                seq: 7,
            },
        };
        assert_eq!(Packed::work(&w, 9, true).unpack(), (Record::Complete(w), 9));
        assert_eq!(Packed::work(&w, 1, false).unpack(), (Record::Post(w), 1));
        for scope in [
            Scope::Peer(1),
            Scope::Path(2),
            Scope::Nic(3),
            Scope::Comm(1 << 60),
        ] {
            let t = Transition {
                ts_ns: 8,
                scope,
                from: "healthy",
                to: "lossy",
                reason: "chunk declared lost",
            };
            assert_eq!(Packed::transition(&t).unpack(), (Record::Transition(t), 0));
        }
    }
}
