//! Adagrad's update fused into one pass per parameter (TensorFlow's `ApplyAdagrad`, bilm-tf's
//! optimizer: `acc ← acc + g²; θ ← θ − lr · g / √acc`): one CubeCL kernel on a GPU, one host
//! loop on burn's flex CPU backend that writes parameter and accumulator in place.
//!
//! Why: with burn's operations one parameter's update is six kernels (square, add, sqrt, div,
//! scale, subtract), ~200 a training step for the biLM's ~35 parameter tensors, each a launch
//! whatever its size; on a CPU six passes over memory, each into a fresh buffer (at `original`'s
//! 119M parameters, 476 MB each). Elsewhere, or with the kernels off, elmo-train's `Adagrad`
//! keeps the composed operations.

use burn::tensor::Tensor;

use rayon::prelude::*;

use crate::KernelSettings;
#[cfg(feature = "cubecl")]
use crate::cube_tensor::{ElementwiseOutput, kernel_input, kernel_input_or};
use crate::host_gemm::{HostInstructions, Isa, pass_for_isa};
use crate::host_tensor::HostTensor;

/// One Adagrad step of a parameter.
#[derive(Debug, Clone)]
pub struct AdagradStep<const D: usize> {
    /// `θ − lr · g / √acc`.
    pub parameter: Tensor<D>,
    /// `acc + g²` (or `g² + initial_accumulator` on the first step).
    pub accumulator: Tensor<D>,
}

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    /// One unit per element: the new accumulator and the new parameter. With `scaled`, the
    /// gradient is multiplied by `scale[0]` first, and where `scale[1]` is 0 the update is
    /// skipped: parameter and accumulator (the initial one on the first step) as they were.
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn adagrad_kernel<F: Float>(
        parameter: &Tensor<F>,
        gradient: &Tensor<F>,
        accumulator: &Tensor<F>,
        scale: &Tensor<F>,
        new_parameter: &mut Tensor<F>,
        new_accumulator: &mut Tensor<F>,
        learning_rate: f32,
        initial_accumulator: f32,
        #[comptime] has_accumulator: bool,
        #[comptime] scaled: bool,
        #[define(F)] _dtype: ElemType,
    ) {
        let position = ABSOLUTE_POS;
        if position >= new_parameter.len() {
            terminate!();
        }
        let mut grad = gradient[position];
        let mut apply = true;
        if scaled {
            grad *= scale[0];
            apply = scale[1] != F::new(0.0);
        }
        let before = if has_accumulator {
            accumulator[position]
        } else {
            F::cast_from(initial_accumulator)
        };
        if apply {
            let sum = before + grad * grad;
            new_accumulator[position] = sum;
            new_parameter[position] =
                parameter[position] - grad / sum.sqrt() * F::cast_from(learning_rate);
        } else {
            new_accumulator[position] = before;
            new_parameter[position] = parameter[position];
        }
    }
}

/// One Adagrad step in one kernel; `None` where the fused kernels do not run
/// ([`KernelSettings::fused_for`]). With `scale` (`[factor, apply]` on the device:
/// [`crate::device_gradient_scale`]) the gradient is multiplied by the factor first, and where
/// apply is 0 the parameter and accumulator stay as they were (the accumulator at
/// `initial_accumulator` on a first step).
///
/// # Shapes
/// - parameter, gradient, accumulator: one shape; scale: `[2]`
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn fused_adagrad_step<const D: usize>(
    parameter: &Tensor<D>,
    gradient: &Tensor<D>,
    accumulator: Option<&Tensor<D>>,
    scale: Option<&Tensor<1>>,
    initial_accumulator: f64,
    learning_rate: f64,
    kernels: KernelSettings,
) -> Option<AdagradStep<D>> {
    if !kernels.fused_for(parameter) {
        return None;
    }
    #[cfg(not(feature = "cubecl"))]
    unreachable!("`fused_for` is false without the `cubecl` feature");
    #[cfg(feature = "cubecl")]
    {
        let device = parameter.device();
        let new_parameter = ElementwiseOutput::new(parameter.dims(), &device);
        let new_accumulator = ElementwiseOutput::new(parameter.dims(), &device);
        // Without an accumulator (the first step) or a scale the kernel reads none.
        let accumulator_argument = kernel_input_or(accumulator, gradient);
        let scale = scale.map(|scale| match scale.dtype() == parameter.dtype() {
            true => scale.clone(),
            false => scale.clone().cast(parameter.dtype()),
        });
        let scale_argument = kernel_input_or(scale.as_ref(), gradient);
        kernels::adagrad_kernel::launch(
            &new_parameter.client,
            new_parameter.count.clone(),
            new_parameter.dim,
            kernel_input(parameter).into_tensor_arg(),
            kernel_input(gradient).into_tensor_arg(),
            accumulator_argument.into_tensor_arg(),
            scale_argument.into_tensor_arg(),
            new_parameter.primitive.into_tensor_arg(),
            new_accumulator.primitive.into_tensor_arg(),
            learning_rate as f32,
            initial_accumulator as f32,
            accumulator.is_some(),
            scale.is_some(),
            new_parameter.dtype,
        );
        Some(AdagradStep {
            parameter: new_parameter.tensor,
            accumulator: new_accumulator.tensor,
        })
    }
}

