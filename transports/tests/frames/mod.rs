//! Test frame contents shared by the link tests (apart from `support`, which installs a
//! counting allocator in the binaries that include it).

/// `len` pseudo-random bytes from `salt` (xorshift): different frames differ everywhere, so a
/// misplaced or mixed-up piece shows.
pub fn pattern(len: usize, salt: u64) -> Vec<u8> {
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
