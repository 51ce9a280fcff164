//! The LSTMP recurrence of a training step on the CPU as host loops over burn's flex tensors:
//! elmo-train's recorded forward pass and its backpropagation through time (`lstm_backward.rs`:
//! Sak et al. 2014 as in bilm-tf's `LSTMCell(num_proj, cell_clip, proj_clip)`), with the
//! arithmetic of the fused GPU kernels of `cube_lstm_cell.rs`. A step is its two products
//! through `host_gemm` on rayon's threads (weights packed once per training step,
//! [`SplitWeight::on_host`]) and one vectorised pass over the cells, rows shared among the
//! threads, that writes the records in place.
//!
//! Why: with burn's operations a step of one layer is ~15 passes over memory forward and as
//! many backward, each a fresh buffer, with flex's scalar `exp` and `tanh`; at `original`'s
//! widths they took about as long as the step's products.

use std::mem::MaybeUninit;

use burn::tensor::Tensor;
use rayon::prelude::*;

use crate::cube_lstm_cell::CellRecords;
use crate::gate_activation::EXP_LIMIT;
use crate::host_gemm::{Isa, Strided, as_written, pass_for_isa};
use crate::host_lstm::{clipped, exp, tanh};
use crate::host_product::{HostPacked, grouped_view_product};
use crate::host_tensor::HostTensor;
use crate::split_product::SplitWeight;

/// The step weights and clips of a layer, or of a group of layers of one shape on their rows
/// stacked (`[G·B, ·]`, group `g` on rows `g·B .. (g+1)·B` with its own weights).
#[derive(Debug, Clone, Copy)]
pub struct HostSteps<'a> {
    /// Forward: `W_h` `[P, 4C]` per group; backward: `W_hᵀ` `[4C, P]`. Packed
    /// ([`SplitWeight::on_host`]).
    pub state: &'a SplitWeight,
    /// Forward: the projection `[C, P]` per group; backward: its transpose `[P, C]`. Packed.
    pub projection: &'a SplitWeight,
    /// Memory cell clip.
    pub cell_clip: Option<f64>,
    /// Projected state clip.
    pub projection_clip: Option<f64>,
}

/// The records of a forward pass, time-major (row `t·B + b`), as [`CellRecords`] reads them.
#[derive(Debug, Clone)]
pub struct HostRecords {
    /// `[T, B, 4C]`: the activated gates `σ(i), σ(f), tanh(g), σ(o)`.
    pub gates: Tensor<3>,
    /// `[T, B, C]`: the clipped memory.
    pub memory: Tensor<3>,
    /// `[T, B, C]`: its `tanh`.
    pub tanh_memory: Tensor<3>,
    /// `[T, B, P]`: the clipped hidden state, the layer's output.
    pub hidden: Tensor<3>,
}

/// The per-step gradients of a backward pass, time-major.
#[derive(Debug, Clone)]
pub struct HostStepGradients {
    /// `[T, B, 4C]`: of the gate pre-activations (plain, not prepared).
    pub gates: Tensor<3>,
    /// `[T, B, P]`: of the projection's output before its clip's mask, the hidden state's
    /// gradient from the layer's output and from the next step.
    pub projected: Tensor<3>,
}

/// The packed weights of `steps`, checked against each other: `state` `[K_s, N_s]` and
/// `projection` `[K_p, N_p]` per group, the same number of groups.
fn packed<'a>(steps: &HostSteps<'a>) -> Option<(&'a [HostPacked], &'a [HostPacked])> {
    let state = steps.state.host_packed()?;
    let projection = steps.projection.host_packed()?;
    (state.len() == projection.len()).then_some((state, projection))
}

/// `a · W_g` for each group's rows of `a` (`rows` rows with row stride `lda`), into `out`
/// (row-major, `N` values a row).
fn grouped_product(weights: &[HostPacked], a: &[f32], lda: usize, rows: usize, out: &mut [f32]) {
    // SAFETY: the products write `f32` values.
    let out = unsafe { as_written(out) };
    grouped_view_product(weights, Strided::rows(a, lda), rows, out);
}

/// A clip as the cell passes take it (no clip: infinity).
fn clip_value(clip: Option<f64>) -> f32 {
    clip.map_or(f32::INFINITY, |clip| clip as f32)
}

