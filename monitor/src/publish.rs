//! The emitting side: a [`Publisher`] is what transports and engines hold. When the monitor is
//! off it is empty and each call costs one branch; when on, each thread that emits gets a ring
//! of its own on first use, which the collector adopts.

use std::cell::RefCell;
use std::sync::Arc;

use crate::event::{Transition, Work};
use crate::packed::Packed;
use crate::ring::{self, Producer};
use crate::subscriber::Subscriber;
use crate::Shared;

thread_local! {
    /// This thread's ring for each live monitor, by monitor id (rarely more than one).
    static RINGS: RefCell<Vec<(u64, Producer<Packed>)>> = const { RefCell::new(Vec::new()) };
}

/// A cheap handle for emitting records; clone it freely.
#[derive(Clone, Default)]
pub struct Publisher {
    shared: Option<Arc<Shared>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("on", &self.shared.is_some())
            .finish()
    }
}

impl Publisher {
    /// A publisher that records nothing.
    pub fn off() -> Self {
        Publisher { shared: None }
    }

    pub(crate) fn on(shared: Arc<Shared>) -> Self {
        Publisher {
            shared: Some(shared),
        }
    }

    /// Whether records go anywhere; build records only when it is true.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.shared.is_some()
    }

    /// The monitor clock's reading, or 0 (without reading any clock) when off.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match &self.shared {
            Some(s) => s.clock.now_ns(),
            None => 0,
        }
    }

    /// Emits a post.
    #[inline]
    pub fn post(&self, w: &Work) {
        self.post_many(w, 1);
    }

    /// Emits a completion.
    #[inline]
    pub fn complete(&self, w: &Work) {
        self.complete_many(w, 1);
    }

    /// Emits `n` posts at once, `w.bytes` their total: one record for a round's chunks of
    /// one path.
    #[inline]
    pub fn post_many(&self, w: &Work, n: u32) {
        if let Some(s) = &self.shared {
            push(s, Packed::work(w, n, false));
        }
    }

    /// Emits `n` completions at once, `w.bytes` their total.
    #[inline]
    pub fn complete_many(&self, w: &Work, n: u32) {
        if let Some(s) = &self.shared {
            push(s, Packed::work(w, n, true));
        }
    }

    /// Emits a health or failover transition.
    #[inline]
    pub fn transition(&self, t: &Transition) {
        if let Some(s) = &self.shared {
            push(s, Packed::transition(t));
        }
    }
}

impl Subscriber for Publisher {
    fn on_post(&self, w: &Work) {
        self.post(w);
    }

    fn on_complete(&self, w: &Work) {
        self.complete(w);
    }

    fn on_transition(&self, t: &Transition) {
        self.transition(t);
    }
}

fn push(s: &Arc<Shared>, r: Packed) {
    // Fails only while the thread is being torn down, when a lost record does not matter.
    let _ = RINGS.try_with(|rings| {
        let Ok(mut rings) = rings.try_borrow_mut() else {
            return;
        };
        match rings.iter_mut().find(|(id, _)| *id == s.id) {
            Some((_, p)) => {
                p.push(r);
            }
            None => {
                // Rings of monitors that are gone go first.
                rings.retain(|(_, p)| !p.is_orphaned());
                let mut p = register(s);
                p.push(r);
                rings.push((s.id, p));
            }
        }
    });
}

/// A new ring for this thread, handed to monitor `s`'s collector.
#[cold]
fn register(s: &Shared) -> Producer<Packed> {
    let (p, c) = ring::channel(s.ring_capacity);
    s.pending.lock().push(c);
    if let Some(t) = s.collector.get() {
        t.unpark();
    }
    p
}
