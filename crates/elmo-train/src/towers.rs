//! bilm-tf's towers (`bilm/training.py`'s `train`: `n_gpus` copies of the model, each reading
//! its own `batch_size` rows of the step's batch on its own GPU with its own sampled negatives,
//! and `average_gradients` before the clipping and the update): a step's loss and gradients as
//! the mean of its towers', each tower run by a copy of the model on its own device and its
//! gradients gathered on the model's device.

use std::borrow::Cow;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::ops::IndexingUpdateOp;
use burn::tensor::{Device, Int, Tensor, TensorData};
use elmo_kernels::cube_device;
use elmo_model::LstmState;

use crate::language_model::{
    BiLanguageModel, CarriedState, GradientOptions, LmGradients, LmLoss, LmStep, SoftmaxMode,
};
use crate::step_input::PreparedStreams;

/// One tower's share of a step.
#[derive(Clone, Copy)]
pub(crate) struct TowerWork<'a> {
    /// Its rows of the batch.
    pub(crate) streams: &'a PreparedStreams,
    /// Its softmax: full, or against its own negatives.
    pub(crate) softmax: SoftmaxMode<'a>,
    /// Its dropout masks' seed.
    pub(crate) dropout_seed: Option<u64>,
    /// The (autodiff) device it runs on.
    pub(crate) device: &'a Device,
}

