//! The LSTMP forward pass of inference as one host loop on the CPU (AllenNLP's
//! `LstmCellWithProjection` recurrence, allennlp/modules/lstm_cell_with_projection.py): the input
//! projection `x·W_x` for several steps in one product, then per step `h·W_h` (weights packed
//! once, [`crate::host_gemm`], for as long as the caller keeps the layer), one fused pass over
//! the cells (gates, memory, clip, `tanh`), and the projection with its clip. The weights
//! stream from memory at every step, so the input weights are read once per chunk of steps, not
//! once per step. Rows sorted longest first, so the rows still running at a step are a prefix;
//! the others keep their state and output zero.
//!
//! A burn CPU backend runs each of a step's ~15 operations as its own pass over memory with a
//! scalar `exp`; this loop makes one pass with a vectorised one. With
//! [`Precision::Mixed`](crate::Precision) on a CPU with AMX or AVX512-BF16, the three products
//! run in `bf16` ([`crate::host_bf16`]'s), the cells and state in `f32`.

use crate::Precision;
use crate::host_gemm::{HostInstructions, Isa, Strided, mul_add, pass_for_isa};
use crate::host_weight::HostWeight;
use crate::line_aligned::LineAligned;

/// Rows of the input projection computed in one product (`x·W_x` of several steps at once).
const CHUNK_ROWS: usize = 256;

/// An LSTMP layer's weights on the host, packed (`W_x`, `W_h`, the projection): a caller keeps
/// them for as long as the weights do not change. Packing is a pass over fresh memory (72 MiB a
/// layer and direction at the `original` size); packed at every call, `W_x` alone took a sixth
/// of the recurrence's time when sentences come one at a time.
#[derive(Debug, Clone)]
pub struct HostLstm {
    /// `[d_input, 4C]`.
    input: HostWeight,
    /// `[P, 4C]`.
    state: HostWeight,
    /// `[4C]`.
    bias: Vec<f32>,
    /// `[C, P]`.
    projection: HostWeight,
    /// The cell pass's instruction set.
    isa: Isa,
    d_input: usize,
    d_cell: usize,
    d_projection: usize,
    cell_clip: Option<f32>,
    projection_clip: Option<f32>,
}

/// The row-major host values of an LSTMP layer's weights (the layout of
/// `LstmWithProjection`).
#[derive(Debug, Clone, Copy)]
pub struct HostLstmWeights<'a> {
    /// `[d_input, 4C]`.
    pub input_weight: &'a [f32],
    /// `[P, 4C]`.
    pub state_weight: &'a [f32],
    /// `[4C]`.
    pub bias: &'a [f32],
    /// `[C, P]`.
    pub projection: &'a [f32],
    /// Memory cell clip.
    pub cell_clip: Option<f64>,
    /// Projected state clip.
    pub projection_clip: Option<f64>,
    /// The widest instruction set the loop uses ([`crate::KernelSettings::host_instructions`]).
    pub instructions: HostInstructions,
    /// [`Precision::Mixed`]: the three products in `bf16` where this CPU has a unit for them
    /// within `instructions` ([`crate::Bf16Unit::at_most`]), sums, cells and state in `f32`;
    /// else, and with [`Precision::F32`], in `f32`.
    pub precision: Precision,
}

/// A layer's outputs and final state on the host.
///
/// # Shapes
/// - outputs: `[B, T, P]`, zero at padded positions
/// - hidden: `[B, P]`, memory: `[B, C]`
#[derive(Debug, Clone)]
pub struct HostLstmOutput {
    /// Output of every step.
    pub outputs: Vec<f32>,
    /// Final projected state.
    pub hidden: Vec<f32>,
    /// Final memory.
    pub memory: Vec<f32>,
}

