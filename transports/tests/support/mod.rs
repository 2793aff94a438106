//! A counting global allocator for the tests that check "no allocation per chunk/frame".
//! Include with `mod support;`: it installs itself as the test binary's allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts allocations made on a thread while that thread switched counting on.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls made on this thread while
// counting is switched on.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f`, counting the allocations this thread makes meanwhile when `count` is set;
/// returns `f`'s result and the count.
pub fn allocations<R>(count: bool, f: impl FnOnce() -> R) -> (R, u64) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(count));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (r, COUNT.with(Cell::get))
}
