//! End-to-end training tests on a tiny biLM: tied gradients, overfitting, exact resume, NaN stop,
//! export round trip, sampled softmax.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use elmo_model::options::CnnActivation;
use elmo_model::{KernelSettings, Precision};
use elmo_train::batcher::{BatchMode, BatchShape, Batcher};
use elmo_train::config::{Averaging, LrSchedule, OptimizerConfig, TrainConfig};
use elmo_train::init_from::initial_model;
use elmo_train::language_model::{CarriedState, GradientOptions, SoftmaxMode};
use elmo_train::lm_batch::{LmBatch, Targets, TokenGrid};
use elmo_train::metrics::{MetricsRecord, read_metrics};
use elmo_train::optimizer::build_optimizer;
use elmo_train::optimizer_step::{StepSettings, optimizer_step, optimizer_step_overlapping};
use elmo_train::run::seeded_model;
use elmo_train::softmax::SampledCandidates;
use elmo_train::{InitFrom, StepInput, TrainOptions, TrainedRun, Vocabulary, train};
use rand::SeedableRng;

const CORPUS: &str = "the cat sat on the mat .\n\
a dog ran in the park .\n\
the bird sang a song .\n\
my cat likes the dog .\n";

fn write_corpus(dir: &Path) -> PathBuf {
    let path = dir.join("corpus.txt");
    std::fs::write(&path, CORPUS).unwrap();
    path
}

fn vocab(corpus: &Path) -> Vocabulary {
    Vocabulary::build(&[corpus.to_path_buf()], false, Default::default(), |_| {}).unwrap()
}

fn tiny_config() -> TrainConfig {
    let mut config = TrainConfig::preset("tiny").unwrap();
    config.batch_size = 2;
    config.unroll_steps = 5;
    config
}

fn options(run_dir: &Path, corpus: &Path, steps: u64) -> TrainOptions {
    TrainOptions {
        run_dir: run_dir.to_path_buf(),
        train_files: vec![corpus.to_path_buf()],
        valid_file: Some(corpus.to_path_buf()),
        steps,
        checkpoint_every: 3,
        keep_checkpoints: 2,
        log_every: 1,
        seed: 11,
        resume: false,
        init_from: None,
        kernels: KernelSettings::default(),
        break_stale_lock: false,
        tower_devices: Vec::new(),
    }
}

use elmo_test_support::autodiff_one_at_a_time;
use elmo_test_support::nonzero_gradients as gradient_map;

fn first_batch(corpus: &Path, vocab: &Vocabulary, mode: BatchMode) -> LmBatch {
    let shape = BatchShape {
        n_rows: 2,
        n_steps: 5,
        mode,
        max_sentence_tokens: 50,
        n_mixed_shards: 1,
    };
    Batcher::new(
        vec![corpus.to_path_buf()],
        false,
        Arc::new(vocab.clone()),
        shape,
        Some(1),
    )
    .next_batch()
    .unwrap()
    .unwrap()
}

/// A seeded model of `config` on `device`'s autodiff device and the first packed batch (or
/// one of another mode) of the test corpus (written in `_dir`, kept as long as this).
struct PackedStep {
    _dir: tempfile::TempDir,
    vocab: Vocabulary,
    device: Device,
    model: elmo_train::BiLanguageModel,
    batch: LmBatch,
}

impl PackedStep {
    fn new(config: &TrainConfig, device: Device) -> Self {
        Self::of_mode(config, device, BatchMode::Packed)
    }

    /// The same with the first batch of `mode`.
    fn of_mode(config: &TrainConfig, device: Device, mode: BatchMode) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let corpus = write_corpus(dir.path());
        let vocab = vocab(&corpus);
        let device = device.autodiff();
        let model = seeded_model(config, &vocab, 1, &device);
        let batch = first_batch(&corpus, &vocab, mode);
        Self {
            _dir: dir,
            vocab,
            device,
            model,
            batch,
        }
    }

    /// The model's loss and gradients of the batch with the full softmax and no dropout seed,
    /// computed through autodiff (the reference a fast step is checked against).
    fn full_softmax_gradients(&self) -> elmo_train::language_model::LmGradients {
        self.model.loss_and_gradients(
            &self.batch,
            None,
            SoftmaxMode::Full,
            &self.device,
            GradientOptions::seeded(None),
        )
    }
}

#[test]
fn tied_softmax_and_encoder_get_gradient_from_both_directions() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let device = Device::flex().autodiff();
    let model = seeded_model(&tiny_config(), &vocab, 1, &device);
    for mode in [
        BatchMode::Packed,
        BatchMode::Contiguous,
        BatchMode::Sentences,
    ] {
        let batch = first_batch(&corpus, &vocab, mode);
        let loss = || {
            model
                .loss(&batch, None, SoftmaxMode::Full, Some(5), &device)
                .loss
        };
        for direction in ["forward", "backward"] {
            // burn keeps no graph after a backward pass: recompute per loss.
            let out = loss();
            let nll = if direction == "forward" {
                out.forward_nll
            } else {
                out.backward_nll
            };
            let grads = GradientsParams::from_grads(nll.backward(), &model);
            let map = gradient_map(&model, &grads);
            for (path, nonzero) in &map {
                let own_stack = path.contains(&format!("{direction}_layers"));
                let other_stack = path.contains("_layers") && !own_stack;
                if other_stack {
                    assert!(!nonzero, "{direction} loss reached {path}");
                } else {
                    // The shared encoder, the shared softmax and this direction's LSTMs.
                    assert!(
                        nonzero,
                        "{direction} loss gave no gradient to {path} ({mode:?} batches)"
                    );
                }
            }
            assert!(map.iter().any(|(p, nz)| p.starts_with("softmax") && *nz));
            assert!(map.iter().any(|(p, nz)| p.contains("token_encoder") && *nz));
        }
        // Joint loss: every parameter.
        let grads = GradientsParams::from_grads(loss().loss.backward(), &model);
        for (path, nonzero) in gradient_map(&model, &grads) {
            assert!(nonzero, "joint loss gave no gradient to {path}");
        }
    }
}

/// Per parameter: the largest difference between two sets of gradients, relative to the largest
/// gradient value or `floor`, whichever is larger (`None` where either set lacks the parameter).
struct CompareGradients<'a> {
    expected: &'a GradientsParams,
    got: &'a GradientsParams,
    floor: f32,
    errors: Vec<Option<f32>>,
}

impl ModuleVisitor for CompareGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let pair = self
            .expected
            .get::<D>(param.id)
            .zip(self.got.get::<D>(param.id));
        self.errors.push(pair.map(|(expected, got)| {
            let scale: f32 = expected.clone().abs().max().into_scalar();
            let error: f32 = (expected - got).abs().max().into_scalar();
            error / scale.max(self.floor)
        }));
    }
}

/// The training step's fast path (LSTMs outside autodiff with hand-written backpropagation, the
/// softmax and the token encoder differentiated by hand) gives the loss and the gradients of
/// plain autodiff, for every parameter, from a carried state, with dropout (per step; locked
/// with weight drop), full and sampled softmax, either char CNN activation. Tolerance: 1e-4 of
/// each parameter's largest gradient (float32 sums in a different order).
#[test]
fn fast_training_step_equals_autodiff() {
    let _one = autodiff_one_at_a_time();
    check_fast_step(Device::flex());
}

/// The same on wgpu (in CI: lavapipe), where the two LSTM stacks run as one group (the
/// directions paired: fused kernels and products over both stacks' rows).
#[test]
fn fast_training_step_equals_autodiff_on_wgpu() {
    let _one = autodiff_one_at_a_time();
    if let Some(device) =
        elmo_test_support::wgpu_device_or_skip("fast_training_step_equals_autodiff_on_wgpu")
    {
        check_fast_step(device);
    }
}

fn check_fast_step(device: Device) {
    let mut regularised = tiny_config();
    regularised.locked_dropout = true;
    regularised.weight_drop = 0.3;
    // The char CNN's other activation (its derivative is the backward's own).
    let mut tanh = tiny_config();
    tanh.model.char_cnn.activation = CnnActivation::Tanh;
    let mut losses = Vec::new();
    for config in [tiny_config(), regularised, tanh] {
        losses.push(check_fast_step_with(
            &config,
            device.clone(),
            KernelSettings::default(),
        ));
    }
    // The locked masks, the weight drop and the activation change the loss (none is silently
    // off).
    assert!((losses[0] - losses[1]).abs() > 1e-4, "{losses:?}");
    assert!((losses[0] - losses[2]).abs() > 1e-4, "{losses:?}");
}

/// On wgpu, the char CNN's distinct tokens (11 in the batch) in chunks of 4 (each completed to
/// 128 rows) and each chunk's convolutions in pieces of 25 rows (a 40 kB buffer limit): the fast
/// step still equals autodiff (the chunks' and pieces' records are backpropagated each into its
/// own rows).
#[test]
fn fast_training_step_in_chunks_and_pieces_equals_autodiff_on_wgpu() {
    let _one = autodiff_one_at_a_time();
    let name = "fast_training_step_in_chunks_and_pieces_equals_autodiff_on_wgpu";
    if let Some(device) = elmo_test_support::wgpu_device_or_skip(name) {
        let kernels = KernelSettings {
            cube_encoder_chunk_tokens: 4,
            buffer_bytes: 40_000,
            ..KernelSettings::default()
        };
        check_fast_step_with(&tiny_config(), device, kernels);
    }
}

