//! The memory an engine's messages live in: a [`Slab`] of slots, and a [`Loan`] of the
//! user's memory that a receive may be placed in instead.

use std::cell::UnsafeCell;

/// A slab of message slots shared between the link's user and whoever runs progress.
///
/// Receive slab: ownership of slot `s` is handed over by the state in `Inner::recv_done`
/// (guarded by the mutex): while the slot's receive is posted and incomplete only progress
/// writes it; once complete only the consumer reads it, until it is posted again.
///
/// Send slab: the user writes slot `next_send % slots` while it holds no message (the
/// engine is not full, so the slot's previous message is acknowledged and retired) and
/// without the lock, then hands the message to the connection under the lock; from then on
/// only progress reads it (under the lock) until it is retired.
pub(super) struct Slab {
    buf: Box<[UnsafeCell<u8>]>,
}

// SAFETY: access to each slot is partitioned in time by the protocols above, with the
// mutex providing the happens-before edges at every handover.
unsafe impl Sync for Slab {}
// SAFETY: as above; the slab is plain bytes.
unsafe impl Send for Slab {}

impl Slab {
    pub(super) fn new(len: usize) -> Self {
        // Zeroed by the allocator (a large allocation's fresh pages come zeroed from the
        // kernel, committed only when first written), not collected byte by byte: the
        // optimiser turned that into the same allocation, but unoptimised builds (the tests)
        // wrote every byte of up to slots x 16 MiB, 4.3 s for 256 MiB, long enough on a
        // loaded machine for the peer's probe window or liveness watch to give up on this
        // side.
        let bytes: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        // SAFETY: `UnsafeCell<u8>` is `repr(transparent)` over `u8`, so a boxed `[u8]` and a
        // boxed `[UnsafeCell<u8>]` of the same length have the same layout; the allocation
        // is handed over whole, with its length, and freed by the new box.
        let buf = unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<u8>]) };
        Slab { buf }
    }

    pub(super) fn ptr(&self) -> *mut u8 {
        // UnsafeCell<u8> has the layout of u8, so the slice is a contiguous byte array.
        UnsafeCell::raw_get(self.buf.as_ptr())
    }
}

/// A destination lent for one message (see [`Link::lend`]): its first `skip` bytes (a part
/// header) go to the message's slot, the next `cap` to `addr` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Loan {
    pub(super) addr: usize,
    pub(super) cap: usize,
    pub(super) skip: usize,
}

impl Loan {
    pub(super) const NONE: Loan = Loan {
        addr: 0,
        cap: 0,
        skip: 0,
    };
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn a_new_slab_is_zeroed_and_as_long_as_asked() {
        let len = (3 << 20) + 5;
        let s = Slab::new(len);
        assert_eq!(s.buf.len(), len);
        // SAFETY: the slab is this test's alone; `len` bytes from its start are in it.
        let bytes = unsafe { std::slice::from_raw_parts(s.ptr(), len) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
