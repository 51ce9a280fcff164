//! LSTM with a projection layer and clipping (LSTMP; Sak et al. 2014), one direction of one layer of
//! the ELMo biLM (Peters et al. 2018, §3.1/§3.4). Follows AllenNLP's `LstmCellWithProjection`
//! (allennlp/modules/lstm_cell_with_projection.py): rows sorted longest first, each step computing
//! only the rows still running.
//!
//! Per step: `gates = x_t·W_x + h_{t−1}·W_h + b` (one fused `[.., 4C]` matmul, gate order
//! input, forget, cell, output, activated in one pass: `gate_activation.rs`),
//! `c_t = clip(i·g + f·c_{t−1})`, `h_t = clip((o·tanh c_t)·W_p)`.
//! `x·W_x` is computed for 32 steps at a time before the recurrence. On burn's flex CPU backend
//! without autodiff (inference), the recurrence runs as one host loop instead
//! (`elmo_kernels::HostLstm`: packed weights, one vectorised pass per cell); on a CubeCL device
//! with the fused kernels, as two kernels and two products a step (`fused_recurrence.rs`); with
//! the same results to float32 rounding.

use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Device, Int, Tensor, TensorData};

use elmo_kernels::{GateActivation, KernelSettings, half_product, to_half};

pub use crate::fused_recurrence::PROJECTION_CHUNK_STEPS;
use crate::fused_recurrence::{GroupLayer, forward_group, projection_chunk_steps};
use crate::host_weights::HostWeights;
pub use crate::lstm_state::LstmState;

/// Configuration of a [`LstmWithProjection`].
#[derive(Debug, Clone)]
pub struct LstmWithProjectionConfig {
    /// Input width.
    pub d_input: usize,
    /// Number of cells (`C`).
    pub d_cell: usize,
    /// Projection / hidden width (`P`).
    pub d_projection: usize,
    /// Memory cell clip.
    pub cell_clip: Option<f64>,
    /// Projected state clip.
    pub projection_clip: Option<f64>,
}

/// One LSTMP layer of one direction.
#[derive(Module, Debug)]
pub struct LstmWithProjection {
    /// `[d_input, 4C]`, gates `i, f, g, o`.
    pub input_weight: Param<Tensor<2>>,
    /// `[P, 4C]`, gates `i, f, g, o`.
    pub state_weight: Param<Tensor<2>>,
    /// `[4C]`, including the forget-gate bias (+1.0 of TensorFlow already added at import).
    pub bias: Param<Tensor<1>>,
    /// `[C, P]`.
    pub projection: Param<Tensor<2>>,
    /// Memory cell clip.
    #[module(skip)]
    pub cell_clip: Option<f64>,
    /// Projected state clip.
    #[module(skip)]
    pub projection_clip: Option<f64>,
    /// Which kernels run (here: `host_recurrence`, the host loop of inference on a CPU).
    #[module(skip)]
    pub kernels: KernelSettings,
    /// The packed host copy of the weights that inference on flex keeps between calls
    /// ([`HostWeights`]; empty elsewhere).
    #[module(skip)]
    pub host_weights: HostWeights,
}

/// Output of [`LstmWithProjection::forward`].
#[derive(Debug, Clone)]
pub struct LstmOutput {
    /// `[B, T, P]`, zero at padded positions.
    pub outputs: Tensor<3>,
    /// State after each row's last real step (rows of length 0 keep their initial state).
    pub final_state: LstmState,
}

impl LstmWithProjectionConfig {
    /// Creates the layer with random weights (uniform in ±1/sqrt(C), forget bias 1).
    pub fn init(&self, device: &Device) -> LstmWithProjection {
        let bound = 1.0 / (self.d_cell as f64).sqrt();
        let init = Initializer::Uniform {
            min: -bound,
            max: bound,
        };
        let gates = 4 * self.d_cell;
        let forget_gate = self.d_cell..2 * self.d_cell;
        let bias = Tensor::zeros([gates], device)
            .slice_assign(forget_gate, Tensor::ones([self.d_cell], device));
        LstmWithProjection {
            input_weight: init.init([self.d_input, gates], device),
            state_weight: init.init([self.d_projection, gates], device),
            bias: Param::from_tensor(bias.detach()),
            projection: init.init([self.d_cell, self.d_projection], device),
            cell_clip: self.cell_clip,
            projection_clip: self.projection_clip,
            kernels: KernelSettings::default(),
            host_weights: HostWeights::default(),
        }
    }

