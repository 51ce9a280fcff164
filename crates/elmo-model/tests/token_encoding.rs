//! `BiLm::encode_tokens` (each distinct token encoded once, in chunks; on a CubeCL device each
//! chunk completed to a multiple of `ENCODER_ROW_MULTIPLE` rows) gives exactly what the char CNN
//! gives position by position, also past one chunk of distinct tokens, and the same gradients;
//! with a `TokenEmbeddingCache` (tokens of earlier batches not encoded again) the biLM's outputs
//! are those without it, whether the cache holds every token or drops some; the training step's
//! pass outside autodiff (`BiLm::convolve_tokens`) records every chunk; a token alone
//! (`BiLm::token_embeddings`) is encoded as in a sentence.

mod common;

use std::num::NonZeroUsize;

use burn::tensor::{Device, Tensor, TensorData};
use common::*;
use elmo_model::bilm::{ENCODER_CHUNK_TOKENS, ENCODER_ROW_MULTIPLE, char_ids_tensor};
use elmo_model::{CharIdBatch, DistinctTokens, ElmoConfig, KernelSettings, TokenEmbeddingCache};
use elmo_test_support::{
    autodiff_one_at_a_time, flex_and_wgpu, scaled_difference, wgpu_device_or_skip,
};

/// The tiny biLM encoding chunks of [`ENCODER_CHUNK_TOKENS`] distinct tokens on every device
/// (on a CubeCL device 4,096 by default).
fn host_chunked_bilm(device: &Device) -> elmo_model::BiLm {
    tiny_bilm(device).with_kernels(KernelSettings {
        cube_encoder_chunk_tokens: ENCODER_CHUNK_TOKENS,
        ..KernelSettings::default()
    })
}

/// Sentences over `n_distinct` words `w0 …`, every word at least once, many repeated, rows of
/// different lengths, with sentence boundaries.
fn batch_of(n_sentences: usize, n_distinct: usize) -> CharIdBatch {
    let mut sentences: Vec<Vec<String>> = (0..n_sentences)
        .map(|row| {
            (0..(20 + row % 17))
                .map(|t| format!("w{}", (row * 37 + t * 11) % n_distinct))
                .collect()
        })
        .collect();
    sentences.push((0..n_distinct).map(|i| format!("w{i}")).collect());
    CharIdBatch::from_sentences(&sentences).with_sentence_boundaries()
}

#[test]
fn deduplicated_chunked_encoding_equals_direct_encoding() {
    for device in flex_and_wgpu("deduplicated_chunked_encoding_equals_direct_encoding") {
        let bilm = host_chunked_bilm(&device);
        // More distinct tokens than one chunk (and, on wgpu, a last chunk of 77 + 2 padded).
        let batch = batch_of(20, ENCODER_CHUNK_TOKENS + 77);
        let direct = bilm.token_encoder.forward(char_ids_tensor(&batch, &device));
        let deduplicated = bilm.encode_tokens(&batch, &device);
        let mask = batch.mask();
        let (shape, a) = values3(&direct);
        let (_, b) = values3(&deduplicated);
        let width = shape[2];
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if mask[i / width] {
                assert!(
                    (x - y).abs() <= 1e-6,
                    "{device:?}, position {}: {x} vs {y}",
                    i / width
                );
            }
        }
    }
}

/// `BiLm::convolve_tokens` (the training step's encoder up to its highways, outside autodiff)
/// places the convolutions that the char CNN gives position by position, and records every
/// chunk: the chunks follow each other over the distinct tokens' rows (more than one chunk here;
/// on wgpu completed to a multiple of `ENCODER_ROW_MULTIPLE` rows), and each convolution's
/// record of each piece holds that piece's rows and columns of the chunk's convolutions, which
/// its backward pass reads.
#[test]
fn convolved_tokens_record_every_chunk() {
    let _one = autodiff_one_at_a_time();
    for device in flex_and_wgpu("convolved_tokens_record_every_chunk") {
        let device = device.autodiff();
        let bilm = host_chunked_bilm(&device);
        let batch = batch_of(20, ENCODER_CHUNK_TOKENS + 77);
        let convolved = bilm.convolve_tokens(&DistinctTokens::of(&batch), &device);
        let direct = (bilm.token_encoder)
            .forward_stages(char_ids_tensor(&batch, &device))
            .convolutions
            .inner();
        let (shape, a) = values3(&direct);
        let (_, b) = values3(&convolved.place(convolved.convolutions.clone()));
        let mask = batch.mask();
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if mask[i / shape[2]] {
                assert!((x - y).abs() <= 1e-5, "{device:?}, value {i}: {x} vs {y}");
            }
        }
        let [n_distinct, n_filters] = convolved.convolutions.dims();
        assert_eq!(convolved.chunks.len(), 2, "{device:?}");
        let mut start = 0;
        for chunk in &convolved.chunks {
            assert_eq!(chunk.start, start);
            assert!(chunk.n_kept <= chunk.n_rows);
            start += chunk.n_kept;
            let mut columns = vec![0; chunk.n_rows];
            for record in &chunk.convolutions {
                assert_eq!(
                    record.output.dims(),
                    [record.rows.len(), record.columns.len()]
                );
                for row in record.rows.clone() {
                    assert_eq!(columns[row], record.columns.start, "{device:?}");
                    columns[row] = record.columns.end;
                }
                let kept = record.rows.start..record.rows.end.min(chunk.n_kept);
                if kept.is_empty() {
                    continue;
                }
                let rows = chunk.start + kept.start..chunk.start + kept.end;
                let placed = (convolved.convolutions.clone()).slice([rows, record.columns.clone()]);
                let recorded = (record.output.clone()).narrow(0, 0, kept.len());
                let difference: f32 = (placed - recorded).abs().max().into_scalar();
                assert_eq!(difference, 0.0, "{device:?}");
            }
            assert!(columns.iter().all(|&c| c == n_filters), "{device:?}");
        }
        assert_eq!(start, n_distinct);
        // With the default settings a CubeCL device encodes these tokens in one call (the
        // host in two), with the same convolutions.
        let default_chunks =
            tiny_bilm(&device).convolve_tokens(&DistinctTokens::of(&batch), &device);
        let on_gpu = elmo_kernels::on_cube_device(&convolved.convolutions);
        let expected = if on_gpu { 1 } else { 2 };
        assert_eq!(default_chunks.chunks.len(), expected, "{device:?}");
        let (_, c) = values3(&default_chunks.place(default_chunks.convolutions.clone()));
        for (i, (x, y)) in a.iter().zip(&c).enumerate() {
            if mask[i / shape[2]] {
                assert!((x - y).abs() <= 1e-5, "{device:?}, value {i}: {x} vs {y}");
            }
        }
    }
}

