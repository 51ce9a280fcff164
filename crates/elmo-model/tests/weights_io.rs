//! Weight import/export: round trips, and clear errors for wrong, truncated or mismatched files.

mod common;

use burn::tensor::Device;
use common::*;
use elmo_model::export::{Datasets, bilm_datasets, export_bilm, write_datasets};
use elmo_model::options::BiLmOptions;
use elmo_model::weights::{WeightFile, load_bilm};
use elmo_model::{ElmoConfig, ElmoError};

fn tiny_datasets(device: &Device) -> Datasets {
    let bilm = tiny_bilm(device);
    bilm_datasets(&bilm).expect("datasets")
}

fn load_with(datasets: Datasets) -> Result<(), ElmoError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weights.hdf5");
    write_datasets(&path, datasets).expect("write");
    load_bilm(fixture("tiny/options.json"), &path, &Device::flex()).map(|_| ())
}

#[test]
fn export_reproduces_the_original_datasets() {
    let device = Device::flex();
    let exported = tiny_datasets(&device);
    let mut original = WeightFile::open(fixture("tiny/weights.hdf5")).expect("open");
    let names = original.unread();
    assert_eq!(
        names,
        exported.keys().cloned().collect::<Vec<_>>(),
        "same dataset names"
    );
    for (name, (shape, values)) in &exported {
        let expected = original.read(name, shape).expect("same shape");
        for (a, b) in values.iter().zip(&expected) {
            // Only the forget-gate bias goes through `+1 − 1`.
            assert!((a - b).abs() <= 1e-6, "{name}: {a} vs {b}");
        }
    }
    original.finish().expect("every dataset compared");
}

#[test]
fn exported_model_loads_and_gives_the_same_outputs() {
    let device = Device::flex();
    let bilm = tiny_bilm(&device);
    let options = BiLmOptions::from_file(fixture("tiny/options.json")).expect("options");
    let dir = tempfile::tempdir().expect("tempdir");
    export_bilm(&bilm, &options, dir.path()).expect("export");
    let reloaded = load_bilm(
        dir.path().join("options.json"),
        dir.path().join("weights.hdf5"),
        &device,
    )
    .expect("reload");
    let sentences = tiny_sentences("main");
    let a = bilm.forward_sentences(&sentences, &device);
    let b = reloaded.forward_sentences(&sentences, &device);
    for (x, y) in a.layers.iter().zip(&b.layers) {
        let worst = max_abs_diff3(x, y);
        assert!(worst <= 1e-6, "round trip changed outputs by {worst}");
    }
}

#[test]
fn missing_dataset_is_named() {
    let mut datasets = tiny_datasets(&Device::flex());
    datasets.remove("CNN_proj/b_proj");
    let err = load_with(datasets).expect_err("must fail");
    assert!(
        matches!(&err, ElmoError::MissingDataset { dataset, .. } if dataset == "CNN_proj/b_proj"),
        "{err}"
    );
    assert!(err.to_string().contains("CNN_proj/b_proj"));
}

#[test]
fn misshaped_dataset_is_named_with_both_shapes() {
    let mut datasets = tiny_datasets(&Device::flex());
    let name = "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0".to_string();
    datasets.insert(name.clone(), (vec![16, 32], vec![0.0; 512]));
    let err = load_with(datasets).expect_err("must fail");
    let text = err.to_string();
    assert!(
        text.contains(&name) && text.contains("[16, 32]") && text.contains("[32, 16]"),
        "{text}"
    );
}

#[test]
fn unused_dataset_is_an_error() {
    let mut datasets = tiny_datasets(&Device::flex());
    datasets.insert("CNN_high_2/W_carry".into(), (vec![28, 28], vec![0.0; 784]));
    let err = load_with(datasets).expect_err("must fail");
    assert!(
        matches!(&err, ElmoError::UnusedDatasets { datasets, .. } if datasets == &["CNN_high_2/W_carry".to_string()]),
        "{err}"
    );
}

#[test]
fn non_finite_weight_is_an_error() {
    let mut datasets = tiny_datasets(&Device::flex());
    datasets.get_mut("CNN/b_cnn_0").expect("exists").1[1] = f32::NAN;
    let err = load_with(datasets).expect_err("must fail");
    assert!(
        matches!(&err, ElmoError::NonFinite { dataset, .. } if dataset == "CNN/b_cnn_0"),
        "{err}"
    );
}

#[test]
fn truncated_and_foreign_files_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(fixture("tiny/weights.hdf5")).expect("read");
    for (name, content) in [
        ("truncated.hdf5", bytes[..bytes.len() / 2].to_vec()),
        ("text.hdf5", b"this is not HDF5\n".to_vec()),
        ("empty.hdf5", Vec::new()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, content).expect("write");
        let err = load_bilm(fixture("tiny/options.json"), &path, &Device::flex())
            .map(|_| ())
            .expect_err("must fail");
        assert!(err.to_string().contains(name), "{name}: {err}");
        assert_chain_says_each_thing_once(&err);
    }
    let missing = dir.path().join("nope.hdf5");
    let err = load_bilm(fixture("tiny/options.json"), &missing, &Device::flex())
        .map(|_| ())
        .expect_err("must fail");
    assert!(matches!(err, ElmoError::Io { .. }), "{err}");
    assert_chain_says_each_thing_once(&err);
}