    /// [`Self::init`] with the weights drawn from `seed` ([`crate::seeded_init()`]): the same
    /// layer on every run and thread.
    pub fn init_seeded(&self, device: &Device, seed: u64) -> LstmWithProjection {
        crate::seeded_init(device, seed, || self.init(device))
    }
}

impl LstmWithProjection {
    /// This layer running `kernels`.
    pub fn with_kernels(mut self, kernels: KernelSettings) -> Self {
        self.kernels = kernels;
        self
    }

    /// Number of cells (`C`).
    pub fn d_cell(&self) -> usize {
        self.projection.shape().dims::<2>()[0]
    }

    /// Projection width (`P`).
    pub fn d_projection(&self) -> usize {
        self.projection.shape().dims::<2>()[1]
    }

    /// Whether [`Self::forward`] runs the fused inference kernels on `inputs`
    /// (`fused_recurrence.rs`): a CubeCL device without autodiff, with the fused kernels on.
    pub(crate) fn fused_inference(&self, inputs: &Tensor<3>) -> bool {
        !inputs.device().is_autodiff() && self.kernels.fused_for(inputs)
    }

    /// What the fused inference recurrence (and the host loop on flex) reads of this layer.
    pub(crate) fn group_layer(&self) -> GroupLayer {
        GroupLayer {
            input_weight: self.input_weight.val(),
            state_weight: self.state_weight.val(),
            bias: self.bias.val(),
            projection: self.projection.val(),
            cell_clip: self.cell_clip,
            projection_clip: self.projection_clip,
        }
    }

    /// Whether `other` has this layer's weight shapes and clips (two layers that can run as one
    /// group: a biLM layer's directions in inference here, elmo-train's `LstmGroup`).
    pub fn same_shape(&self, other: &Self) -> bool {
        let shape = |l: &Self| {
            (
                l.input_weight.val().dims(),
                l.projection.val().dims(),
                l.cell_clip.map(f64::to_bits),
                l.projection_clip.map(f64::to_bits),
            )
        };
        shape(self) == shape(other)
    }

    /// A zero state for `batch` rows.
    pub fn zero_state(&self, batch: usize, device: &Device) -> LstmState {
        LstmState {
            hidden: Tensor::zeros([batch, self.d_projection()], device),
            memory: Tensor::zeros([batch, self.d_cell()], device),
        }
    }

