//! Resumed optimizer state read onto the training device: burn-optim's
//! `ModuleOptimizer::load_record` builds every state tensor on burn's *default* device (it takes
//! none), which in a build with wgpu or CUDA compiled in is a GPU that may not start; wrapping
//! each rule in [`OnDevice`] and loading inside [`load_onto`] builds them on the trainer's device.

use std::cell::RefCell;

use burn::optim::{LearningRate, Optimizer, RecordState, StateSink, StateSource};
use burn::tensor::{Device, Tensor};

thread_local! {
    /// The device of the [`load_onto`] call running on this thread, if any.
    static LOAD_DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// Runs `load` (a `ModuleOptimizer::load`) with the state of every [`OnDevice`] rule it reads
/// built on `device` instead of the device burn-optim passes (its default).
pub(crate) fn load_onto<R>(device: &Device, load: impl FnOnce() -> R) -> R {
    /// Puts back the device of an enclosing call, also when `load` panics.
    struct Restore(Option<Device>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOAD_DEVICE.with_borrow_mut(|slot| *slot = self.0.take());
        }
    }
    let before = LOAD_DEVICE.with_borrow_mut(|slot| slot.replace(device.clone()));
    let _restore = Restore(before);
    load()
}

/// An optimizer rule `O` whose state, read from a record inside [`load_onto`], is built on that
/// call's device; its steps and records are `O`'s (the record's names are unchanged).
#[derive(Clone)]
pub(crate) struct OnDevice<O>(pub(crate) O);

/// `S`, built on [`load_onto`]'s device when read from a record.
#[derive(Clone)]
pub(crate) struct LoadedState<S>(S);

impl<S: RecordState> RecordState for LoadedState<S> {
    fn state_flatten(&self, prefix: &str, out: &mut StateSink) {
        self.0.state_flatten(prefix, out);
    }

    fn state_unflatten(prefix: &str, src: &mut StateSource, device: &Device) -> Option<Self> {
        let load_device = LOAD_DEVICE.with_borrow(Clone::clone);
        S::state_unflatten(prefix, src, load_device.as_ref().unwrap_or(device)).map(Self)
    }
}

impl<O: Optimizer> Optimizer for OnDevice<O> {
    type State<const D: usize> = LoadedState<O::State<D>>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let (tensor, state) = self.0.step(lr, tensor, grad, state.map(|state| state.0));
        (tensor, state.map(LoadedState))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        LoadedState(O::to_device(state.0, device))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use burn::optim::{AdamConfig, SgdConfig};
    use burn::tensor::TensorData;

    use super::*;
    use crate::optimizer::{Adagrad, AdagradState};
    use elmo_kernels::KernelSettings;

    /// A record of `state` read back by `S` with burn-optim's default-device argument `passed`.
    fn read_back<S: RecordState>(state: &S, passed: &Device) -> S {
        let mut sink = StateSink::default();
        state.state_flatten("7", &mut sink);
        let mut source = StateSource::new(sink.scalars.into_iter().collect::<BTreeMap<_, _>>());
        for (name, data) in sink.tensors {
            source.insert_tensor(name, data);
        }
        S::state_unflatten("7", &mut source, passed).unwrap()
    }

    #[test]
    fn state_is_read_onto_the_load_device_and_the_passed_one_elsewhere() {
        #[allow(deprecated)]
        let (flex, ndarray) = (Device::flex(), Device::ndarray());
        let accumulator = Tensor::<2>::from_data(TensorData::from([[1.0f32, 2.0]]), &flex);
        let state = LoadedState(AdagradState { accumulator });
        let loaded = load_onto(&flex, || read_back(&state, &ndarray));
        assert_eq!(loaded.0.accumulator.device(), flex);
        loaded
            .0
            .accumulator
            .into_data()
            .assert_eq(&TensorData::from([[1.0f32, 2.0]]), true);
        // Outside the call (and after it) the device burn-optim passes is used.
        assert_eq!(read_back(&state, &ndarray).0.accumulator.device(), ndarray);
        // Nested calls: the inner device while it runs, the outer one after it.
        load_onto(&ndarray, || {
            load_onto(&flex, || {
                assert_eq!(read_back(&state, &ndarray).0.accumulator.device(), flex);
            });
            assert_eq!(read_back(&state, &flex).0.accumulator.device(), ndarray);
        });
    }

    #[test]
    fn the_wrapped_rules_step_as_their_own() {
        let device = Device::flex();
        let tensor = || Tensor::<1>::from_data(TensorData::from([0.5f32, -1.0, 2.0]), &device);
        let grad = || Tensor::<1>::from_data(TensorData::from([0.1f32, -0.3, 0.7]), &device);
        fn two_steps<O: Optimizer>(rule: &O, tensor: Tensor<1>, grad: Tensor<1>) -> TensorData {
            let (tensor, state) = rule.step(0.1, tensor, grad.clone(), None);
            rule.step(0.1, tensor, grad, state).0.into_data()
        }
        let adagrad = Adagrad::new(0.1, KernelSettings::default());
        let adam = AdamConfig::new().build();
        let sgd = SgdConfig::new().build();
        let pairs = [
            (
                two_steps(&adagrad, tensor(), grad()),
                two_steps(&OnDevice(adagrad.clone()), tensor(), grad()),
            ),
            (
                two_steps(&adam, tensor(), grad()),
                two_steps(&OnDevice(adam.clone()), tensor(), grad()),
            ),
            (
                two_steps(&sgd, tensor(), grad()),
                two_steps(&OnDevice(sgd.clone()), tensor(), grad()),
            ),
        ];
        for (plain, wrapped) in pairs {
            plain.assert_eq(&wrapped, true);
        }
    }
}
