//! End-to-end tests of `elmo tokens` (bilm-tf's `dump_token_embeddings`): rows against the
//! genuine AllenNLP token embeddings of the `tiny` fixture, the vocabulary's order, errors.

use elmo_test_support::read_npy;

use crate::common::{fails, fixture, ok, path};

/// The `embedding` dataset of an `elmo tokens` output: shape and values.
fn embedding(file: &std::path::Path) -> (Vec<u64>, Vec<f32>) {
    let file = hdf5_pure::File::open(file).expect("open hdf5");
    let names = file.root().datasets().expect("list");
    assert_eq!(names, ["embedding"]);
    let dataset = file.dataset("embedding").expect("embedding");
    (
        dataset.shape().expect("shape"),
        dataset.read_f32().expect("values"),
    )
}

/// Each row is the token's embedding alone, equal to AllenNLP's `token_embedding` of the same
/// token in a sentence (the encoder is context-free), `<S>` and `</S>` the boundary tokens; the
/// rows follow the vocabulary's ids, whatever the batch size.
#[test]
fn rows_are_allennlps_token_embeddings_in_vocabulary_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sentences: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("tiny/sentences.json")).expect("sentences"),
    )
    .expect("json");
    let main: Vec<Vec<String>> = serde_json::from_value(sentences["main"].clone()).expect("main");
    let reference = read_npy::<f32>(&fixture("tiny/main/token_embedding.npy"));
    let [_, n_positions, width] = reference.shape[..] else {
        panic!("token_embedding: {:?}", reference.shape)
    };
    let at = |s: usize, t: usize| &reference.data[(s * n_positions + t) * width..][..width];
    // (token, its reference row): every distinct token of the fixture, then `<S>` and `</S>`
    // as the first sentence's boundaries; the 1B Word Benchmark's order of the special tokens.
    let mut expected: Vec<(String, &[f32])> = Vec::new();
    for (s, sentence) in main.iter().enumerate() {
        for (t, token) in sentence.iter().enumerate() {
            if expected.iter().all(|(seen, _)| seen != token) {
                expected.push((token.clone(), at(s, t + 1)));
            }
        }
    }
    expected.insert(0, ("</S>".into(), at(0, main[0].len() + 1)));
    expected.insert(1, ("<S>".into(), at(0, 0)));
    let vocab = dir.path().join("vocab.txt");
    let mut text = String::new();
    for (i, (token, _)) in expected.iter().enumerate() {
        text.push_str(token);
        text.push('\n');
        if i == 1 {
            text.push_str("<UNK>\n");
        }
    }
    std::fs::write(&vocab, text + "!!!MAXTERMID\n").expect("write");
    let (options, weights) = (fixture("tiny/options.json"), fixture("tiny/weights.hdf5"));
    let model = ["--options", path(&options), "--weights", path(&weights)];
    let mut outputs = Vec::new();
    for batch in ["4096", "7"] {
        let output = dir.path().join(format!("tokens-{batch}.hdf5"));
        let mut args = vec!["tokens", "--quiet", "--batch-size", batch];
        args.extend(model);
        args.extend([path(&vocab), path(&output)]);
        ok(&args);
        outputs.push(embedding(&output));
    }
    assert_eq!(outputs[0], outputs[1], "rows depend on the batch size");
    let (shape, values) = &outputs[0];
    assert_eq!(shape, &[expected.len() as u64 + 1, width as u64]);
    let row = |id: usize| &values[id * width..][..width];
    for (i, (token, reference)) in expected.iter().enumerate() {
        // `<UNK>` is row 2.
        let id = if i < 2 { i } else { i + 1 };
        let worst = (row(id).iter().zip(*reference))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "{token:?} (row {id}): off by {worst}");
    }
}

/// Bad input is a clear error naming the file (and line), and no output is left.
#[test]
fn bad_vocabularies_and_outputs_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let vocab = dir.path().join("vocab.txt");
    let output = dir.path().join("tokens.hdf5");
    for (text, problem) in [
        ("<S>\n</S>\nthe\n", "but not `<UNK>`"),
        ("the\n\ncat\n", "vocab.txt:2:"),
        ("the\nthe\n", "duplicate token `the`"),
    ] {
        std::fs::write(&vocab, text).expect("write");
        let stderr = fails(&["tokens", path(&vocab), path(&output)]);
        assert!(
            stderr.contains(problem) && stderr.contains("vocab.txt"),
            "{stderr}"
        );
    }
    std::fs::write(&vocab, "the\n").expect("write");
    let stderr = fails(&["tokens", path(&vocab), path(&dir.path().join("tokens.txt"))]);
    assert!(stderr.contains("unsupported output format"), "{stderr}");
    let left: Vec<_> = (std::fs::read_dir(dir.path()).expect("list"))
        .map(|e| e.expect("entry").file_name())
        .filter(|name| name != "vocab.txt")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A vocabulary without the special tokens gets them as rows 0-2 (the embedded demo model).
    ok(&["tokens", "--quiet", path(&vocab), path(&output)]);
    assert_eq!(embedding(&output).0[0], 4);
}