    /// Runs the layer over a padded batch.
    ///
    /// Row `b` is read at positions `0..lengths[b]`: left to right when `go_forward`, else right to
    /// left starting at its own last token (each row reversed by its own length). Outputs at
    /// padded positions are zero, and the state of a row is not changed by padded positions.
    ///
    /// # Shapes
    /// - inputs: `[B, T, d_input]`
    /// - lengths: `B` values `<= T`
    /// - output: [`LstmOutput`]
    pub fn forward(
        &self,
        inputs: Tensor<3>,
        lengths: &[usize],
        go_forward: bool,
        initial_state: Option<LstmState>,
    ) -> LstmOutput {
        let device = inputs.device();
        let batch = inputs.dims()[0];
        let initial_state = initial_state.unwrap_or_else(|| self.zero_state(batch, &device));
        if self.fused_inference(&inputs) {
            // On a CubeCL device, the fused kernels take rows in any order.
            let mut out = forward_group(
                &[self.group_layer()],
                self.kernels,
                inputs,
                lengths,
                &[go_forward],
                vec![initial_state],
            );
            return LstmOutput {
                outputs: out.outputs,
                final_state: out.final_states.remove(0),
            };
        }
        // Rows sorted longest first make the rows still running at any step a prefix of the batch,
        // so a step computes only those (AllenNLP sorts its batches the same way).
        let mut order: Vec<usize> = (0..batch).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(lengths[b]));
        if order.iter().enumerate().all(|(i, &b)| i == b) {
            return self.forward_sorted(inputs, lengths, go_forward, initial_state);
        }
        let rows = |indices: Vec<usize>| {
            let indices = indices.into_iter().map(|b| b as i64).collect::<Vec<_>>();
            Tensor::<1, Int>::from_data(TensorData::new(indices, [batch]), &device)
        };
        let sort = rows(order.clone());
        let mut inverse = vec![0; batch];
        for (position, &b) in order.iter().enumerate() {
            inverse[b] = position;
        }
        let unsort = rows(inverse);
        let sorted_lengths: Vec<usize> = order.iter().map(|&b| lengths[b]).collect();
        let out = self.forward_sorted(
            inputs.select(0, sort.clone()),
            &sorted_lengths,
            go_forward,
            LstmState {
                hidden: initial_state.hidden.select(0, sort.clone()),
                memory: initial_state.memory.select(0, sort),
            },
        );
        LstmOutput {
            outputs: out.outputs.select(0, unsort.clone()),
            final_state: LstmState {
                hidden: out.final_state.hidden.select(0, unsort.clone()),
                memory: out.final_state.memory.select(0, unsort),
            },
        }
    }

    /// [`Self::forward`] for rows sorted longest first.
    fn forward_sorted(
        &self,
        inputs: Tensor<3>,
        lengths: &[usize],
        go_forward: bool,
        initial_state: LstmState,
    ) -> LstmOutput {
        let device = inputs.device();
        if self.kernels.host_recurrence
            && on_host_cpu(&device)
            && let Some(out) = self.forward_host(&inputs, lengths, go_forward, &initial_state)
        {
            return out;
        }
        let [batch, n_steps, d_input] = inputs.dims();
        let d_cell = self.d_cell();
        let gates_width = 4 * d_cell;
        let LstmState {
            hidden: mut h,
            memory: mut c,
        } = initial_state;

        // Input contribution of many steps at once (one large matmul per chunk of steps; the
        // chunks bound memory for long sequences). The bias joins the state contribution as in
        // AllenNLP (`x·W_x + (h·W_h + b)`), which keeps float32 rounding close.
        let activation = GateActivation::new(d_cell, &device);
        // Mixed precision: the weights cast to 16 bits once, each product's result in `f32`.
        let mode = self.kernels.product_mode(&inputs);
        let half = mode.half;
        let input_weight = to_half(activation.prepare(self.input_weight.val()), half);
        let chunk_steps = projection_chunk_steps(self.kernels, &inputs, batch, gates_width);
        let project = |start: usize| {
            let len = chunk_steps.min(n_steps - start);
            let rows = inputs
                .clone()
                .narrow(1, start, len)
                .reshape([batch * len, d_input]);
            half_product(rows, input_weight.clone(), mode).reshape([batch, len, gates_width])
        };
        // The chunk of projected inputs in use and the step it starts at.
        let mut projected: Option<(usize, Tensor<3>)> = None;
        let bias = activation.prepare(self.bias.val().unsqueeze_dim::<2>(0));
        let state_weight = to_half(activation.prepare(self.state_weight.val()), half);
        let projection = to_half(self.projection.val(), half);

        let mut outputs: Vec<Tensor<2>> = Vec::with_capacity(n_steps);
        for step in 0..n_steps {
            let t = if go_forward { step } else { n_steps - 1 - step };
            // Rows `0..n_active` are still running (lengths sorted longest first).
            let n_active = lengths.iter().take_while(|&&l| l > t).count();
            if n_active == 0 {
                outputs.push(Tensor::zeros([batch, self.d_projection()], &device));
                continue;
            }
            let wanted = t - t % chunk_steps;
            let (chunk_start, chunk) = match projected.take() {
                Some((start, chunk)) if start == wanted => (start, chunk),
                _ => (wanted, project(wanted)),
            };
            let x_t = chunk
                .clone()
                .narrow(1, t - chunk_start, 1)
                .reshape([batch, gates_width]);
            projected = Some((chunk_start, chunk));
            let (x_t, h_active, c_active) = if n_active == batch {
                (x_t, h.clone(), c.clone())
            } else {
                (
                    x_t.narrow(0, 0, n_active),
                    h.clone().narrow(0, 0, n_active),
                    c.clone().narrow(0, 0, n_active),
                )
            };
            let gates = x_t + (half_product(h_active, state_weight.clone(), mode) + bias.clone());
            let activated = activation.activate(gates);
            let gate = |k: usize| activated.clone().narrow(1, k * d_cell, d_cell);
            let (input_gate, forget_gate, cell_input, output_gate) =
                (gate(0), gate(1), gate(2), gate(3));
            let mut memory = input_gate * cell_input + forget_gate * c_active;
            if let Some(clip) = self.cell_clip {
                memory = memory.clamp(-clip, clip);
            }
            let cell_output = output_gate * memory.clone().tanh();
            let mut hidden = half_product(cell_output, projection.clone(), mode);
            if let Some(clip) = self.projection_clip {
                hidden = hidden.clamp(-clip, clip);
            }
            if n_active == batch {
                c = memory;
                h = hidden.clone();
                outputs.push(hidden);
            } else {
                // Finished (or not yet started) rows keep their state and output zero.
                let n_rest = batch - n_active;
                c = Tensor::cat(vec![memory, c.narrow(0, n_active, n_rest)], 0);
                h = Tensor::cat(vec![hidden.clone(), h.narrow(0, n_active, n_rest)], 0);
                let zeros = Tensor::zeros([n_rest, self.d_projection()], &device);
                outputs.push(Tensor::cat(vec![hidden, zeros], 0));
            }
        }
        if !go_forward {
            outputs.reverse();
        }
        let outputs = if outputs.is_empty() {
            Tensor::zeros([batch, 0, self.d_projection()], &device)
        } else {
            Tensor::stack(outputs, 1)
        };
        LstmOutput {
            outputs,
            final_state: LstmState {
                hidden: h,
                memory: c,
            },
        }
    }
}

