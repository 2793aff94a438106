//! In-memory links for tests of plans (here and in `pieces`).

#![allow(clippy::unwrap_used)] // tests: a poisoned lock is a failed test

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ccl_transports::Link;

/// One direction of a pair: frames in order.
pub(crate) type Wire = Arc<Mutex<VecDeque<Vec<u8>>>>;
/// Each rank's links, indexed by peer (`None` for itself).
pub(crate) type Links = Vec<Vec<Option<Box<dyn Link>>>>;

struct MemLink {
    out: Wire,
    inp: Wire,
    head: Option<Vec<u8>>,
    max_frame: usize,
    cap: usize,
}

impl Link for MemLink {
    fn max_frame(&self) -> usize {
        self.max_frame
    }
    fn try_send(&mut self, frame: &[u8]) -> ccl_transports::Result<bool> {
        let mut q = self.out.lock().unwrap();
        if q.len() >= self.cap {
            return Ok(false);
        }
        q.push_back(frame.to_vec());
        Ok(true)
    }
    fn peek(&mut self) -> ccl_transports::Result<Option<&[u8]>> {
        if self.head.is_none() {
            self.head = self.inp.lock().unwrap().pop_front();
        }
        Ok(self.head.as_deref())
    }
    fn pop(&mut self) {
        self.head = None;
    }
    fn flush(&mut self) -> ccl_transports::Result<bool> {
        Ok(false)
    }
    fn has_pending(&self) -> bool {
        false
    }
    fn kind(&self) -> &'static str {
        "mem"
    }
}

/// Two ranks' links to each other, as `links[rank][peer]`: frames of at most `max_frame`
/// bytes, at most `cap` of them queued per direction (then the sender stalls, as on a real
/// link); and the two wires (rank 0's outgoing, rank 1's), to check they drained.
#[allow(clippy::type_complexity)]
pub(crate) fn pair(max_frame: usize, cap: usize) -> (Links, [Wire; 2]) {
    pair_capped(max_frame, [cap, cap])
}

/// As [`pair`], with rank `r`'s outgoing wire holding at most `caps[r]` frames.
pub(crate) fn pair_capped(max_frame: usize, caps: [usize; 2]) -> (Links, [Wire; 2]) {
    let (a, b): (Wire, Wire) = Default::default();
    let link = |out: &Wire, inp: &Wire, cap: usize| -> Option<Box<dyn Link>> {
        Some(Box::new(MemLink {
            out: out.clone(),
            inp: inp.clone(),
            head: None,
            max_frame,
            cap,
        }))
    };
    let links = vec![
        vec![None, link(&a, &b, caps[0])],
        vec![link(&b, &a, caps[1]), None],
    ];
    (links, [a, b])
}