/// Checks the fast step against autodiff with `config`'s dropout, the model running `kernels`;
/// returns the full-softmax loss.
fn check_fast_step_with(config: &TrainConfig, device: Device, kernels: KernelSettings) -> f32 {
    let PackedStep {
        _dir,
        vocab,
        device,
        model,
        batch,
    } = PackedStep::new(config, device);
    let model = model.with_kernels(kernels);
    let mut full_loss = None;
    let state = model
        .loss(&batch, None, SoftmaxMode::Full, None, &device)
        .state
        .map(CarriedState::detach);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    let candidates = SampledCandidates::draw(6, vocab.len(), &mut rng);
    for mode in [SoftmaxMode::Full, SoftmaxMode::Sampled(&candidates)] {
        let reference = model.loss(&batch, state.clone(), mode, Some(5), &device);
        let expected_loss: f32 = reference.loss.loss.clone().into_scalar();
        let expected = GradientsParams::from_grads(reference.loss.loss.backward(), &model);
        let fast = model.loss_and_gradients(
            &batch,
            state.clone(),
            mode,
            &device,
            GradientOptions::seeded(Some(5)),
        );
        let loss: f32 = fast.step.loss.loss.clone().into_scalar();
        assert!(
            (loss - expected_loss).abs() < 1e-5,
            "{loss} vs {expected_loss}"
        );
        full_loss.get_or_insert(loss);
        // The state carried to the next batch: each direction's own, every layer.
        let (expected_state, got_state) = (
            reference.state.expect("a packed batch carries state"),
            fast.step.state.expect("a packed batch carries state"),
        );
        let directions = [
            (&expected_state.forward, &got_state.forward),
            (&expected_state.backward, &got_state.backward),
        ];
        for (direction, (expected, got)) in directions.into_iter().enumerate() {
            assert_eq!(expected.len(), got.len());
            for (layer, (e, g)) in expected.iter().zip(got).enumerate() {
                let differences = [
                    (e.hidden.clone() - g.hidden.clone()).abs().max(),
                    (e.memory.clone() - g.memory.clone()).abs().max(),
                ];
                for difference in differences {
                    let difference: f32 = difference.into_scalar();
                    assert!(
                        difference < 1e-5,
                        "direction {direction} layer {layer}: carried state differs by {difference}"
                    );
                }
            }
        }
        assert_gradients_match(&model, &expected, fast.grads, (mode, &device));
    }
    full_loss.expect("two softmax modes checked")
}

/// Sentence batches (one sentence a row, rows of different lengths, from a zero state): the
/// token encoder outside autodiff and differentiated by hand, under the LSTMs and the softmax
/// through autodiff, gives the loss and the gradients of plain autodiff, full and sampled
/// softmax, with dropout, on flex and on wgpu. Tolerance as for the packed fast step.
#[test]
fn the_sentence_step_equals_autodiff() {
    let _one = autodiff_one_at_a_time();
    for device in elmo_test_support::flex_and_wgpu("the_sentence_step_equals_autodiff") {
        let PackedStep {
            _dir,
            vocab,
            device,
            model,
            batch,
        } = PackedStep::of_mode(&tiny_config(), device, BatchMode::Sentences);
        let LmBatch::Sentences { lengths, .. } = &batch else {
            panic!("a sentence batch");
        };
        assert_ne!(lengths[0], lengths[1], "rows of different lengths");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let candidates = SampledCandidates::draw(6, vocab.len(), &mut rng);
        for mode in [SoftmaxMode::Full, SoftmaxMode::Sampled(&candidates)] {
            let reference = model.loss(&batch, None, mode, Some(5), &device);
            let expected_loss: f32 = reference.loss.loss.clone().into_scalar();
            let expected = GradientsParams::from_grads(reference.loss.loss.backward(), &model);
            let options = GradientOptions::seeded(Some(5));
            let fast = model.loss_and_gradients(&batch, None, mode, &device, options);
            let loss: f32 = fast.step.loss.loss.clone().into_scalar();
            assert!(
                (loss - expected_loss).abs() < 1e-5,
                "{loss} vs {expected_loss} ({mode:?}, {device:?})"
            );
            assert_gradients_match(&model, &expected, fast.grads, (mode, &device));
        }
    }
}

/// A sentence batch's loss (no dropout) is the one of the biLM's own stacks, which read each
/// row with its length, the backward one right to left from its last token (AllenNLP's
/// `go_forward=False`; parity-tested against AllenNLP in elmo-model): the training loss runs
/// the rows reversed within their lengths instead ([`LmBatch`]'s streams). On flex and wgpu,
/// without autodiff (as evaluation runs), each direction's summed NLL within 1e-5 relative.
#[test]
fn a_sentence_batch_reads_each_row_as_the_bilm_does() {
    for device in
        elmo_test_support::flex_and_wgpu("a_sentence_batch_reads_each_row_as_the_bilm_does")
    {
        let PackedStep {
            _dir,
            device,
            model,
            batch,
            ..
        } = PackedStep::of_mode(&tiny_config(), device, BatchMode::Sentences);
        let (model, device) = (model.valid(), device.without_autodiff());
        let LmBatch::Sentences {
            tokens,
            lengths,
            forward_targets,
            backward_targets,
        } = &batch
        else {
            panic!("a sentence batch");
        };
        assert_ne!(lengths[0], lengths[1], "rows of different lengths");
        let step = model.loss(&batch, None, SoftmaxMode::Full, None, &device);
        assert!(step.state.is_none(), "a sentence batch carries no state");
        let rows: Vec<Vec<&str>> = (tokens.rows.iter())
            .map(|row| {
                let mut row: Vec<&str> = row.iter().map(String::as_str).collect();
                row.resize(tokens.n_steps, "");
                row
            })
            .collect();
        let char_ids = elmo_model::CharIdBatch::from_sentences(&rows);
        let embedded = model.bilm.encode_tokens(&char_ids, &device);
        let stacks = model.bilm.run_stacks(embedded, lengths, None);
        // A direction's summed NLL over its targets, from its top layer `[B, T, P]`.
        let nll = |top: &Tensor<3>, targets: &Targets| -> f32 {
            let [b, t, p] = top.dims();
            let (cells, ids): (Vec<i64>, Vec<u32>) = (targets.weights.iter().zip(&targets.ids))
                .enumerate()
                .filter(|(_, (w, _))| **w > 0.0)
                .map(|(cell, (_, &id))| (cell as i64, id))
                .unzip();
            let cells = Tensor::from_data(
                burn::tensor::TensorData::new(cells.clone(), [cells.len()]),
                &device,
            );
            let hidden = top.clone().reshape([b * t, p]).select(0, cells);
            model.softmax.full_nll(hidden, &ids).sum().into_scalar()
        };
        let top = |layers: &[Tensor<3>]| layers.last().expect("a layer").clone();
        let pairs = [
            (
                "forward",
                step.loss.forward_nll,
                top(&stacks.forward),
                forward_targets,
            ),
            (
                "backward",
                step.loss.backward_nll,
                top(&stacks.backward),
                backward_targets,
            ),
        ];
        for (direction, got, top, targets) in pairs {
            let got: f32 = got.into_scalar();
            let expected = nll(&top, targets);
            assert!(
                (got - expected).abs() <= 1e-5 * expected.abs(),
                "{direction}: {got} vs {expected} ({device:?})"
            );
        }
    }
}

/// Regression: on wgpu a sentence batch's loss with dropout is the same at every call (dropout
/// masks are a pure function of the seed), with autodiff and without. Its two stacks ran on two
/// threads (two CubeCL streams); when both read the same token embeddings, each thread handed a
/// clone of them, the second could overwrite the buffer in place while the first one's reads
/// were still queued: under autodiff, on lavapipe, 7 of 24 calls gave 2.9517016 instead of
/// 2.9510093. (`both_directions` now asks for borrowed inputs, each stack reads rows of its own,
/// and under autodiff the stacks run one after the other.)
#[test]
fn a_sentence_loss_with_dropout_is_the_same_at_every_call_on_wgpu() {
    let _one = autodiff_one_at_a_time();
    let Some(device) = elmo_test_support::wgpu_device_or_skip(
        "a_sentence_loss_with_dropout_is_the_same_at_every_call_on_wgpu",
    ) else {
        return;
    };
    let PackedStep {
        _dir,
        device,
        model,
        batch,
        ..
    } = PackedStep::of_mode(&tiny_config(), device, BatchMode::Sentences);
    let plain = (model.valid(), device.clone().without_autodiff());
    for (model, device) in [(model, device), plain] {
        let losses: Vec<f32> = (0..24)
            .map(|_| {
                let step = model.loss(&batch, None, SoftmaxMode::Full, Some(5), &device);
                step.loss.loss.into_scalar()
            })
            .collect();
        assert!(
            losses.iter().all(|&l| l == losses[0]),
            "{losses:?} ({device:?})"
        );
    }
}