/// The error keeps its cause as `source()` and does not repeat it in its own message, so the
/// chain the CLI prints (`{:#}`) says each thing once (a truncated file's "EOF" used to appear
/// three times).
fn assert_chain_says_each_thing_once(err: &ElmoError) {
    let source = std::error::Error::source(err).expect("the reader's error is kept as the source");
    let cause = source.to_string();
    assert!(!cause.is_empty());
    assert!(
        !err.to_string().contains(&cause),
        "`{err}` repeats its source `{cause}`"
    );
}

#[test]
fn bad_options_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("options.json");
    std::fs::write(&path, "{\"lstm\": {}}").expect("write");
    let err = BiLmOptions::from_file(&path).expect_err("must fail");
    assert!(
        matches!(err, ElmoError::Options { .. }) && err.to_string().contains("options.json"),
        "{err}"
    );
    let mut options = BiLmOptions::from_file(fixture("tiny/options.json")).expect("options");
    options.char_cnn.max_characters_per_token = 30;
    assert!(matches!(
        options.validate(),
        Err(ElmoError::InvalidOptions(_))
    ));
    // The same value read from a file: the error names the file and the field.
    std::fs::write(&path, serde_json::to_string(&options).expect("json")).expect("write");
    let err = BiLmOptions::from_file(&path).expect_err("must fail");
    assert_eq!(err.path(), Some(path.as_path()));
    assert!(
        matches!(err, ElmoError::InvalidOptionsFile { .. })
            && err.to_string().contains("options.json: ")
            && err.to_string().contains("max_characters_per_token"),
        "{err}"
    );
    // Options that disagree with the weights: a shape error naming the dataset.
    let mut options = BiLmOptions::from_file(fixture("tiny/options.json")).expect("options");
    options.lstm.dim = 64;
    let mut weights = WeightFile::open(fixture("tiny/weights.hdf5")).expect("open");
    let err = elmo_model::weights::load_bilm_from(&options, &mut weights, &Device::flex())
        .map(|_| ())
        .expect_err("must fail");
    assert!(matches!(err, ElmoError::ShapeMismatch { .. }), "{err}");
}

#[test]
fn burn_record_round_trip() {
    let device = Device::flex();
    let config = ElmoConfig {
        n_outputs: 2,
        do_layer_norm: true,
        ..ElmoConfig::default()
    };
    let elmo = config
        .from_pretrained(
            fixture("tiny/options.json"),
            fixture("tiny/weights.hdf5"),
            &device,
        )
        .expect("load");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("elmo.bpk");
    elmo.save_record(&path).expect("save");
    let options = BiLmOptions::from_file(fixture("tiny/options.json")).expect("options");
    let fresh = config.init(&options, &device).expect("ELMo");
    let restored = fresh.load_record(&path).expect("load record");
    let sentences = tiny_sentences("edge");
    let a = elmo.forward_sentences(&sentences, &device);
    let b = restored.forward_sentences(&sentences, &device);
    for (x, y) in a.representations.iter().zip(&b.representations) {
        assert_eq!(values3(x).1, values3(y).1);
    }
    let err = fresh_mismatch_load(&path, &device);
    assert!(err.to_string().contains("elmo.bpk"), "{err}");
}

fn fresh_mismatch_load(path: &std::path::Path, device: &Device) -> ElmoError {
    let mut options = BiLmOptions::from_file(fixture("tiny/options.json")).expect("options");
    options.lstm.dim = 8;
    ElmoConfig::default()
        .init(&options, device)
        .expect("ELMo")
        .load_record(path)
        .map(|_| ())
        .expect_err("shape mismatch must fail")
}

/// Regression (`cargo xtask fuzz`, weights cases 4477 and 5264): a weight file whose groups
/// reach themselves overflowed the stack while its datasets were listed (an abort that no
/// caller can catch); it is an error naming the file.
#[test]
fn a_weight_file_whose_groups_loop_is_an_error() {
    for name in [
        "weights-4477-group-cycle.hdf5",
        "weights-5264-group-cycle.hdf5",
    ] {
        let path = fixture(&format!("fuzz/{name}"));
        let error = match WeightFile::open(&path) {
            Err(error) => error,
            Ok(_) => panic!("{name}: a looping weight file was opened"),
        };
        let message = error.to_string();
        assert!(message.contains(name), "{message}");
        assert!(
            matches!(
                error,
                ElmoError::InvalidWeights { .. } | ElmoError::Hdf5 { .. }
            ),
            "{message}"
        );
    }
}