/// The step's loss and gradients as bilm-tf's towers take them. Tower `k` runs `works[k]`'s rows
/// on its device, by `model` itself where that is `device` and by a copy of `model` forked
/// there otherwise, from its rows of `start` (the towers' rows in order), with the gradient of
/// its own mean loss times `options.loss_scale / K`. The gradients are summed on `device`
/// (bilm-tf's `average_gradients`: their mean; a sampled softmax's row gradients over the union
/// of the towers' rows), the loss is the towers' mean, the NLL sums and target counts are sums
/// over the towers, and the state to carry holds the towers' final states in row order.
/// Towers on another device than `device` run on threads of their own (one each), at the same
/// time as those on `device`, which run one after another on this thread. One tower on `device` is
/// [`BiLanguageModel::loss_and_gradients_of`] itself.
///
/// `options.dropout_seed` is not read: each tower's is in its [`TowerWork`]; the profile is
/// given to the first tower only.
pub(crate) fn tower_gradients(
    model: &BiLanguageModel,
    works: &[TowerWork<'_>],
    start: Option<CarriedState>,
    device: &Device,
    options: GradientOptions<'_>,
) -> LmGradients {
    if let [work] = works
        && work.device == device
    {
        let options = GradientOptions {
            dropout_seed: work.dropout_seed,
            ..options
        };
        return model.loss_and_gradients_of(work.streams, start, work.softmax, device, options);
    }
    // Row gradients only where every tower gives them: on CPU devices, or on none.
    let row_gradients = options.row_gradients
        && (works.iter()).all(|work| cube_device(work.device) == cube_device(works[0].device));
    let options_of = |k: usize, work: &TowerWork| GradientOptions {
        dropout_seed: work.dropout_seed,
        loss_scale: options.loss_scale / works.len() as f32,
        row_gradients,
        profile: options.profile.filter(|_| k == 0),
    };
    let mut offset = 0;
    let starts: Vec<Option<CarriedState>> = (works.iter())
        .map(|work| {
            let rows = offset..offset + work.streams.n_rows;
            offset = rows.end;
            (start.as_ref())
                .filter(|_| work.streams.carries_state)
                .map(|state| state_rows(state, rows, work.device))
        })
        .collect();
    let run = |k: usize, work: &TowerWork, start: Option<CarriedState>| {
        let model = match work.device == device {
            true => Cow::Borrowed(model),
            false => Cow::Owned(model.clone().fork(work.device)),
        };
        let options = options_of(k, work);
        model.loss_and_gradients_of(work.streams, start, work.softmax, work.device, options)
    };
    let towers: Vec<LmGradients> = std::thread::scope(|scope| {
        let mut elsewhere = Vec::new();
        let mut here = Vec::new();
        for ((k, work), start) in works.iter().enumerate().zip(starts) {
            match work.device == device {
                true => here.push((k, work, start)),
                false => elsewhere.push((k, scope.spawn(move || run(k, work, start)))),
            }
        }
        let mut done: Vec<(usize, LmGradients)> = (here.into_iter())
            .map(|(k, work, start)| (k, run(k, work, start)))
            .collect();
        for (k, thread) in elsewhere {
            let gradients = thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            done.push((k, gradients));
        }
        done.sort_by_key(|(k, _)| *k);
        done.into_iter().map(|(_, gradients)| gradients).collect()
    });
    gather(model, towers, device)
}

/// Rows `rows` of every layer of `state`, on `device`.
fn state_rows(state: &CarriedState, rows: std::ops::Range<usize>, device: &Device) -> CarriedState {
    let cut = |states: &[LstmState]| {
        (states.iter())
            .map(|s| LstmState {
                hidden: (s.hidden.clone().slice(rows.clone())).to_device(device),
                memory: (s.memory.clone().slice(rows.clone())).to_device(device),
            })
            .collect()
    };
    CarriedState {
        forward: cut(&state.forward),
        backward: cut(&state.backward),
    }
}

/// The towers' results on `device`: gradients summed, the loss their mean, NLLs and counts
/// summed, the states to carry joined by rows.
fn gather(model: &BiLanguageModel, towers: Vec<LmGradients>, device: &Device) -> LmGradients {
    let n_towers = towers.len();
    let mut grads = GradientsParams::new();
    let mut losses = Vec::with_capacity(n_towers);
    let mut states = Vec::with_capacity(n_towers);
    let mut row_gradients = Vec::new();
    for tower in towers {
        let LmGradients {
            step,
            grads: mut tower_grads,
            softmax_rows,
        } = tower;
        if let Some(rows) = softmax_rows {
            let softmax = &model.softmax;
            let weight = tower_grads.remove::<2>(softmax.weight.id);
            let bias = tower_grads.remove::<1>(softmax.bias.id);
            row_gradients.push((rows, weight, bias));
        }
        model.visit(&mut AddGradients {
            from: &mut tower_grads,
            to: &mut grads,
            device,
        });
        losses.push(step.loss);
        states.push(step.state);
    }
    let softmax_rows = (!row_gradients.is_empty()).then(|| {
        let (rows, weight, bias) = union_rows(row_gradients, device);
        let softmax = &model.softmax;
        if let Some(weight) = weight {
            grads.register(softmax.weight.id, weight);
        }
        if let Some(bias) = bias {
            grads.register(softmax.bias.id, bias);
        }
        rows
    });
    let on_device = |t: Tensor<1>| t.to_device(device);
    let sum = |part: fn(&LmLoss) -> &Tensor<1>| {
        (losses.iter().map(|l| on_device(part(l).clone())))
            .reduce(|a, b| a + b)
            .expect("at least one tower")
    };
    let loss = LmLoss {
        loss: sum(|l| &l.loss).div_scalar(n_towers as f64),
        forward_nll: sum(|l| &l.forward_nll),
        backward_nll: sum(|l| &l.backward_nll),
        n_forward: losses.iter().map(|l| l.n_forward).sum(),
        n_backward: losses.iter().map(|l| l.n_backward).sum(),
    };
    let state = states
        .into_iter()
        .collect::<Option<Vec<CarriedState>>>()
        .map(|states| join_rows(states, device));
    LmGradients {
        step: LmStep { loss, state },
        grads,
        softmax_rows,
    }
}

/// The towers' final states, their rows in tower order, on `device`.
fn join_rows(states: Vec<CarriedState>, device: &Device) -> CarriedState {
    let n_layers = states[0].forward.len();
    let join = |layers: Vec<&Vec<LstmState>>| -> Vec<LstmState> {
        (0..n_layers)
            .map(|layer| {
                let part = |pick: fn(&LstmState) -> &Tensor<2>| {
                    let parts = (layers.iter())
                        .map(|states| pick(&states[layer]).clone().to_device(device))
                        .collect();
                    Tensor::cat(parts, 0)
                };
                LstmState {
                    hidden: part(|s| &s.hidden),
                    memory: part(|s| &s.memory),
                }
            })
            .collect()
    };
    CarriedState {
        forward: join(states.iter().map(|s| &s.forward).collect()),
        backward: join(states.iter().map(|s| &s.backward).collect()),
    }
}

/// The sampled softmax's row gradients: the rows (ascending), the weight's gradient (`[U, P]`)
/// and the bias's (`[U]`), each absent where the parameter is frozen.
type RowGradients = (Vec<u32>, Option<Tensor<2>>, Option<Tensor<1>>);

/// Each tower's row gradients as gradients of the union of their rows (ascending), summed where
/// towers share a row, on `device`.
fn union_rows(towers: Vec<RowGradients>, device: &Device) -> RowGradients {
    let mut union: Vec<u32> = towers.iter().flat_map(|(rows, ..)| rows.clone()).collect();
    union.sort_unstable();
    union.dedup();
    let (mut weight, mut bias): (Option<Tensor<2>>, Option<Tensor<1>>) = (None, None);
    for (rows, tower_weight, tower_bias) in towers {
        let places: Vec<i64> = (rows.iter())
            .map(|row| union.partition_point(|u| u < row) as i64)
            .collect();
        let n = places.len();
        let places = Tensor::<1, Int>::from_data(TensorData::new(places, [n]), device);
        if let Some(g) = tower_weight.map(|g| g.to_device(device)) {
            let into = weight.unwrap_or_else(|| Tensor::zeros([union.len(), g.dims()[1]], device));
            weight = Some(into.select_assign(0, places.clone(), g, IndexingUpdateOp::Add));
        }
        if let Some(g) = tower_bias.map(|g| g.to_device(device)) {
            let into = bias.unwrap_or_else(|| Tensor::zeros([union.len()], device));
            bias = Some(into.select_assign(0, places, g, IndexingUpdateOp::Add));
        }
    }
    (union, weight, bias)
}

/// Adds each gradient of `from` to `to`'s, on `device`.
struct AddGradients<'a> {
    from: &'a mut GradientsParams,
    to: &'a mut GradientsParams,
    device: &'a Device,
}

