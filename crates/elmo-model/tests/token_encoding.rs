//! `BiLm::encode_tokens` (each distinct token encoded once, in chunks) gives exactly what the
//! char CNN gives position by position, also past one chunk of distinct tokens; with a
//! `TokenEmbeddingCache` (tokens of earlier batches not encoded again) the biLM's outputs are
//! those without it, whether the cache holds every token or drops some.

mod common;

use std::num::NonZeroUsize;

use burn::tensor::Device;
use common::*;
use elmo_model::bilm::{ENCODER_CHUNK_TOKENS, char_ids_tensor};
use elmo_model::{CharIdBatch, ElmoConfig, TokenEmbeddingCache};

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

#[test]
fn cached_token_embeddings_leave_the_outputs_unchanged() {
    let device = Device::flex();
    let bilm = tiny_bilm(&device);
    let d = bilm.token_encoder.d_output();
    // Three batches over 60 words: later batches repeat words of earlier ones.
    let batches: Vec<CharIdBatch> = (0..3)
        .map(|b| {
            let sentences: Vec<Vec<String>> = (0..6)
                .map(|row| {
                    (0..(3 + (row + b) % 7))
                        .map(|t| format!("w{}", (b * 13 + row * 7 + t * 5) % 60))
                        .collect()
                })
                .collect();
            CharIdBatch::from_sentences(&sentences)
        })
        .collect();
    for capacity in [1000, 7] {
        let mut cache = TokenEmbeddingCache::new(NonZeroUsize::new(capacity).expect("cap"), d);
        for batch in batches.iter().chain(&batches) {
            let plain = bilm.forward_batch(batch, &device, None);
            let cached = bilm
                .forward_batch_cached(batch, &device, None, Some(&mut cache))
                .expect("cached forward");
            for (layer, (a, b)) in plain.layers.iter().zip(&cached.layers).enumerate() {
                let diff = max_abs_diff3(a, b);
                assert!(diff <= 1e-6, "capacity {capacity}, layer {layer}: {diff}");
            }
        }
        assert!(cache.len() <= capacity);
        assert!(cache.hits() > 0, "capacity {capacity}: no token was reused");
    }
    // The second pass over the batches finds every token in a cache that holds them all.
    let mut cache = TokenEmbeddingCache::new(NonZeroUsize::new(1000).expect("cap"), d);
    for batch in &batches {
        bilm.forward_batch_cached(batch, &device, None, Some(&mut cache))
            .expect("fill");
    }
    let misses = cache.misses();
    for batch in &batches {
        bilm.forward_batch_cached(batch, &device, None, Some(&mut cache))
            .expect("reuse");
    }
    assert_eq!(cache.misses(), misses);
    // ELMo's mixes over a cached pass equal those over a plain one.
    let elmo = ElmoConfig {
        dropout: 0.0,
        ..ElmoConfig::default()
    }
    .init_with(bilm.clone(), &device);
    let plain = elmo.forward_batch(&batches[2], &device, None);
    let cached = elmo
        .forward_batch_cached(&batches[2], &device, None, Some(&mut cache))
        .expect("cached elmo");
    let diff = max_abs_diff3(&plain.representations[0], &cached.representations[0]);
    assert!(diff <= 1e-6, "ELMo with the cache: {diff}");
    // A cache of another width is refused, not mixed in.
    let mut other = TokenEmbeddingCache::new(NonZeroUsize::new(10).expect("cap"), d + 1);
    assert!(
        bilm.forward_batch_cached(&batches[0], &device, None, Some(&mut other))
            .is_err()
    );
}
