//! A bounded lock-free single-producer single-consumer ring of fixed-size records.
//!
//! A thread that posts work requests must never wait on the monitor: a push allocates
//! nothing, takes no lock, and when the collector has fallen behind drops the record and
//! counts it (the count is exported, so a lossy window is visible rather than silent).

use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::sync::{AtomicU64, AtomicUsize, Ordering, UnsafeCell};

struct Ring<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Next slot the consumer reads; only the consumer stores it.
    head: AtomicUsize,
    /// Next slot the producer writes; only the producer stores it.
    tail: AtomicUsize,
    dropped: AtomicU64,
}

// SAFETY: a slot is written only by the producer while it is outside `head..tail` and read
// only by the consumer while inside it; the Release store of `tail` (after the write) and of
// `head` (after the read), paired with Acquire loads on the other side, order every slot
// access, so sharing the ring between the two threads is sound for `T: Send`.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above; the ring owns its `T`s, which may move between threads when `T: Send`.
unsafe impl<T: Send> Send for Ring<T> {}

/// The writing end. Not `Clone`: a single producer is what makes the ring sound.
pub struct Producer<T> {
    ring: Arc<Ring<T>>,
    /// The consumer's `head` as last read: re-read only when the ring looks full, so a push
    /// does not pull the consumer's cache line every time.
    head: usize,
}

/// The reading end. Not `Clone`, for the same reason.
pub struct Consumer<T> {
    ring: Arc<Ring<T>>,
}

impl<T> std::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").finish_non_exhaustive()
    }
}

/// A ring holding at least `capacity` records (rounded up to a power of two, at least 2).
pub fn channel<T: Copy + Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let slots = (0..cap)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let ring = Arc::new(Ring {
        slots,
        mask: cap - 1,
        head: AtomicUsize::new(0),
        tail: AtomicUsize::new(0),
        dropped: AtomicU64::new(0),
    });
    let producer = Producer {
        ring: ring.clone(),
        head: 0,
    };
    (producer, Consumer { ring })
}

impl<T: Copy + Send> Producer<T> {
    /// Appends `v`, or drops and counts it when the ring is full. Returns whether it was kept.
    #[inline]
    pub fn push(&mut self, v: T) -> bool {
        let r = &*self.ring;
        let tail = r.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(self.head) > r.mask {
            self.head = r.head.load(Ordering::Acquire);
            if tail.wrapping_sub(self.head) > r.mask {
                r.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        r.slots[tail & r.mask].with_mut(|p| {
            // SAFETY: `tail - head <= mask` for a `head` read (Acquire) from the consumer at
            // some point, and the real head only grows, so slot `tail` is outside the
            // consumer's `head..tail`: it does not read the slot until the Release store below
            // publishes it, and the Acquire load of `head` that freed the slot ordered the
            // consumer's last read of it before this write.
            unsafe { (*p).write(v) };
        });
        r.tail.store(tail.wrapping_add(1), Ordering::Release);
        true
    }

    /// Whether the consumer is gone (the monitor shut down).
    pub fn is_orphaned(&self) -> bool {
        Arc::strong_count(&self.ring) == 1
    }
}

impl<T: Copy + Send> Consumer<T> {
    /// The oldest record, if any.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        let r = &*self.ring;
        let head = r.head.load(Ordering::Relaxed);
        let tail = r.tail.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let v = r.slots[head & r.mask].with(|p| {
            // SAFETY: `head != tail`, so the producer wrote slot `head` and published it with
            // its Release store of `tail`, which the Acquire load above synchronised with; the
            // producer does not write it again until the store of `head` below.
            unsafe { (*p).assume_init_read() }
        });
        r.head.store(head.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    /// Whether the ring holds nothing.
    pub fn is_empty(&self) -> bool {
        let r = &*self.ring;
        r.head.load(Ordering::Relaxed) == r.tail.load(Ordering::Acquire)
    }

    /// Records dropped because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.ring.dropped.load(Ordering::Relaxed)
    }

    /// Whether the producer is gone (its thread ended); the ring may still hold records, and
    /// once this returns true a `pop` sees every one of them.
    pub fn is_orphaned(&self) -> bool {
        let gone = Arc::strong_count(&self.ring) == 1;
        if gone {
            // The count is read Relaxed; this fence pairs with the Release decrement of the
            // producer's drop so its last pushes are visible to the pops that follow.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        gone
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.ring.mask + 1
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_until_full_then_drops_and_counts() {
        let (mut p, mut c) = channel::<u32>(3);
        assert_eq!(c.capacity(), 4);
        let kept: Vec<bool> = (0..6).map(|i| p.push(i)).collect();
        assert_eq!(kept, [true, true, true, true, false, false]);
        assert_eq!(c.dropped(), 2);
        assert_eq!(c.pop(), Some(0));
        assert!(p.push(10));
        let rest: Vec<u32> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(rest, [1, 2, 3, 10]);
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn wraps_around_many_times() {
        let (mut p, mut c) = channel::<u64>(2);
        for i in 0..1000 {
            assert!(p.push(i));
            assert!(p.push(i + 1));
            assert_eq!(c.pop(), Some(i));
            assert_eq!(c.pop(), Some(i + 1));
        }
        assert_eq!(c.dropped(), 0);
    }

    #[test]
    fn orphaned_when_the_other_end_drops() {
        let (p, c) = channel::<u8>(2);
        assert!(!c.is_orphaned());
        drop(p);
        assert!(c.is_orphaned());
    }

    /// Across threads every record arrives once, in order, or is counted as dropped.
    #[test]
    fn threads_lose_nothing_uncounted() {
        let (mut p, mut c) = channel::<u64>(64);
        let n = 200_000u64;
        let t = std::thread::spawn(move || (0..n).filter(|&i| p.push(i)).count() as u64);
        let mut got = Vec::new();
        loop {
            match c.pop() {
                Some(v) => got.push(v),
                None if c.is_orphaned() => break,
                None => std::thread::yield_now(),
            }
        }
        let kept = t.join().unwrap();
        got.extend(std::iter::from_fn(|| c.pop()));
        assert_eq!(got.len() as u64, kept);
        assert_eq!(kept + c.dropped(), n);
        assert!(got.windows(2).all(|w| w[0] < w[1]));
    }
}