/// On wgpu, where the distinct tokens' chunk is completed with padding rows (57 distinct words
/// and the boundaries: 59 rows, 128 encoded), the token encoder's parameters get the gradients
/// that encoding every position directly gives them.
#[test]
fn padded_distinct_encoding_has_the_direct_gradients() {
    let _one = autodiff_one_at_a_time();
    let Some(wgpu) = wgpu_device_or_skip("padded_distinct_encoding_has_the_direct_gradients")
    else {
        return;
    };
    const { assert!(59 % ENCODER_ROW_MULTIPLE != 0) };
    let device = wgpu.autodiff();
    let bilm = tiny_bilm(&device);
    let batch = batch_of(6, 57);
    let d = bilm.token_encoder.d_output();
    // A fixed projection of the real positions (zero at the padded ones).
    let mask = batch.mask();
    let weights: Vec<f32> = (0..mask.len() * d)
        .map(|i| match mask[i / d] {
            true => ((i * 7919 % 1009) as f32 / 1009.0) - 0.5,
            false => 0.0,
        })
        .collect();
    let shape = [batch.n_sentences, batch.n_tokens, d];
    let weights = Tensor::<3>::from_data(TensorData::new(weights, shape), &device);
    let gradients = |encoded: Tensor<3>| -> Vec<Vec<f32>> {
        let grads = (encoded * weights.clone()).sum().backward();
        let encoder = &bilm.token_encoder;
        std::iter::once(encoder.char_embedding.val())
            .chain(encoder.convolutions.iter().map(|c| c.weight.val()))
            .chain(std::iter::once(encoder.projection.weight.val()))
            .map(|parameter| {
                let gradient = parameter.grad(&grads).expect("a gradient");
                gradient.into_data().try_into_vec_as::<f32>().expect("f32")
            })
            .collect()
    };
    let direct = gradients(bilm.token_encoder.forward(char_ids_tensor(&batch, &device)));
    let distinct = gradients(bilm.encode_tokens(&batch, &device));
    for (n, (a, b)) in direct.iter().zip(&distinct).enumerate() {
        let (worst, scale) = scaled_difference(a, b);
        assert!(
            worst <= 1e-4 * scale,
            "parameter {n}: {worst} (scale {scale})"
        );
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
    .init_with(bilm.clone(), &device)
    .expect("ELMo");
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

/// `token_embeddings` (a vocabulary's rows, as bilm-tf's `dump_token_embeddings`) equal the
/// token embeddings of the same tokens inside sentences, boundaries included, past one chunk.
#[test]
fn a_token_alone_is_encoded_as_in_a_sentence() {
    let device = Device::flex();
    let bilm = host_chunked_bilm(&device);
    let n_distinct = ENCODER_CHUNK_TOKENS + 5;
    let batch = batch_of(3, n_distinct);
    let in_sentences = bilm.encode_tokens(&batch, &device);
    let d = in_sentences.dims()[2];
    // The last sentence lists every word once: `<S> w0 … w{n - 1} </S>`.
    let words: Vec<String> = ["<S>".to_string(), "</S>".to_string()]
        .into_iter()
        .chain((0..n_distinct).map(|i| format!("w{i}")))
        .collect();
    let alone = bilm.token_embeddings(&words, &device);
    assert_eq!(alone.dims(), [words.len(), d]);
    let at = |t: usize| in_sentences.clone().slice([3..4, t..t + 1]).reshape([1, d]);
    let positions = [0, n_distinct + 1].into_iter().chain(1..=n_distinct);
    let expected = Tensor::cat(positions.map(at).collect(), 0);
    let difference = max_abs_diff3(&alone.unsqueeze(), &expected.unsqueeze());
    assert!(difference < 1e-5, "off by {difference}");
}
