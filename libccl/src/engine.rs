//! What the communicator's lifecycle asks of every engine that runs its operations (the
//! staged GPU engine, graph capture's replay thread, the copy-engine engine, the hierarchy),
//! and the slot a communicator keeps each one in.
//!
//! The communicator core holds engines only through this trait, so it names none of their
//! types and they can all depend on it: each engine module gets its own type back from its
//! slot ([`EngineSlot::get`]).

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Result;

/// An engine, as the communicator's lifecycle drives it.
pub trait Engine: Send + Sync + 'static {
    /// Waits until everything it queued has run (`ncclCommFinalize`, before a destroy); gives
    /// up when `abort` is set.
    fn wait_idle(&self, abort: &AtomicBool) -> Result<()>;
    /// Looks for trouble the caller cannot see (mismatched calls, work that cannot finish)
    /// and records it as the communicator's async error (`ncclCommGetAsyncError`).
    fn check_health(&self) {}
    /// Stops its threads and releases what it holds. `aborted`: peers may be gone and may
    /// still write into its memory, so what they could reach is leaked rather than freed.
    fn shutdown(&self, aborted: bool);
    /// Bytes of GPU memory it holds for the communicator (`ncclCommMemStats`).
    fn gpu_bytes(&self) -> u64 {
        0
    }
    /// Itself as `Any`, for its own module to get its type back.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// Where a communicator keeps one engine, made when first needed.
#[derive(Default)]
pub struct EngineSlot(Mutex<Option<Arc<dyn Engine>>>);

impl EngineSlot {
    /// The engine, if one of type `E` is there.
    pub fn get<E: Engine>(&self) -> Option<Arc<E>> {
        let e = self.0.lock().clone()?;
        e.into_any().downcast::<E>().ok()
    }

    /// The engine of type `E`, made by `make` if the slot is empty (under the slot's lock, so
    /// two threads never make two).
    pub fn get_or_make<E: Engine>(&self, make: impl FnOnce() -> Result<Arc<E>>) -> Result<Arc<E>> {
        let mut slot = self.0.lock();
        if let Some(e) = slot.clone().and_then(|e| e.into_any().downcast::<E>().ok()) {
            return Ok(e);
        }
        let e = make()?;
        *slot = Some(e.clone());
        Ok(e)
    }

    pub fn set(&self, engine: Arc<dyn Engine>) {
        *self.0.lock() = Some(engine);
    }

    pub fn is_some(&self) -> bool {
        self.0.lock().is_some()
    }

    /// Empties the slot, handing its engine over (to shut it down).
    pub fn take(&self) -> Option<Arc<dyn Engine>> {
        self.0.lock().take()
    }

    /// Waits for the engine in the slot, if any, to run what it queued.
    pub fn wait_idle(&self, abort: &AtomicBool) -> Result<()> {
        let e = self.0.lock().clone();
        e.map_or(Ok(()), |e| e.wait_idle(abort))
    }

    /// Lets the engine in the slot, if any, check its health.
    pub fn check_health(&self) {
        let e = self.0.lock().clone();
        if let Some(e) = e {
            e.check_health();
        }
    }

    /// Takes the engine out and shuts it down.
    pub fn shutdown(&self, aborted: bool) {
        if let Some(e) = self.take() {
            e.shutdown(aborted);
        }
    }

    /// The GPU memory its engine holds (0 without one).
    pub fn gpu_bytes(&self) -> u64 {
        self.0.lock().as_ref().map_or(0, |e| e.gpu_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Engine for Counting {
        fn wait_idle(&self, _: &AtomicBool) -> Result<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn shutdown(&self, aborted: bool) {
            self.0
                .fetch_add(if aborted { 100 } else { 10 }, Ordering::Relaxed);
        }
        /// As many bytes as the counter reads, so a test sees the slot ask this engine.
        fn gpu_bytes(&self) -> u64 {
            self.0.load(Ordering::Relaxed) as u64
        }
        fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    struct Other;

    impl Engine for Other {
        fn wait_idle(&self, _: &AtomicBool) -> Result<()> {
            Ok(())
        }
        fn shutdown(&self, _: bool) {}
        fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    #[test]
    fn a_slot_makes_its_engine_once_and_hands_back_its_type_only() {
        let slot = EngineSlot::default();
        assert!(slot.get::<Counting>().is_none());
        let made = slot
            .get_or_make(|| Ok(Arc::new(Counting::default())))
            .unwrap();
        let again = slot
            .get_or_make::<Counting>(|| panic!("made twice"))
            .unwrap();
        assert!(Arc::ptr_eq(&made, &again));
        assert!(slot.get::<Other>().is_none());
        slot.wait_idle(&AtomicBool::new(false)).unwrap();
        assert_eq!(slot.gpu_bytes(), 1, "the engine's own count");
        slot.shutdown(true);
        assert_eq!(made.0.load(Ordering::Relaxed), 101);
        assert!(!slot.is_some());
        assert_eq!(slot.gpu_bytes(), 0, "no engine, no memory");
        slot.shutdown(false);
        assert_eq!(made.0.load(Ordering::Relaxed), 101);
    }
}
