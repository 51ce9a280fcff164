//! The `Embedder` (what `elmo embed` and the task feature pass run) against the genuine AllenNLP
//! 2.10.1 outputs of `fixtures/tiny`: stateless vectors per sentence whatever the batching,
//! top / average from the same layers, their means over each sentence's tokens, and the stateful
//! sequence of calls; on the CPUs and on wgpu (the fused inference kernels).

mod common;

use burn::tensor::Device;
use common::*;
use elmo_model::{
    Embedder, EmbedderConfig, KernelSettings, LayerSelection, Pooling, SentenceVectors,
};

const TOL: f32 = 1e-5;

fn embedder(device: &Device, config: EmbedderConfig) -> Embedder {
    config.init(tiny_bilm(device), device).expect("embedder")
}

/// AllenNLP's layers of `batch` (boundaries removed), `[L + 1]` arrays `[B, T, 2P]`.
fn reference_layers(batch: &str) -> Vec<Array<f32>> {
    (0..3)
        .map(|i| npy(&format!("tiny/{batch}/layer{i}_no_bos_eos.npy")))
        .collect()
}

/// Row `row`'s first `n` positions of layer `layer` of a `[B, T, D]` reference.
fn reference_row(layers: &[Array<f32>], layer: usize, row: usize, n: usize) -> Vec<f32> {
    let array = &layers[layer];
    let (t, d) = (array.shape[1], array.shape[2]);
    array.data[row * t * d..row * t * d + n * d].to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn stateless_vectors_match_allennlp_whatever_the_batching() {
    for (name, device) in cpu_and_wgpu_devices("stateless_vectors_match_allennlp") {
        for batch in ["main", "edge"] {
            let sentences = tiny_sentences(batch);
            let reference = reference_layers(batch);
            // One call per batch as AllenNLP ran it, and batches of 3 rows under a position cap
            // that splits them further; and with buffers too small for the batch (one byte: a
            // token at a time through the char CNN, one step of input projection at a time, a
            // sentence per read-back; 4 KiB: pieces of several tokens, the step-by-step LSTM):
            // the same vectors, in input order.
            let small_buffers = |buffer_bytes, host_recurrence| KernelSettings {
                buffer_bytes,
                host_recurrence,
                ..KernelSettings::default()
            };
            for (batch_size, max_batch_positions, kernels) in [
                (64, 8192, KernelSettings::default()),
                (3, 40, KernelSettings::default()),
                (64, 8192, small_buffers(1, true)),
                (64, 8192, small_buffers(4096, false)),
            ] {
                let mut embedder = EmbedderConfig {
                    batch_size,
                    max_batch_positions,
                    ..EmbedderConfig::default()
                }
                .init(tiny_bilm(&device).with_kernels(kernels), &device)
                .expect("embedder");
                let d = embedder.d_output();
                let vectors = embedder.embed(&sentences).expect("embed");
                assert_eq!(vectors.len(), sentences.len());
                for (row, (sentence, v)) in sentences.iter().zip(&vectors).enumerate() {
                    let n = sentence.len();
                    assert_eq!(v.shape, [3, n, d], "{name}/{batch} row {row}");
                    for layer in 0..3 {
                        let got = &v.values[layer * n * d..(layer + 1) * n * d];
                        let diff = max_diff(got, &reference_row(&reference, layer, row, n));
                        assert!(
                            diff <= TOL,
                            "{name}/{batch} batch {batch_size} buffers {} row {row} layer {layer}: \
                             {diff}",
                            kernels.buffer_bytes
                        );
                    }
                }
            }
        }
    }
}

/// Top and average (gathered on the device, the average computed there) against all layers;
/// the views `embed_each_view` hands out against the vectors `embed` returns.
#[test]
fn top_and_average_are_cut_from_all_layers() {
    for (name, device) in cpu_and_wgpu_devices("top_and_average_are_cut_from_all_layers") {
        let sentences = tiny_sentences("main");
        let config = |layers| EmbedderConfig {
            layers,
            ..EmbedderConfig::default()
        };
        let run = |layers| {
            embedder(&device, config(layers))
                .embed(&sentences)
                .expect("embed")
        };
        let (all, top, average) = (
            run(LayerSelection::All),
            run(LayerSelection::Top),
            run(LayerSelection::Average),
        );
        for ((a, t), m) in all.iter().zip(&top).zip(&average) {
            let [n_layers, n, d] = a.shape[..] else {
                panic!("{name}: all layers: {:?}", a.shape)
            };
            assert_eq!(
                (t.shape.as_slice(), m.shape.as_slice()),
                (&[n, d][..], &[n, d][..]),
                "{name}"
            );
            let layer = |l: usize| &a.values[l * n * d..(l + 1) * n * d];
            assert_eq!(t.values, layer(n_layers - 1), "{name}");
            let mean: Vec<f32> = (0..n * d)
                .map(|i| (0..n_layers).map(|l| layer(l)[i]).sum::<f32>() / n_layers as f32)
                .collect();
            assert!(max_diff(&m.values, &mean) <= 1e-6, "{name}");
        }
        for (layers, owned) in [
            (LayerSelection::All, &all),
            (LayerSelection::Top, &top),
            (LayerSelection::Average, &average),
        ] {
            let mut viewed: Vec<Option<SentenceVectors>> = vec![None; sentences.len()];
            embedder(&device, config(layers))
                .embed_each_view(&sentences, |i, view| {
                    assert_eq!(view.values().len(), view.shape().iter().product::<usize>());
                    viewed[i] = Some(view.to_vectors());
                    Ok::<_, elmo_model::ElmoError>(())
                })
                .expect("embed_each_view");
            let viewed: Vec<SentenceVectors> = viewed.into_iter().flatten().collect();
            assert_eq!(&viewed, owned, "{name}: {layers:?}");
        }
    }
}

/// `Pooling::Mean`: each selected layer's mean over the sentence's tokens, against the mean of
/// AllenNLP's layers (zeros for the empty sentence of `edge`), stateless and stateful (the
/// mean of the same run's token vectors).
#[test]
fn the_mean_pools_each_layers_tokens() {
    for (name, device) in cpu_and_wgpu_devices("the_mean_pools_each_layers_tokens") {
        for batch in ["main", "edge"] {
            let sentences = tiny_sentences(batch);
            let reference = reference_layers(batch);
            let d = reference[0].shape[2];
            let mean_of = |tokens: &[f32]| -> Vec<f32> {
                let n = tokens.len() / d;
                (0..d)
                    .map(|j| (0..n).map(|t| tokens[t * d + j]).sum::<f32>() / n.max(1) as f32)
                    .collect()
            };
            let run = |layers, pooling, stateful| {
                let config = EmbedderConfig {
                    layers,
                    pooling,
                    stateful,
                    ..EmbedderConfig::default()
                };
                embedder(&device, config).embed(&sentences).expect("embed")
            };
            let (all, top, average) = (
                run(LayerSelection::All, Pooling::Mean, false),
                run(LayerSelection::Top, Pooling::Mean, false),
                run(LayerSelection::Average, Pooling::Mean, false),
            );
            for (row, sentence) in sentences.iter().enumerate() {
                let n = sentence.len();
                let layer_means: Vec<Vec<f32>> = (0..3)
                    .map(|l| mean_of(&reference_row(&reference, l, row, n)))
                    .collect();
                assert_eq!(all[row].shape, [3, d], "{name}: {batch} {row}");
                assert!(max_diff(&all[row].values, &layer_means.concat()) <= TOL);
                assert_eq!(top[row].shape, [d], "{name}: {batch} {row}");
                assert!(max_diff(&top[row].values, &layer_means[2]) <= TOL);
                let average_mean: Vec<f32> = (0..d)
                    .map(|j| layer_means.iter().map(|m| m[j]).sum::<f32>() / 3.0)
                    .collect();
                assert!(max_diff(&average[row].values, &average_mean) <= TOL);
                if n == 0 {
                    assert!(all[row].values.iter().all(|&v| v == 0.0), "{name}: {batch}");
                }
            }
            let tokens = run(LayerSelection::All, Pooling::Tokens, true);
            let pooled = run(LayerSelection::All, Pooling::Mean, true);
            for (t, p) in tokens.iter().zip(&pooled) {
                let n = t.shape[1];
                let means: Vec<f32> = (0..3)
                    .flat_map(|l| mean_of(&t.values[l * n * d..(l + 1) * n * d]))
                    .collect();
                assert_eq!(p.shape, [3, d]);
                assert!(
                    max_diff(&p.values, &means) <= 1e-6,
                    "{name}: {batch} stateful"
                );
            }
        }
    }
}

#[test]
fn empty_sentences_have_no_rows_and_keep_their_place() {
    let device = Device::flex();
    for stateful in [false, true] {
        let config = EmbedderConfig {
            stateful,
            batch_size: 2,
            ..EmbedderConfig::default()
        };
        let mut embedder = embedder(&device, config);
        let d = embedder.d_output();
        // Stateful batches of 2 rows: [], [a, cat] then [], [] (a batch without tokens).
        let sentences: Vec<Vec<&str>> = vec![vec![], vec!["a", "cat"], vec![], vec![]];
        let vectors = embedder.embed(&sentences).expect("embed");
        let shapes: Vec<&[usize]> = vectors.iter().map(|v| v.shape.as_slice()).collect();
        assert_eq!(
            shapes,
            [
                &[3, 0, d][..],
                &[3, 2, d][..],
                &[3, 0, d][..],
                &[3, 0, d][..]
            ],
            "stateful: {stateful}"
        );
        assert!([0, 2, 3].iter().all(|&i| vectors[i].values.is_empty()));
        assert_eq!(vectors[1].values.len(), 3 * 2 * d);
    }
}

#[test]
fn stateful_calls_match_allennlps_sequence() {
    for (name, device) in cpu_and_wgpu_devices("stateful_calls_match_allennlps_sequence") {
        let mut embedder = embedder(
            &device,
            EmbedderConfig {
                stateful: true,
                batch_size: 8,
                ..EmbedderConfig::default()
            },
        );
        let d = embedder.d_output();
        // The fixture's calls: main (8 rows), edge (4), main_first3 (3), main again, with the
        // LSTM state carried row by row (call 3's float32 reference is 1.4e-5 from float64).
        for (call, batch) in ["main", "edge", "main_first3", "main"]
            .into_iter()
            .enumerate()
        {
            let sentences = tiny_sentences(batch);
            let vectors: Vec<SentenceVectors> = embedder.embed(&sentences).expect("embed");
            let tolerance = if call < 3 { TOL } else { 3e-5 };
            for layer in 0..3 {
                // `call{k}_layer{i}` keeps the boundaries: `[B, T + 2, 2P]`.
                let reference: Array<f32> =
                    npy(&format!("tiny/stateful/call{call}_layer{layer}.npy"));
                let (t, _) = (reference.shape[1], reference.shape[2]);
                for (row, (sentence, v)) in sentences.iter().zip(&vectors).enumerate() {
                    let n = sentence.len();
                    let start = (row * t + 1) * d;
                    let expected = &reference.data[start..start + n * d];
                    let got = &v.values[layer * n * d..(layer + 1) * n * d];
                    let diff = max_diff(got, expected);
                    assert!(
                        diff <= tolerance,
                        "{name}: call {call} row {row} layer {layer}: {diff}"
                    );
                }
            }
        }
        embedder.reset_state();
    }
}

/// Stateful, several batches in one call (one batch in flight while the next is launched)
/// give what the same batches give one call at a time: the state passes in input order.
#[test]
fn stateful_batches_in_one_call_equal_one_call_each() {
    for (name, device) in cpu_and_wgpu_devices("stateful_batches_in_one_call") {
        let config = EmbedderConfig {
            stateful: true,
            batch_size: 4,
            ..EmbedderConfig::default()
        };
        let sentences: Vec<Vec<String>> = [tiny_sentences("main"), tiny_sentences("edge")].concat();
        let together = embedder(&device, config.clone())
            .embed(&sentences)
            .expect("embed");
        let mut apart = embedder(&device, config);
        let one_by_one: Vec<SentenceVectors> = sentences
            .chunks(4)
            .flat_map(|batch| apart.embed(batch).expect("embed"))
            .collect();
        assert_eq!(together.len(), one_by_one.len());
        for (row, (a, b)) in together.iter().zip(&one_by_one).enumerate() {
            assert_eq!(a.shape, b.shape, "{name} row {row}");
            assert!(
                max_diff(&a.values, &b.values) <= 1e-6,
                "{name} row {row}: {}",
                max_diff(&a.values, &b.values)
            );
        }
    }
}

/// Regression: stateful, a batch of one empty sentence ran the biLM over `<S> </S>` and moved
/// the carried state. AllenNLP's `ElmoEmbedder.embed_batch` answers `[[]]` without running it
/// (so `embed_sentence([])` leaves the state as it was); a batch of two empty sentences runs.
#[test]
fn a_batch_of_one_empty_sentence_leaves_the_state() {
    let device = Device::flex();
    let config = EmbedderConfig {
        stateful: true,
        ..EmbedderConfig::default()
    };
    let sentences = tiny_sentences("main");
    let (first, second) = (&sentences[..2], &sentences[2..4]);
    let empty: Vec<Vec<String>> = vec![Vec::new()];
    let mut without = embedder(&device, config.clone());
    without.embed(first).expect("embed");
    let expected = without.embed(second).expect("embed");
    for (between, moves) in [
        (empty.clone(), false),
        ([empty.clone(), empty].concat(), true),
    ] {
        let mut with = embedder(&device, config.clone());
        with.embed(first).expect("embed");
        let answered = with.embed(&between).expect("embed");
        assert!(answered.iter().all(|v| v.shape == [3, 0, 32]));
        let got = with.embed(second).expect("embed");
        let moved = got.iter().zip(&expected).any(|(g, e)| g.values != e.values);
        assert_eq!(moved, moves, "{} empty sentences between", between.len());
    }
}

#[test]
fn a_zero_batch_size_is_an_error() {
    let device = Device::flex();
    let config = EmbedderConfig {
        batch_size: 0,
        ..EmbedderConfig::default()
    };
    let error = config.init(tiny_bilm(&device), &device).unwrap_err();
    assert!(error.to_string().contains("batch size"), "{error}");
}

/// A stateful run's state handed to another embedder of the same biLM (`take_state`,
/// `set_state`) goes on as the first would, whatever the second's layer selection; a state of
/// another shape is refused and leaves the carried state as it was.
#[test]
fn a_carried_state_moves_between_embedders() {
    let device = Device::flex();
    let config = EmbedderConfig {
        stateful: true,
        batch_size: 8,
        ..EmbedderConfig::default()
    };
    let (main, edge) = (tiny_sentences("main"), tiny_sentences("edge"));
    let mut first = embedder(&device, config.clone());
    first.embed(&main).expect("embed");
    let mut continued = embedder(&device, config.clone());
    continued.embed(&main).expect("embed");
    let want = continued.embed(&edge).expect("embed");

    let mut second = embedder(
        &device,
        EmbedderConfig {
            layers: LayerSelection::Top,
            ..config
        },
    );
    let state = first.take_state().expect("a state after a stateful batch");
    assert!(first.take_state().is_none(), "taken out, not copied");

    let mut fewer = state.clone();
    fewer.layers.pop();
    let error = second.set_state(Some(fewer)).unwrap_err();
    assert!(
        error.to_string().contains("1 LSTM layers for a biLM of 2"),
        "{error}"
    );
    let mut swapped = state.clone();
    let forward = &mut swapped.layers[1].forward;
    std::mem::swap(&mut forward.hidden, &mut forward.memory);
    let error = second.set_state(Some(swapped)).unwrap_err();
    assert!(
        error.to_string().contains("forward state of LSTM layer 1"),
        "{error}"
    );
    assert!(
        second.take_state().is_none(),
        "a refused state is not carried"
    );

    second.set_state(Some(state)).expect("the biLM's own state");
    let got = second.embed(&edge).expect("embed");
    let d = second.d_output();
    for (row, (top, all)) in got.iter().zip(&want).enumerate() {
        let n = top.shape[0];
        let diff = max_diff(&top.values, &all.values[2 * n * d..3 * n * d]);
        assert!(diff <= 1e-6, "row {row}: {diff}");
    }
}
