//! One optimizer step of the joint biLM loss (bilm-tf `train`'s inner loop): dropout masks and
//! sampled negatives drawn from (seed, step), the loss and its gradients (scaled in mixed
//! precision, [`crate::loss_scale`]), global-norm clipping, the update, and the carried LSTM
//! state moved on with the gradient cut at the boundary.

use burn::tensor::{Device, Tensor, TensorReadError};
use elmo_kernels::{GradientScaling, SquaredNorm, device_gradient_scale};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::TrainConfig;
use crate::error::{Result, TrainError};
use crate::language_model::{
    BiLanguageModel, CarriedState, GradientOptions, LmGradients, LmLoss, SoftmaxMode,
};
use crate::lm_batch::LmBatch;
use crate::optimizer::{TrainingOptimizer, clip_to_norm, queued_squared_norm};
use crate::seeds::mix_seed;
use crate::step_input::StepInput;
use crate::step_losses::StepLosses;
use crate::step_profile::StepProfile;
use crate::towers::{TowerWork, tower_gradients};

/// What [`optimizer_step`] needs besides the model, optimizer, batch and state.
#[derive(Debug, Clone, Copy)]
pub struct StepSettings<'a> {
    /// Softmax, clipping, learning rate and schedule.
    pub config: &'a TrainConfig,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Run seed (dropout masks and negatives are drawn from (seed, step)).
    pub seed: u64,
    /// 0-based step.
    pub step: u64,
    /// Factor of the plateau schedule on the learning rate (1 for the other schedules).
    pub lr_scale: f64,
    /// The autodiff device: the model's, where the towers' gradients are summed and the update
    /// runs.
    pub device: &'a Device,
    /// The autodiff device of each tower ([`TrainConfig::towers`]), in order; a tower without
    /// one (all of them when empty) runs on `device`.
    pub tower_devices: &'a [Device],
    /// Mixed precision's loss scale ([`crate::LossScale::scale`]): the loss's gradient is
    /// multiplied by it and the gradients divided by it before clipping, and a step whose
    /// gradients overflow is skipped. `None` (`f32` training): gradients as they come.
    pub loss_scale: Option<f64>,
    /// Adds each phase's time to it, when given (the device is then synchronised per phase).
    pub profile: Option<&'a StepProfile>,
}

/// One optimizer step on a batch: the joint loss (dropout masks and sampled negatives drawn from
/// (seed, step)), gradients, global-norm clipping, the update, and the carried LSTM state moved
/// on (detached). When the loss is not finite the model and state are returned unchanged; when
/// scaled gradients overflow (`loss_scale`) the update is skipped (`skipped`) and the state
/// moves on.
///
/// # Errors
/// [`TrainError::Device`] when the device failed computing the step (its losses cannot be read).
pub fn optimizer_step(
    model: BiLanguageModel,
    optimizer: &mut TrainingOptimizer,
    batch: &LmBatch,
    state: &mut Option<CarriedState>,
    settings: StepSettings,
) -> Result<(BiLanguageModel, StepLosses)> {
    let input = StepInput::prepare(
        batch,
        settings.config,
        settings.n_vocab,
        settings.seed,
        settings.step,
    );
    optimizer_step_overlapping(model, optimizer, &input, state, settings, || {})
}

