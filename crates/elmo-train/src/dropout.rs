//! Inverted dropout with masks from a seed and a draw counter (bilm-tf's dropout on every LSTM
//! input and on the top output), made by `elmo_kernels::dropout_mask` (a counter-based hash: one
//! kernel on a GPU, the same values on the host): unlike the backend's global RNG, the masks
//! depend only on the seed, whatever else runs in the process (exact resume, reproducible runs).
//! Two variants from the regularised LSTM language models: locked (variational) masks, one per
//! row for all the steps of a batch (Gal & Ghahramani 2016), and weight drop, DropConnect on each
//! LSTM's recurrent weights with one mask per batch (Merity et al. 2018, "Regularizing and
//! Optimizing LSTM Language Models", §2).

use std::borrow::Cow;

use burn::tensor::Tensor;
use elmo_kernels::{KernelSettings, MaskKey, dropout_mask};
use elmo_model::LstmWithProjection;

/// What dropout a training step applies (none at evaluation).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DropoutConfig {
    /// Probability on every LSTM input and on the top output.
    pub probability: f64,
    /// One mask per row and feature shared by all the time steps of a batch (locked, or
    /// variational, dropout) instead of a new mask at every step.
    pub locked: bool,
    /// Probability of dropping each recurrent weight (`state_weight`, `h_{t−1} → gates`) of
    /// every LSTM layer, one mask per layer and batch (weight drop).
    pub weight_drop: f64,
}

/// One LSTM stack's dropout in a training step: its activation masks (every layer input, then
/// the top output) and its recurrent-weight masks (one per layer, bottom first), two streams so
/// that the activation masks are the same with and without weight drop.
pub(crate) struct StackDropout {
    pub(crate) activations: DropoutMasks,
    pub(crate) recurrent: DropoutMasks,
}

impl StackDropout {
    /// The streams of `direction` (0 forward, 1 backward) for a step's `seed` (`None`: no
    /// dropout): each stack has its own, so the two may run in any order or in parallel.
    /// Their masks are made by the kernel where `kernels` run it.
    pub(crate) fn new(
        config: &DropoutConfig,
        seed: Option<u64>,
        direction: u64,
        kernels: KernelSettings,
    ) -> Self {
        let seed = |parts: &[u64]| seed.map(|s| crate::seeds::mix_seed(&[&[s], parts].concat()));
        Self {
            activations: DropoutMasks::new(config.probability, config.locked, seed(&[direction]))
                .with_kernels(kernels),
            recurrent: DropoutMasks::new(
                config.weight_drop,
                false,
                seed(&[direction, WEIGHT_DROP_STREAM]),
            )
            .with_kernels(kernels),
        }
    }
}

/// Last word of the weight-drop masks' seed (after the run seed and the direction).
const WEIGHT_DROP_STREAM: u64 = 2;

/// A stream of dropout masks.
pub(crate) struct DropoutMasks {
    keep: f64,
    locked: bool,
    /// The stream's seed, `None` when dropout is off.
    stream: Option<u64>,
    /// Masks drawn so far (the next one's number).
    drawn: u64,
    kernels: KernelSettings,
}

impl DropoutMasks {
    /// Masks that drop with `probability` (one per row and feature for all steps when `locked`);
    /// none at all without a seed (evaluation).
    pub(crate) fn new(probability: f64, locked: bool, seed: Option<u64>) -> Self {
        Self {
            keep: 1.0 - probability,
            locked,
            stream: seed.filter(|_| probability > 0.0),
            drawn: 0,
            kernels: KernelSettings::default(),
        }
    }

    /// These masks made by the kernel where `kernels` run it (the same values either way).
    pub(crate) fn with_kernels(mut self, kernels: KernelSettings) -> Self {
        self.kernels = kernels;
        self
    }

    /// The next mask (each value `0` or `1/keep`) of `dims` on `like`'s device, `None` when
    /// dropout is off.
    fn draw<const D: usize, const E: usize>(
        &mut self,
        dims: [usize; D],
        like: &Tensor<E>,
    ) -> Option<Tensor<D>> {
        let key = MaskKey::new(self.stream?, self.drawn);
        self.drawn += 1;
        Some(dropout_mask(dims, key, self.keep, like, self.kernels))
    }

    /// The next mask for activations `[B, T, d]` (on `like`'s device): `[B, T, d]`, or
    /// `[B, 1, d]` (broadcast over the steps) when locked; `None` when dropout is off.
    pub(crate) fn next_mask<const E: usize>(
        &mut self,
        dims: [usize; 3],
        like: &Tensor<E>,
    ) -> Option<Tensor<3>> {
        let [batch, n_steps, d] = dims;
        let n_steps = if self.locked { 1 } else { n_steps };
        self.draw([batch, n_steps, d], like)
    }

    /// `x` times the next mask.
    pub(crate) fn apply(&mut self, x: Tensor<3>) -> Tensor<3> {
        match self.next_mask(x.dims(), &x) {
            Some(mask) => x * mask,
            None => x,
        }
    }

