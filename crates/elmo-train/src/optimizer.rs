//! Optimisation: TensorFlow's Adagrad (bilm-tf's optimizer, with an initial accumulator), Adam,
//! plain SGD (Kim et al. 2016's PTB recipe), and clipping of the global gradient norm (`tf.clip_by_global_norm`).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{
    AdamConfig, GradientsParams, LearningRate, ModuleOptimizer, Optimizer, OptimizerRecord,
    RecordState, SgdConfig, StateSink, StateSource,
};
use burn::store::RecordError;
use burn::tensor::{Device, Int, Tensor, TensorData, ops::IndexingUpdateOp};
use elmo_kernels::{
    AdagradStep, KernelSettings, SquaredNorm, fused_adagrad_step, fused_squared_norm,
    host_adagrad_rows, host_adagrad_step,
};

use crate::config::OptimizerConfig;
use crate::state_device::{OnDevice, load_onto};

/// Where [`TrainingOptimizer::step_scaled`] hands a step's gradient scale (`[factor, apply]`
/// on the device) to [`Adagrad`]'s update of each parameter, for that step only.
type ScaleSlot = Arc<Mutex<Option<Tensor<1>>>>;

/// Where [`TrainingOptimizer::step`] hands [`Adagrad`] the rows of a step's row gradients
/// ([`crate::language_model::LmGradients::softmax_rows`]), for that step only.
type RowsSlot = Arc<Mutex<Option<Arc<[u32]>>>>;

/// Sets a slot's value for the length of `f` (cleared after it, also when it panics).
fn with_slot<T, R>(slot: &Mutex<Option<T>>, value: T, f: impl FnOnce() -> R) -> R {
    struct Clear<'a, T>(&'a Mutex<Option<T>>);
    impl<T> Drop for Clear<'_, T> {
        fn drop(&mut self) {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
    let _clear = Clear(slot);
    f()
}

/// Adagrad as `tf.train.AdagradOptimizer`: `acc ← acc + g²; θ ← θ − lr · g / √acc`, the
/// accumulator starting at `initial_accumulator` (no epsilon).
///
/// A gradient with fewer rows than its parameter is a row gradient (TensorFlow's
/// `IndexedSlices`, the sampled softmax's): the gradient of the rows in the step's rows slot,
/// zero elsewhere, applied to those rows only with the dense update's result
/// ([`host_adagrad_rows`]).
#[derive(Debug, Clone)]
pub struct Adagrad {
    /// Starting value of every accumulator.
    pub initial_accumulator: f64,
    /// Whether the update runs fused: one kernel per parameter on a CubeCL device, one host pass
    /// on flex.
    pub kernels: KernelSettings,
    /// The gradient scale of the step being run, when it was decided on the device.
    device_scale: ScaleSlot,
    /// The rows of the step's row gradients, when it has them.
    rows: RowsSlot,
}

/// The squared-gradient accumulator of one parameter.
#[derive(Debug, Clone)]
pub struct AdagradState<const D: usize> {
    /// `Σ g²` (plus the initial value).
    pub accumulator: Tensor<D>,
}

impl<const D: usize> RecordState for AdagradState<D> {
    fn state_flatten(&self, prefix: &str, out: &mut StateSink) {
        out.push_tensor(prefix, "accumulator", self.accumulator.to_data());
    }

    fn state_unflatten(prefix: &str, src: &mut StateSource, device: &Device) -> Option<Self> {
        let data = src.take_tensor(prefix, "accumulator")?;
        (data.rank() == D).then(|| Self {
            accumulator: Tensor::from_data(data, device),
        })
    }
}

impl Adagrad {
    /// Adagrad with accumulators starting at `initial_accumulator`, its update running
    /// `kernels`.
    pub fn new(initial_accumulator: f64, kernels: KernelSettings) -> Self {
        Self {
            initial_accumulator,
            kernels,
            device_scale: ScaleSlot::default(),
            rows: RowsSlot::default(),
        }
    }

