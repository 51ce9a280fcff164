//! Parity with the original TensorFlow bilm-tf outputs shipped as AllenNLP's test fixture
//! (`fixtures/allennlp`): 10 batches of 3 sentences through ONE stateful model, in order, top
//! layer without boundaries within 1e-5 (AllenNLP itself reproduces them to 1.2e-6).

mod common;

use common::*;
use elmo_model::elmo::remove_sentence_boundaries;
use elmo_model::weights::load_bilm;
use elmo_model::{BiLmState, CharIdBatch};

const TOL: f32 = 1e-5;

fn expected_top_layer(k: usize, i: usize) -> (usize, Vec<f32>) {
    let file = hdf5_pure::File::open(fixture(&format!("allennlp/lm_embeddings_{k}.hdf5")))
        .expect("embeddings file");
    let ds = file.dataset(&i.to_string()).expect("dataset");
    let shape: Vec<usize> = ds
        .shape()
        .expect("shape")
        .into_iter()
        .map(|d| d as usize)
        .collect();
    let values = ds.read_f32().expect("values");
    let (n_tokens, d) = (shape[1], shape[2]);
    // (2, T, P) -> (T, 2P): forward then backward.
    let mut out = Vec::with_capacity(n_tokens * 2 * d);
    for t in 0..n_tokens {
        out.extend_from_slice(&values[t * d..(t + 1) * d]);
        out.extend_from_slice(&values[(n_tokens + t) * d..(n_tokens + t + 1) * d]);
    }
    (n_tokens, out)
}

#[test]
#[allow(
    clippy::needless_range_loop,
    reason = "i and k are the fixture's batch and file indices"
)]
fn ten_stateful_batches_reproduce_bilm_tf() {
    // As `elmo embed` runs on flex (parity_tiny.rs covers gemm's default setting).
    elmo_model::cpu_matmul::pack_small_batch_weights();
    let sentences: Vec<Vec<String>> = serde_json::from_str(
        &std::fs::read_to_string(fixture("allennlp/sentences.json")).expect("sentences"),
    )
    .expect("json");
    for (name, device) in cpu_devices() {
        let bilm = load_bilm(
            fixture("allennlp/options.json"),
            fixture("allennlp/lm_weights.hdf5"),
            &device,
        )
        .expect("load");
        let mut state: Option<BiLmState> = None;
        let mut worst = 0.0f32;
        for i in 0..10 {
            let batch: Vec<Vec<String>> = (0..3)
                .map(|k| {
                    sentences[k][i]
                        .split_whitespace()
                        .map(str::to_string)
                        .collect()
                })
                .collect();
            let out = bilm.forward_batch(
                &CharIdBatch::from_sentences(&batch),
                &device,
                Some(&mut state),
            );
            let (top, lengths) = remove_sentence_boundaries(out.layers[2].clone(), &out.lengths);
            let (shape, values) = values3(&top);
            let width = shape[2];
            for k in 0..3 {
                let (n_tokens, expected) = expected_top_layer(k, i);
                assert_eq!(lengths[k], n_tokens, "{name}: batch {i} row {k} length");
                let start = k * shape[1] * width;
                for (j, (g, e)) in values[start..start + n_tokens * width]
                    .iter()
                    .zip(&expected)
                    .enumerate()
                {
                    let diff = (g - e).abs();
                    assert!(
                        diff <= TOL,
                        "{name}: batch {i} row {k} element {j}: {g} vs {e}"
                    );
                    worst = worst.max(diff);
                }
            }
        }
        eprintln!("{name}: max |diff| vs bilm-tf = {worst:e}");
    }
}
