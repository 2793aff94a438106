//! The interface observers plug into: transports and engines call a [`Subscriber`] (the
//! monitor's publisher, a test's counter, or several at once as a pair), and the monitor's own
//! analysis reports its window events to the subscribers it was given.

use crate::event::{Transition, Work};
use crate::window::Event;

/// Receives records. Every method defaults to doing nothing, so a subscriber implements only
/// what it wants; a transport generic over `S: Subscriber` and given `()` compiles its calls
/// away.
pub trait Subscriber {
    /// A work request was handed to the hardware or peer.
    fn on_post(&self, _w: &Work) {}
    /// A work request completed.
    fn on_complete(&self, _w: &Work) {}
    /// A health or failover state changed.
    fn on_transition(&self, _t: &Transition) {}
    /// The monitor's analysis produced an event (only subscribers given to
    /// [`crate::Monitor::with_options`] see these).
    fn on_window(&self, _e: &Event) {}
}

/// The subscriber that ignores everything.
impl Subscriber for () {}

/// Both subscribers, in order: a transport holds one `S` and still feeds several sinks.
impl<A: Subscriber, B: Subscriber> Subscriber for (A, B) {
    fn on_post(&self, w: &Work) {
        self.0.on_post(w);
        self.1.on_post(w);
    }

    fn on_complete(&self, w: &Work) {
        self.0.on_complete(w);
        self.1.on_complete(w);
    }

    fn on_transition(&self, t: &Transition) {
        self.0.on_transition(t);
        self.1.on_transition(t);
    }

    fn on_window(&self, e: &Event) {
        self.0.on_window(e);
        self.1.on_window(e);
    }
}

/// A shared subscriber.
impl<S: Subscriber + ?Sized> Subscriber for std::sync::Arc<S> {
    fn on_post(&self, w: &Work) {
        (**self).on_post(w);
    }

    fn on_complete(&self, w: &Work) {
        (**self).on_complete(w);
    }

    fn on_transition(&self, t: &Transition) {
        (**self).on_transition(t);
    }

    fn on_window(&self, e: &Event) {
        (**self).on_window(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::W;
    use crate::event::Scope;
    use std::cell::Cell;

    #[derive(Default)]
    struct Count(Cell<u32>, Cell<u32>, Cell<u32>);

    impl Subscriber for Count {
        fn on_post(&self, _w: &Work) {
            self.0.set(self.0.get() + 1);
        }
        fn on_complete(&self, _w: &Work) {
            self.1.set(self.1.get() + 1);
        }
        fn on_transition(&self, _t: &Transition) {
            self.2.set(self.2.get() + 1);
        }
    }

    #[test]
    fn a_pair_feeds_both_and_unit_ignores() {
        let pair = (Count::default(), ((), Count::default()));
        pair.on_post(&W);
        pair.on_complete(&W);
        pair.on_complete(&W);
        pair.on_transition(&Transition {
            ts_ns: 1,
            scope: Scope::Comm(6),
            from: "a",
            to: "b",
            reason: "c",
        });
        for c in [&pair.0, &pair.1 .1] {
            assert_eq!((c.0.get(), c.1.get(), c.2.get()), (1, 2, 1));
        }
    }
}