impl ModuleVisitor for AddGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(grad) = self.from.remove::<D>(param.id) else {
            return;
        };
        let grad = grad.to_device(self.device);
        let sum = match self.to.remove::<D>(param.id) {
            Some(before) => before + grad,
            None => grad,
        };
        self.to.register(param.id, sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The towers' row gradients of the sampled softmax become gradients of the union of
    /// their rows, ascending, summed where two towers touched the same row.
    #[test]
    fn row_gradients_join_over_the_union_of_rows() {
        let device = Device::flex();
        let weight = |rows: [[f32; 2]; 2]| Some(Tensor::<2>::from_floats(rows, &device));
        let bias = |values: [f32; 2]| Some(Tensor::<1>::from_floats(values, &device));
        let (rows, weight, bias) = union_rows(
            vec![
                (
                    vec![1, 3],
                    weight([[1.0, 1.0], [2.0, 2.0]]),
                    bias([10.0, 20.0]),
                ),
                (
                    vec![0, 3],
                    weight([[5.0, 5.0], [7.0, 7.0]]),
                    bias([1.0, 2.0]),
                ),
            ],
            &device,
        );
        assert_eq!(rows, [0, 1, 3]);
        let values = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(values(weight.unwrap()), [5.0, 5.0, 1.0, 1.0, 9.0, 9.0]);
        let bias = bias.unwrap().into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(bias, [1.0, 10.0, 22.0]);
    }
}
