//! Seed mixing: every random stream of a run (shuffles, dropout masks, sampled candidates) is
//! seeded from the run's seed and its position, so a resumed run draws what it would have drawn.

/// Mixes seed material into one 64-bit seed (splitmix64 steps).
pub fn mix_seed(parts: &[u64]) -> u64 {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for &part in parts {
        state ^= part;
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        state = z ^ (z >> 31);
    }
    state
}