/// The recorded forward pass (elmo-train's `LstmGroup::forward_recorded`) of a layer (or group)
/// from `initial_hidden` and `initial_memory` over the input contributions of all steps; `None`
/// where a tensor is not an `f32` flex tensor outside autodiff or the weights are not packed on
/// the host (the caller runs burn's operations), or without steps. The gates' pre-activations
/// are `(x·W_x + b) + h·W_h` in that order, negated (doubled for `g`) as
/// `GateActivation::prepare`'s weights would make them (exactly: both are powers of two), so
/// that the records equal the composed path's.
///
/// # Shapes
/// - contributions: `[T, B, 4C]`, `x·W_x` without the bias
/// - biases: `[1, 4C]` per group
/// - initial_hidden: `[B, P]`; initial_memory: `[B, C]`
///
/// # Panics
/// When the shapes disagree.
pub fn host_forward_steps(
    steps: &HostSteps,
    contributions: &Tensor<3>,
    biases: &[Tensor<2>],
    initial_hidden: &Tensor<2>,
    initial_memory: &Tensor<2>,
) -> Option<HostRecords> {
    let (state, projection) = packed(steps)?;
    let [n_steps, rows, gates_width] = contributions.dims();
    let (c, p) = (gates_width / 4, state[0].k());
    if n_steps == 0 || rows == 0 {
        return None;
    }
    assert!(
        state[0].n() == gates_width
            && gates_width == 4 * c
            && projection[0].k() == c
            && projection[0].n() == p
            && rows.is_multiple_of(state.len()),
        "the weights of [{rows}, {gates_width}] contributions"
    );
    assert!(
        initial_hidden.dims() == [rows, p] && initial_memory.dims() == [rows, c],
        "the initial state of {rows} rows"
    );
    assert!(
        biases.len() == state.len() && biases.iter().all(|b| b.dims() == [1, gates_width]),
        "a [1, {gates_width}] bias per group"
    );
    let contributions = HostTensor::of(contributions)?.contiguous();
    let mut bias = Vec::with_capacity(biases.len() * gates_width);
    for group in biases {
        bias.extend_from_slice(HostTensor::of(group)?.contiguous().values());
    }
    let initial_hidden = HostTensor::of(initial_hidden)?.contiguous();
    let initial_memory = HostTensor::of(initial_memory)?.contiguous();
    let shapes = [4 * c, c, c, p].map(|width| [n_steps, rows, width]);
    // Every step writes its rows of each record (the cell pass every value of the gates,
    // memory and its `tanh`, the projection every value of the hidden state), before the
    // next step reads them.
    let write = |[gates, memory, tanh_memory, hidden]: [&mut [MaybeUninit<f32>]; 4]| {
        let mut recurrent = vec![0.0f32; rows * 4 * c];
        let mut cells = vec![0.0f32; rows * c];
        let cell_clip = clip_value(steps.cell_clip);
        let isa = state[0].isa();
        for t in 0..n_steps {
            let (done_hidden, hidden_t) = hidden.split_at_mut(t * rows * p);
            let (done_memory, memory_t) = memory.split_at_mut(t * rows * c);
            let (h_prev, c_prev) = match t {
                0 => (initial_hidden.values(), initial_memory.values()),
                // SAFETY: step `t − 1` wrote these rows.
                _ => unsafe {
                    (
                        done_hidden[(t - 1) * rows * p..].assume_init_ref(),
                        done_memory[(t - 1) * rows * c..].assume_init_ref(),
                    )
                },
            };
            grouped_product(state, h_prev, p, rows, &mut recurrent);
            let at = |width: usize| t * rows * width..(t + 1) * rows * width;
            let pass = CellForward {
                contributions: &contributions.values()[at(4 * c)],
                bias: &bias,
                batch: rows / state.len(),
                recurrent: &recurrent,
                memory_prev: &c_prev[..rows * c],
            };
            pass.run(
                isa,
                c,
                cell_clip,
                ForwardOutputs {
                    gates: &mut gates[at(4 * c)],
                    memory: &mut memory_t[..rows * c],
                    tanh_memory: &mut tanh_memory[at(c)],
                    cells: &mut cells,
                },
            );
            let hidden_t = &mut hidden_t[..rows * p];
            grouped_view_product(projection, Strided::rows(&cells, c), rows, hidden_t);
            // SAFETY: the product wrote every value.
            let hidden_t = unsafe { hidden_t.assume_init_mut() };
            if let Some(clip) = steps.projection_clip {
                let clip = clip as f32;
                hidden_t.iter_mut().for_each(|v| *v = clipped(*v, clip));
            }
        }
    };
    // SAFETY: `write` writes every value of each record (above).
    let [gates, memory, tanh_memory, hidden] = unsafe { HostTensor::written_each(shapes, write) };
    Some(HostRecords {
        gates: gates.into_tensor(),
        memory: memory.into_tensor(),
        tanh_memory: tanh_memory.into_tensor(),
        hidden: hidden.into_tensor(),
    })
}