impl LstmWithProjection {
    /// [`Self::forward_sorted`] as one host loop (`elmo_kernels::HostLstm`, its weights packed
    /// once and kept: [`HostWeights`]); `None` when a tensor cannot be read as float32 (then
    /// burn's operations run).
    fn forward_host(
        &self,
        inputs: &Tensor<3>,
        lengths: &[usize],
        go_forward: bool,
        initial_state: &LstmState,
    ) -> Option<LstmOutput> {
        let device = inputs.device();
        let [batch, n_steps, _] = inputs.dims();
        let (d_cell, d_projection) = (self.d_cell(), self.d_projection());
        let host = |tensor: Tensor<2>| tensor.into_data().try_into_vec::<f32>().ok();
        let layer = (self.host_weights).layer(
            &self.group_layer(),
            self.kernels.host_instructions,
            self.kernels.precision,
        )?;
        let out = layer.forward(
            &inputs.clone().into_data().try_into_vec::<f32>().ok()?,
            lengths,
            n_steps,
            go_forward,
            host(initial_state.hidden.clone())?,
            host(initial_state.memory.clone())?,
            products_on_pool(),
        );
        let data = |values: Vec<f32>, shape: Vec<usize>| TensorData::new(values, shape);
        Some(LstmOutput {
            outputs: Tensor::from_data(
                data(out.outputs, vec![batch, n_steps, d_projection]),
                &device,
            ),
            final_state: LstmState {
                hidden: Tensor::from_data(data(out.hidden, vec![batch, d_projection]), &device),
                memory: Tensor::from_data(data(out.memory, vec![batch, d_cell]), &device),
            },
        })
    }
}

/// Whether the host loop hands its products and cell passes to rayon's pool: where the pool
/// has more than two threads. The two directions of a stack run side by side on two threads
/// (`both_directions`, one after the other with a pool of one), so with a pool of two each
/// computes on its own thread (4-7% faster on 2 cores than through the pool), and a larger
/// pool's threads all share each direction's steps.
fn products_on_pool() -> bool {
    elmo_kernels::host_threads() > 2
}

/// Whether `device` is burn's flex CPU backend without autodiff, where `elmo_kernels::HostLstm`
/// runs.
#[cfg(feature = "flex")]
fn on_host_cpu(device: &Device) -> bool {
    matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_))
}

/// Without the `flex` feature no device is the host loop's.
#[cfg(not(feature = "flex"))]
fn on_host_cpu(_device: &Device) -> bool {
    false
}