/// On wgpu (in CI: lavapipe, whose float scatter-adds are atomic) the fast step gives the same
/// gradients, to the bit, at every run, in both softmax modes: every gradient added by index
/// (the softmax's target and candidate rows, the tops' rows, the token encoder's positions and
/// the char embedding's windows) is summed in a fixed order. (With the atomic scatter-adds of
/// 636c02e, 3 runs of this test in 4 failed.)
#[test]
fn the_fast_step_gives_the_same_gradients_at_every_run_on_wgpu() {
    let _one = autodiff_one_at_a_time();
    let Some(device) = elmo_test_support::wgpu_device_or_skip(
        "the_fast_step_gives_the_same_gradients_at_every_run_on_wgpu",
    ) else {
        return;
    };
    let PackedStep {
        _dir,
        vocab,
        device,
        model,
        batch,
    } = PackedStep::new(&tiny_config(), device);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    let candidates = SampledCandidates::draw(6, vocab.len(), &mut rng);
    for mode in [SoftmaxMode::Full, SoftmaxMode::Sampled(&candidates)] {
        let gradients = || {
            let step = model.loss_and_gradients(
                &batch,
                None,
                mode,
                &device,
                GradientOptions::seeded(Some(5)),
            );
            let mut bits = GradientBits {
                grads: &step.grads,
                bits: Vec::new(),
            };
            model.visit(&mut bits);
            bits.bits
        };
        let first = gradients();
        assert!(!first.is_empty());
        for run in 1..12 {
            let again = gradients();
            let differing = (first.iter().zip(&again)).filter(|(a, b)| a != b).count();
            assert_eq!(
                differing, 0,
                "run {run}: {differing} parameters' gradients differ ({mode:?})"
            );
        }
    }
}

/// Every gradient of a model's parameters, as bits.
struct GradientBits<'a> {
    grads: &'a GradientsParams,
    bits: Vec<Vec<u32>>,
}

impl ModuleVisitor for GradientBits<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            let values = grad.into_data().try_to_vec::<f32>().expect("f32 gradients");
            self.bits
                .push(values.into_iter().map(f32::to_bits).collect());
        }
    }
}

/// No LM reads what it predicts: a direction's loss at one target changes with the last token
/// that LM has read and not with any token it has not read yet (the target included), in both
/// batch modes. A leak would make the training perplexity of that direction a lie.
#[test]
fn each_lm_reads_only_the_tokens_before_its_target() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let device = Device::flex();
    let model = seeded_model(&tiny_config(), &vocab, 1, &device);
    let words: Vec<String> = "<S> the cat sat on the mat . </S>"
        .split(' ')
        .map(String::from)
        .collect();
    let n = words.len();
    let one_target = |cells: usize, cell: usize, word: &str| {
        let mut targets = Targets {
            ids: vec![0; cells],
            weights: vec![0.0; cells],
        };
        targets.ids[cell] = vocab.id(word);
        targets.weights[cell] = 1.0;
        targets
    };
    let nll = |batch: &LmBatch| {
        let out = model
            .loss(batch, None, SoftmaxMode::Full, None, &device)
            .loss;
        [
            out.forward_nll.into_scalar::<f32>(),
            out.backward_nll.into_scalar::<f32>(),
        ]
    };
    // Replaces token `q` of the input by a word of the corpus that is not there.
    let perturbed = |tokens: &[String], q: usize| {
        let mut tokens = tokens.to_vec();
        tokens[q] = "dog".into();
        tokens
    };
    // An unread token may move the last bits (the gemm blocking can follow the number of
    // distinct tokens), never more than 1e-4; the last token read moves the loss by far more.
    let check = |what: &str, p: usize, q: usize, unread: bool, before: f32, after: f32| {
        let moved = (before - after).abs() >= 1e-4;
        if unread {
            assert!(
                !moved,
                "{what}: the target of cell {p} depends on unread token {q}"
            );
        } else if q == p {
            assert!(
                moved,
                "{what}: the target of cell {p} ignores token {q}, just read"
            );
        }
    };

    // Packed: both streams are read left to right; the target of cell p is token p + 1.
    let inputs = &words[..n - 1];
    let packed = |tokens: &[String], p: usize| {
        let grid = TokenGrid {
            rows: vec![tokens.to_vec()],
            n_steps: n - 1,
        };
        let targets = one_target(n - 1, p, &words[p + 1]);
        LmBatch::Packed {
            forward: grid.clone(),
            backward: grid,
            forward_targets: targets.clone(),
            backward_targets: targets,
        }
    };
    for p in 0..n - 1 {
        let [forward, backward] = nll(&packed(inputs, p));
        for q in 0..n - 1 {
            let [f, b] = nll(&packed(&perturbed(inputs, q), p));
            check("packed forward", p, q, q > p, forward, f);
            check("packed backward", p, q, q > p, backward, b);
        }
    }

    // Sentences: the backward LM reads the row right to left; its target at p is token p − 1.
    let sentences = |tokens: &[String], p: usize| LmBatch::Sentences {
        tokens: TokenGrid {
            rows: vec![tokens.to_vec()],
            n_steps: n,
        },
        lengths: vec![n],
        forward_targets: one_target(n, p, &words[p + 1]),
        backward_targets: one_target(n, p, &words[p - 1]),
    };
    for p in 1..n - 1 {
        let [forward, backward] = nll(&sentences(&words, p));
        for q in 0..n {
            let [f, b] = nll(&sentences(&perturbed(&words, q), p));
            check("sentence forward", p, q, q > p, forward, f);
            check("sentence backward", p, q, q < p, backward, b);
        }
    }
}

/// Frozen parts (`no_grad`) get no gradient and everything else does, through plain autodiff and
/// through the fast path: the token encoder, its char embedding alone, the whole biLM (only the
/// softmax trains) and the softmax.
#[test]
fn frozen_parts_get_no_gradient() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let device = Device::flex().autodiff();
    let batch = first_batch(&corpus, &vocab, BatchMode::Packed);
    let frozen_parts = [
        "bilm.token_encoder",
        "bilm.token_encoder.char_embedding",
        "bilm",
        "softmax",
    ];
    for frozen in frozen_parts {
        let mut model = seeded_model(&tiny_config(), &vocab, 1, &device);
        match frozen {
            "bilm.token_encoder" => {
                model.bilm.token_encoder = model.bilm.token_encoder.no_grad();
            }
            "bilm.token_encoder.char_embedding" => {
                let encoder = &mut model.bilm.token_encoder;
                encoder.char_embedding = encoder.char_embedding.clone().set_require_grad(false);
            }
            "bilm" => model.bilm = model.bilm.no_grad(),
            _ => model.softmax = model.softmax.no_grad(),
        }
        let autodiff = model
            .loss(&batch, None, SoftmaxMode::Full, Some(5), &device)
            .loss;
        let autodiff = GradientsParams::from_grads(autodiff.loss.backward(), &model);
        let fast = model
            .loss_and_gradients(
                &batch,
                None,
                SoftmaxMode::Full,
                &device,
                GradientOptions::seeded(Some(5)),
            )
            .grads;
        for (name, grads) in [("autodiff", autodiff), ("fast path", fast)] {
            let map = gradient_map(&model, &grads);
            assert!(map.len() > 10, "{map:?}");
            for (path, nonzero) in map {
                assert_eq!(
                    nonzero,
                    !path.starts_with(frozen),
                    "{path} with {frozen} frozen ({name})"
                );
            }
        }
    }
}

fn train_losses(run: &Path) -> Vec<MetricsRecord> {
    read_metrics(run.join("metrics.jsonl"))
        .unwrap()
        .into_iter()
        .map(|mut r| {
            if let MetricsRecord::Train {
                tokens_per_second, ..
            } = &mut r
            {
                *tokens_per_second = 0.0;
            }
            r
        })
        .collect()
}

/// A run of `steps` steps straight through (`DIR/straight`), and one "killed" after step
/// `killed_after` (`DIR/broken`: trained that far, then its last checkpoint removed, so that the
/// checkpoint before survives with the metrics lines after it), handed to `before_resume`, then
/// resumed to `steps`. `run_options` gives a run's options (without `resume`). Returns the two
/// run directories.
fn straight_and_resumed(
    (config, vocab, device, dir): (&TrainConfig, &Vocabulary, &Device, &Path),
    (steps, killed_after): (u64, u64),
    run_options: impl Fn(&Path, u64) -> TrainOptions,
    before_resume: impl FnOnce(&Path),
) -> (PathBuf, PathBuf) {
    let run = |dir: &Path, options: TrainOptions| {
        train(config, vocab.clone(), &options, device, &mut ()).unwrap_or_else(|error| {
            panic!("{}: {error}", dir.display());
        });
    };
    let straight = dir.join("straight");
    run(&straight, run_options(&straight, steps));
    let broken = dir.join("broken");
    run(&broken, run_options(&broken, killed_after));
    let last = broken.join(format!("checkpoints/step-{killed_after:09}"));
    std::fs::remove_dir_all(&last).unwrap();
    before_resume(&broken);
    let resumed = TrainOptions {
        resume: true,
        ..run_options(&broken, steps)
    };
    run(&broken, resumed);
    (straight, broken)
}

#[test]
fn tiny_model_overfits_a_few_sentences() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // One sentence, twice: nothing is uncertain, so the loss can approach zero.
    let corpus = dir.path().join("overfit.txt");
    let sentence = "the cat sat on the mat and the dog ran in the park .\n";
    std::fs::write(&corpus, sentence.repeat(2)).unwrap();
    let vocab = vocab(&corpus);
    let mut config = tiny_config();
    config.dropout = 0.0;
    config.optimizer = OptimizerConfig::Adam { lr: 0.02 };
    // Decayed to zero at the end: at a constant 0.02 the loss keeps jumping between 0.01 and 2
    // near the minimum, so where it ends would depend on float rounding.
    config.lr_schedule = LrSchedule::Linear {
        warmup_steps: 1,
        total_steps: 500,
    };
    let mut opts = options(&dir.path().join("run"), &corpus, 500);
    opts.checkpoint_every = 500;
    opts.valid_file = None;
    train(&config, vocab, &opts, &Device::flex(), &mut ()).unwrap();
    let losses = train_losses(&dir.path().join("run"));
    let loss_at = |i: usize| match losses[i] {
        MetricsRecord::Train { loss, .. } => loss,
        _ => panic!("expected a training record"),
    };
    // From ~ln(V) to nearly nothing (both directions: the loss is their mean).
    assert!(loss_at(0) > 2.0, "first loss {}", loss_at(0));
    let last = losses.len() - 1;
    assert!(
        loss_at(last) < 0.01,
        "did not overfit: final loss {}",
        loss_at(last)
    );
}