    /// The update of the rows `rows` of `tensor` by their gradient `grad` (the rows of a
    /// gradient that is zero elsewhere), with burn's operations: the other rows as they are,
    /// and the rows named as [`Self::composed_step`] computes them.
    ///
    /// # Shapes
    /// - tensor, accumulator: `[V, …]`; grad: `[rows.len(), …]`
    fn composed_rows_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        rows: &[u32],
        accumulator: Option<Tensor<D>>,
    ) -> AdagradStep<D> {
        let device = tensor.device();
        let values: Vec<i64> = rows.iter().map(|&row| i64::from(row)).collect();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(values, [rows.len()]), &device);
        let before =
            accumulator.unwrap_or_else(|| tensor.zeros_like().add_scalar(self.initial_accumulator));
        let squared = grad.clone().square();
        let sums = before.clone().select(0, ids.clone()) + squared.clone();
        let update = grad.div(sums.sqrt()).mul_scalar(lr);
        AdagradStep {
            parameter: tensor.select_assign(0, ids.clone(), update.neg(), IndexingUpdateOp::Add),
            accumulator: before.select_assign(0, ids, squared, IndexingUpdateOp::Add),
        }
    }

    /// [`Self::composed_step`] of the gradient times `scale[0]`, or parameter and accumulator
    /// as they were (the initial accumulator on a first step) where `scale[1]` is 0: the
    /// fused kernel's scaled update with burn's operations.
    ///
    /// # Shapes
    /// - tensor, grad, accumulator: one shape; scale: `[2]`
    fn composed_scaled_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        accumulator: Option<Tensor<D>>,
        scale: Tensor<1>,
    ) -> AdagradStep<D> {
        let dims = tensor.dims();
        let factor = scale.clone().narrow(0, 0, 1).reshape([1; D]).expand(dims);
        let skip = scale
            .narrow(0, 1, 1)
            .equal_elem(0.0)
            .reshape([1; D])
            .expand(dims);
        let before =
            accumulator.unwrap_or_else(|| tensor.zeros_like().add_scalar(self.initial_accumulator));
        let step = self.composed_step(lr, tensor.clone(), grad * factor, Some(before.clone()));
        AdagradStep {
            parameter: step.parameter.mask_where(skip.clone(), tensor),
            accumulator: step.accumulator.mask_where(skip, before),
        }
    }

    /// The update with burn's operations (every backend; one kernel each on a GPU, where
    /// [`fused_adagrad_step`] runs instead).
    fn composed_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        accumulator: Option<Tensor<D>>,
    ) -> AdagradStep<D> {
        let squared = grad.clone().square();
        let accumulator = match accumulator {
            Some(accumulator) => accumulator + squared,
            None => squared.add_scalar(self.initial_accumulator),
        };
        let update = grad.div(accumulator.clone().sqrt()).mul_scalar(lr);
        AdagradStep {
            parameter: tensor - update,
            accumulator,
        }
    }
}

