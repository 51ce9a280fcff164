//! A weight packed once for the host products of one precision, as the host loops keep it
//! while they run: `f32` panels for `crate::host_gemm`'s kernel, or with
//! [`Precision::Mixed`] on a CPU with AMX or AVX512-BF16 `bf16` tiles for `crate::host_bf16`'s
//! (the LSTMP recurrence of `crate::host_lstm`, the char convolutions of
//! `crate::host_window_max`).

use crate::Precision;
use crate::host_bf16::Bf16Matrix;
use crate::host_bf16_product::{matmul_bf16, matmul_bf16_parallel};
use crate::host_gemm::{
    HostInstructions, PackedMatrix, Strided, matmul_packed, matmul_packed_parallel,
};

/// A `[K, N]` weight packed for the products of one precision.
#[derive(Debug, Clone)]
pub(crate) enum HostWeight {
    F32(PackedMatrix),
    Bf16(Bf16Matrix),
}

impl HostWeight {
    /// The `[k, n]` matrix of `view` packed for `precision`'s products with the widest
    /// instruction set up to `instructions`: in `bf16` with [`Precision::Mixed`] where this CPU
    /// has a unit for them within it ([`crate::Bf16Unit::at_most`]), else in `f32`.
    ///
    /// # Panics
    /// When `n` is 0 or the view does not hold `[k, n]`.
    pub(crate) fn pack(
        view: Strided,
        k: usize,
        n: usize,
        instructions: HostInstructions,
        precision: Precision,
    ) -> Self {
        let bf16 = match precision {
            Precision::Mixed => Bf16Matrix::pack_view(view, k, n, instructions),
            Precision::F32 => None,
        };
        match bf16 {
            Some(packed) => Self::Bf16(packed),
            None => Self::F32(PackedMatrix::pack_view(view, k, n, instructions)),
        }
    }

    /// `c = a · self` for `m` rows (`lda`, `ldc` the row strides), on rayon's threads where
    /// `on_pool`.
    ///
    /// # Panics
    /// When `a` or `c` is too short for `m` rows.
    pub(crate) fn product(
        &self,
        on_pool: bool,
        a: &[f32],
        lda: usize,
        m: usize,
        c: &mut [f32],
        ldc: usize,
    ) {
        match (self, on_pool) {
            (Self::F32(b), false) => matmul_packed(a, lda, m, b, c, ldc),
            (Self::F32(b), true) => matmul_packed_parallel(a, lda, m, b, c, ldc),
            (Self::Bf16(b), false) => matmul_bf16(a, lda, m, b, c, ldc),
            (Self::Bf16(b), true) => matmul_bf16_parallel(a, lda, m, b, c, ldc),
        }
    }
}
