//! Reproducible random initialisation of a module when burn's RNG is global to the process.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor};

/// Runs `make` with the backend's RNG seeded from `seed` and draws every parameter of the module
/// it returns before anyone else may use that RNG.
///
/// burn's random initialisers draw from the backend's RNG, which is global to the process, and
/// parameters are drawn lazily, at their first use. Two initialisations in one process (two
/// training runs, or tests on several threads) would interleave their draws and get other
/// weights than alone; here both the seeding and every draw happen under one process-wide lock.
/// Code that draws from the same backend's RNG without this function is not held back by it.
pub fn seeded_init<M: Module>(device: &Device, seed: u64, make: impl FnOnce() -> M) -> M {
    let _guard = backend_rng_lock();
    device.seed(seed);
    let module = make();
    module.visit(&mut Materialize);
    module
}

/// The process-wide lock of [`seeded_init`].
fn backend_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static BACKEND_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    BACKEND_RNG
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Forces the lazy initialisation of every parameter.
struct Materialize;

impl ModuleVisitor for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LstmWithProjection, LstmWithProjectionConfig};

    fn layer(device: &Device) -> LstmWithProjection {
        LstmWithProjectionConfig {
            d_input: 16,
            d_cell: 32,
            d_projection: 8,
            cell_clip: None,
            projection_clip: None,
        }
        .init(device)
    }

    fn weights(layer: &LstmWithProjection) -> Vec<f32> {
        [&layer.input_weight, &layer.state_weight, &layer.projection]
            .into_iter()
            .flat_map(|p| p.val().into_data().try_to_vec::<f32>().unwrap())
            .collect()
    }

    #[test]
    fn concurrent_initialisations_draw_the_same_weights_as_one_alone() {
        let device = Device::flex();
        let alone = weights(&seeded_init(&device, 11, || layer(&device)));
        // Without the lock, four threads seeding and drawing at once interleave their draws.
        let together: Vec<Vec<f32>> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| weights(&seeded_init(&device, 11, || layer(&device)))))
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        });
        for run in together {
            assert_eq!(run, alone);
        }
        let other = weights(&seeded_init(&device, 12, || layer(&device)));
        assert_ne!(other, alone);
    }

    /// Building a biLM (for instance to load weights into) takes nothing from the backend's RNG:
    /// every random parameter is drawn lazily, so only `seeded_init`'s draws happen under its lock.
    #[test]
    fn building_a_bilm_draws_nothing_until_its_parameters_are_used() {
        let device = Device::flex();
        let options = crate::BiLmOptions::from_json_str(
            include_str!("../../../fixtures/allennlp/options.json"),
            "fixture options",
        )
        .unwrap();
        let draw = || -> Vec<f32> {
            Tensor::<1>::random([4], burn::tensor::Distribution::Default, &device)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        // Seeding and drawing here must not interleave with other tests' `seeded_init`.
        let _guard = backend_rng_lock();
        device.seed(3);
        let expected = draw();
        device.seed(3);
        let bilm = crate::BiLmConfig { options }.init(&device);
        assert_eq!(draw(), expected, "building the biLM drew from the RNG");
        // Using it draws its parameters.
        device.seed(3);
        bilm.visit(&mut Materialize);
        assert_ne!(draw(), expected);
    }
}