impl Optimizer for Adagrad {
    type State<const D: usize> = AdagradState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let accumulator = state.map(|state| state.accumulator);
        let scale = (self.device_scale.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if grad.dims()[0] != tensor.dims()[0] {
            let rows = (self
                .rows
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone())
            .expect("a row gradient comes with its rows (TrainingOptimizer::step)");
            assert!(scale.is_none(), "row gradients take the host's clip factor");
            let update = match self.kernels.host_for(&tensor) {
                true => host_adagrad_rows(
                    tensor,
                    &grad,
                    &rows,
                    accumulator,
                    self.initial_accumulator,
                    lr,
                    self.kernels.host_instructions,
                ),
                false => self.composed_rows_step(lr, tensor, grad, &rows, accumulator),
            };
            let accumulator = update.accumulator;
            return (update.parameter, Some(AdagradState { accumulator }));
        }
        // The host pass takes no device scale (a step hands one only where the norm's sums
        // are on a CubeCL device).
        if scale.is_none() && self.kernels.host_for(&tensor) {
            let update = host_adagrad_step(
                tensor,
                &grad,
                accumulator,
                self.initial_accumulator,
                lr,
                self.kernels.host_instructions,
            );
            let accumulator = update.accumulator;
            return (update.parameter, Some(AdagradState { accumulator }));
        }
        let fused = fused_adagrad_step(
            &tensor,
            &grad,
            accumulator.as_ref(),
            scale.as_ref(),
            self.initial_accumulator,
            lr,
            self.kernels,
        );
        let update = match (fused, scale) {
            (Some(update), _) => update,
            (None, Some(scale)) => self.composed_scaled_step(lr, tensor, grad, accumulator, scale),
            (None, None) => self.composed_step(lr, tensor, grad, accumulator),
        };
        (
            update.parameter,
            Some(AdagradState {
                accumulator: update.accumulator,
            }),
        )
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        AdagradState {
            accumulator: state.accumulator.to_device(device),
        }
    }
}

/// A training run's optimizer: burn's [`ModuleOptimizer`] over the rule a config asks for,
/// which with Adagrad also takes a step's gradient scale decided on the device
/// ([`elmo_kernels::device_gradient_scale`]), so that a step queues its update before it reads
/// its loss ([`crate::optimizer_step::optimizer_step`]).
#[derive(Clone)]
pub struct TrainingOptimizer {
    modules: ModuleOptimizer,
    /// Adagrad's slot for the device scale (`None` for Adam and SGD, which take the host's).
    device_scale: Option<ScaleSlot>,
    /// Adagrad's slot for the rows of row gradients (`None` for Adam and SGD, which take none).
    rows: Option<RowsSlot>,
}

impl TrainingOptimizer {
    /// Updates `module`'s parameters with `grads` (scaled as they are), advancing the state.
    /// `rows`: the rows of the gradients with fewer rows than their parameters (the sampled
    /// softmax's, [`crate::language_model::LmGradients::softmax_rows`]), which only Adagrad takes
    /// ([`Self::takes_row_gradients`]).
    ///
    /// # Panics
    /// With `rows` and an optimizer that takes none.
    pub fn step<M: Module>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        rows: Option<Vec<u32>>,
    ) -> M {
        match rows {
            None => self.modules.step(lr, module, grads),
            Some(rows) => {
                let slot = (self.rows.clone()).expect("row gradients need Adagrad");
                with_slot(&slot, rows.into(), || self.modules.step(lr, module, grads))
            }
        }
    }

    /// Whether [`Self::step`] takes row gradients: Adagrad, whose update leaves a row with a
    /// zero gradient as it is (Adam's moments move it; SGD's would too with momentum).
    pub fn takes_row_gradients(&self) -> bool {
        self.rows.is_some()
    }

    /// Whether a step can hand the optimizer a scale decided on the device: Adagrad.
    pub fn scales_on_device(&self) -> bool {
        self.device_scale.is_some()
    }

    /// [`Self::step`] with the gradients multiplied by `scale[0]`, skipped where `scale[1]` is
    /// 0 (parameters and accumulators as they were), both read on the device: one kernel per
    /// parameter where the fused kernels run, burn's operations elsewhere.
    ///
    /// # Shapes
    /// - scale: `[2]` ([`elmo_kernels::device_gradient_scale`])
    ///
    /// # Panics
    /// Unless [`Self::scales_on_device`].
    pub(crate) fn step_scaled<M: Module>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        scale: Tensor<1>,
    ) -> M {
        let slot = (self.device_scale.clone()).expect("step_scaled needs Adagrad");
        with_slot(&slot, scale, || self.modules.step(lr, module, grads))
    }

    /// The optimizer's state as a record.
    pub fn to_record(&self) -> OptimizerRecord {
        self.modules.to_record()
    }

    /// Writes the optimizer's state to a burnpack file.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), RecordError> {
        self.modules.save(path)
    }

    /// The optimizer with its state read from a burnpack file ([`Self::save`]) onto `device`,
    /// the device of the parameters it updates (not burn's default device, where burn-optim
    /// alone would put it).
    ///
    /// # Errors
    /// When the file cannot be read or is not an optimizer record.
    pub fn load(self, path: impl AsRef<Path>, device: &Device) -> Result<Self, RecordError> {
        Ok(Self {
            modules: load_onto(device, || self.modules.load(path))?,
            ..self
        })
    }
}

