//! How far a list of values is from a reference, relative to the reference's scale: the
//! tolerance rule of the tests that check a CubeCL path's values or gradients against another.

/// `(largest absolute difference, scale)` of `got` against `expected`, the scale being the
/// largest magnitude in `expected` and at least 1; a test asserts `difference <= tol * scale`.
///
/// # Panics
/// When the two lists differ in length.
pub fn scaled_difference(expected: &[f32], got: &[f32]) -> (f32, f32) {
    assert_eq!(
        expected.len(),
        got.len(),
        "the value lists differ in length"
    );
    let scale = expected.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let difference = expected
        .iter()
        .zip(got)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    (difference, scale)
}