impl HostLstm {
    /// Packs a layer's weights.
    ///
    /// # Panics
    /// When the slices do not have the shapes of one layer.
    pub fn new(weights: HostLstmWeights) -> Self {
        let gates_width = weights.bias.len();
        let d_cell = gates_width / 4;
        let d_projection = weights.projection.len() / d_cell.max(1);
        let d_input = weights.input_weight.len() / gates_width.max(1);
        assert!(
            gates_width == 4 * d_cell
                && d_cell > 0
                && weights.projection.len() == d_cell * d_projection
                && weights.state_weight.len() == d_projection * gates_width
                && weights.input_weight.len() == d_input * gates_width,
            "weights of one LSTMP layer"
        );
        let pack = |values: &[f32], k: usize, n: usize| {
            let view = Strided::rows(values, n);
            HostWeight::pack(view, k, n, weights.instructions, weights.precision)
        };
        Self {
            input: pack(weights.input_weight, d_input, gates_width),
            state: pack(weights.state_weight, d_projection, gates_width),
            bias: weights.bias.to_vec(),
            projection: pack(weights.projection, d_cell, d_projection),
            isa: Isa::at_most(weights.instructions),
            d_input,
            d_cell,
            d_projection,
            cell_clip: weights.cell_clip.map(|c| c as f32),
            projection_clip: weights.projection_clip.map(|c| c as f32),
        }
    }

    /// Runs the layer over `inputs` `[B, T, d_input]` (rows sorted longest first: `lengths`
    /// non-increasing) from `hidden` `[B, P]` and `memory` `[B, C]`: left to right when
    /// `go_forward`, else right to left from each row's own last token. The products and the
    /// cell pass run on the calling thread, or on the threads of rayon's pool where `on_pool`
    /// ([`crate::matmul_packed_parallel`]; a step's cells at least 4,096 a task).
    ///
    /// # Panics
    /// When the shapes disagree or `lengths` is not sorted longest first.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        inputs: &[f32],
        lengths: &[usize],
        n_steps: usize,
        go_forward: bool,
        hidden: Vec<f32>,
        memory: Vec<f32>,
        on_pool: bool,
    ) -> HostLstmOutput {
        let matmul = |b: &HostWeight, a: &[f32], lda, m, c: &mut [f32], ldc| {
            b.product(on_pool, a, lda, m, c, ldc)
        };
        let batch = lengths.len();
        let (d_in, c, p) = (self.d_input, self.d_cell, self.d_projection);
        assert_eq!(
            inputs.len(),
            batch * n_steps * d_in,
            "inputs are [B, T, d_input]"
        );
        assert!(
            hidden.len() == batch * p && memory.len() == batch * c,
            "the state is [B, P] and [B, C]"
        );
        assert!(
            lengths.windows(2).all(|w| w[0] >= w[1]) && lengths.iter().all(|&l| l <= n_steps),
            "lengths sorted longest first, at most T"
        );
        let (mut hidden, mut memory) = (hidden, memory);
        let mut outputs = vec![0.0f32; batch * n_steps * p];
        // The input projection `x·W_x` of several steps at once (one product streams `W_x` for
        // all of them); at most CHUNK_ROWS rows, so memory stays bounded.
        let chunk_steps = (CHUNK_ROWS / batch.max(1)).clamp(1, n_steps.max(1));
        let mut chunk_inputs = vec![0.0f32; chunk_steps * batch * d_in];
        let mut projected_inputs = LineAligned::zeroed(chunk_steps * batch * 4 * c);
        let mut chunk_rows = 0;
        let mut gates = LineAligned::zeroed(batch * 4 * c);
        let mut cells = vec![0.0f32; batch * c];
        let mut projected = LineAligned::zeroed(batch * p);
        let time = |step: usize| if go_forward { step } else { n_steps - 1 - step };
        let active = |t: usize| lengths.iter().take_while(|&&l| l > t).count();
        for step in 0..n_steps {
            if step % chunk_steps == 0 {
                // Rows running at any step of the chunk: those of its earliest time.
                let steps = step..(step + chunk_steps).min(n_steps);
                let earliest = steps.clone().map(time).min().unwrap_or(0);
                chunk_rows = active(earliest);
                for (j, s) in steps.clone().enumerate() {
                    for row in 0..chunk_rows {
                        let x = &inputs[(row * n_steps + time(s)) * d_in..][..d_in];
                        chunk_inputs[(j * chunk_rows + row) * d_in..][..d_in].copy_from_slice(x);
                    }
                }
                let n = steps.len() * chunk_rows;
                matmul(
                    &self.input,
                    &chunk_inputs,
                    d_in,
                    n,
                    &mut projected_inputs,
                    4 * c,
                );
            }
            let t = time(step);
            let n_active = active(t);
            if n_active == 0 {
                continue;
            }
            let x = &projected_inputs[(step % chunk_steps) * chunk_rows * 4 * c..];
            matmul(&self.state, &hidden, p, n_active, &mut gates, 4 * c);
            let rows = CellRows {
                gates: &gates[..n_active * 4 * c],
                inputs: &x[..n_active * 4 * c],
                memory: &mut memory[..n_active * c],
                cells: &mut cells[..n_active * c],
            };
            match on_pool {
                true => rows.pass_on_pool(self.isa, &self.bias, self.cell_clip),
                false => rows.pass(self.isa, &self.bias, self.cell_clip),
            }
            matmul(&self.projection, &cells, c, n_active, &mut projected, p);
            let projected = &mut projected[..n_active * p];
            if let Some(clip) = self.projection_clip {
                projected.iter_mut().for_each(|v| *v = clipped(*v, clip));
            }
            hidden[..n_active * p].copy_from_slice(projected);
            for row in 0..n_active {
                outputs[(row * n_steps + t) * p..][..p]
                    .copy_from_slice(&projected[row * p..(row + 1) * p]);
            }
        }
        HostLstmOutput {
            outputs,
            hidden,
            memory,
        }
    }
}