#[test]
fn resume_reproduces_an_uninterrupted_run() {
    let _one = autodiff_one_at_a_time();
    #[allow(deprecated)]
    let ndarray = Device::ndarray();
    // Packed batches on both CPU backends, and contiguous batches (their epochs roll over
    // within the 7 steps: 30 tokens in rows of 10 or 15).
    for (device, contiguous) in [
        (Device::flex(), false),
        (ndarray, false),
        (Device::flex(), true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let corpus = write_corpus(dir.path());
        let vocab = vocab(&corpus);
        // With the plateau schedule (validation at steps 3, 6 and 7): step 6's validation is
        // not 90% better than step 3's, so steps 7+ run at half the rate, which the resumed run
        // only reproduces if the checkpoint of step 3 kept the schedule's best perplexity.
        // Locked dropout and weight drop on: their masks too must follow from (seed, step).
        let mut config = tiny_config();
        config.locked_dropout = true;
        config.weight_drop = 0.2;
        config.contiguous = contiguous;
        config.lr_schedule = LrSchedule::Plateau {
            decay: 0.5,
            threshold: 0.9,
            patience: 0,
        };
        let (straight, broken) = straight_and_resumed(
            (&config, &vocab, &device, dir.path()),
            (7, 4),
            |run, steps| options(run, &corpus, steps),
            |broken| {
                // A fresh start into a directory with checkpoints is refused.
                let err = train(
                    &config,
                    vocab.clone(),
                    &options(broken, &corpus, 7),
                    &device,
                    &mut (),
                )
                .unwrap_err()
                .to_string();
                assert!(err.contains("--resume"), "{err}");
            },
        );
        assert_eq!(
            train_losses(&straight),
            train_losses(&broken),
            "on {device:?}, contiguous {contiguous}"
        );
        let rates: Vec<f64> = train_losses(&straight)
            .iter()
            .filter_map(|r| match r {
                MetricsRecord::Train { lr, .. } => Some(*lr),
                _ => None,
            })
            .collect();
        let base = config.optimizer.lr();
        assert_eq!(rates, [[base; 6].as_slice(), &[base / 2.0]].concat());
        // keep_checkpoints = 2.
        let kept: Vec<_> = std::fs::read_dir(broken.join("checkpoints"))
            .unwrap()
            .collect();
        assert_eq!(kept.len(), 2);
    }
}

/// Set in the child process of [`a_resume_on_the_cpu_never_touches_burns_default_device`].
const UNUSABLE_DEFAULT: &str = "ELMO_TEST_UNUSABLE_DEFAULT_DEVICE";

/// Regression: burn-optim's `load_record` builds resumed optimizer state on burn's default
/// device, which in a build with wgpu (or CUDA) compiled in is the GPU, so resuming a CPU run
/// on a machine without a usable GPU panicked (found under qemu, where no Vulkan adapter
/// opens). The trainer reads the state onto its own device. The test runs itself again in a
/// child process whose default device cannot start (no wgpu adapter of that index, no CUDA
/// device visible), with Adagrad's and Adam's state, and checks the resumed run's losses.
/// `ELMO_TEST_RUNNER` (set by `cargo xtask platforms --test aarch64`) is the command that runs
/// a test binary of another architecture, e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`.
#[test]
fn a_resume_on_the_cpu_never_touches_burns_default_device() {
    let name = "a_resume_on_the_cpu_never_touches_burns_default_device";
    if std::env::var_os(UNUSABLE_DEFAULT).is_none() {
        let runner = std::env::var("ELMO_TEST_RUNNER").unwrap_or_default();
        let mut command: Vec<String> = runner.split_whitespace().map(String::from).collect();
        command.push(std::env::current_exe().unwrap().display().to_string());
        let output = std::process::Command::new(&command[0])
            .args(&command[1..])
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(UNUSABLE_DEFAULT, "1")
            .env("CUBECL_WGPU_DEFAULT_DEVICE", "DiscreteGpu(4096)")
            .env("CUDA_VISIBLE_DEVICES", "")
            .env_remove("BURN_DEVICE")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{log}");
        assert!(log.contains("1 passed"), "{log}");
        return;
    }
    // The child: first make sure the default device really cannot start.
    let default =
        std::panic::catch_unwind(|| Tensor::<1>::zeros([1], &Device::default()).into_data());
    assert!(default.is_err(), "the default device started");
    for optimizer in [
        OptimizerConfig::Adagrad {
            lr: 0.2,
            initial_accumulator: 1.0,
        },
        OptimizerConfig::Adam { lr: 0.01 },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let corpus = write_corpus(dir.path());
        let vocab = vocab(&corpus);
        let mut config = tiny_config();
        config.optimizer = optimizer;
        let (straight, broken) = straight_and_resumed(
            (&config, &vocab, &Device::flex(), dir.path()),
            (4, 4),
            |run, steps| options(run, &corpus, steps),
            |_| {},
        );
        assert_eq!(train_losses(&straight), train_losses(&broken));
    }
}

#[test]
fn non_finite_loss_stops_with_the_last_checkpoint_intact() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let mut config = tiny_config();
    config.optimizer = OptimizerConfig::Adam { lr: 1.0e30 };
    config.clip_norm = None;
    let mut opts = options(&dir.path().join("run"), &corpus, 20);
    opts.checkpoint_every = 1;
    opts.valid_file = None;
    let err = train(&config, vocab, &opts, &Device::flex(), &mut ()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("non-finite"), "{message}");
    assert!(message.contains("step-000000001"), "{message}");
    // The last good checkpoint still loads.
    let run = TrainedRun::load(&dir.path().join("run"), &Device::flex()).unwrap();
    assert!(run.step >= 1);
}

/// Regression (issue 49): without `--valid` and with no metrics line before the first checkpoint,
/// the curves had nothing to draw and the run died there. A plot never stops a run: it is
/// reported to the observer and the run goes on to its last step.
#[test]
fn a_plot_that_cannot_be_drawn_does_not_stop_the_run() {
    let _one = autodiff_one_at_a_time();
    struct Warnings(Vec<String>);
    impl elmo_train::TrainObserver for Warnings {
        fn warning(&mut self, message: &str) {
            self.0.push(message.to_string());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let mut opts = options(&dir.path().join("run"), &corpus, 4);
    opts.checkpoint_every = 2;
    opts.log_every = 100;
    opts.valid_file = None;
    let mut warnings = Warnings(Vec::new());
    let summary = train(&tiny_config(), vocab, &opts, &Device::flex(), &mut warnings)
        .expect("the run finishes");
    assert_eq!(summary.steps, 4);
    assert!(
        warnings.0.iter().any(|w| w.contains("no perplexity")),
        "{:?}",
        warnings.0
    );
    assert_eq!(
        TrainedRun::load(&dir.path().join("run"), &Device::flex())
            .unwrap()
            .step,
        4
    );
}

/// Regression (issue 49): two `elmo train` processes on one run directory both ran. The second
/// writer, fresh or `--resume`, is refused while the first holds the run's lock, and nothing of
/// the run is touched.
#[test]
fn a_second_writer_of_a_run_is_refused() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let held = elmo_model::RunLock::acquire(run_dir.join(".lock"), false).unwrap();
    for resume in [false, true] {
        let mut opts = options(&run_dir, &corpus, 2);
        opts.resume = resume;
        opts.break_stale_lock = true;
        let error = train(
            &tiny_config(),
            vocab(&corpus),
            &opts,
            &Device::flex(),
            &mut (),
        )
        .expect_err("locked")
        .to_string();
        assert!(error.contains("locked by process"), "{error}");
        assert!(!run_dir.join("config.json").exists());
    }
    drop(held);
    let opts = options(&run_dir, &corpus, 2);
    train(
        &tiny_config(),
        vocab(&corpus),
        &opts,
        &Device::flex(),
        &mut (),
    )
    .expect("free again");
    assert!(
        !run_dir.join(".lock").exists(),
        "the lock is released when the run returns"
    );
}

#[test]
fn sampled_softmax_trains_and_export_round_trips() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let mut config = tiny_config();
    config.negatives = 4;
    assert!(config.uses_sampled_softmax(vocab.len()));
    config.stateful = false;
    let run_dir = dir.path().join("run");
    let summary = train(
        &config,
        vocab,
        &options(&run_dir, &corpus, 6),
        &Device::flex(),
        &mut (),
    )
    .unwrap();
    assert!(summary.valid.unwrap().average.is_finite());
    assert!(run_dir.join("curves.svg").is_file());

    let device = Device::flex();
    let run = TrainedRun::load(&run_dir, &device).unwrap();
    let export = dir.path().join("export");
    elmo_model::export::export_bilm(&run.model.bilm, &run.config.model, &export).unwrap();
    let loaded = elmo_model::weights::load_bilm(
        export.join("options.json"),
        export.join("weights.hdf5"),
        &device,
    )
    .unwrap();
    let sentences = vec![vec!["the", "cat", "sat"], vec!["a", "bird"]];
    let a = run.model.bilm.forward_sentences(&sentences, &device);
    let b = loaded.forward_sentences(&sentences, &device);
    for (x, y) in a.layers.into_iter().zip(b.layers) {
        let diff: f32 = (x - y).abs().max().into_scalar();
        assert!(diff < 1e-6, "export round trip differs by {diff}");
    }
}