/// The backpropagation through time (elmo-train's `LstmGroup::backward_recorded`) of a layer
/// (or group) whose forward pass wrote `records`: the gradients of every step's gate pre-activations and projection, from the
/// gradient of the layer's outputs; `None` as [`host_forward_steps`].
///
/// # Shapes
/// - records: as [`CellRecords`], `[T, B, ·]`; initial_memory: `[B, C]`
/// - grad_outputs: `[B, T, P]` (batch-major, as the layer's outputs)
///
/// # Panics
/// When the shapes disagree.
pub fn host_backward_steps(
    steps: &HostSteps,
    records: &CellRecords,
    initial_memory: &Tensor<2>,
    grad_outputs: &Tensor<3>,
) -> Option<HostStepGradients> {
    let (state, projection) = packed(steps)?;
    let [n_steps, rows, gates_width] = records.gates.dims();
    let (c, p) = (gates_width / 4, state[0].n());
    if n_steps == 0 || rows == 0 {
        return None;
    }
    assert!(
        state[0].k() == gates_width
            && gates_width == 4 * c
            && projection[0].k() == p
            && projection[0].n() == c
            && rows.is_multiple_of(state.len()),
        "the transposed weights of [{rows}, {gates_width}] gates"
    );
    assert!(
        records.memory.dims() == [n_steps, rows, c]
            && records.tanh_memory.dims() == [n_steps, rows, c]
            && records.hidden.dims() == [n_steps, rows, p]
            && initial_memory.dims() == [rows, c]
            && grad_outputs.dims() == [rows, n_steps, p],
        "the records and gradients of {n_steps} steps of {rows} rows"
    );
    let gates = HostTensor::of(records.gates)?.contiguous();
    let memory = HostTensor::of(records.memory)?.contiguous();
    let tanh_memory = HostTensor::of(records.tanh_memory)?.contiguous();
    let hidden = HostTensor::of(records.hidden)?.contiguous();
    let initial_memory = HostTensor::of(initial_memory)?.contiguous();
    let grad_outputs = HostTensor::of(grad_outputs)?.contiguous();
    let (gates, memory, tanh_memory, hidden) = (
        gates.values(),
        memory.values(),
        tanh_memory.values(),
        hidden.values(),
    );
    let shapes = [4 * c, p].map(|width| [n_steps, rows, width]);
    // Every step writes its rows of both (the cell pass every gate's gradient, the loop
    // below every projection gradient) before reading them.
    let write = |[grad_gates, grad_projected]: [&mut [MaybeUninit<f32>]; 2]| {
        let grad_outputs = grad_outputs.values();
        // The hidden state's gradient from step t + 1 (`∂z_{t+1}·W_hᵀ`), and the memory's
        // (`∂c_{t+1}·f_{t+1}`), both zero after the last step.
        let mut grad_hidden_next = vec![0.0f32; rows * p];
        let mut carry = vec![0.0f32; rows * c];
        let mut grad_cells = vec![0.0f32; rows * c];
        let (cell_clip, projection_clip) = (
            clip_value(steps.cell_clip),
            clip_value(steps.projection_clip),
        );
        let isa = state[0].isa();
        for t in (0..n_steps).rev() {
            let at = |width: usize| t * rows * width..(t + 1) * rows * width;
            // The projection's output gradient: the output's and the next step's, where the
            // clip did not cut.
            let grad_projected_t = &mut grad_projected[at(p)];
            let hidden_t = &hidden[at(p)];
            for (row, (grad, hidden)) in (grad_projected_t.chunks_exact_mut(p))
                .zip(hidden_t.chunks_exact(p))
                .enumerate()
            {
                let from_output = &grad_outputs[(row * n_steps + t) * p..][..p];
                let from_next = &grad_hidden_next[row * p..][..p];
                for j in 0..p {
                    let kept = hidden[j].abs() < projection_clip;
                    grad[j] = MaybeUninit::new(if kept {
                        from_output[j] + from_next[j]
                    } else {
                        0.0
                    });
                }
            }
            // SAFETY: the loop above wrote every value.
            let grad_projected_t = unsafe { grad_projected_t.assume_init_ref() };
            grouped_product(projection, grad_projected_t, p, rows, &mut grad_cells);
            let memory_prev = match t {
                0 => initial_memory.values(),
                _ => &memory[(t - 1) * rows * c..t * rows * c],
            };
            let pass = CellBackward {
                gates: &gates[at(4 * c)],
                memory: &memory[at(c)],
                tanh_memory: &tanh_memory[at(c)],
                memory_prev,
                grad_cells: &grad_cells,
            };
            let grad_gates_t = &mut grad_gates[at(4 * c)];
            pass.run(isa, c, cell_clip, grad_gates_t, &mut carry);
            // SAFETY: the cell pass wrote every value.
            let grad_gates_t = unsafe { grad_gates_t.assume_init_ref() };
            if t > 0 {
                grouped_product(state, grad_gates_t, 4 * c, rows, &mut grad_hidden_next);
            }
        }
    };
    // SAFETY: `write` writes every value of both (above).
    let [grad_gates, grad_projected] = unsafe { HostTensor::written_each(shapes, write) };
    Some(HostStepGradients {
        gates: grad_gates.into_tensor(),
        projected: grad_projected.into_tensor(),
    })
}

