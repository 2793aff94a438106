//! Frames cut into parts over several engines: the part header in front of every message,
//! where a frame is cut, and copying a frame (or one part of it) into reserved send slots.

use crate::PIECE_ALIGN;

/// Part header in front of every message of a link of several engines.
pub(super) const PART_HEADER: usize = 16;
/// Last two bytes of a part header: catches a peer that speaks another framing.
pub(super) const PART_MAGIC: u16 = 0x4D45;

/// Copies `src[lo..hi]` to address `dst` for every `(dst, lo, hi)` of `to` (disjoint
/// ranges of `src`, each destination a reserved send slot with room for its range), the
/// whole of `src` cut over the copy threads at once if large enough (crate::par).
pub(super) fn copy_into_slots(src: &[u8], to: &[(usize, usize, usize)]) {
    crate::par::for_parts(src.len(), 1, &|r: std::ops::Range<usize>| {
        copy_range_into_slots(&src[..r.end], r.start, to)
    });
}

/// [`copy_into_slots`] of the bytes `[start, src.len())` of a frame only: one part of it
/// (`src` is the frame up to the part's end).
pub(super) fn copy_range_into_slots(src: &[u8], start: usize, to: &[(usize, usize, usize)]) {
    let from = src.as_ptr() as usize;
    for &(dst, lo, hi) in to {
        let (a, b) = (start.max(lo), src.len().min(hi));
        if a < b {
            // SAFETY: [a, b) lies inside [lo, hi) and inside `src`; `dst + (a - lo)` and its
            // b - a bytes lie inside the reserved slot, which nothing else writes until the
            // message is committed after the copy; parts of one frame write disjoint bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (from + a) as *const u8,
                    (dst + a - lo) as *mut u8,
                    b - a,
                )
            }
        }
    }
}

pub(super) fn part_header(seq: u64, total: usize, part: usize, parts: usize) -> [u8; PART_HEADER] {
    let mut h = [0u8; PART_HEADER];
    h[..8].copy_from_slice(&seq.to_le_bytes());
    // `bind` refuses frames over 4 GiB with several engines.
    h[8..12].copy_from_slice(&(total as u32).to_le_bytes());
    h[12] = part as u8;
    h[13] = parts as u8;
    h[14..].copy_from_slice(&PART_MAGIC.to_le_bytes());
    h
}

/// Whether a `total`-byte frame is cut into one part per engine: over the split size, and
/// long enough that every cut at a multiple of [`PIECE_ALIGN`] leaves no part empty.
pub(super) fn splits(total: usize, split_bytes: usize, engines: usize) -> bool {
    engines > 1 && total > split_bytes && total >= engines * PIECE_ALIGN
}

/// Byte range of part `i` of a `total`-byte frame cut into `parts` near-equal parts, every
/// cut at a multiple of [`PIECE_ALIGN`] (the receiver shows parts as pieces of the frame).
pub(super) fn part_range(total: usize, i: usize, parts: usize) -> (usize, usize) {
    let parts = parts.max(1);
    // total < 2^32 and i <= 8: the product cannot overflow.
    let at = |k: usize| {
        if k >= parts {
            total
        } else {
            (total as u64 * k as u64 / parts as u64) as usize / PIECE_ALIGN * PIECE_ALIGN
        }
    };
    (at(i), at(i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpt_link::config::MAX_ENGINES;

    /// Parts cover the frame exactly, in order, every cut at a multiple of PIECE_ALIGN, no
    /// part empty and none longer than an n-th plus PIECE_ALIGN (the slot size allows that);
    /// frames too short for such cuts go whole.
    #[test]
    fn parts_cut_at_piece_alignment() {
        for n in 2..=MAX_ENGINES {
            for total in [
                n * PIECE_ALIGN,
                n * PIECE_ALIGN + 1,
                1000,
                65_537,
                (4 << 20) - 3,
            ] {
                if total < n * PIECE_ALIGN {
                    continue;
                }
                assert!(splits(total, 0, n));
                let mut at = 0;
                for i in 0..n {
                    let (lo, hi) = part_range(total, i, n);
                    assert_eq!(lo, at, "n {n} total {total} part {i}");
                    assert!(hi > lo, "n {n} total {total} part {i} empty");
                    assert!(hi - lo <= total.div_ceil(n) + PIECE_ALIGN);
                    if i + 1 < n {
                        assert_eq!(hi % PIECE_ALIGN, 0);
                    }
                    at = hi;
                }
                assert_eq!(at, total);
            }
        }
        assert!(!splits(4 * PIECE_ALIGN - 1, 0, 4));
        assert!(!splits(1 << 20, 1 << 20, 4));
        assert!(splits((1 << 20) + 1, 1 << 20, 4));
        assert!(!splits(1 << 20, 0, 1));
    }
}