/// Largest absolute difference of two tensors of the same shape.
fn max_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar()
}

#[test]
fn a_new_run_can_start_from_another_runs_weights() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let config = tiny_config();
    let source = dir.path().join("source");
    let device = Device::flex();
    train(
        &config,
        vocab.clone(),
        &options(&source, &corpus, 3),
        &device,
        &mut (),
    )
    .unwrap();
    let trained = TrainedRun::load(&source, &device).unwrap();
    let from = InitFrom::Run(source.clone());
    let sentences = vec![vec!["the", "cat", "sat"], vec!["a", "bird"]];
    let top = |bilm: &elmo_model::BiLm| {
        let layers = bilm.forward_sentences(&sentences, &device).layers;
        layers.into_iter().last().unwrap()
    };

    // Same vocabulary: biLM and softmax are the run's, exactly.
    let model = initial_model(&config, &vocab, Some(&from), 99, &device).unwrap();
    assert!(model.softmax_taken);
    let model = model.model;
    assert_eq!(max_diff(top(&model.bilm), top(&trained.model.bilm)), 0.0);
    assert_eq!(
        max_diff(
            model.softmax.weight.val(),
            trained.model.softmax.weight.val()
        ),
        0.0
    );
    let fresh = initial_model(&config, &vocab, None, 99, &device)
        .unwrap()
        .model;
    assert!(
        max_diff(
            fresh.softmax.weight.val(),
            trained.model.softmax.weight.val()
        ) > 1e-3
    );

    // Another vocabulary: the run's biLM with a new softmax of the new size.
    let bigger =
        Vocabulary::from_tokens(vocab.tokens().iter().cloned().chain(["zebra".to_string()]));
    let model = initial_model(&config, &bigger, Some(&from), 99, &device).unwrap();
    assert!(!model.softmax_taken);
    let model = model.model;
    assert_eq!(max_diff(top(&model.bilm), top(&trained.model.bilm)), 0.0);
    assert_eq!(model.softmax.weight.dims()[0], vocab.len() + 1);

    // Another architecture is refused, naming the run.
    let mut wider = config.clone();
    wider.model.lstm.dim += 4;
    let error =
        initial_model(&wider, &vocab, Some(&from), 99, &device).expect_err("architecture mismatch");
    assert!(error.to_string().contains("source"), "{error}");
    // ...before anything of the new run is written.
    let refused = dir.path().join("refused");
    let mut opts = options(&refused, &corpus, 3);
    opts.init_from = Some(from.clone());
    assert!(train(&wider, vocab.clone(), &opts, &device, &mut ()).is_err());
    assert!(!refused.exists(), "a refused --init-from left {refused:?}");

    // Training from it; a resume reads the checkpoint, not the source run (removed here).
    let tuned = dir.path().join("tuned");
    let mut opts = options(&tuned, &corpus, 3);
    opts.init_from = Some(from);
    train(&config, vocab.clone(), &opts, &device, &mut ()).unwrap();
    std::fs::remove_dir_all(&source).unwrap();
    opts.steps = 4;
    opts.resume = true;
    let summary = train(&config, vocab, &opts, &device, &mut ()).unwrap();
    assert_eq!(summary.steps, 4);
}

/// Every float parameter of a module, flattened, in visiting order.
#[derive(Default)]
struct Flat(Vec<Vec<f32>>);

impl ModuleVisitor for Flat {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0
            .push(param.val().into_data().try_to_vec::<f32>().unwrap());
    }
}

fn flat(model: &elmo_train::BiLanguageModel) -> Vec<Vec<f32>> {
    let mut flat = Flat::default();
    model.visit(&mut flat);
    flat.0
}

/// Weight averaging: the run's model (what eval, export, embed and --init-from read) is the
/// arithmetic mean of the weights after the steps from `start` on (to 1e-6, the running mean
/// rounds differently); switched on by a resume, carried across another resume exactly.
#[test]
fn weight_averaging_is_the_mean_of_the_steps_weights_and_resumes_exactly() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let device = Device::flex();
    let mut config = tiny_config();
    config.averaging = Averaging::FromStep { start: 3 };
    let run_options = |name: &str, steps: u64| {
        let mut opts = options(&dir.path().join(name), &corpus, steps);
        opts.checkpoint_every = 1;
        opts.keep_checkpoints = 10;
        opts
    };
    let straight = dir.path().join("straight");
    train(
        &config,
        vocab.clone(),
        &run_options("straight", 6),
        &device,
        &mut (),
    )
    .unwrap();

    let averaged = TrainedRun::load(&straight, &device).unwrap();
    assert_eq!(averaged.averaged_steps, Some(4));
    let step_weights: Vec<Vec<Vec<f32>>> = (3..=6)
        .map(|step| {
            let file = straight.join(format!("checkpoints/step-{step:09}/model.bpk"));
            flat(
                &elmo_train::run::model_for(&config, &vocab, &device)
                    .try_load_file(file)
                    .unwrap(),
            )
        })
        .collect();
    let mut largest_change = 0f32;
    for (p, mean) in flat(&averaged.model).iter().enumerate() {
        for (i, value) in mean.iter().enumerate() {
            let expected = step_weights.iter().map(|w| w[p][i]).sum::<f32>() / 4.0;
            assert!(
                (value - expected).abs() < 1e-6,
                "parameter {p}[{i}]: {value} vs {expected}"
            );
            largest_change =
                largest_change.max((step_weights[3][p][i] - step_weights[0][p][i]).abs());
        }
    }
    assert!(
        largest_change > 1e-3,
        "the weights did not move: {largest_change}"
    );
    let trained = TrainedRun::load_trained_weights(&straight, &device).unwrap();
    assert_eq!(trained.averaged_steps, None);
    assert_eq!(flat(&trained.model), step_weights[3]);
    // Validation reads the mean from step 3 on.
    let averaged_steps: Vec<Option<u64>> = read_metrics(straight.join("metrics.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            MetricsRecord::Valid { averaged_steps, .. } => Some(averaged_steps),
            _ => None,
        })
        .collect();
    assert_eq!(
        averaged_steps,
        [None, None, Some(1), Some(2), Some(3), Some(4)]
    );

    // Without averaging to step 2, switched on by --resume, "killed" after step 4, resumed.
    let mut plain = config.clone();
    plain.averaging = Averaging::Off;
    train(
        &plain,
        vocab.clone(),
        &run_options("broken", 2),
        &device,
        &mut (),
    )
    .unwrap();
    let mut resumed = run_options("broken", 4);
    resumed.resume = true;
    train(&config, vocab.clone(), &resumed, &device, &mut ()).unwrap();
    std::fs::remove_dir_all(dir.path().join("broken/checkpoints/step-000000004")).unwrap();
    resumed.steps = 6;
    train(&config, vocab.clone(), &resumed, &device, &mut ()).unwrap();
    let broken = dir.path().join("broken");
    assert_eq!(train_losses(&straight), train_losses(&broken));
    assert_eq!(
        flat(&TrainedRun::load(&broken, &device).unwrap().model),
        flat(&averaged.model)
    );

    // The non-monotone trigger needs validation.
    config.averaging = Averaging::WhenFlat { patience: 5 };
    let mut no_valid = run_options("no-valid", 2);
    no_valid.valid_file = None;
    let error = train(&config, vocab, &no_valid, &device, &mut ()).unwrap_err();
    assert!(error.to_string().contains("validation"), "{error}");
}

/// The configs shipped in `examples/configs/` load, and have the sizes docs/training.md
/// gives them (PTB's vocabulary: 10,002 entries).
#[test]
fn shipped_ptb_configs_have_their_documented_sizes() {
    let dir = elmo_test_support::repository_root().join("examples/configs");
    let vocab = Vocabulary::from_tokens((0..9_999).map(|k| format!("w{k}")));
    assert_eq!(vocab.len(), 10_002);
    let device = Device::flex();
    let millions = |name: &str| {
        let config = TrainConfig::from_file(dir.join(name)).expect(name);
        let n = seeded_model(&config, &vocab, 0, &device).n_parameters();
        (n, (n as f64 / 1e4).round() / 100.0)
    };
    assert_eq!(millions("ptb-small.json").1, 4.88);
    assert_eq!(millions("ptb-312-200.json").0, 4_960_411);
    assert_eq!(millions("ptb-large.json").1, 18.86);
    // docs/training.md's pretraining preset: a full softmax over its 20,000-word vocabulary.
    let pretraining = TrainConfig::from_file(dir.join("lm-small-v2.json")).expect("lm-small-v2");
    assert!(!pretraining.uses_sampled_softmax(20_000));
    assert_eq!(
        pretraining.model,
        TrainConfig::from_file(dir.join("ptb-small.json"))
            .unwrap()
            .model
    );
}

/// The loss a step reports.
fn step_loss(step: &elmo_train::language_model::LmGradients) -> f32 {
    step.step.loss.loss.clone().into_scalar()
}