/// Values per task of the host loop.
const HOST_CHUNK: usize = 1 << 16;

/// A host step's operands as the host loops read and write them, contiguous: the gradient
/// read, the parameter and accumulator taken (written in place where the caller held their
/// only reference).
struct HostOperands {
    gradient: HostTensor,
    parameter: HostTensor,
    accumulator: Option<HostTensor>,
}

impl HostOperands {
    /// # Panics
    /// Where a tensor is not an `f32` flex tensor ([`KernelSettings::host_for`]).
    fn of<const D: usize>(
        parameter: Tensor<D>,
        gradient: &Tensor<D>,
        accumulator: Option<Tensor<D>>,
    ) -> Self {
        const HOST: &str = "f32 flex tensors (KernelSettings::host_for)";
        let take = |tensor: Tensor<D>| HostTensor::take(tensor).expect(HOST).contiguous();
        Self {
            gradient: HostTensor::of(gradient).expect(HOST).contiguous(),
            parameter: take(parameter),
            accumulator: accumulator.map(take),
        }
    }
}

/// One Adagrad step on the host, the arithmetic of the composed operations in their order
/// (bit for bit): the new accumulator and parameter written over `accumulator` and
/// `parameter` where the caller held their only reference (copies otherwise); in vectors of
/// the widest instruction set this CPU has up to `instructions` (square roots and quotients
/// are exact in each, so every one gives the same bits).
///
/// # Panics
/// Where the tensors are not `f32` flex tensors of one shape: check
/// [`KernelSettings::host_for`] on `parameter` first.
pub fn host_adagrad_step<const D: usize>(
    parameter: Tensor<D>,
    gradient: &Tensor<D>,
    accumulator: Option<Tensor<D>>,
    initial_accumulator: f64,
    learning_rate: f64,
    instructions: HostInstructions,
) -> AdagradStep<D> {
    let dims = parameter.dims();
    assert!(
        gradient.dims() == dims && accumulator.as_ref().is_none_or(|a| a.dims() == dims),
        "a parameter, its gradient and its accumulator of one shape"
    );
    let first = accumulator.is_none();
    let HostOperands {
        gradient,
        mut parameter,
        accumulator,
    } = HostOperands::of(parameter, gradient, accumulator);
    let mut accumulator = accumulator.unwrap_or_else(|| HostTensor::zeros(dims));
    let update = Update {
        isa: Isa::at_most(instructions),
        learning_rate: learning_rate as f32,
        initial: first.then_some(initial_accumulator as f32),
    };
    (parameter.values_mut().par_chunks_mut(HOST_CHUNK))
        .zip(accumulator.values_mut().par_chunks_mut(HOST_CHUNK))
        .zip(gradient.values().par_chunks(HOST_CHUNK))
        .for_each(|((parameter, accumulator), gradient)| {
            update.run(parameter, accumulator, gradient)
        });
    AdagradStep {
        parameter: parameter.into_tensor(),
        accumulator: accumulator.into_tensor(),
    }
}

