//! The atomics of the lock-free shared-memory protocols (the cuda-ipc rendezvous), behind one
//! object-safe trait, so that the same code runs on words mapped from `/dev/shm` (std atomics)
//! and under loom's model checker, which explores every interleaving and every reordering the
//! memory orderings allow.

pub(crate) use std::sync::atomic::Ordering;

/// A 64-bit atomic word as the protocols use it.
pub(crate) trait Atomic64 {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
    fn fetch_add(&self, value: u64, order: Ordering) -> u64;
    /// One round of waiting for another party to change the word: spin, then yield, then
    /// sleep briefly (under loom: yield, which the model needs to make progress).
    fn pause(&self, spins: &mut u32);
}

impl Atomic64 for std::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::load(self, order)
    }
    fn store(&self, value: u64, order: Ordering) {
        std::sync::atomic::AtomicU64::store(self, value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        std::sync::atomic::AtomicU64::compare_exchange(self, current, new, success, failure)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::fetch_add(self, value, order)
    }
    fn pause(&self, spins: &mut u32) {
        *spins += 1;
        if *spins < 64 {
            std::hint::spin_loop();
        } else if *spins < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
}

#[cfg(test)]
impl Atomic64 for loom::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::load(self, order)
    }
    fn store(&self, value: u64, order: Ordering) {
        loom::sync::atomic::AtomicU64::store(self, value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        loom::sync::atomic::AtomicU64::compare_exchange(self, current, new, success, failure)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::fetch_add(self, value, order)
    }
    fn pause(&self, _spins: &mut u32) {
        loom::thread::yield_now();
    }
}