/// Per parameter of `model`, [`CompareGradients`]' relative error of `scaled` (a step's
/// gradients computed with loss scale `scale`, divided by it here) against `expected`; every
/// parameter of `expected` must have one.
/// Asserts that `grads` (a step's) are `expected` within 1e-4 of each parameter's
/// largest gradient (float32 sums in a different order); `context` names the case.
fn assert_gradients_match(
    model: &elmo_train::BiLanguageModel,
    expected: &GradientsParams,
    grads: GradientsParams,
    context: impl std::fmt::Debug,
) {
    let errors = gradient_errors(model, expected, grads, 1.0, 1e-3);
    for (index, error) in errors.into_iter().enumerate() {
        assert!(
            error < 1e-4,
            "parameter {index}: relative error {error} ({context:?})"
        );
    }
}

fn gradient_errors(
    model: &elmo_train::BiLanguageModel,
    expected: &GradientsParams,
    mut scaled: GradientsParams,
    scale: f64,
    floor: f32,
) -> Vec<f32> {
    elmo_train::optimizer::scale_gradients(model, &mut scaled, 1.0 / scale);
    let mut compare = CompareGradients {
        expected,
        got: &scaled,
        floor,
        errors: Vec::new(),
    };
    model.visit(&mut compare);
    assert_eq!(compare.errors.len(), gradient_map(model, expected).len());
    compare
        .errors
        .into_iter()
        .enumerate()
        .map(|(index, error)| error.unwrap_or_else(|| panic!("parameter {index} lacks a gradient")))
        .collect()
}

/// The loss scale multiplies every gradient and nothing else: with a power of two, exactly (to
/// float rounding) on both paths (packed batches by hand, sentence batches through autodiff and
/// the token encoder by hand),
/// and the reported loss is the unscaled one.
#[test]
fn a_loss_scale_multiplies_every_gradient() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let device = Device::flex().autodiff();
    let model = seeded_model(&tiny_config(), &vocab, 1, &device);
    for mode in [BatchMode::Packed, BatchMode::Sentences] {
        let batch = first_batch(&corpus, &vocab, mode);
        let step = |loss_scale: f32| {
            let options = GradientOptions {
                loss_scale,
                ..GradientOptions::seeded(Some(5))
            };
            model.loss_and_gradients(&batch, None, SoftmaxMode::Full, &device, options)
        };
        let (plain, scaled) = (step(1.0), step(1024.0));
        assert_eq!(step_loss(&plain), step_loss(&scaled), "{mode:?}");
        let errors = gradient_errors(&model, &plain.grads, scaled.grads, 1024.0, 1e-3);
        assert!(errors.len() > 10);
        for (index, error) in errors.into_iter().enumerate() {
            assert!(error < 1e-6, "{mode:?} parameter {index}: {error}");
        }
    }
}

/// Mixed precision on wgpu (in CI: lavapipe, which computes in f16): the loss and every
/// gradient (the LSTM's, the softmax's and the token encoder's, each by hand)
/// within f16's rounding of the `f32` step's: the loss to 1e-4 relative, each gradient to 1% of
/// its largest value (measured on lavapipe: 1.5e-6 and 2.4e-6, 1.0e-3 at most), from a carried
/// state, full and sampled softmax, and the products really in 16 bits (not silently `f32`).
#[test]
fn mixed_precision_gradients_are_within_f16_rounding_on_wgpu() {
    let _one = autodiff_one_at_a_time();
    let Some(device) = elmo_test_support::wgpu_sixteen_bit_device_or_skip(
        "mixed_precision_gradients_are_within_f16_rounding_on_wgpu",
    ) else {
        return;
    };
    mixed_gradients_within_rounding(device, 4096.0, [1e-3, 0.01]);
}

/// The same on flex where the CPU has a unit for `bf16` products (AMX's tiles, AVX512-BF16):
/// every large product of the step and its host loops' per-step products in `bf16`, without a
/// loss scale (`bf16` keeps `f32`'s range). `bf16` keeps 8 bits where `f16` keeps 11, and the
/// tiny model's highway sums over ten tokens, where a `relu` that the rounding flips moves a
/// small gradient by a visible fraction; so each gradient is compared to its largest value or
/// 1e-2, whichever is larger, within 2% (measured on a Xeon with AMX: the loss within 1.7e-5,
/// the highway's transform weights 1.2e-2, every other parameter 6e-3 at most).
#[test]
fn mixed_precision_gradients_are_within_bf16_rounding_on_flex() {
    let _one = autodiff_one_at_a_time();
    if !elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Widest) {
        eprintln!("skipping: this CPU has no unit for bf16 products");
        return;
    }
    let device = Device::flex();
    assert!(!Precision::Mixed.scales_loss(&device));
    mixed_gradients_within_rounding(device, 1.0, [1e-2, 0.02]);
}

/// A mixed-precision step's loss within 1e-4 relative of the `f32` step's and every gradient
/// within `max_error` of its largest value (or `floor`, where that is larger), on `device`
/// with `loss_scale`, and not equal to them.
fn mixed_gradients_within_rounding(device: Device, loss_scale: f32, [floor, max_error]: [f32; 2]) {
    let PackedStep {
        _dir,
        vocab,
        device,
        model,
        batch,
    } = PackedStep::new(&tiny_config(), device);
    let mixed = model.clone().with_kernels(KernelSettings {
        precision: Precision::Mixed,
        ..KernelSettings::default()
    });
    let state = model
        .loss(&batch, None, SoftmaxMode::Full, None, &device)
        .state
        .map(CarriedState::detach);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    let candidates = SampledCandidates::draw(6, vocab.len(), &mut rng);
    let mut largest_error = 0.0f32;
    for mode in [SoftmaxMode::Full, SoftmaxMode::Sampled(&candidates)] {
        let step = |model: &elmo_train::BiLanguageModel, loss_scale: f32| {
            let options = GradientOptions {
                loss_scale,
                ..GradientOptions::seeded(Some(5))
            };
            model.loss_and_gradients(&batch, state.clone(), mode, &device, options)
        };
        let (exact, half) = (step(&model, 1.0), step(&mixed, loss_scale));
        let (exact_loss, half_loss) = (step_loss(&exact), step_loss(&half));
        let loss_error = (exact_loss - half_loss).abs() / exact_loss;
        assert!(loss_error < 1e-4, "{half_loss} vs {exact_loss} ({mode:?})");
        assert!(loss_error > 0.0, "the mixed step ran in f32 ({mode:?})");
        let scale = f64::from(loss_scale);
        let errors = gradient_errors(&model, &exact.grads, half.grads, scale, floor);
        for (index, error) in errors.into_iter().enumerate() {
            largest_error = largest_error.max(error);
            assert!(error < max_error, "parameter {index}: {error} ({mode:?})");
        }
    }
    assert!(largest_error > 1e-5, "the mixed gradients equal f32's");
}

/// The settings of a test's first optimizer step (seed 3) on `device`.
fn first_step<'a>(
    config: &'a TrainConfig,
    n_vocab: usize,
    device: &'a Device,
    loss_scale: Option<f64>,
) -> StepSettings<'a> {
    StepSettings {
        config,
        n_vocab,
        seed: 3,
        step: 0,
        lr_scale: 1.0,
        device,
        tower_devices: &[],
        loss_scale,
        profile: None,
    }
}

/// A step whose scaled gradients overflow is skipped: the weights stay as they were, the
/// carried state moves on, and the step says so (on a CPU in f32, and on wgpu in f16, where
/// the 16-bit products overflow first).
#[test]
fn an_overflowing_mixed_precision_step_is_skipped() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let config = tiny_config();
    for device in elmo_test_support::flex_and_wgpu("an_overflowing_mixed_precision_step_is_skipped")
    {
        let train_device = device.clone().autodiff();
        let kernels = KernelSettings {
            precision: Precision::Mixed,
            ..KernelSettings::default()
        };
        let model = seeded_model(&config, &vocab, 1, &train_device).with_kernels(kernels);
        let before = flat(&model);
        let mut optimizer = build_optimizer(&config.optimizer, kernels);
        let batch = first_batch(&corpus, &vocab, BatchMode::Packed);
        let mut state = None;
        let settings =
            |loss_scale: f64| first_step(&config, vocab.len(), &train_device, Some(loss_scale));
        let (model, losses) =
            optimizer_step(model, &mut optimizer, &batch, &mut state, settings(1e38)).unwrap();
        assert!(losses.skipped && losses.loss.is_finite(), "{losses:?}");
        assert_eq!(flat(&model), before, "{device:?}");
        assert!(state.is_some(), "the carried state moves on");
        // At a sane scale the same step is applied.
        let (model, losses) =
            optimizer_step(model, &mut optimizer, &batch, &mut None, settings(1024.0)).unwrap();
        assert!(
            !losses.skipped && losses.grad_norm.is_finite(),
            "{losses:?}"
        );
        assert_ne!(flat(&model), before, "{device:?}");
    }
}