/// Cells per task at least when [`CellRows::pass_on_pool`] shares a step's cells among rayon's
/// threads (a row of `original`'s 4,096 cells is a few microseconds of work, about what handing
/// a task to another thread costs).
const TASK_CELLS: usize = 4096;

/// A step's running rows for the cell pass: the state's and the input's products `[n, 4C]`,
/// the memory `[n, C]` (updated in place) and the cells' outputs `[n, C]`.
struct CellRows<'a> {
    gates: &'a [f32],
    inputs: &'a [f32],
    memory: &'a mut [f32],
    cells: &'a mut [f32],
}

impl CellRows<'_> {
    /// [`cell_pass`] over all rows on the calling thread.
    fn pass(self, isa: Isa, bias: &[f32], clip: Option<f32>) {
        let rows = self;
        cell_pass(isa, CellPass { rows, bias, clip });
    }

    /// [`cell_pass`] with the rows shared among rayon's threads (at least [`TASK_CELLS`] cells
    /// a task): the same values, each row computed by one thread.
    fn pass_on_pool(self, isa: Isa, bias: &[f32], clip: Option<f32>) {
        use rayon::prelude::*;
        let c = bias.len() / 4;
        let n = self.memory.len() / c.max(1);
        let per_task = n
            .div_ceil(crate::host_threads())
            .max(TASK_CELLS.div_ceil(c.max(1)));
        if c == 0 || per_task >= n {
            return self.pass(isa, bias, clip);
        }
        (self.gates.par_chunks(per_task * 4 * c))
            .zip(self.inputs.par_chunks(per_task * 4 * c))
            .zip(self.memory.par_chunks_mut(per_task * c))
            .zip(self.cells.par_chunks_mut(per_task * c))
            .for_each(|(((gates, inputs), memory), cells)| {
                let rows = CellRows {
                    gates,
                    inputs,
                    memory,
                    cells,
                };
                rows.pass(isa, bias, clip)
            });
    }
}

/// The rows of a cell pass with the bias `[4C]` and the memory's clip.
struct CellPass<'a> {
    rows: CellRows<'a>,
    bias: &'a [f32],
    clip: Option<f32>,
}

// `cell_pass(isa, pass)`: the cells of the running rows (`cell_rows`), compiled for `isa` (the
// products' instruction set, detected on this machine).
pass_for_isa!(cell_pass, cell_rows::<FUSED>, CellPass);

