//! Matrix products through one of cubek's matmul kernels named explicitly, on a CubeCL device:
//! to measure, on a GPU, which kernel suits each of the training step's and inference step's
//! product shapes, in `f32` and `f16` (`bench_train --matmul-probe`).
//!
//! burn built without its `autotune` feature runs every product with cubek's `Auto` strategy:
//! the tensor-core (cmma) kernels where the device offers them for the type, which wgpu does
//! not for f32, then `SimpleUnit` with its largest register tiles (4 × 4 × 4 on an H200),
//! ~3.6 TFLOPS on the softmax's `[419, 10,002] · [10,002, 256]` there, where cuBLAS runs f32
//! at ~50. cubek has other unit kernels (double-buffered, smaller tiles) and a plane-cooperative
//! GEMM; which one wins per shape is a GPU measurement.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::matmul::init_matmul_output;
use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
use cubek::matmul::multi_level::Strategy as MultiLevel;
use cubek::matmul::multi_level::routines::TileSizeSelection;
use cubek::matmul::multi_level::routines::batch::double_unit::DoubleUnitSelectionArgs;
use cubek::matmul::multi_level::routines::batch::simple_unit::SimpleUnitSelectionArgs;
use cubek::matmul::multi_level::routines::gemm::GemmStrategy;
use cubek::matmul::routine::BlueprintStrategy;
use cubek::matmul::strategy::Strategy;
use cubek::std::InputBinding;

use crate::cube_tensor::cube_primitive;

/// A matmul kernel of cubek (or burn's own choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulKernel {
    /// burn's `Tensor::matmul` (on a CubeCL device without `autotune`: cubek's `Auto`).
    Burn,
    /// `SimpleUnit`, one unit per register tile, the largest tiles (burn's fallback).
    SimpleUnitMax,
    /// `SimpleUnit` with the smallest tiles (more units per output).
    SimpleUnitMin,
    /// `DoubleUnit` (double-buffered loads), the largest tiles.
    DoubleUnitMax,
    /// `DoubleUnit`, the smallest tiles.
    DoubleUnitMin,
    /// `Gemm`: planes cooperating on blocks of the output.
    Gemm,
    /// Tensor cores (cooperative matrices: f16 / bf16 operands on a device that offers them),
    /// one stage at a time: cubek's `Auto` first choice.
    SimpleCyclicCmma,
    /// Tensor cores, double-buffered stages.
    DoubleCyclicCmma,
    /// Tensor cores, double-buffered stages loaded in order.
    OrderedDoubleCmma,
    /// Tensor cores, planes specialised in loading or computing.
    SpecializedCyclicCmma,
    /// NVIDIA's cuBLAS on a CUDA device (this crate's `cublas` feature; `crate::cublas_product`):
    /// the result in `f32` whatever the operands' type.
    Cublas,
}

impl MatmulKernel {
    /// Every kernel, burn's first (the tensor-core ones are unavailable for `f32` and where the
    /// device offers no cooperative matrices).
    pub const ALL: [MatmulKernel; 11] = [
        Self::Burn,
        Self::SimpleUnitMax,
        Self::SimpleUnitMin,
        Self::DoubleUnitMax,
        Self::DoubleUnitMin,
        Self::Gemm,
        Self::SimpleCyclicCmma,
        Self::DoubleCyclicCmma,
        Self::OrderedDoubleCmma,
        Self::SpecializedCyclicCmma,
        Self::Cublas,
    ];