/// A batch prepared ahead of its step ([`StepInput`]: its streams' distinct tokens and the
/// step's negatives) gives the step that the batch alone gives, the same losses and weights;
/// prepared for another step, it runs with the negatives of the step it runs at, where the
/// negatives of another step give other weights.
#[test]
fn a_batch_prepared_ahead_gives_the_step_of_the_batch_alone() {
    let _one = autodiff_one_at_a_time();
    let mut config = tiny_config();
    config.negatives = 4;
    let PackedStep {
        vocab,
        device,
        model,
        batch,
        ..
    } = PackedStep::new(&config, Device::flex());
    assert!(config.uses_sampled_softmax(vocab.len()));
    let kernels = KernelSettings::default();
    let settings = |step| StepSettings {
        step,
        ..first_step(&config, vocab.len(), &device, None)
    };
    let step_of = |input: Option<StepInput>, step| {
        let mut optimizer = build_optimizer(&config.optimizer, kernels);
        let model = model.clone();
        let (model, losses) = match input {
            Some(input) => optimizer_step_overlapping(
                model,
                &mut optimizer,
                &input,
                &mut None,
                settings(step),
                || {},
            ),
            None => optimizer_step(model, &mut optimizer, &batch, &mut None, settings(step)),
        }
        .unwrap();
        (flat(&model), losses.loss)
    };
    let prepared = |step| Some(StepInput::prepare(&batch, &config, vocab.len(), 3, step));
    // Weights compared whole, reported by their loss (the weights are too many to print).
    let same = |(a, loss_a): (Vec<Vec<f32>>, f64), (b, loss_b): (Vec<Vec<f32>>, f64)| {
        assert!(a == b && loss_a == loss_b, "losses {loss_a} and {loss_b}");
    };
    let alone = step_of(None, 0);
    assert!(alone.1.is_finite());
    same(step_of(prepared(0), 0), alone.clone());
    same(step_of(prepared(5), 0), alone.clone());
    assert!(step_of(None, 5).0 != alone.0, "another step, other weights");
    same(step_of(prepared(5), 5), step_of(None, 5));
}

/// A step reads its joint loss, the directions' NLLs and its gradients' global norm from the
/// device in one read, once its backward is queued: they are what separate reads of the same
/// step give (on flex, where the norm is summed on the host, and on wgpu, where the norm's
/// partial sums travel in that read beside the losses).
#[test]
fn a_step_reports_the_losses_and_norm_that_separate_reads_give() {
    let _one = autodiff_one_at_a_time();
    let mut config = tiny_config();
    config.dropout = 0.0;
    config.clip_norm = None;
    config.negatives = 1000;
    for device in elmo_test_support::flex_and_wgpu(
        "a_step_reports_the_losses_and_norm_that_separate_reads_give",
    ) {
        let packed = PackedStep::new(&config, device);
        let expected = packed.full_softmax_gradients();
        let PackedStep {
            vocab,
            device,
            model,
            batch,
            ..
        } = packed;
        let kernels = KernelSettings::default();
        let read = |t: &Tensor<1>| f64::from(t.clone().into_scalar::<f32>());
        let loss = &expected.step.loss;
        let [joint, forward, backward] =
            [&loss.loss, &loss.forward_nll, &loss.backward_nll].map(read);
        let norm = elmo_train::optimizer::global_norm(&model, &expected.grads, kernels);
        let mut optimizer = build_optimizer(&config.optimizer, kernels);
        let settings = first_step(&config, vocab.len(), &device, None);
        let mut meanwhile = 0;
        let input = StepInput::prepare(&batch, &config, vocab.len(), settings.seed, settings.step);
        let (_, losses) =
            optimizer_step_overlapping(model, &mut optimizer, &input, &mut None, settings, || {
                meanwhile += 1
            })
            .unwrap();
        assert_eq!(meanwhile, 1, "the host's work runs once a step");
        assert!(joint.is_finite() && norm > 0.0, "{joint} {norm}");
        assert_eq!(
            [
                losses.loss,
                losses.forward_nll,
                losses.backward_nll,
                losses.grad_norm
            ],
            [joint, forward, backward, norm],
            "{device:?}"
        );
    }
}

/// A step clips its gradients' global norm and updates as the host's clipping and Adagrad
/// step of the same gradients do: on wgpu the clip factor is decided on the device and the
/// update queued before the step's read (`elmo_kernels::device_gradient_scale`), on flex on
/// the host; a clip far below the norm, so that it applies.
#[test]
fn a_step_clips_as_the_hosts_clipping_and_update() {
    let _one = autodiff_one_at_a_time();
    let mut config = tiny_config();
    config.dropout = 0.0;
    config.clip_norm = Some(1e-3);
    config.negatives = 1000;
    for device in elmo_test_support::flex_and_wgpu("a_step_clips_as_the_hosts_clipping_and_update")
    {
        let packed = PackedStep::new(&config, device);
        let mut expected = packed.full_softmax_gradients();
        let PackedStep {
            vocab,
            device,
            model,
            batch,
            ..
        } = packed;
        let kernels = KernelSettings::default();
        let norm = elmo_train::optimizer::clip_global_norm(
            &model,
            &mut expected.grads,
            config.clip_norm,
            1.0,
            kernels,
        );
        assert!(norm > 10.0 * 1e-3, "the clip applies: {norm}");
        let lr = config.optimizer.lr() * config.lr_schedule.factor(0);
        let host = build_optimizer(&config.optimizer, kernels).step(
            lr,
            model.clone(),
            expected.grads,
            expected.softmax_rows,
        );
        let mut optimizer = build_optimizer(&config.optimizer, kernels);
        let settings = first_step(&config, vocab.len(), &device, None);
        let (stepped, losses) =
            optimizer_step(model.clone(), &mut optimizer, &batch, &mut None, settings).unwrap();
        assert!(!losses.skipped && (losses.grad_norm - norm).abs() < 1e-6 * norm);
        let (before, host, stepped) = (flat(&model), flat(&host), flat(&stepped));
        assert_ne!(host, before, "the update applies");
        for ((h, s), b) in host.iter().zip(&stepped).zip(&before) {
            let error = h
                .iter()
                .zip(s)
                .map(|(h, s)| (h - s).abs())
                .fold(0.0, f32::max);
            let moved = h
                .iter()
                .zip(b)
                .map(|(h, b)| (h - b).abs())
                .fold(0.0, f32::max);
            assert!(
                error <= 1e-3 * moved + 1e-7,
                "{error} of {moved} on {device:?}"
            );
        }
    }
}

/// Adagrad on the sampled softmax's row gradients (the rows a step touched, as bilm-tf's
/// `IndexedSlices`) is the update of the whole tables, bit for bit: three sampled steps from
/// one model, the softmax's gradients given as rows and as tables, leave the same parameters
/// (each step's update reads the accumulators the steps before left), with the host kernels
/// and with burn's operations; a step through `optimizer_step` takes the rows.
#[test]
fn adagrad_on_the_sampled_softmax_rows_is_the_whole_tables_update() {
    let _one = autodiff_one_at_a_time();
    let optimizer = OptimizerConfig::Adagrad {
        lr: 0.2,
        initial_accumulator: 0.1,
    };
    let packed = PackedStep::new(&tiny_config(), Device::flex());
    let n_vocab = packed.vocab.len();
    for kernels in [
        KernelSettings::default(),
        KernelSettings {
            host_recurrence: false,
            ..KernelSettings::default()
        },
    ] {
        let model = packed.model.clone().with_kernels(kernels);
        let run = |row_gradients: bool| {
            let mut adagrad = build_optimizer(&optimizer, kernels);
            assert!(adagrad.takes_row_gradients());
            let mut model = model.clone();
            for step in 0..3u64 {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(step);
                let candidates = SampledCandidates::draw(5, n_vocab, &mut rng);
                let options = GradientOptions {
                    row_gradients,
                    ..GradientOptions::seeded(Some(step))
                };
                let gradients = model.loss_and_gradients(
                    &packed.batch,
                    None,
                    SoftmaxMode::Sampled(&candidates),
                    &packed.device,
                    options,
                );
                let rows = gradients.softmax_rows;
                assert_eq!(rows.is_some(), row_gradients);
                if let Some(rows) = &rows {
                    assert!(rows.len() < n_vocab && rows.len() >= 5, "{rows:?}");
                }
                model = adagrad.step(0.2, model, gradients.grads, rows);
            }
            flat(&model)
        };
        let (by_rows, whole) = (run(true), run(false));
        assert_eq!(by_rows, whole, "{kernels:?}");
        assert_ne!(whole, flat(&model), "the steps move the model");
    }
    // `optimizer_step` asks for the rows with Adagrad, not with Adam (whose moments move a
    // row with a zero gradient), and on wgpu (whose Adagrad takes the clip factor decided on
    // the device) the softmax gives the whole tables: every step runs and moves the softmax.
    let mut config = tiny_config();
    config.negatives = 5;
    assert!(config.uses_sampled_softmax(n_vocab));
    for device in elmo_test_support::flex_and_wgpu(
        "adagrad_on_the_sampled_softmax_rows_is_the_whole_tables_update",
    ) {
        let packed = PackedStep::new(&config, device);
        for optimizer in [optimizer.clone(), OptimizerConfig::Adam { lr: 0.01 }] {
            config.optimizer = optimizer;
            let mut training = build_optimizer(&config.optimizer, KernelSettings::default());
            let settings = first_step(&config, n_vocab, &packed.device, None);
            let model = packed.model.clone();
            let (stepped, losses) = optimizer_step(
                model.clone(),
                &mut training,
                &packed.batch,
                &mut None,
                settings,
            )
            .unwrap();
            assert!(losses.loss.is_finite() && !losses.skipped);
            let weight = |m: &elmo_train::BiLanguageModel| m.softmax.weight.val().into_data();
            let on = &packed.device;
            let optimizer = &config.optimizer;
            assert_ne!(weight(&stepped), weight(&model), "{optimizer:?} on {on:?}");
        }
    }
}