/// Row `row` of a row-major matrix `width` values wide.
fn row_of(x: &[f32], row: usize, width: usize) -> &[f32] {
    &x[row * width..(row + 1) * width]
}

/// What a forward step's cell pass reads, `[B, ·]` row-major.
struct CellForward<'a> {
    /// `[B, 4C]`: the step's input contributions `x·W_x`.
    contributions: &'a [f32],
    /// `[G, 4C]`: each group's bias.
    bias: &'a [f32],
    /// Rows per group.
    batch: usize,
    /// `[B, 4C]`: `h_{t−1}·W_h`.
    recurrent: &'a [f32],
    /// `[B, C]`.
    memory_prev: &'a [f32],
}

/// What a forward step's cell pass writes (every value of each).
struct ForwardOutputs<'a> {
    /// `[B, 4C]`.
    gates: &'a mut [MaybeUninit<f32>],
    /// `[B, C]`.
    memory: &'a mut [MaybeUninit<f32>],
    /// `[B, C]`.
    tanh_memory: &'a mut [MaybeUninit<f32>],
    /// `[B, C]`: `o·tanh(memory)`, the projection's left factor.
    cells: &'a mut [f32],
}

impl CellForward<'_> {
    /// The pass over every row, rows shared among rayon's threads, compiled for `isa`.
    fn run(&self, isa: Isa, c: usize, clip: f32, out: ForwardOutputs) {
        (out.gates.par_chunks_mut(4 * c))
            .zip(out.memory.par_chunks_mut(c))
            .zip(out.tanh_memory.par_chunks_mut(c))
            .zip(out.cells.par_chunks_mut(c))
            .enumerate()
            .for_each(|(row, (((gates, memory), tanh_memory), cells))| {
                let row_in = |x, width| row_of(x, row, width);
                let args = ForwardRow {
                    contributions: row_in(self.contributions, 4 * c),
                    bias: row_of(self.bias, row / self.batch, 4 * c),
                    recurrent: row_in(self.recurrent, 4 * c),
                    memory_prev: row_in(self.memory_prev, c),
                    gates,
                    memory,
                    tanh_memory,
                    cells,
                    clip,
                };
                forward_row_for(isa, args);
            });
    }
}

/// One row of [`CellForward::run`].
struct ForwardRow<'a> {
    contributions: &'a [f32],
    bias: &'a [f32],
    recurrent: &'a [f32],
    memory_prev: &'a [f32],
    gates: &'a mut [MaybeUninit<f32>],
    memory: &'a mut [MaybeUninit<f32>],
    tanh_memory: &'a mut [MaybeUninit<f32>],
    cells: &'a mut [f32],
    clip: f32,
}

/// The four gate blocks `i, f, g, o` of a `[4C]` row.
fn blocks(row: &[f32], c: usize) -> [&[f32]; 4] {
    let (i, rest) = row.split_at(c);
    let (f, rest) = rest.split_at(c);
    let (g, o) = rest.split_at(c);
    [i, f, g, &o[..c]]
}

/// [`blocks`], to write.
fn blocks_mut<T>(row: &mut [T], c: usize) -> [&mut [T]; 4] {
    let (i, rest) = row.split_at_mut(c);
    let (f, rest) = rest.split_at_mut(c);
    let (g, o) = rest.split_at_mut(c);
    [i, f, g, &mut o[..c]]
}

/// `GateActivation::activate` of one prepared (negated) pre-activation:
/// `1 / (1 + exp(clamp(v)))`, `σ(−v)`.
#[inline(always)]
fn prepared_sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + exp(v.clamp(-EXP_LIMIT, EXP_LIMIT)))
}

