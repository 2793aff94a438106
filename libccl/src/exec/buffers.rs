//! Plan-owned buffers (scratch, pre-scaled inputs), kept per thread for the next plans.

thread_local! {
    /// Plan-owned buffers (scratch, pre-scaled inputs) of finished plans on this thread,
    /// for the next plans: tens of MiB freshly allocated are page-faulted in by whatever
    /// first writes them, and an all-to-all's receives into new scratch ran at ~1 GB/s.
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare buffers kept per thread, and their bytes at most.
const SPARE_BUFFERS: usize = 4;
const SPARE_BYTES: usize = 512 << 20;

/// A buffer of `len` bytes for a plan: a spare one of this thread's if one is large enough
/// (its bytes are whatever a previous plan left: every plan writes its scratch before
/// reading it), else a new one.
pub(super) fn take_buffer(len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    let spare = SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let best = s
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        best.map(|i| s.swap_remove(i))
    });
    match spare {
        Some(mut v) => {
            // Growth within the capacity is zero-filled; shrinking touches nothing.
            v.resize(len, 0);
            v
        }
        None => vec![0u8; len],
    }
}

/// Keeps `v` for a later plan on this thread, within the spare limits.
pub(super) fn give_back(v: Vec<u8>) {
    if v.capacity() == 0 {
        return;
    }
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let held: usize = s.iter().map(Vec::capacity).sum();
        if s.len() < SPARE_BUFFERS && held + v.capacity() <= SPARE_BYTES {
            s.push(v);
        }
    });
}
