//! Order statistics and searches for the windows' hot path: each runs for every record or
//! every key's millisecond, so neither allocates for the usual sizes.

use std::collections::VecDeque;

/// The median (the mean of the middle two of an even count), by `f64::total_cmp`.
pub(crate) fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    // The default 16 baseline values stay on the stack, and only the middle is selected
    // rather than the whole sorted.
    let mut small = [0.0f64; 32];
    let mut n = 0;
    let mut large = Vec::new();
    for x in values {
        if n < small.len() {
            small[n] = x;
        } else {
            if large.is_empty() {
                large.extend_from_slice(&small);
            }
            large.push(x);
        }
        n += 1;
    }
    let v = if large.is_empty() {
        &mut small[..n]
    } else {
        &mut large[..]
    };
    let len = v.len();
    if len == 0 {
        return None;
    }
    let (below, mid, _) = v.select_nth_unstable_by(len / 2, f64::total_cmp);
    let mid = *mid;
    if len % 2 == 1 {
        return Some(mid);
    }
    let lower = below.iter().copied().max_by(f64::total_cmp).unwrap_or(mid);
    Some((lower + mid) / 2.0)
}

/// `ring.partition_point(before)` (`before` holds for a prefix of the ring), searched from
/// the back: a galloping search touches a few entries near the end when the point is there,
/// where a binary search starts in the middle of a ring that may hold thousands. It runs on
/// the ring's two slices: indexing the deque itself wraps every index, which made this search
/// a third of the windows' instructions.
pub(crate) fn partition_from_back<T>(ring: &VecDeque<T>, before: impl Fn(&T) -> bool) -> usize {
    let (front, back) = ring.as_slices();
    match back.first() {
        Some(first) if before(first) => front.len() + gallop_from_back(back, &before),
        _ => gallop_from_back(front, &before),
    }
}

/// [`partition_from_back`] on one slice.
fn gallop_from_back<T>(s: &[T], before: &impl Fn(&T) -> bool) -> usize {
    // Entries from `hi` on are past the point; step back doubling until one is before it.
    let mut hi = s.len();
    let mut step = 1;
    let lo = loop {
        match hi.checked_sub(step) {
            Some(i) if !before(&s[i]) => {
                hi = i;
                step *= 2;
            }
            Some(i) => break i + 1,
            None => break 0,
        }
    };
    lo + s[lo..hi].partition_point(before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sorted_median(mut v: Vec<f64>) -> Option<f64> {
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[m]),
            _ => Some((v[m - 1] + v[m]) / 2.0),
        }
    }

    proptest! {
        #[test]
        fn median_is_the_sorted_median(v in proptest::collection::vec(any::<f64>(), 0..80)) {
            let want = sorted_median(v.clone());
            let got = median(v.into_iter());
            prop_assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits));
        }

        #[test]
        fn back_search_is_partition_point(
            mut walls in proptest::collection::vec(0u64..50, 0..300),
            t in 0u64..55,
            skew in 0usize..300,
        ) {
            walls.sort_unstable();
            // Entries pushed and popped first move the ring's start, so it wraps (two slices).
            let mut ring = VecDeque::with_capacity(walls.len().max(1));
            for _ in 0..skew % ring.capacity() {
                ring.push_back(0);
                ring.pop_front();
            }
            ring.extend(walls);
            prop_assert_eq!(
                partition_from_back(&ring, |&w| w <= t),
                ring.partition_point(|&w| w <= t)
            );
        }
    }

    #[test]
    fn median_of_few() {
        assert_eq!(median([].into_iter()), None);
        assert_eq!(median([3.0].into_iter()), Some(3.0));
        assert_eq!(median([4.0, 1.0].into_iter()), Some(2.5));
        assert_eq!(median([5.0, 1.0, 3.0].into_iter()), Some(3.0));
    }
}
