//! `BiLm::encode_tokens` (each distinct token encoded once, in chunks) gives exactly what the
//! char CNN gives position by position, also past one chunk of distinct tokens.

mod common;

use burn::tensor::Device;
use common::*;
use elmo_model::CharIdBatch;
use elmo_model::bilm::{ENCODER_CHUNK_TOKENS, char_ids_tensor};

#[test]
fn deduplicated_chunked_encoding_equals_direct_encoding() {
    let device = Device::flex();
    let bilm = tiny_bilm(&device);
    // More distinct tokens than one chunk, many repeated, rows of different lengths.
    let n_distinct = ENCODER_CHUNK_TOKENS + 77;
    let sentences: Vec<Vec<String>> = (0..40)
        .map(|row| {
            (0..(20 + row % 17))
                .map(|t| format!("w{}", (row * 37 + t * 11) % n_distinct))
                .collect()
        })
        .collect();
    let mut all: Vec<Vec<String>> = sentences.clone();
    all.push((0..n_distinct).map(|i| format!("w{i}")).collect());
    let batch = CharIdBatch::from_sentences(&all).with_sentence_boundaries();
    let direct = bilm.token_encoder.forward(char_ids_tensor(&batch, &device));
    let deduplicated = bilm.encode_tokens(&batch, &device);
    let mask = batch.mask();
    let (shape, a) = values3(&direct);
    let (_, b) = values3(&deduplicated);
    let width = shape[2];
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if mask[i / width] {
            assert!((x - y).abs() <= 1e-6, "position {}: {x} vs {y}", i / width);
        }
    }
}