/// The cells of the running rows: gates `i, f, g, o` from `gates + inputs + bias` (the state's
/// and the input's products), the new memory (clipped) in place and `o · tanh(memory)` into
/// `cells`.
#[inline(always)]
fn cell_rows<const FUSED: bool>(pass: CellPass) {
    let CellPass {
        rows:
            CellRows {
                gates,
                inputs,
                memory,
                cells,
            },
        bias,
        clip,
    } = pass;
    let c = bias.len() / 4;
    let clip = clip.unwrap_or(f32::INFINITY);
    // `e^−v`, its argument at most 40: a product of two `1 + e(v)` stays finite (below 2^116),
    // and `σ(−40)`, 4e-18, is zero to float32's precision beside 1.
    let e = |v: f32| exp_with::<FUSED>(at_most(-v, 40.0));
    let (bi, bf, bg, bo) = (
        &bias[..c],
        &bias[c..2 * c],
        &bias[2 * c..3 * c],
        &bias[3 * c..],
    );
    for (((gates, inputs), memory), cells) in gates
        .chunks_exact(4 * c)
        .zip(inputs.chunks_exact(4 * c))
        .zip(memory.chunks_exact_mut(c))
        .zip(cells.chunks_exact_mut(c))
    {
        let (gi, gf, gg, go) = (
            &gates[..c],
            &gates[c..2 * c],
            &gates[2 * c..3 * c],
            &gates[3 * c..],
        );
        let (xi, xf, xg, xo) = (
            &inputs[..c],
            &inputs[c..2 * c],
            &inputs[2 * c..3 * c],
            &inputs[3 * c..],
        );
        for j in 0..c {
            // AllenNLP's order: `x·W_x + (h·W_h + b)`; `e(v)` is `e^−v`, so `σ(v) = 1 / (1 +
            // e(v))` and `tanh(v) = (1 − e(2v)) / (1 + e(2v))`.
            let ei = e(xi[j] + (gi[j] + bi[j]));
            let ef = e(xf[j] + (gf[j] + bf[j]));
            let eg = e(2.0 * (xg[j] + (gg[j] + bg[j])));
            let eo = e(xo[j] + (go[j] + bo[j]));
            // `σ(i)·tanh(g) + σ(f)·memory` in two divisions, not three.
            let m = clipped(
                (1.0 - eg) / ((1.0 + ei) * (1.0 + eg)) + memory[j] / (1.0 + ef),
                clip,
            );
            memory[j] = m;
            // `σ(o)·tanh(m)` in one.
            let em = e(2.0 * m);
            cells[j] = (1.0 - em) / ((1.0 + eo) * (1.0 + em));
        }
    }
}

/// `e^x` to about one unit in the last place over the range of float32 (Cephes `expf`: a
/// degree-6 polynomial after reduction by `ln 2`), branch-free so that loops of it vectorise.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// [`exp`] with its products and sums fused where `FUSED` ([`mul_add`]).
#[inline(always)]
fn exp_with<const FUSED: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Rounds to the nearest integer for |v| < 2^22 without a call (vectorises on any x86-64).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.0);
    let shifted = mul_add::<FUSED>(x, LOG2E, ROUND);
    let n = shifted - ROUND;
    let r = mul_add::<FUSED>(-n, LN2_LO, mul_add::<FUSED>(-n, LN2_HI, x));
    let mut y = 1.987_569_1e-4;
    for coefficient in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ] {
        y = mul_add::<FUSED>(y, r, coefficient);
    }
    let y = mul_add::<FUSED>(y * r, r, r) + 1.0;
    // `shifted`'s low bits hold `n` (its exponent is fixed by ROUND): 2^n without a float to
    // integer conversion, so that the loop vectorises.
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    y * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// The logistic function.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh(x) = 2σ(2x) − 1` (absolute error below 2e-7).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    2.0 * sigmoid(2.0 * x) - 1.0
}

/// `min(v, high)`, NaN where `v` is (a comparison, where `f32::min` takes three instructions to
/// drop NaN).
#[inline(always)]
fn at_most(v: f32, high: f32) -> f32 {
    if v > high { high } else { v }
}