    /// `layer` with its recurrent weights times the next mask, and that mask (on the weights'
    /// device); `layer` itself and `None` when dropout is off. Under autodiff the gradient
    /// reaches `layer`'s own parameter through the product (same parameter id).
    pub(crate) fn drop_recurrent<'a>(
        &mut self,
        layer: &'a LstmWithProjection,
    ) -> (Cow<'a, LstmWithProjection>, Option<Tensor<2>>) {
        self.drop_recurrent_with(layer, |weight| weight)
    }

    /// [`Self::drop_recurrent`] outside autodiff, for a step differentiated by hand: the
    /// dropped weights and the mask are plain tensors, and nothing is recorded. (A product
    /// recorded under autodiff that no backward pass consumes stays in burn's graph with the
    /// mask it saved: `ptb-small.json` with weight drop grew by 5.6 MB a step.)
    pub(crate) fn drop_recurrent_untracked<'a>(
        &mut self,
        layer: &'a LstmWithProjection,
    ) -> (Cow<'a, LstmWithProjection>, Option<Tensor<2>>) {
        self.drop_recurrent_with(layer, Tensor::inner)
    }

    /// The two above: the mask is drawn like, and multiplies, `weight_of` the layer's recurrent
    /// weights.
    fn drop_recurrent_with<'a>(
        &mut self,
        layer: &'a LstmWithProjection,
        weight_of: impl FnOnce(Tensor<2>) -> Tensor<2>,
    ) -> (Cow<'a, LstmWithProjection>, Option<Tensor<2>>) {
        let weight = weight_of(layer.state_weight.val());
        let Some(mask) = self.draw(weight.dims(), &weight) else {
            return (Cow::Borrowed(layer), None);
        };
        let mut dropped = layer.clone();
        let dropped_weight = weight * mask.clone();
        dropped.state_weight = dropped.state_weight.map(|_| dropped_weight);
        (Cow::Owned(dropped), Some(mask))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    #[test]
    fn locked_masks_are_shared_by_all_steps_and_scaled() {
        let device = Device::flex();
        let like = Tensor::<1>::zeros([1], &device);
        let mut masks = DropoutMasks::new(0.5, true, Some(3));
        let mask = masks.next_mask([4, 7, 5], &like).expect("dropout on");
        assert_eq!(mask.dims(), [4, 1, 5]);
        let x = Tensor::<3>::ones([4, 7, 5], &device);
        let dropped = (x * mask).to_data().try_to_vec::<f32>().unwrap();
        for row in dropped.chunks(35) {
            let first = &row[..5];
            assert!(row.chunks(5).all(|step| step == first), "{row:?}");
        }
        assert!(dropped.iter().all(|&v| v == 0.0 || v == 2.0));
        assert!(dropped.contains(&0.0) && dropped.contains(&2.0));
        let mut unlocked = DropoutMasks::new(0.5, false, Some(3));
        let mask = unlocked.next_mask([4, 7, 5], &like).expect("dropout on");
        assert_eq!(mask.dims(), [4, 7, 5]);
        assert!(
            DropoutMasks::new(0.5, true, None)
                .next_mask([4, 7, 5], &like)
                .is_none()
        );
    }

    #[test]
    fn weight_drop_masks_only_the_recurrent_weights() {
        let device = Device::flex();
        let layer = elmo_model::LstmWithProjectionConfig {
            d_input: 3,
            d_cell: 8,
            d_projection: 4,
            cell_clip: None,
            projection_clip: None,
        }
        .init(&device);
        let (dropped, mask) = DropoutMasks::new(0.25, false, Some(9)).drop_recurrent(&layer);
        let mask = mask
            .expect("weight drop on")
            .to_data()
            .try_to_vec::<f32>()
            .unwrap();
        let values = |w: &Tensor<2>| w.to_data().try_to_vec::<f32>().unwrap();
        let (original, got) = (
            values(&layer.state_weight.val()),
            values(&dropped.state_weight.val()),
        );
        for ((o, g), m) in original.iter().zip(&got).zip(&mask) {
            assert!(*m == 0.0 || (*m - 4.0 / 3.0).abs() < 1e-6);
            assert_eq!(*g, o * m);
        }
        let n_dropped = mask.iter().filter(|&&m| m == 0.0).count();
        assert!((12..=52).contains(&n_dropped), "{n_dropped} of 128 dropped");
        assert_eq!(dropped.state_weight.id, layer.state_weight.id);
        assert_eq!(
            values(&dropped.input_weight.val()),
            values(&layer.input_weight.val())
        );
        let (same, none) = DropoutMasks::new(0.25, false, None).drop_recurrent(&layer);
        assert!(matches!(same, Cow::Borrowed(_)) && none.is_none());
    }

    /// Regression: the fast training step's weight drop records nothing under autodiff (its
    /// recorded products, never consumed by a backward pass, stayed in burn's graph, and a run's
    /// memory grew with every step), and drops the same weights as the tracked one.
    #[test]
    fn untracked_weight_drop_records_nothing_under_autodiff() {
        let device = Device::flex().autodiff();
        let layer = elmo_model::LstmWithProjectionConfig {
            d_input: 3,
            d_cell: 8,
            d_projection: 4,
            cell_clip: None,
            projection_clip: None,
        }
        .init(&device);
        assert!(layer.state_weight.val().is_require_grad());
        let (tracked, _) = DropoutMasks::new(0.25, false, Some(9)).drop_recurrent(&layer);
        let (untracked, mask) =
            DropoutMasks::new(0.25, false, Some(9)).drop_recurrent_untracked(&layer);
        let tracked = tracked.state_weight.val();
        let untracked = untracked.state_weight.val();
        assert!(
            tracked.is_tracked(),
            "the autodiff loss's weight drop is recorded"
        );
        assert!(!untracked.is_tracked() && !untracked.is_autodiff());
        assert!(!mask.expect("weight drop on").is_autodiff());
        let values = |w: Tensor<2>| w.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(values(untracked), values(tracked.inner()));
    }
}