    /// The kernel's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Burn => "burn",
            Self::SimpleUnitMax => "simple-unit-max",
            Self::SimpleUnitMin => "simple-unit-min",
            Self::DoubleUnitMax => "double-unit-max",
            Self::DoubleUnitMin => "double-unit-min",
            Self::Gemm => "gemm",
            Self::SimpleCyclicCmma => "simple-cyclic-cmma",
            Self::DoubleCyclicCmma => "double-cyclic-cmma",
            Self::OrderedDoubleCmma => "ordered-double-cmma",
            Self::SpecializedCyclicCmma => "specialized-cyclic-cmma",
            Self::Cublas => "cublas",
        }
    }

    fn strategy(self) -> Option<Strategy> {
        let tile = |max: bool| match max {
            true => TileSizeSelection::MaxTileSize,
            false => TileSizeSelection::MinTileSize,
        };
        let simple = |max| {
            MultiLevel::SimpleUnit(BlueprintStrategy::Inferred(SimpleUnitSelectionArgs {
                tile_size: tile(max),
            }))
        };
        let double = |max| {
            MultiLevel::DoubleUnit(BlueprintStrategy::Inferred(DoubleUnitSelectionArgs {
                tile_size: tile(max),
            }))
        };
        let multi_level = match self {
            Self::Burn | Self::Cublas => return None,
            Self::SimpleUnitMax => simple(true),
            Self::SimpleUnitMin => simple(false),
            Self::DoubleUnitMax => double(true),
            Self::DoubleUnitMin => double(false),
            Self::Gemm => MultiLevel::Gemm(BlueprintStrategy::Inferred(GemmStrategy::default())),
            Self::SimpleCyclicCmma => MultiLevel::SimpleCyclicCmma(Default::default()),
            Self::DoubleCyclicCmma => MultiLevel::DoubleCyclicCmma(Default::default()),
            Self::OrderedDoubleCmma => MultiLevel::OrderedDoubleCmma(Default::default()),
            Self::SpecializedCyclicCmma => MultiLevel::SpecializedCyclicCmma(Default::default()),
        };
        Some(multi_level.into())
    }
}

/// `lhs · rhs` with `kernel`. An error (as text) where the kernel does not launch: not a CubeCL
/// tensor, or a kernel the device or shape does not support.
///
/// # Shapes
/// - lhs: `[…, M, K]`; rhs: `[…, K, N]`; output: `[…, M, N]`
pub fn matmul_with<const D: usize>(
    lhs: Tensor<D>,
    rhs: Tensor<D>,
    kernel: MatmulKernel,
) -> Result<Tensor<D>, String> {
    if kernel == MatmulKernel::Cublas {
        #[cfg(feature = "cublas")]
        return crate::cublas_product(lhs, rhs, None);
        #[cfg(not(feature = "cublas"))]
        return Err("built without the `cublas` feature".into());
    }
    let Some(strategy) = kernel.strategy() else {
        return Ok(lhs.matmul(rhs));
    };
    let (Some(lhs), Some(rhs)) = (cube_primitive(&lhs), cube_primitive(&rhs)) else {
        return Err("not a CubeCL tensor".into());
    };
    let out = init_matmul_output(&lhs, &rhs, lhs.dtype);
    let client = out.client.clone();
    let lhs_dtype = dtype_to_storage_type(lhs.dtype);
    let rhs_dtype = dtype_to_storage_type(rhs.dtype);
    let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: lhs_dtype,
        rhs: rhs_dtype,
        out: dtype_to_storage_type(out.dtype),
    });
    cubek::matmul::launch::launch_ref(
        &strategy,
        &client,
        InputBinding::new(lhs.binding(), lhs_dtype),
        InputBinding::new(rhs.binding(), rhs_dtype),
        out.clone().binding(),
        &mut dtypes,
    )
    .map_err(|error| format!("{error:?}"))?;
    Ok(Tensor::from_primitive::<CubeBackend>(out))
}

#[cfg(all(test, feature = "cubecl"))]
mod tests {
    use super::*;
    use crate::to_half;
    use burn::tensor::{Device, Distribution, FloatDType};

    use elmo_test_support::{wgpu_device_or_skip, wgpu_sixteen_bit_device_or_skip};