/// The optimizer a config asks for (Adagrad's update running `kernels`).
pub fn build_optimizer(config: &OptimizerConfig, kernels: KernelSettings) -> TrainingOptimizer {
    match config {
        OptimizerConfig::Adagrad {
            initial_accumulator,
            ..
        } => {
            let adagrad = Adagrad::new(*initial_accumulator, kernels);
            TrainingOptimizer {
                device_scale: Some(adagrad.device_scale.clone()),
                rows: Some(adagrad.rows.clone()),
                modules: ModuleOptimizer::from(OnDevice(adagrad)),
            }
        }
        OptimizerConfig::Adam { .. } => TrainingOptimizer {
            modules: ModuleOptimizer::from(OnDevice(AdamConfig::new().build())),
            device_scale: None,
            rows: None,
        },
        OptimizerConfig::Sgd { .. } => TrainingOptimizer {
            modules: ModuleOptimizer::from(OnDevice(SgdConfig::new().build())),
            device_scale: None,
            rows: None,
        },
    }
}

/// Every gradient of a module, flattened (a view for contiguous ones).
struct FlatGradients<'a> {
    grads: &'a GradientsParams,
    flat: Vec<Tensor<1>>,
}

impl ModuleVisitor for FlatGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            let n: usize = grad.dims().iter().product();
            self.flat.push(grad.reshape([n]));
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, grad.mul_scalar(self.factor));
        }
    }
}

struct MoveGradients<'a> {
    from: GradientsParams,
    to: &'a mut GradientsParams,
}

impl ModuleVisitor for MoveGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.from.remove::<D>(param.id) {
            self.to.register(param.id, grad);
        }
    }
}

/// Moves the gradients of `module`'s parameters from `from` into `to` (gradients of one model
/// computed in separate backward passes).
pub fn move_gradients<M: Module>(module: &M, from: GradientsParams, to: &mut GradientsParams) {
    module.visit(&mut MoveGradients { from, to });
}

/// The global L2 norm of all gradients of `module`: one fused kernel per gradient where
/// `kernels` runs them ([`fused_squared_norm`]), burn's operations elsewhere.
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams, kernels: KernelSettings) -> f64 {
    queued_squared_norm(module, grads, kernels).read().sqrt()
}

/// `‖g‖²` of all gradients of `module`, queued on the device and not read, so that a step reads
/// it with its losses at once ([`SquaredNorm::Partials`]; summed already on flex's host pass).
pub fn queued_squared_norm<M: Module>(
    module: &M,
    grads: &GradientsParams,
    kernels: KernelSettings,
) -> SquaredNorm {
    let mut visitor = FlatGradients {
        grads,
        flat: Vec::new(),
    };
    module.visit(&mut visitor);
    let flat = visitor.flat;
    if let Some(squared) = fused_squared_norm(&flat, kernels) {
        return squared;
    }
    flat.into_iter()
        .map(|grad| grad.square().sum())
        .reduce(|total, part| total + part)
        .map_or(SquaredNorm::Summed(0.0), SquaredNorm::Partials)
}

/// Multiplies every gradient of `module` by `factor`.
pub fn scale_gradients<M: Module>(module: &M, grads: &mut GradientsParams, factor: f64) {
    module.visit(&mut Scale { grads, factor });
}