/// A layer of `[d_input, d_cell, d_projection]` with weights drawn from `seed`, for tests.
#[cfg(test)]
pub(crate) fn seeded_layer(
    device: &Device,
    seed: u64,
    [d_input, d_cell, d_projection]: [usize; 3],
    cell_clip: Option<f64>,
    projection_clip: Option<f64>,
) -> LstmWithProjection {
    LstmWithProjectionConfig {
        d_input,
        d_cell,
        d_projection,
        cell_clip,
        projection_clip,
    }
    .init_seeded(device, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar()
    }

    /// `n` deterministic values `scale · cos(0.37 i)` of `shape` (host values: the backend's
    /// RNG is left to `seeded_init` in this test binary).
    fn values(n: usize, scale: f32, shape: &[usize]) -> TensorData {
        let v: Vec<f32> = (0..n).map(|i| scale * (i as f32 * 0.37).cos()).collect();
        TensorData::new(v, shape.to_vec())
    }

    /// Rows of any lengths, in any order, from a given state: each row's outputs and final state
    /// are those of the row run alone (the sorting and the running-rows prefix are invisible).
    #[test]
    fn a_batch_equals_its_rows_run_alone() {
        // The host loop (flex, inference), the fused kernels (wgpu) and burn's operations.
        let devices = elmo_test_support::flex_and_wgpu("a_batch_equals_its_rows_run_alone");
        for device in devices {
            for kernels in [KernelSettings::ALL, KernelSettings::COMPOSED] {
                let layer = seeded_layer(&device, 5, [3, 6, 4], Some(3.0), Some(3.0));
                rows_alone(&layer.with_kernels(kernels), &device);
            }
        }
    }

    fn rows_alone(layer: &LstmWithProjection, device: &Device) {
        let device = device.clone();
        let lengths = [2, 5, 0, 3, 5];
        let batch = lengths.len();
        // Host values (the backend's RNG is left to `seeded_init` in this test binary).
        let values = |n: usize, scale: f32| -> Vec<f32> {
            (0..n).map(|i| scale * (i as f32 * 0.77).sin()).collect()
        };
        let tensor = |n: usize, scale: f32, shape: &[usize]| {
            TensorData::new(values(n, scale), shape.to_vec())
        };
        let inputs = Tensor::<3>::from_data(tensor(batch * 15, 1.0, &[batch, 5, 3]), &device);
        let start = LstmState {
            hidden: Tensor::from_data(tensor(batch * 4, 0.5, &[batch, 4]), &device),
            memory: Tensor::from_data(tensor(batch * 6, -0.5, &[batch, 6]), &device),
        };
        for go_forward in [true, false] {
            let all = layer.forward(inputs.clone(), &lengths, go_forward, Some(start.clone()));
            for (b, &length) in lengths.iter().enumerate() {
                let row = |t: Tensor<2>| t.narrow(0, b, 1);
                let outputs = all.outputs.clone().narrow(0, b, 1);
                if length < 5 {
                    let padding = outputs.clone().narrow(1, length, 5 - length);
                    let padding: f32 = padding.abs().sum().into_scalar();
                    assert_eq!(padding, 0.0, "row {b}");
                }
                // A row of length 0 keeps its state.
                let alone = if length == 0 {
                    LstmOutput {
                        outputs: Tensor::zeros([1, 0, 4], &device),
                        final_state: LstmState {
                            hidden: row(start.hidden.clone()),
                            memory: row(start.memory.clone()),
                        },
                    }
                } else {
                    layer.forward(
                        inputs.clone().narrow(0, b, 1).narrow(1, 0, length),
                        &[length],
                        go_forward,
                        Some(LstmState {
                            hidden: row(start.hidden.clone()),
                            memory: row(start.memory.clone()),
                        }),
                    )
                };
                if length > 0 {
                    let real = outputs.narrow(1, 0, length);
                    assert!(max_abs_diff(real, alone.outputs) < 1e-6, "row {b}");
                }
                let final_state = &all.final_state;
                let h = max_abs_diff(row(final_state.hidden.clone()), alone.final_state.hidden);
                let c = max_abs_diff(row(final_state.memory.clone()), alone.final_state.memory);
                assert!(h < 1e-6 && c < 1e-6, "row {b} ({go_forward}): {h} {c}");
            }
        }
    }

    /// The host loop equals burn's operations on the `original` shape's proportions (wide gates,
    /// a narrow projection, clips active, unsorted rows, a carried state), both directions.
    #[test]
    fn the_host_loop_equals_burns_operations() {
        let device = Device::flex();
        let layer = seeded_layer(&device, 9, [24, 40, 12], Some(0.5), Some(0.3));
        let lengths = [3, 9, 1, 0, 9, 6, 2];
        let batch = lengths.len();
        let inputs = Tensor::<3>::from_data(values(batch * 9 * 24, 2.0, &[batch, 9, 24]), &device);
        let start = LstmState {
            hidden: Tensor::from_data(values(batch * 12, 0.2, &[batch, 12]), &device),
            memory: Tensor::from_data(values(batch * 40, -0.4, &[batch, 40]), &device),
        };
        for go_forward in [true, false] {
            let run = |kernels| {
                layer.clone().with_kernels(kernels).forward(
                    inputs.clone(),
                    &lengths,
                    go_forward,
                    Some(start.clone()),
                )
            };
            let (host, burn) = (run(KernelSettings::ALL), run(KernelSettings::COMPOSED));
            let outputs = max_abs_diff(host.outputs, burn.outputs);
            let hidden = max_abs_diff(host.final_state.hidden, burn.final_state.hidden);
            let memory = max_abs_diff(host.final_state.memory, burn.final_state.memory);
            assert!(
                outputs < 2e-6 && hidden < 2e-6 && memory < 2e-6,
                "{go_forward}: {outputs} {hidden} {memory}"
            );
        }
    }

    /// The host loop keeps its packed weights between calls and packs them again
    /// whenever a weight changes: replaced, or mapped by an operation that flex could run in
    /// place (`Param::map`, the optimizer's and `load_record`'s way). A copy that missed a change
    /// would give the old weights' outputs.
    #[test]
    fn the_host_loop_follows_every_change_of_the_weights() {
        let device = Device::flex();
        let mut layer = seeded_layer(&device, 9, [24, 40, 12], Some(0.5), Some(0.3));
        let lengths = [9, 6, 2];
        let inputs = Tensor::<3>::from_data(values(3 * 9 * 24, 2.0, &[3, 9, 24]), &device);
        let run = |layer: &LstmWithProjection, kernels| {
            let layer = layer.clone().with_kernels(kernels);
            layer.forward(inputs.clone(), &lengths, true, None).outputs
        };
        let check = |layer: &LstmWithProjection| {
            let host = run(layer, KernelSettings::ALL);
            let diff = max_abs_diff(host.clone(), run(layer, KernelSettings::COMPOSED));
            assert!(
                diff < 2e-6,
                "the host loop against burn's operations: {diff}"
            );
            host
        };
        assert!(!layer.host_weights.is_packed());
        let first = check(&layer);
        assert!(layer.host_weights.is_packed());
        assert_eq!(
            max_abs_diff(first.clone(), run(&layer, KernelSettings::ALL)),
            0.0,
            "the kept copy gives the same outputs"
        );
        layer.state_weight = layer.state_weight.map(|w| w.mul_scalar(0.5));
        let mapped = check(&layer);
        layer.projection = Param::from_tensor(layer.projection.val().mul_scalar(-1.0));
        let replaced = check(&layer);
        layer.bias = layer.bias.map(|b| b.add_scalar(0.25));
        let biased = check(&layer);
        layer.input_weight = layer.input_weight.map(|w| w.mul_scalar(1.5));
        let input_mapped = check(&layer);
        layer.input_weight = Param::from_tensor(layer.input_weight.val().mul_scalar(-1.0));
        let input_replaced = check(&layer);
        for (name, a, b) in [
            ("mapped", &first, &mapped),
            ("replaced", &mapped, &replaced),
            ("biased", &replaced, &biased),
            ("input mapped", &biased, &input_mapped),
            ("input replaced", &input_mapped, &input_replaced),
        ] {
            assert!(
                max_abs_diff(a.clone(), b.clone()) > 1e-3,
                "{name}: no change"
            );
        }
    }

    /// The kept copy of the weights is packed for one precision: a call in another packs again
    /// (bf16 on a CPU with AMX or AVX512-BF16, else `f32` again), and the first precision's
    /// outputs come back with it.
    #[test]
    fn the_host_loop_packs_again_for_another_precision() {
        use elmo_kernels::Precision;
        let device = Device::flex();
        let layer = seeded_layer(&device, 4, [40, 64, 24], Some(3.0), Some(3.0));
        let lengths = [7, 5];
        let inputs = Tensor::<3>::from_data(values(2 * 7 * 40, 2.0, &[2, 7, 40]), &device);
        let run = |precision| {
            let kernels = KernelSettings {
                precision,
                ..KernelSettings::ALL
            };
            let layer = layer.clone().with_kernels(kernels);
            layer.forward(inputs.clone(), &lengths, true, None).outputs
        };
        let exact = run(Precision::F32);
        let mixed = run(Precision::Mixed);
        let again = run(Precision::F32);
        assert_eq!(max_abs_diff(exact.clone(), again), 0.0, "f32 after bf16");
        let diff = max_abs_diff(exact.clone(), mixed);
        let largest: f32 = exact.abs().max().into_scalar();
        // The host loop runs with this crate's `flex` feature (the workspace's builds).
        if cfg!(feature = "flex")
            && elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Widest)
        {
            assert!(
                diff > 0.0 && diff < 0.02 * largest,
                "bf16: {diff} of {largest}"
            );
        } else {
            assert_eq!(
                diff, 0.0,
                "f32 where the CPU has no bf16 unit (or off flex)"
            );
        }
    }

    /// The fused inference kernels (wgpu) equal burn's operations on the CPU on the `original`
    /// shape's proportions with the projection's product split (K = 512 in 4 slices), unsorted
    /// rows, a row of length 0, clips active and a carried state, both directions; the caller's
    /// state is not written by the kernels' in-place updates.
    #[test]
    fn the_fused_kernels_equal_burns_operations() {
        let Some(gpu) =
            elmo_test_support::wgpu_device_or_skip("the_fused_kernels_equal_burns_operations")
        else {
            return;
        };
        let cpu = Device::flex();
        let layer = seeded_layer(&cpu, 11, [24, 512, 12], Some(0.5), Some(0.3));
        let lengths = [3, 9, 1, 0, 9, 6, 2];
        let batch = lengths.len();
        let inputs = values(batch * 9 * 24, 2.0, &[batch, 9, 24]);
        let hidden = values(batch * 12, 0.2, &[batch, 12]);
        let memory = values(batch * 512, -0.4, &[batch, 512]);
        let run = |device: &Device, kernels, go_forward| {
            let start = LstmState {
                hidden: Tensor::from_data(hidden.clone(), device),
                memory: Tensor::from_data(memory.clone(), device),
            };
            let out = (layer.clone().to_device(device).with_kernels(kernels)).forward(
                Tensor::from_data(inputs.clone(), device),
                &lengths,
                go_forward,
                Some(start.clone()),
            );
            let kept = max_abs_diff(
                start.hidden.clone(),
                Tensor::from_data(hidden.clone(), device),
            ) + max_abs_diff(start.memory, Tensor::from_data(memory.clone(), device));
            assert_eq!(kept, 0.0, "the caller's state was written");
            let host = |x: Tensor<2>| Tensor::<2>::from_data(x.into_data(), &cpu);
            (
                Tensor::<3>::from_data(out.outputs.into_data(), &cpu),
                host(out.final_state.hidden),
                host(out.final_state.memory),
            )
        };
        let probe = Tensor::<3>::zeros([1, 1, 24], &gpu);
        let on_gpu = layer.clone().to_device(&gpu);
        assert_eq!(on_gpu.fused_inference(&probe), cfg!(feature = "kernels"));
        for go_forward in [true, false] {
            let fused = run(&gpu, KernelSettings::ALL, go_forward);
            let burn = run(&cpu, KernelSettings::COMPOSED, go_forward);
            let outputs = max_abs_diff(fused.0, burn.0);
            let hidden = max_abs_diff(fused.1, burn.1);
            let memory = max_abs_diff(fused.2, burn.2);
            assert!(
                outputs < 1e-5 && hidden < 1e-5 && memory < 1e-5,
                "{go_forward}: {outputs} {hidden} {memory}"
            );
        }
    }

    /// A batch without rows or without steps gives empty outputs and keeps the state, on every
    /// path (the fused kernels launch nothing over zero units).
    #[test]
    fn empty_batches_give_empty_outputs() {
        for device in elmo_test_support::flex_and_wgpu("empty_batches_give_empty_outputs") {
            for kernels in [KernelSettings::ALL, KernelSettings::COMPOSED] {
                let layer =
                    seeded_layer(&device, 3, [5, 8, 4], Some(3.0), Some(3.0)).with_kernels(kernels);
                for (rows, steps) in [(0, 3), (2, 0)] {
                    let out = layer.forward(
                        Tensor::zeros([rows, steps, 5], &device),
                        &vec![steps; rows],
                        false,
                        None,
                    );
                    assert_eq!(out.outputs.dims(), [rows, steps, 4]);
                    assert_eq!(out.final_state.memory.dims(), [rows, 8]);
                }
            }
        }
    }
}