/// A mixed-precision run on wgpu resumes exactly (its loss scale is in the checkpoint), its
/// metrics carry the loss scale, and resuming it in `f32` is refused.
#[test]
fn a_mixed_precision_run_resumes_exactly_on_wgpu() {
    let _one = autodiff_one_at_a_time();
    let Some(device) = elmo_test_support::wgpu_sixteen_bit_device_or_skip(
        "a_mixed_precision_run_resumes_exactly_on_wgpu",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let config = tiny_config();
    let mixed = |run: &Path, steps: u64| TrainOptions {
        kernels: KernelSettings {
            precision: Precision::Mixed,
            ..KernelSettings::default()
        },
        ..options(run, &corpus, steps)
    };
    let (straight, broken) = straight_and_resumed(
        (&config, &vocab, &device, dir.path()),
        (5, 4),
        mixed,
        |broken| {
            let mut in_f32 = options(broken, &corpus, 5);
            in_f32.resume = true;
            let err = train(&config, vocab.clone(), &in_f32, &device, &mut ())
                .unwrap_err()
                .to_string();
            assert!(err.contains("--precision"), "{err}");
        },
    );
    let records = train_losses(&straight);
    assert_eq!(records, train_losses(&broken));
    let scales: Vec<Option<f64>> = records
        .iter()
        .filter_map(|record| match record {
            MetricsRecord::Train { loss_scale, .. } => Some(*loss_scale),
            MetricsRecord::Valid { .. } => None,
        })
        .collect();
    let initial = elmo_train::loss_scale::INITIAL_LOSS_SCALE;
    assert_eq!(scales, vec![Some(initial); 5]);
}

/// Regression (found running `bench_train` at the `original` shape, 128 × 20, on lavapipe): a
/// batch whose LSTM gate record exceeds the largest buffer the device allocates failed an
/// allocation inside the first step and panicked reading the loss. It is refused when the run
/// opens, naming the settings to lower, with nothing written.
#[test]
fn a_batch_too_large_for_the_device_is_refused_before_anything_is_written() {
    let _one = autodiff_one_at_a_time();
    let Some(device) = elmo_test_support::wgpu_device_or_skip(
        "a_batch_too_large_for_the_device_is_refused_before_anything_is_written",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let mut config = tiny_config();
    let limit = elmo_kernels::largest_buffer_bytes(&device);
    // Both directions' gates, `4 · dim` f32 values per row and step.
    let per_row = 2 * config.unroll_steps * 4 * config.model.lstm.dim * 4;
    config.batch_size = limit / per_row + 1;
    let run = dir.path().join("run");
    let err = train(
        &config,
        vocab.clone(),
        &options(&run, &corpus, 2),
        &device,
        &mut (),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("gates") && err.contains("--batch-size"),
        "{err}"
    );
    assert!(!run.exists(), "a refused run wrote {}", run.display());
    // A step run without that check fails on the device: an error, not a panic.
    let train_device = device.autodiff();
    let model = seeded_model(&config, &vocab, 1, &train_device);
    let mut optimizer = build_optimizer(&config.optimizer, KernelSettings::default());
    let shape = BatchShape {
        n_rows: config.batch_size,
        n_steps: config.unroll_steps,
        mode: BatchMode::Packed,
        max_sentence_tokens: 50,
        n_mixed_shards: 1,
    };
    let batch = Batcher::new(vec![corpus], false, Arc::new(vocab.clone()), shape, Some(1))
        .next_batch()
        .unwrap()
        .unwrap();
    let settings = first_step(&config, vocab.len(), &train_device, None);
    let failed = optimizer_step(model, &mut optimizer, &batch, &mut None, settings);
    let Err(err) = failed else {
        panic!("a batch over the device's buffers ran")
    };
    assert!(err.to_string().contains("device failed"), "{err}");
}

/// The largest absolute difference between two models' weights ([`flat`]).
fn weight_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    (a.iter().zip(b).flat_map(|(a, b)| a.iter().zip(b)))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// bilm-tf's towers (`n_gpus`): two steps of two towers of 2 rows each are the steps of one
/// tower of the same 4 rows (the full softmax and no dropout, where the mean of the towers'
/// mean losses is the batch's mean loss: every row of a packed batch holds as many targets),
/// to float rounding: the losses, the gradient norm, the weights after the updates and the
/// carried state, whose rows come back in tower order. The towers run on the model's device
/// one after the other, or on a device each, the second on a thread of its own with a copy of
/// the model (flex and ndarray; two wgpu devices where an adapter opens).
#[test]
fn towers_step_as_one_tower_of_their_rows() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let mut one = tiny_config();
    one.batch_size = 4;
    one.dropout = 0.0;
    one.state_reset = 0.0;
    let two = TrainConfig {
        batch_size: 2,
        towers: 2,
        ..one.clone()
    };
    assert!(!one.uses_sampled_softmax(vocab.len()));
    assert_eq!(two.batch_shape().n_rows, 4);
    let mut batcher = Batcher::new(
        vec![corpus],
        false,
        Arc::new(vocab.clone()),
        one.batch_shape(),
        Some(1),
    );
    let batches: Vec<LmBatch> = (0..2)
        .map(|_| batcher.next_batch().unwrap().unwrap())
        .collect();
    #[allow(deprecated)]
    let ndarray = Device::ndarray();
    let mut cases = vec![
        (Device::flex(), vec![]),
        (Device::flex(), vec![Device::flex(), ndarray]),
    ];
    if let Some(wgpu) = elmo_test_support::wgpu_device_or_skip("towers_step_as_one_tower") {
        let second = Device::wgpu(burn::tensor::DeviceKind::Cpu);
        cases.push((wgpu.clone(), vec![wgpu, second]));
    }
    for (device, towers) in cases {
        let device = device.autodiff();
        let tower_devices: Vec<Device> = towers.into_iter().map(Device::autodiff).collect();
        let model = seeded_model(&one, &vocab, 1, &device);
        let run = |config: &TrainConfig, tower_devices: &[Device]| {
            let mut optimizer = build_optimizer(&config.optimizer, KernelSettings::default());
            let (mut model, mut state, mut losses) = (model.clone(), None, Vec::new());
            for (step, batch) in batches.iter().enumerate() {
                let settings = StepSettings {
                    step: step as u64,
                    tower_devices,
                    ..first_step(config, vocab.len(), &device, None)
                };
                let (next, out) =
                    optimizer_step(model, &mut optimizer, batch, &mut state, settings).unwrap();
                model = next;
                losses.push(out);
            }
            let state = state.expect("packed batches carry their state");
            let hidden = |s: &CarriedState| -> Vec<f32> {
                (s.forward.iter().chain(&s.backward))
                    .flat_map(|layer| layer.hidden.to_data().try_to_vec::<f32>().unwrap())
                    .collect()
            };
            (flat(&model), losses, hidden(&state))
        };
        let (weights, losses, state) = run(&one, &[]);
        let (tower_weights, tower_losses, tower_state) = run(&two, &tower_devices);
        let on = format!("on {device:?}, towers on {tower_devices:?}");
        for (a, b) in losses.iter().zip(&tower_losses) {
            assert!(a.loss.is_finite(), "{on}");
            assert!((a.loss - b.loss).abs() < 1e-5, "{on}: {a:?} {b:?}");
            assert!(
                (a.forward_nll - b.forward_nll).abs() < 1e-3,
                "{on}: {a:?} {b:?}"
            );
            assert!(
                (a.grad_norm - b.grad_norm).abs() < 1e-4 * a.grad_norm,
                "{on}"
            );
            assert_eq!(
                (a.n_forward, a.n_backward),
                (b.n_forward, b.n_backward),
                "{on}"
            );
        }
        let moved = weight_difference(&weights, &flat(&model));
        let apart = weight_difference(&weights, &tower_weights);
        assert!(
            moved > 1e-2 && apart < 1e-5,
            "{on}: moved {moved}, apart {apart}"
        );
        assert_eq!(state.len(), tower_state.len(), "{on}");
        let state_apart = (state.iter().zip(&tower_state))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(state_apart < 1e-5, "{on}: state {state_apart}");
    }
}

/// A run of two towers on two devices resumes exactly, with its carried state of both towers'
/// rows; a list of tower devices that is not one per tower is refused before anything is
/// written.
#[test]
fn a_run_of_towers_resumes_exactly() {
    let _one = autodiff_one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path());
    let vocab = vocab(&corpus);
    let mut config = tiny_config();
    config.towers = 2;
    #[allow(deprecated)]
    let devices = vec![Device::flex(), Device::ndarray()];
    let towers = |run: &Path, steps: u64| TrainOptions {
        tower_devices: devices.clone(),
        ..options(run, &corpus, steps)
    };
    let device = Device::flex();
    let (straight, broken) = straight_and_resumed(
        (&config, &vocab, &device, dir.path()),
        (5, 4),
        towers,
        |_| {},
    );
    assert_eq!(train_losses(&straight), train_losses(&broken));

    let refused = dir.path().join("refused");
    let three = TrainOptions {
        tower_devices: vec![Device::flex(); 3],
        ..options(&refused, &corpus, 2)
    };
    let error = train(&config, vocab, &three, &device, &mut ())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("3 tower devices for the config's 2 towers"),
        "{error}"
    );
    assert!(!refused.exists(), "nothing written");
}