/// Divides all gradients by `loss_scale` (mixed precision's, [`crate::LossScale`]; 1
/// otherwise) and scales them so that their global norm is at most `max_norm` (when given;
/// unchanged when below), in one pass; returns the norm of the unscaled gradients before
/// clipping. A non-finite norm (scaled gradients that overflowed) leaves them as they are.
pub fn clip_global_norm<M: Module>(
    module: &M,
    grads: &mut GradientsParams,
    max_norm: Option<f64>,
    loss_scale: f64,
    kernels: KernelSettings,
) -> f64 {
    let norm = global_norm(module, grads, kernels) / loss_scale;
    clip_to_norm(module, grads, norm, max_norm, loss_scale);
    norm
}

/// [`clip_global_norm`] with the gradients' norm known (`norm`, of the unscaled gradients).
pub fn clip_to_norm<M: Module>(
    module: &M,
    grads: &mut GradientsParams,
    norm: f64,
    max_norm: Option<f64>,
    loss_scale: f64,
) {
    if !norm.is_finite() {
        return;
    }
    let clip = match max_norm {
        Some(max) if norm > max => max / norm,
        _ => 1.0,
    };
    if clip / loss_scale != 1.0 {
        scale_gradients(module, grads, clip / loss_scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use elmo_kernels::HostInstructions;

    #[derive(Module, Debug)]
    struct Two {
        a: Param<Tensor<1>>,
        b: Param<Tensor<2>>,
    }

    /// `a = [1, −2]`, `b = 0.5` (2 × 2) and the gradients of `loss = 3·Σa + Σb²`: 3 for `a`,
    /// `2b = 1` for `b`.
    fn two_with_gradients() -> (Two, GradientsParams) {
        two_with_gradients_on(&Device::flex().autodiff())
    }

    fn two_with_gradients_on(device: &Device) -> (Two, GradientsParams) {
        let device = device.clone();
        let model = Two {
            a: Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![1.0f32, -2.0], [2]),
                &device,
            )),
            b: Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![0.5f32; 4], [2, 2]),
                &device,
            )),
        };
        let loss = model.a.val().sum().mul_scalar(3.0) + model.b.val().square().sum();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        (model, grads)
    }

    #[test]
    fn adagrad_matches_tensorflow_and_clipping_scales() {
        adagrad_matches_tensorflow_on(&Device::flex().autodiff());
    }

    /// The same through the fused kernel on wgpu (in CI: lavapipe).
    #[test]
    fn fused_adagrad_matches_tensorflow_on_wgpu() {
        if let Some(device) =
            elmo_test_support::wgpu_device_or_skip("fused_adagrad_matches_tensorflow_on_wgpu")
        {
            adagrad_matches_tensorflow_on(&device.autodiff());
        }
    }

    /// Two composed Adagrad steps at learning rate 0.2, the first without an accumulator.
    fn composed_two_steps(
        adagrad: &Adagrad,
        parameter: Tensor<1>,
        [first, second]: [Tensor<1>; 2],
    ) -> [AdagradStep<1>; 2] {
        let one = adagrad.composed_step(0.2, parameter, first, None);
        let two = adagrad.composed_step(
            0.2,
            one.parameter.clone(),
            second,
            Some(one.accumulator.clone()),
        );
        [one, two]
    }

    /// `n` values of a sine wave.
    fn wave(n: usize, scale: f32, phase: f32, device: &Device) -> Tensor<1> {
        let values = (0..n)
            .map(|i| scale * (i as f32 * 0.37 + phase).sin())
            .collect();
        Tensor::<1>::from_data(TensorData::new(values, [n]), device)
    }

    /// The fused kernel against the composed operations on the same wgpu device: two steps
    /// (the first without an accumulator) over several workgroups' worth of elements.
    #[test]
    fn fused_adagrad_equals_composed_on_wgpu() {
        let Some(device) =
            elmo_test_support::wgpu_device_or_skip("fused_adagrad_equals_composed_on_wgpu")
        else {
            return;
        };
        let n = 3000;
        let wave = |scale: f32, phase: f32| wave(n, scale, phase, &device);
        let adagrad = Adagrad::new(0.5, KernelSettings::default());
        let (parameter, first, second) = (wave(1.0, 0.0), wave(2.0, 1.0), wave(0.3, 2.0));
        let fused = |parameter: &Tensor<1>, grad: &Tensor<1>, accumulator: Option<&Tensor<1>>| {
            fused_adagrad_step(
                parameter,
                grad,
                accumulator,
                None,
                0.5,
                0.2,
                KernelSettings::default(),
            )
            .expect("the fused kernel runs on wgpu")
        };
        let fused_first = fused(&parameter, &first, None);
        let fused_second = fused(
            &fused_first.parameter,
            &second,
            Some(&fused_first.accumulator),
        );
        let [composed_first, composed_second] =
            composed_two_steps(&adagrad, parameter, [first, second]);
        let max_error = |a: Tensor<1>, b: Tensor<1>| -> f32 { (a - b).abs().max().into_scalar() };
        for (name, error) in [
            (
                "first accumulator",
                max_error(fused_first.accumulator, composed_first.accumulator),
            ),
            (
                "first parameter",
                max_error(fused_first.parameter, composed_first.parameter),
            ),
            (
                "second accumulator",
                max_error(fused_second.accumulator, composed_second.accumulator),
            ),
            (
                "second parameter",
                max_error(fused_second.parameter, composed_second.parameter),
            ),
        ] {
            assert!(error < 1e-6, "{name}: {error}");
        }
    }

    /// The host loop against the composed operations on flex, bit for bit, in the vectors of
    /// every instruction set this CPU has: two steps (the first without an accumulator) over
    /// several of its tasks' worth of values; a parameter whose values another tensor shares
    /// is copied, not overwritten.
    #[test]
    fn host_adagrad_equals_composed_on_flex() {
        let device = Device::flex();
        let n = 150_001;
        let wave = |scale: f32, phase: f32| wave(n, scale, phase, &device);
        let (parameter, first, second) = (wave(1.0, 0.0), wave(2.0, 1.0), wave(0.3, 2.0));
        assert!(KernelSettings::default().host_for(&parameter));
        let adagrad = Adagrad::new(0.5, KernelSettings::default());
        let [composed_first, composed_second] =
            composed_two_steps(&adagrad, parameter.clone(), [first.clone(), second.clone()]);
        for limit in HostInstructions::EVERY {
            let shared = parameter.clone().into_data();
            let host_first = host_adagrad_step(parameter.clone(), &first, None, 0.5, 0.2, limit);
            parameter.to_data().assert_eq(&shared, true);
            let host_second = host_adagrad_step(
                host_first.parameter.clone(),
                &second,
                Some(host_first.accumulator.clone()),
                0.5,
                0.2,
                limit,
            );
            for (host, composed) in [
                (host_first.accumulator, &composed_first.accumulator),
                (host_first.parameter, &composed_first.parameter),
                (host_second.accumulator, &composed_second.accumulator),
                (host_second.parameter, &composed_second.parameter),
            ] {
                host.into_data().assert_eq(&composed.to_data(), true);
            }
        }
    }

    /// Adagrad of a row gradient (the rows named, zero elsewhere) is the dense step of the
    /// gradient those rows make, bit for bit, for accumulator and parameter, on the host pass
    /// and with burn's operations: two steps (the first without an accumulator) on different
    /// rows, of a table wide enough for several host tasks a row set.
    #[test]
    fn adagrad_of_rows_is_the_dense_step_of_their_table() {
        let device = Device::flex();
        let (n_rows, width) = (700, 300);
        let table = |values: Vec<f32>| {
            Tensor::<2>::from_data(TensorData::new(values, [n_rows, width]), &device)
        };
        let parameter = table(
            (0..n_rows * width)
                .map(|i| (i as f32 * 0.37).sin())
                .collect(),
        );
        let steps: [Vec<u32>; 2] = [
            (0..n_rows as u32).step_by(3).collect(),
            // The last row (699) among them.
            (1..n_rows as u32).step_by(2).collect(),
        ];
        // Each step's row gradient and the dense gradient it stands for.
        let gradients = steps.clone().map(|rows| {
            let mut dense = vec![0.0f32; n_rows * width];
            let mut compact = Vec::new();
            for &row in &rows {
                let values: Vec<f32> = (0..width)
                    .map(|j| ((row as usize * width + j) as f32 * 0.11).cos() * 2.0)
                    .collect();
                dense[row as usize * width..][..width].copy_from_slice(&values);
                compact.extend(values);
            }
            let compact =
                Tensor::<2>::from_data(TensorData::new(compact, [rows.len(), width]), &device);
            (rows, compact, table(dense))
        });
        for kernels in [
            KernelSettings::default(),
            KernelSettings {
                host_instructions: HostInstructions::Portable,
                ..KernelSettings::default()
            },
            KernelSettings {
                host_recurrence: false,
                ..KernelSettings::default()
            },
        ] {
            let adagrad = Adagrad::new(0.5, kernels);
            let (mut dense, mut by_rows) = ((parameter.clone(), None), (parameter.clone(), None));
            for (rows, compact, full) in &gradients {
                let (tensor, state) = adagrad.step(0.2, dense.0, full.clone(), dense.1);
                dense = (tensor, state);
                let (tensor, state) = with_slot(&adagrad.rows, rows.as_slice().into(), || {
                    adagrad.step(0.2, by_rows.0, compact.clone(), by_rows.1)
                });
                by_rows = (tensor, state);
                let accumulator =
                    |state: &Option<AdagradState<2>>| state.as_ref().unwrap().accumulator.to_data();
                dense.0.to_data().assert_eq(&by_rows.0.to_data(), true);
                accumulator(&dense.1).assert_eq(&accumulator(&by_rows.1), true);
            }
            assert_ne!(
                dense.0.to_data(),
                parameter.to_data(),
                "the steps move the table"
            );
        }
    }

    fn adagrad_matches_tensorflow_on(device: &Device) {
        let (model, mut grads) = two_with_gradients_on(device);
        let norm = clip_global_norm(
            &model,
            &mut grads,
            Some(1.0),
            1.0,
            KernelSettings::default(),
        );
        assert!((norm - (9.0f64 * 2.0 + 4.0).sqrt()).abs() < 1e-5);
        assert!((global_norm(&model, &grads, KernelSettings::default()) - 1.0).abs() < 1e-5);

        let mut optim = ModuleOptimizer::from(Adagrad::new(1.0, KernelSettings::default()));
        let g = 3.0 / 22f64.sqrt();
        let model = optim.step(0.2, model, grads);
        let a: Vec<f32> = model.a.val().into_data().try_into_vec_as().unwrap();
        let expected = 1.0 - 0.2 * g / (1.0 + g * g).sqrt();
        assert!(
            (f64::from(a[0]) - expected).abs() < 1e-6,
            "{a:?} vs {expected}"
        );
    }

    /// `[a, b]` of `model`, flat.
    fn values_of(model: &Two) -> Vec<f32> {
        let mut values: Vec<f32> = model.a.val().into_data().try_into_vec_as().unwrap();
        values.extend(model.b.val().into_data().try_into_vec_as::<f32>().unwrap());
        values
    }

    /// The gradients of [`two_with_gradients`]'s loss at `model`.
    fn gradients_at(model: &Two) -> GradientsParams {
        let loss = model.a.val().sum().mul_scalar(3.0) + model.b.val().square().sum();
        GradientsParams::from_grads(loss.backward(), model)
    }

    /// A step whose scale was decided on the device ([`TrainingOptimizer::step_scaled`]: the
    /// fused kernel on wgpu, burn's operations on flex) is the host's clipping and step; a
    /// step whose scale says skip leaves the parameters, and their accumulators (the initial
    /// ones on a first step), as they were.
    #[test]
    fn a_step_scaled_on_the_device_is_the_hosts_clipping_and_step() {
        let kernels = KernelSettings::default();
        let config = OptimizerConfig::Adagrad {
            lr: 0.2,
            initial_accumulator: 1.0,
        };
        for device in elmo_test_support::flex_and_wgpu(
            "a_step_scaled_on_the_device_is_the_hosts_clipping_and_step",
        ) {
            let train_device = device.clone().autodiff();
            let scale = |factor: f32, apply: f32| {
                Tensor::<1>::from_data(TensorData::new(vec![factor, apply], [2]), &device)
            };
            let close = |a: &[f32], b: &[f32]| {
                let error = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f32::max);
                assert!(error < 1e-6, "{a:?} vs {b:?} on {device:?}");
            };
            // Two steps on the host, clipped to norm 1 (the first norm is √22).
            let (model, mut grads) = two_with_gradients_on(&train_device);
            let mut host = build_optimizer(&config, kernels);
            let norm = clip_global_norm(&model, &mut grads, Some(1.0), 1.0, kernels);
            let host_one = host.step(0.2, model, grads, None);
            let mut grads = gradients_at(&host_one);
            let second_norm = clip_global_norm(&host_one, &mut grads, Some(1.0), 1.0, kernels);
            let host_two = host.step(0.2, host_one.clone(), grads, None);
            // The same with the factors given, after a first step that is skipped.
            let (model, grads) = two_with_gradients_on(&train_device);
            let before = values_of(&model);
            let mut scaled = build_optimizer(&config, kernels);
            assert!(scaled.scales_on_device());
            let skipped = scaled.step_scaled(0.2, model, grads, scale(0.5, 0.0));
            assert_eq!(values_of(&skipped), before, "skipped on {device:?}");
            let grads = gradients_at(&skipped);
            let one = scaled.step_scaled(0.2, skipped, grads, scale((1.0 / norm) as f32, 1.0));
            close(&values_of(&one), &values_of(&host_one));
            let grads = gradients_at(&one);
            let two = scaled.step_scaled(0.2, one.clone(), grads, scale(0.0, 0.0));
            assert_eq!(values_of(&two), values_of(&one), "skipped on {device:?}");
            let grads = gradients_at(&two);
            let factor = (1.0 / second_norm) as f32;
            let three = scaled.step_scaled(0.2, two, grads, scale(factor, 1.0));
            close(&values_of(&three), &values_of(&host_two));
        }
    }

    #[test]
    fn sgd_steps_against_the_gradient_and_its_state_round_trips() {
        let (model, grads) = two_with_gradients();
        let mut optim =
            build_optimizer(&OptimizerConfig::Sgd { lr: 0.1 }, KernelSettings::default());
        // θ ← θ − 0.1·g.
        let model = optim.step(0.1, model, grads, None);
        let a: Vec<f32> = model.a.val().into_data().try_into_vec_as().unwrap();
        let b: Vec<f32> = model.b.val().into_data().try_into_vec_as().unwrap();
        assert!(
            (a[0] - 0.7).abs() < 1e-6 && (a[1] + 2.3).abs() < 1e-6,
            "{a:?}"
        );
        assert!(b.iter().all(|v| (v - 0.4).abs() < 1e-6), "{b:?}");
        // A checkpoint's optimizer file written and read back (SGD keeps no tensors).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optimizer.bpk");
        optim.save(&path).unwrap();
        let restored =
            build_optimizer(&OptimizerConfig::Sgd { lr: 0.1 }, KernelSettings::default())
                .load(&path, &Device::flex())
                .unwrap();
        assert_eq!(restored.to_record().len(), optim.to_record().len());
    }
}