    /// Every kernel on each `(lhs, rhs)` with its operands in `half` (`None`: `f32`): the ones
    /// that launch give burn's `f32` product to less than `tolerance`, and burn's own kernel and
    /// its fallback (`SimpleUnitMax`) launch. Returns the names of the kernels that launched.
    fn check_every_kernel(
        device: &Device,
        pairs: [(Tensor<3>, Tensor<3>); 2],
        half: Option<FloatDType>,
        tolerance: f32,
    ) -> Vec<&'static str> {
        let precision = if half.is_some() { "f16" } else { "f32" };
        let mut launched = Vec::new();
        for (lhs, rhs) in pairs {
            let expected = lhs.clone().matmul(rhs.clone());
            let (lhs, rhs) = (to_half(lhs, half), to_half(rhs, half));
            for kernel in MatmulKernel::ALL {
                match matmul_with(lhs.clone(), rhs.clone(), kernel) {
                    Ok(product) => {
                        let difference = (product.cast(FloatDType::F32) - expected.clone())
                            .abs()
                            .max()
                            .into_scalar::<f32>();
                        assert!(
                            difference < tolerance,
                            "{} in {precision} on {device:?}: {difference} from f32",
                            kernel.name()
                        );
                        launched.push(kernel.name());
                    }
                    Err(error) => {
                        assert!(
                            kernel != MatmulKernel::SimpleUnitMax && kernel != MatmulKernel::Burn,
                            "{} did not launch in {precision} on {device:?}: {error}",
                            kernel.name()
                        );
                        eprintln!(
                            "{} does not launch in {precision} on {device:?}: {error}",
                            kernel.name()
                        );
                    }
                }
            }
        }
        launched
    }

    /// On wgpu, every kernel that launches gives burn's product (a row-major and a transposed
    /// right factor, and a batch), and burn's own fallback kernel launches (on lavapipe every
    /// unit kernel does; the tensor-core ones are unavailable for `f32`).
    #[test]
    fn every_kernel_gives_burns_product() {
        if let Some(device) = wgpu_device_or_skip("every_kernel_gives_burns_product") {
            let normal = Distribution::Normal(0.0, 1.0);
            let lhs = Tensor::<3>::random([2, 37, 300], normal, &device);
            let rhs = Tensor::<3>::random([2, 300, 45], normal, &device);
            let rhs_transposed = Tensor::<3>::random([2, 45, 300], normal, &device).swap_dims(1, 2);
            let pairs = [(lhs.clone(), rhs), (lhs, rhs_transposed)];
            check_every_kernel(&device, pairs, None, 1e-3);
        }
    }

    /// With `f16` operands (`--precision mixed`'s products), every kernel that launches gives
    /// burn's `f32` product within f16's rounding: the unit kernels everywhere, the tensor-core
    /// (cooperative-matrix) kernels on a device that offers them for f16 (SPIR-V or CUDA on
    /// NVIDIA; no lavapipe at hand does). Sums of 300 products of N(0, 1) values in f16
    /// operands with f32 accumulation stay within 0.1 of f32's (values ~17).
    #[test]
    fn every_kernel_gives_burns_product_in_f16() {
        if let Some(device) =
            wgpu_sixteen_bit_device_or_skip("every_kernel_gives_burns_product_in_f16")
        {
            let normal = Distribution::Normal(0.0, 1.0);
            // Multiples of 16 and not: the tensor-core tiles and their edges.
            let pairs = [
                (
                    Tensor::<3>::random([2, 64, 320], normal, &device),
                    Tensor::<3>::random([2, 320, 48], normal, &device),
                ),
                (
                    Tensor::<3>::random([2, 37, 300], normal, &device),
                    Tensor::<3>::random([2, 45, 300], normal, &device).swap_dims(1, 2),
                ),
            ];
            let launched = check_every_kernel(&device, pairs, Some(FloatDType::F16), 0.1);
            eprintln!("launched in f16: {launched:?}");
        }
    }
}