#[inline(always)]
fn forward_row(r: ForwardRow) {
    let c = r.memory.len();
    let [xi, xf, xg, xo] = blocks(r.contributions, c);
    let [bi, bf, bg, bo] = blocks(r.bias, c);
    let [zi, zf, zg, zo] = blocks(r.recurrent, c);
    let [gi, gf, gg, go] = blocks_mut(r.gates, c);
    let clip = r.clip;
    for j in 0..c {
        // The composed path's `(x·W_x + b) + h·W_h`, negated (doubled for `g`) as its prepared
        // weights give it.
        let input = prepared_sigmoid(-((xi[j] + bi[j]) + zi[j]));
        let forget = prepared_sigmoid(-((xf[j] + bf[j]) + zf[j]));
        let candidate = prepared_sigmoid(-2.0 * ((xg[j] + bg[j]) + zg[j])) * 2.0 - 1.0;
        let output = prepared_sigmoid(-((xo[j] + bo[j]) + zo[j]));
        gi[j] = MaybeUninit::new(input);
        gf[j] = MaybeUninit::new(forget);
        gg[j] = MaybeUninit::new(candidate);
        go[j] = MaybeUninit::new(output);
        let memory = clipped(input * candidate + forget * r.memory_prev[j], clip);
        let tanh_memory = tanh(memory);
        r.memory[j] = MaybeUninit::new(memory);
        r.tanh_memory[j] = MaybeUninit::new(tanh_memory);
        r.cells[j] = output * tanh_memory;
    }
}

/// What a backward step's cell pass reads, `[B, ·]` row-major.
struct CellBackward<'a> {
    /// `[B, 4C]`: the step's activated gates.
    gates: &'a [f32],
    /// `[B, C]`: its clipped memory.
    memory: &'a [f32],
    /// `[B, C]`.
    tanh_memory: &'a [f32],
    /// `[B, C]`: the memory before the step.
    memory_prev: &'a [f32],
    /// `[B, C]`: the gradient of `o·tanh(memory)`.
    grad_cells: &'a [f32],
}

impl CellBackward<'_> {
    /// The pass over every row: the gates' gradients into `grad_gates` `[B, 4C]` (every
    /// value), and `carry` `[B, C]` (the memory's gradient from the next step on entry)
    /// replaced by this step's memory gradient times its forget gate.
    fn run(
        &self,
        isa: Isa,
        c: usize,
        clip: f32,
        grad_gates: &mut [MaybeUninit<f32>],
        carry: &mut [f32],
    ) {
        (grad_gates.par_chunks_mut(4 * c))
            .zip(carry.par_chunks_mut(c))
            .enumerate()
            .for_each(|(row, (grad_gates, carry))| {
                let row_in = |x, width| row_of(x, row, width);
                let args = BackwardRow {
                    gates: row_in(self.gates, 4 * c),
                    memory: row_in(self.memory, c),
                    tanh_memory: row_in(self.tanh_memory, c),
                    memory_prev: row_in(self.memory_prev, c),
                    grad_cells: row_in(self.grad_cells, c),
                    grad_gates,
                    carry,
                    clip,
                };
                backward_row_for(isa, args);
            });
    }
}

/// One row of [`CellBackward::run`].
struct BackwardRow<'a> {
    gates: &'a [f32],
    memory: &'a [f32],
    tanh_memory: &'a [f32],
    memory_prev: &'a [f32],
    grad_cells: &'a [f32],
    grad_gates: &'a mut [MaybeUninit<f32>],
    carry: &'a mut [f32],
    clip: f32,
}

#[inline(always)]
fn backward_row(r: BackwardRow) {
    let c = r.memory.len();
    let [i, f, g, o] = blocks(r.gates, c);
    let [di, df, dg, d_o] = blocks_mut(r.grad_gates, c);
    for j in 0..c {
        let (input, forget, candidate, output) = (i[j], f[j], g[j], o[j]);
        let tanh_memory = r.tanh_memory[j];
        let grad_cell = r.grad_cells[j];
        // The memory's gradient before its clip: zero where the clip cut.
        let from_cell = grad_cell * (output * (1.0 - tanh_memory * tanh_memory));
        let grad_memory = if r.memory[j].abs() < r.clip {
            from_cell + r.carry[j]
        } else {
            0.0
        };
        di[j] = MaybeUninit::new(grad_memory * (candidate * (input * (1.0 - input))));
        df[j] = MaybeUninit::new(grad_memory * (r.memory_prev[j] * (forget * (1.0 - forget))));
        dg[j] = MaybeUninit::new(grad_memory * (input * (1.0 - candidate * candidate)));
        d_o[j] = MaybeUninit::new(grad_cell * (tanh_memory * (output * (1.0 - output))));
        r.carry[j] = grad_memory * forget;
    }
}

pass_for_isa!(forward_row_for, forward_row, ForwardRow);
pass_for_isa!(backward_row_for, backward_row, BackwardRow);