/// [`optimizer_step`] on a batch prepared ahead ([`StepInput::prepare`]), running `meanwhile`
/// on this thread once the step's work up to the clipping is queued (with Adagrad on a CubeCL
/// device the update too, its clip factor and skip decided there:
/// [`elmo_kernels::device_gradient_scale`]) and before the step waits for the device to read its
/// losses back: host work that then overlaps the device's (the next batch read and prepared:
/// [`crate::Trainer::step`]).
///
/// # Errors
/// As [`optimizer_step`].
pub fn optimizer_step_overlapping(
    model: BiLanguageModel,
    optimizer: &mut TrainingOptimizer,
    input: &StepInput,
    state: &mut Option<CarriedState>,
    settings: StepSettings,
    meanwhile: impl FnOnce(),
) -> Result<(BiLanguageModel, StepLosses)> {
    let StepSettings {
        config,
        n_vocab,
        seed,
        step,
        lr_scale,
        device,
        tower_devices,
        loss_scale,
        profile,
    } = settings;
    let mark = |phase| {
        if let Some(profile) = profile {
            profile.mark(device, phase);
        }
    };
    if let Some(profile) = profile {
        profile.start(device);
    }
    let towers = input.towers();
    let candidates: Vec<_> = (towers.iter().zip(0..))
        .map(|(tower, k)| tower.candidates_for(config, n_vocab, seed, step, k))
        .collect();
    let works: Vec<TowerWork> = (towers.iter().zip(&candidates).zip(0..))
        .map(|((tower, candidates), k)| TowerWork {
            streams: &tower.streams,
            softmax: (candidates.as_ref().as_ref()).map_or(SoftmaxMode::Full, SoftmaxMode::Sampled),
            // The first tower's masks are those of a run of one tower.
            dropout_seed: Some(match k {
                0 => mix_seed(&[seed, step, 0xD80]),
                k => mix_seed(&[seed, step, 0xD80, k]),
            }),
            device: tower_devices.get(k as usize).unwrap_or(device),
        })
        .collect();
    let start = state.clone().map(|carried| {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, step, 0x5E7]));
        let n_rows = carried.forward.first().map_or(0, |s| s.hidden.dims()[0]);
        let reset: Vec<bool> = (0..n_rows)
            .map(|_| rng.random::<f64>() < config.state_reset)
            .collect();
        carried.reset_rows(&reset)
    });
    let scale = loss_scale.unwrap_or(1.0);
    let LmGradients {
        step: out,
        grads,
        softmax_rows,
    } = tower_gradients(
        &model,
        &works,
        start,
        device,
        GradientOptions {
            dropout_seed: None,
            loss_scale: scale as f32,
            row_gradients: optimizer.takes_row_gradients(),
            profile,
        },
    );
    let lr = config.optimizer.lr() * config.lr_schedule.factor(step) * lr_scale;
    let loss = &out.loss;
    let squared_norm = queued_squared_norm(&model, &grads, model.kernels);
    // Adagrad on a CubeCL device: the clip factor and the skip decided there, and the update
    // queued before the read, so that the device runs it while the host reads and prepares.
    let scaling = GradientScaling {
        max_norm: config.clip_norm,
        loss_scale: scale,
        skip_overflow: loss_scale.is_some(),
    };
    let device_scale = match &squared_norm {
        SquaredNorm::Partials(partials) if optimizer.scales_on_device() => {
            device_gradient_scale(partials, &loss.loss, scaling)
        }
        _ => None,
    };
    let (model, grads) = match device_scale.clone() {
        Some(device_scale) => {
            let model = optimizer.step_scaled(lr, model, grads, device_scale);
            mark("clipping and optimizer update");
            (model, None)
        }
        None => (model, Some(grads)),
    };
    meanwhile();
    let read = read_step_values(loss, squared_norm, device_scale).map_err(|source| {
        TrainError::Device {
            step: step + 1,
            source,
        }
    })?;
    let [joint, forward_nll, backward_nll, norm] = read.values;
    let mut losses = StepLosses {
        loss: joint,
        forward_nll,
        n_forward: loss.n_forward as u64,
        backward_nll,
        n_backward: loss.n_backward as u64,
        grad_norm: 0.0,
        lr,
        skipped: false,
    };
    mark("losses and gradient norm to the host");
    // A non-finite loss leaves the model (updated on the device to the same values) and the
    // state as they were.
    if !joint.is_finite() {
        return Ok((model, losses));
    }
    losses.grad_norm = norm / scale;
    // The state moves on whether or not the update is applied.
    *state = out.state.map(CarriedState::detach);
    let Some(mut grads) = grads else {
        losses.skipped = read.applied == Some(false);
        return Ok((model, losses));
    };
    clip_to_norm(
        &model,
        &mut grads,
        losses.grad_norm,
        config.clip_norm,
        scale,
    );
    mark("clipping");
    if loss_scale.is_some() && !losses.grad_norm.is_finite() {
        losses.skipped = true;
        return Ok((model, losses));
    }
    let model = optimizer.step(lr, model, grads, softmax_rows);
    mark("optimizer update");
    Ok((model, losses))
}

/// What [`read_step_values`] read.
struct StepValues {
    /// The joint loss, the forward and backward NLLs and the (loss-scaled) gradient norm.
    values: [f64; 4],
    /// Whether the device applied the update, where it decided ([`device_gradient_scale`]).
    applied: Option<bool>,
}

/// The step's joint loss, the two directions' summed NLLs, the gradients' global norm (of
/// the scaled gradients) and, where the device decided it, whether the update was applied
/// (`device_scale`'s second value), in one read from the device: the step's only wait for it,
/// after all of its work up to the clipping (or the update) is queued.
fn read_step_values(
    loss: &LmLoss,
    squared_norm: SquaredNorm,
    device_scale: Option<Tensor<1>>,
) -> std::result::Result<StepValues, TensorReadError> {
    let mut values = vec![
        loss.loss.clone(),
        loss.forward_nll.clone(),
        loss.backward_nll.clone(),
    ];
    // Where each part starts in the read: the offsets of the values pushed so far.
    let length = |values: &[Tensor<1>]| values.iter().map(|v| v.dims()[0]).sum::<usize>();
    // `[factor, apply]`: the second value says whether the update ran.
    let apply_at = device_scale.as_ref().map(|_| length(&values) + 1);
    values.extend(device_scale);
    let partials_from = length(&values);
    let summed = match squared_norm {
        SquaredNorm::Summed(total) => Some(total),
        SquaredNorm::Partials(partials) => {
            values.push(partials);
            None
        }
    };
    let read = Tensor::cat(values, 0).try_into_vec_as::<f32>()?;
    let squared = summed.unwrap_or_else(|| SquaredNorm::total(&read[partials_from..]));
    Ok(StepValues {
        values: [
            f64::from(read[0]),
            f64::from(read[1]),
            f64::from(read[2]),
            squared.sqrt(),
        ],
        applied: apply_at.map(|at| read[at] != 0.0),
    })
}