/// `v` clipped to `[−clip, clip]` as burn's `clamp` does it: a NaN stays NaN, so that a diverged
/// run's loss turns non-finite (`max`/`min` would replace it by a bound). Comparisons rather
/// than `f32::clamp`, whose check of its bounds would stop vectorisation.
#[inline(always)]
pub(crate) fn clipped(v: f32, clip: f32) -> f32 {
    if v < -clip {
        -clip
    } else if v > clip {
        clip
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_sigmoid_and_tanh_are_close_to_the_standard_library() {
        let mut worst = (0.0f32, 0.0f32, 0.0f32);
        for i in -20_000..=20_000 {
            let x = i as f32 * 0.004;
            let exp_error = ((exp(x) - x.exp()) / x.exp()).abs();
            let sigmoid_error = (sigmoid(x) - 1.0 / (1.0 + (-x).exp())).abs();
            let tanh_error = (tanh(x) - x.tanh()).abs();
            worst.0 = worst.0.max(exp_error);
            worst.1 = worst.1.max(sigmoid_error);
            worst.2 = worst.2.max(tanh_error);
        }
        assert!(worst.0 < 5e-7, "exp relative error {}", worst.0);
        assert!(worst.1 < 2e-7, "sigmoid error {}", worst.1);
        assert!(worst.2 < 4e-7, "tanh error {}", worst.2);
        // Saturation without infinities or NaN.
        assert!((0.0..1e-30).contains(&sigmoid(-200.0)));
        assert!((sigmoid(200.0) - 1.0).abs() < 1e-7 && (tanh(-50.0) + 1.0).abs() < 1e-7);
        assert!(exp(-1000.0).is_finite() && exp(1000.0).is_finite());
    }

    /// The cell pass against float64 on every instruction set this CPU has (FMA or not):
    /// pre-activations from saturated (±1e4) to zero, memory beyond the clip and without one,
    /// and NaN carried through where a gate is NaN.
    #[test]
    fn the_cell_pass_equals_float64_saturated_and_carries_nan() {
        let c = 37;
        let spread = |k: usize| match k % 9 {
            0 => 1e4,
            1 => -1e4,
            2 => 0.0,
            _ => (k as f32 * 0.37).sin() * 45.0,
        };
        let gates: Vec<f32> = (0..4 * c).map(spread).collect();
        let inputs: Vec<f32> = (0..4 * c).map(|k| spread(k + 5) * 0.01).collect();
        let bias: Vec<f32> = (0..4 * c).map(|k| (k as f32 * 0.11).cos()).collect();
        let start: Vec<f32> = (0..c).map(|j| (j as f32 - 18.0) * 0.7).collect();
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        for limit in HostInstructions::EVERY {
            for clip in [Some(3.0f32), None] {
                let (mut memory, mut cells) = (start.clone(), vec![0.0f32; c]);
                let mut with_nan = gates.clone();
                with_nan[2 * c + 4] = f32::NAN;
                let rows = CellRows {
                    gates: &with_nan,
                    inputs: &inputs,
                    memory: &mut memory,
                    cells: &mut cells,
                };
                rows.pass(Isa::at_most(limit), &bias, clip);
                assert!(
                    memory[4].is_nan() && cells[4].is_nan(),
                    "{limit:?}: NaN kept"
                );
                for j in (0..c).filter(|&j| j != 4) {
                    let pre = |g: usize| {
                        let k = g * c + j;
                        f64::from(inputs[k]) + (f64::from(gates[k]) + f64::from(bias[k]))
                    };
                    let clip = clip.map_or(f64::INFINITY, f64::from);
                    let m = (s(pre(0)) * pre(2).tanh() + s(pre(1)) * f64::from(start[j]))
                        .clamp(-clip, clip);
                    let h = s(pre(3)) * m.tanh();
                    let (dm, dh) = (f64::from(memory[j]) - m, f64::from(cells[j]) - h);
                    assert!(
                        dm.abs() <= 1e-6 * (1.0 + m.abs()) && dh.abs() <= 1e-6,
                        "{limit:?} clip {clip} cell {j}: memory {} vs {m}, output {} vs {h}",
                        memory[j],
                        cells[j]
                    );
                }
            }
        }
    }

    /// `n` deterministic values in `[-scale, scale]` drawn from `seed`.
    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| (((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0) * scale)
            .collect()
    }

    /// A `d → 4C → P` layer's weights drawn from fixed seeds.
    struct Seeded {
        input_weight: Vec<f32>,
        state_weight: Vec<f32>,
        bias: Vec<f32>,
        projection: Vec<f32>,
    }

    impl Seeded {
        fn new(d: usize, c: usize, p: usize) -> Self {
            Self {
                input_weight: values(d * 4 * c, 1, 0.6),
                state_weight: values(p * 4 * c, 2, 0.6),
                bias: values(4 * c, 3, 0.3),
                projection: values(c * p, 4, 0.5),
            }
        }

        /// In `f32`, with clips that the seeded values reach (cell 0.9, projection 0.4).
        fn clipped(&self, instructions: HostInstructions) -> HostLstmWeights<'_> {
            HostLstmWeights {
                input_weight: &self.input_weight,
                state_weight: &self.state_weight,
                bias: &self.bias,
                projection: &self.projection,
                cell_clip: Some(0.9),
                projection_clip: Some(0.4),
                instructions,
                precision: Precision::F32,
            }
        }
    }

    /// `layer` over `inputs` (`[rows, n_steps, D]`) from a zero state.
    fn from_zero(
        layer: &HostLstm,
        inputs: &[f32],
        lengths: &[usize],
        n_steps: usize,
        go_forward: bool,
        on_pool: bool,
    ) -> HostLstmOutput {
        let [c, p] = [layer.d_cell, layer.d_projection];
        let (hidden, memory) = (vec![0.0; lengths.len() * p], vec![0.0; lengths.len() * c]);
        layer.forward(
            inputs, lengths, n_steps, go_forward, hidden, memory, on_pool,
        )
    }

    /// A step-by-step float64 LSTMP, row by row (the definition).
    fn reference(
        w: &HostLstmWeights,
        inputs: &[f32],
        lengths: &[usize],
        n_steps: usize,
        go_forward: bool,
    ) -> Vec<f64> {
        let c = w.bias.len() / 4;
        let p = w.projection.len() / c;
        let d = w.input_weight.len() / (4 * c);
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let mut out = vec![0.0; lengths.len() * n_steps * p];
        for (row, &len) in lengths.iter().enumerate() {
            let (mut h, mut m) = (vec![0.0f64; p], vec![0.0f64; c]);
            let steps: Vec<usize> = if go_forward {
                (0..len).collect()
            } else {
                (0..len).rev().collect()
            };
            for t in steps {
                let x = &inputs[(row * n_steps + t) * d..][..d];
                let gate = |g: usize, j: usize| {
                    let col = g * c + j;
                    let mut v = f64::from(w.bias[col]);
                    for (q, &xq) in x.iter().enumerate() {
                        v += f64::from(xq) * f64::from(w.input_weight[q * 4 * c + col]);
                    }
                    for (q, &hq) in h.iter().enumerate() {
                        v += hq * f64::from(w.state_weight[q * 4 * c + col]);
                    }
                    v
                };
                let mut cell_out = vec![0.0; c];
                for j in 0..c {
                    let clip = w.cell_clip.unwrap_or(f64::INFINITY);
                    m[j] = (s(gate(0, j)) * gate(2, j).tanh() + s(gate(1, j)) * m[j])
                        .clamp(-clip, clip);
                    cell_out[j] = s(gate(3, j)) * m[j].tanh();
                }
                for (k, hk) in h.iter_mut().enumerate() {
                    let v: f64 = (0..c)
                        .map(|j| cell_out[j] * f64::from(w.projection[j * p + k]))
                        .sum();
                    let clip = w.projection_clip.unwrap_or(f64::INFINITY);
                    *hk = v.clamp(-clip, clip);
                }
                out[(row * n_steps + t) * p..][..p].copy_from_slice(&h);
            }
        }
        out
    }

    #[test]
    fn a_layer_equals_a_float64_reference_in_both_directions_with_clips() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        // Cells within one vector and over several, and enough of them for the pool's cell
        // pass to share a step's rows among its threads (4 + 4 + 1 rows of 1,024 cells), for
        // every instruction set this CPU has.
        for ((d, c, p), instructions) in [(5, 12, 7), (9, 40, 21), (6, 1024, 8)]
            .into_iter()
            .flat_map(|shape| HostInstructions::EVERY.map(|limit| (shape, limit)))
        {
            let seeded = Seeded::new(d, c, p);
            let weights = seeded.clipped(instructions);
            let layer = HostLstm::new(weights);
            let (lengths, n_steps) = match c {
                1024 => (vec![6usize, 6, 5, 5, 4, 4, 3, 2, 1], 6),
                _ => (vec![6usize, 6, 4, 1, 0], 6),
            };
            let inputs = values(lengths.len() * n_steps * d, 5, 1.5);
            // The products on the calling thread, and split among a pool's three threads.
            for (go_forward, on_pool) in
                [(true, false), (false, false), (true, true), (false, true)]
            {
                let out = pool
                    .install(|| from_zero(&layer, &inputs, &lengths, n_steps, go_forward, on_pool));
                let expected = reference(&weights, &inputs, &lengths, n_steps, go_forward);
                let worst = out
                    .outputs
                    .iter()
                    .zip(&expected)
                    .map(|(a, b)| (f64::from(*a) - b).abs())
                    .fold(0.0, f64::max);
                // Sums of 1,024 products round further from float64's.
                let tolerance = if c >= 1024 { 1e-5 } else { 2e-6 };
                assert!(
                    worst < tolerance,
                    "{instructions:?} forward {go_forward} on the pool {on_pool}: {worst}"
                );
                // The final state is the last real step's (row 0 runs all steps).
                let last = if go_forward { n_steps - 1 } else { 0 };
                assert_eq!(out.hidden[..p], out.outputs[last * p..(last + 1) * p]);
            }
        }
    }

    /// A NaN in one sentence's input reaches every later output of that sentence through the
    /// projection's clip, as AllenNLP's `torch.clamp` and burn's `clamp` carry it, and leaves the
    /// other sentences as they were (`max(-clip).min(clip)` would write `-clip`).
    #[test]
    fn a_nan_input_stays_nan_through_the_projection_clip() {
        let (d, c, p) = (6, 40, 9);
        let seeded = Seeded::new(d, c, p);
        for instructions in HostInstructions::EVERY {
            let layer = HostLstm::new(seeded.clipped(instructions));
            let (lengths, n_steps) = (vec![4usize, 4, 3], 4);
            let clean = values(lengths.len() * n_steps * d, 5, 1.5);
            let mut inputs = clean.clone();
            // Sentence 1's second token.
            inputs[(n_steps + 1) * d + 2] = f32::NAN;
            let run = |inputs: &[f32], go_forward: bool| {
                from_zero(&layer, inputs, &lengths, n_steps, go_forward, false).outputs
            };
            for go_forward in [true, false] {
                let (out, expected) = (run(&inputs, go_forward), run(&clean, go_forward));
                for (row, t) in (0..lengths.len()).flat_map(|r| (0..n_steps).map(move |t| (r, t))) {
                    let at = &out[(row * n_steps + t) * p..][..p];
                    // Forward, steps 1-3 follow the NaN; backward, steps 0-1.
                    let reached = row == 1 && if go_forward { t >= 1 } else { t <= 1 };
                    if reached {
                        assert!(
                            at.iter().all(|v| v.is_nan()),
                            "{instructions:?} forward {go_forward} step {t}: {at:?}"
                        );
                    } else {
                        assert_eq!(at, &expected[(row * n_steps + t) * p..][..p]);
                    }
                }
            }
        }
    }

    #[test]
    fn a_mixed_layer_stays_within_bf16_of_float64() {
        let (d, c, p) = (40, 96, 33);
        let (input_weight, state_weight) = (values(d * 4 * c, 1, 0.3), values(p * 4 * c, 2, 0.3));
        let (bias, projection) = (values(4 * c, 3, 0.3), values(c * p, 4, 0.2));
        let weights = |precision, instructions| HostLstmWeights {
            input_weight: &input_weight,
            state_weight: &state_weight,
            bias: &bias,
            projection: &projection,
            cell_clip: Some(3.0),
            projection_clip: Some(3.0),
            instructions,
            precision,
        };
        let (lengths, n_steps) = (vec![12usize, 12, 9, 3, 1], 12);
        let inputs = values(lengths.len() * n_steps * d, 5, 1.0);
        let run = |precision, instructions| {
            HostLstm::new(weights(precision, instructions)).forward(
                &inputs,
                &lengths,
                n_steps,
                true,
                vec![0.0; lengths.len() * p],
                vec![0.0; lengths.len() * c],
                false,
            )
        };
        let expected = reference(
            &weights(Precision::F32, HostInstructions::Widest),
            &inputs,
            &lengths,
            n_steps,
            true,
        );
        let largest = expected.iter().fold(0.0f64, |a, b| a.max(b.abs()));
        let worst = |out: &HostLstmOutput| {
            (out.outputs.iter().zip(&expected))
                .map(|(a, b)| (f64::from(*a) - b).abs())
                .fold(0.0, f64::max)
        };
        let exact = run(Precision::F32, HostInstructions::Widest);
        assert!(worst(&exact) < 2e-6, "f32: {}", worst(&exact));
        // Each unit's products where this CPU has it (AMX, AVX512-BF16), `f32` where not.
        for limit in [HostInstructions::Widest, HostInstructions::Avx512] {
            let mixed = run(Precision::Mixed, limit);
            if crate::host_bf16_products(limit) {
                // bf16 operands (8 significant bits) over 12 steps of the recurrence.
                let error = worst(&mixed) / largest;
                assert!(
                    (1e-4..0.02).contains(&error),
                    "bf16 ({limit:?}): {error} of the largest value"
                );
            } else {
                assert_eq!(
                    mixed.outputs, exact.outputs,
                    "f32 where the CPU has no unit"
                );
            }
        }
    }
}