/// [`host_adagrad_step`] with a gradient that is zero outside some rows, given as those rows
/// only (TensorFlow's `SparseApplyAdagrad`, which bilm-tf's sampled softmax gets through
/// `IndexedSlices`): the rows named are updated in place, the others are left as they are,
/// which is what the dense step computes for them (`acc + 0`, `θ − 0 / √acc`), so the result
/// is [`host_adagrad_step`]'s bit for bit, in a pass over the rows a step touched instead of
/// the whole table (the softmax's 8,192 sampled and the targets' rows of a 793k vocabulary).
/// On the first step (no accumulator) the accumulator is made at `initial_accumulator`.
///
/// # Shapes
/// - parameter, accumulator: `[V, …]`; gradient: `[rows.len(), …]`; rows: ascending, distinct,
///   below `V`
///
/// # Panics
/// Where the tensors are not `f32` flex tensors of those shapes ([`KernelSettings::host_for`]
/// on `parameter` first) or `rows` are not ascending below `V`.
pub fn host_adagrad_rows<const D: usize>(
    parameter: Tensor<D>,
    gradient: &Tensor<D>,
    rows: &[u32],
    accumulator: Option<Tensor<D>>,
    initial_accumulator: f64,
    learning_rate: f64,
    instructions: HostInstructions,
) -> AdagradStep<D> {
    let dims = parameter.dims();
    let grad_dims = gradient.dims();
    assert!(
        grad_dims[0] == rows.len()
            && grad_dims[1..] == dims[1..]
            && accumulator.as_ref().is_none_or(|a| a.dims() == dims),
        "a gradient of the rows named, of the parameter's and accumulator's row shape"
    );
    assert!(
        rows.windows(2).all(|w| w[0] < w[1]) && rows.last().is_none_or(|&r| (r as usize) < dims[0]),
        "rows ascending, distinct and below {}",
        dims[0]
    );
    let width: usize = dims[1..].iter().product();
    let initial = initial_accumulator as f32;
    // The dense step's `squared + initial` on its first step is `acc + squared` from an
    // accumulator made at `initial`.
    let update = Update {
        isa: Isa::at_most(instructions),
        learning_rate: learning_rate as f32,
        initial: None,
    };
    let HostOperands {
        gradient,
        mut parameter,
        accumulator,
    } = HostOperands::of(parameter, gradient, accumulator);
    let mut accumulator = accumulator.unwrap_or_else(|| {
        let mut accumulator = HostTensor::zeros(dims);
        accumulator.values_mut().fill(initial);
        accumulator
    });
    if width > 0 {
        let parameter_rows = rows_of(parameter.values_mut(), rows, width);
        let accumulator_rows = rows_of(accumulator.values_mut(), rows, width);
        (parameter_rows.into_par_iter())
            .zip(accumulator_rows)
            .zip(gradient.values().par_chunks(width))
            .with_min_len(HOST_CHUNK.div_ceil(width))
            .for_each(|((parameter, accumulator), gradient)| {
                update.run(parameter, accumulator, gradient)
            });
    }
    AdagradStep {
        parameter: parameter.into_tensor(),
        accumulator: accumulator.into_tensor(),
    }
}

/// Adagrad's update: its instruction set, rate and, on a first step, initial accumulator.
#[derive(Clone, Copy)]
struct Update {
    isa: Isa,
    learning_rate: f32,
    /// The initial accumulator, on a first step (the accumulator is not read then).
    initial: Option<f32>,
}

impl Update {
    /// `acc ← acc + g²` (`g² + initial` on a first step), `θ ← θ − g / √acc · lr` over the
    /// values of `parameter`, `accumulator` and `gradient` (one length), in the vectors of
    /// `self.isa`.
    fn run(self, parameter: &mut [f32], accumulator: &mut [f32], gradient: &[f32]) {
        let values = Values {
            update: self,
            parameter,
            accumulator,
            gradient,
        };
        update_values_for(self.isa, values);
    }
}

/// A run of values that [`Update::run`] updates.
struct Values<'a> {
    update: Update,
    parameter: &'a mut [f32],
    accumulator: &'a mut [f32],
    gradient: &'a [f32],
}

/// [`Update::run`]'s loop, compiled inline with the caller's features: one loop per case,
/// without a branch inside, so that it is vectorised.
#[inline(always)]
fn update_values(values: Values) {
    let Values {
        update,
        parameter,
        accumulator,
        gradient,
    } = values;
    let lr = update.learning_rate;
    let values = parameter.iter_mut().zip(accumulator).zip(gradient);
    match update.initial {
        Some(initial) => {
            for ((p, a), &g) in values {
                *a = g * g + initial;
                *p -= g / a.sqrt() * lr;
            }
        }
        None => {
            for ((p, a), &g) in values {
                *a += g * g;
                *p -= g / a.sqrt() * lr;
            }
        }
    }
}

pass_for_isa!(update_values_for, update_values, Values);

/// The rows `rows` (ascending, distinct) of row-major `values` with rows of `width` values, as
/// disjoint slices.
fn rows_of<'a>(values: &'a mut [f32], rows: &[u32], width: usize) -> Vec<&'a mut [f32]> {
    let mut out = Vec::with_capacity(rows.len());
    let (mut rest, mut at) = (values, 0);
    for &row in rows {
        let start = row as usize * width;
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - at);
        let (this, tail) = tail.split_at_mut(width);
        out.push(this);
        (rest, at) = (tail, start + width);
    }
    out
}
