//! A cube's values in shared memory reduced as a tree, to their sum or their largest (the
//! sequential-addressing reduction of Harris, "Optimizing Parallel Reduction in CUDA"): in a
//! fixed order, so that a cube's result does not depend on its units' timing. The gradient
//! norm's blocks (`squared_norm.rs`), the gradient scale (`gradient_scale.rs`) and the softmax
//! chunk's rows (`cube_softmax.rs`) use it.

use burn::cubecl;
use burn::cubecl::prelude::*;

/// The sum of the cube's `CUBE_DIM` values in `shared` (one a unit, written before the call;
/// `CUBE_DIM` a power of two), added as a tree: each round the lower half adds the upper
/// half's values. Every unit returns it; `shared` holds partial sums afterwards.
#[cube]
pub(crate) fn shared_sum<F: Float>(shared: &mut Shared<[F]>) -> F {
    shared_tree::<F>(shared, false)
}

/// The largest of the cube's `CUBE_DIM` values in `shared` (as [`shared_sum`]: one a unit,
/// written before the call), by the same tree: each round a lower-half value is replaced by
/// the upper half's where that is greater (a NaN never is). Every unit returns it.
#[cube]
pub(crate) fn shared_max<F: Float>(shared: &mut Shared<[F]>) -> F {
    shared_tree::<F>(shared, true)
}

/// The tree of [`shared_sum`] (`largest` false) and [`shared_max`] (`largest` true).
// The outer `if` is resolved when the kernel is compiled, the inner one when it runs.
#[allow(clippy::collapsible_if, clippy::collapsible_else_if)]
#[cube]
fn shared_tree<F: Float>(shared: &mut Shared<[F]>, #[comptime] largest: bool) -> F {
    sync_cube();
    // The tree's counter is the runtime `CUBE_DIM`, since a comptime value cannot be a loop's
    // changing variable.
    let mut active = CUBE_DIM;
    while active > 1 {
        active /= 2;
        if UNIT_POS < active {
            let other = shared[(UNIT_POS + active) as usize];
            if largest {
                if other > shared[UNIT_POS as usize] {
                    shared[UNIT_POS as usize] = other;
                }
            } else {
                shared[UNIT_POS as usize] += other;
            }
        }
        sync_cube();
    }
    shared[0]
}
