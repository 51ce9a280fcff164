//! Task heads end to end on small configs: the cached biLM layers mixed equal ELMo's own output
//! (also for words taken from the token cache);
//! every trainable parameter of every head gets a gradient (fixed mixes none); the heads learn
//! small synthetic tasks; the best model saved in the task directory predicts the same after
//! loading.

use burn::optim::GradientsParams;
use burn::tensor::{Device, Tolerance};
use elmo_model::options::BiLmOptions;
use elmo_model::weights::{WeightFile, load_bilm_from};
use elmo_model::{BiLm, ElmoConfig};
use elmo_tasks::batch::{GoldIds, TaskBatch};
use elmo_tasks::elmo_mix::ElmoMixerConfig;
use elmo_tasks::encoder::{CharCnnSettings, ElmoSettings, SentenceEncoderConfig};
use elmo_tasks::index::Index;
use elmo_tasks::{
    BiLmFeatures, DataFormat, ElmoPlace, Example, MixKind, Target, TaskDirectory, TaskKind,
    TaskModelConfig, TaskSpec, TaskTrainOptions, evaluate, predict, train_task,
};
use elmo_test_support::nonzero_gradients;

fn fixture_bilm(device: &Device) -> BiLm {
    let dir = elmo_test_support::fixture("allennlp");
    let options = BiLmOptions::from_file(dir.join("options.json")).unwrap();
    let mut weights = WeightFile::open(dir.join("lm_weights.hdf5")).unwrap();
    let bilm = load_bilm_from(&options, &mut weights, device).unwrap();
    weights.finish().unwrap();
    bilm
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

fn features_of(bilm: &BiLm, examples: &[Example], device: &Device) -> BiLmFeatures {
    let mut features = BiLmFeatures::new(bilm, device).unwrap();
    features
        .add(examples.iter().flat_map(Example::sentences), || {})
        .unwrap();
    features
}

#[test]
fn cached_layers_mixed_equal_elmo_output() {
    let device = Device::flex();
    let bilm = fixture_bilm(&device);
    let sentences = [
        words("The cat sat on the mat ."),
        words("Dogs bark"),
        words("The dogs sat on a cat ."),
    ];
    let mut features = BiLmFeatures::new(&bilm, &device).unwrap();
    // Two calls: the second encodes its words from the token cache where the first saw them.
    features
        .add(sentences[..1].iter().map(Vec::as_slice), || {})
        .unwrap();
    features
        .add(sentences.iter().map(Vec::as_slice), || {})
        .unwrap();
    assert_eq!((features.len(), features.n_layers), (3, 3));
    let tokens = features.token_cache().expect("token cache");
    assert!(tokens.hits() >= 5, "{tokens:?}");
    let refs: Vec<&[String]> = sentences.iter().map(Vec::as_slice).collect();
    let layers = features.batch(&refs, &device).unwrap();
    // The same layers beyond a memory budget of 8 tokens' layers, in a temporary file: at
    // least one sentence in memory, the others read back from the file, all equal.
    let token_bytes = 4 * features.n_layers * features.d_layer;
    let dir = tempfile::tempdir().unwrap();
    let mut spilling = BiLmFeatures::new(&bilm, &device)
        .unwrap()
        .spilling(8 * token_bytes, dir.path());
    spilling.add(refs.iter().copied(), || {}).unwrap();
    let (in_file, folder) = spilling.spilled().expect("sentences beyond the budget");
    assert_eq!(folder, dir.path());
    assert!(spilling.n_bytes() > 0 && spilling.n_bytes() <= 8 * token_bytes);
    assert_eq!(spilling.n_bytes() + in_file as usize, 16 * token_bytes);
    assert_eq!(features.spilled(), None);
    let read_back = spilling.batch(&refs, &device).unwrap();
    for (a, b) in layers.iter().zip(&read_back) {
        a.clone()
            .into_data()
            .assert_eq(&b.clone().into_data(), true);
    }
    let elmo = ElmoConfig {
        n_outputs: 1,
        dropout: 0.0,
        do_layer_norm: false,
        keep_sentence_boundaries: false,
        scalar_mix_parameters: Some(vec![0.3, -0.2, 0.5]),
        bilm_requires_grad: false,
    }
    .init_with(bilm, &device)
    .expect("ELMo");
    let expected = elmo.forward_sentences(&sentences, &device);
    let reference = &elmo.scalar_mixes[0];
    let mixer = |layer_norm| {
        let mut mixer = ElmoMixerConfig {
            n_layers: 3,
            kind: MixKind::All,
            dropout: 0.0,
            layer_norm,
        }
        .init(&device);
        mixer.mix.weights = reference.weights.clone();
        mixer.mix.gamma = reference.gamma.clone();
        mixer
    };
    let mixed = mixer(false).forward(&layers, &expected.mask);
    mixed.clone().into_data().assert_approx_eq::<f32>(
        &expected.representations[0].clone().into_data(),
        Tolerance::absolute(1e-6),
    );
    // With layer norm (§3.2): each layer normalised over the batch's tokens before the mix, as
    // elmo-model's `ScalarMix` does (AllenNLP's `Elmo` counts the `<S>`/`</S>` positions too).
    let normed = mixer(true).forward(&layers, &expected.mask);
    let mut by_scalar_mix = reference.clone();
    by_scalar_mix.do_layer_norm = true;
    normed.clone().into_data().assert_approx_eq::<f32>(
        &by_scalar_mix.forward(&layers, &expected.mask).into_data(),
        Tolerance::absolute(1e-6),
    );
    let moved = (normed - mixed).abs().max().into_scalar::<f32>();
    assert!(moved > 1e-2, "layer norm changed the mix by {moved}");
}

fn tag_examples() -> Vec<Example> {
    // Tag: CAP for capitalised words, NUM for numbers, W otherwise.
    let texts = [
        "Alice met 3 friends in Paris",
        "the 2 dogs saw Bob",
        "Rome has 7 hills",
        "we ate 12 apples with Carol",
        "London and Berlin are cities",
        "9 cats chased 4 mice",
    ];
    texts
        .iter()
        .map(|t| {
            let tokens = words(t);
            let tags = tokens
                .iter()
                .map(|w| {
                    if w.chars().all(|c| c.is_ascii_digit()) {
                        "NUM"
                    } else if w.chars().next().is_some_and(char::is_uppercase) {
                        "CAP"
                    } else {
                        "W"
                    }
                    .to_string()
                })
                .collect();
            Example {
                tokens,
                second: None,
                target: Target::Tags(tags),
            }
        })
        .collect()
}

fn class_examples() -> Vec<Example> {
    [
        ("a good film", "pos"),
        ("good acting and a fine plot", "pos"),
        ("really good", "pos"),
        ("a bad film", "neg"),
        ("bad acting and a dull plot", "neg"),
        ("really bad", "neg"),
    ]
    .iter()
    .map(|(t, l)| Example {
        tokens: words(t),
        second: None,
        target: Target::Label((*l).into()),
    })
    .collect()
}

fn pair_examples() -> Vec<Example> {
    let sentences = ["a b c", "d e", "f g h i", "b a", "c c d", "e f g"];
    let mut examples = Vec::new();
    for (i, a) in sentences.iter().enumerate() {
        for (j, b) in sentences.iter().enumerate().take(4) {
            examples.push(Example {
                tokens: words(a),
                second: Some(words(b)),
                target: Target::Label(if i == j { "same" } else { "different" }.into()),
            });
        }
    }
    examples
}

/// A small character CNN.
fn small_chars() -> CharCnnSettings {
    CharCnnSettings {
        d_char: 4,
        filters: vec![[1, 4], [2, 4]],
        d_output: 6,
    }
}

fn spec_for(
    kind: TaskKind,
    examples: &[Example],
    elmo: Option<ElmoSettings>,
    chars: Option<CharCnnSettings>,
) -> TaskSpec {
    let words = Index::words(
        examples
            .iter()
            .flat_map(Example::sentences)
            .flatten()
            .map(String::as_str),
        1,
        1000,
    );
    let labels = Index::labels(
        examples
            .iter()
            .flat_map(Example::labels)
            .map(String::as_str),
    );
    TaskSpec {
        model: TaskModelConfig {
            kind,
            encoder: SentenceEncoderConfig {
                n_words: words.len(),
                d_word: 8,
                d_hidden: 8,
                dropout: 0.0,
                elmo,
                chars,
            },
            n_labels: labels.len(),
        },
        format: DataFormat {
            kind,
            text_column: "text".into(),
            label_column: "label".into(),
            header: true,
            tokenize: false,
            max_tokens: 100,
        },
        words,
        labels,
        elmo: None,
    }
}

fn all_tasks() -> [(TaskKind, Vec<Example>); 3] {
    [
        (TaskKind::Tag, tag_examples()),
        (TaskKind::Classify, class_examples()),
        (TaskKind::Pair, pair_examples()),
    ]
}

/// Every parameter of each head gets a gradient, ELMo's mixes at both places and the character
/// CNN included; the fixed `top` and single-layer mixes get none. (The biLM itself is not part of a task model: its layers come
/// from the cache as constants.)
#[test]
fn every_trainable_parameter_gets_a_gradient() {
    let device = Device::flex();
    let train_device = device.clone().autodiff();
    let bilm = fixture_bilm(&device);
    for (kind, examples) in all_tasks() {
        let features = features_of(&bilm, &examples, &device);
        for mix in [MixKind::All, MixKind::Top, MixKind::Layer(1)] {
            let settings = ElmoSettings {
                n_layers: features.n_layers,
                d_layer: features.d_layer,
                mix,
                place: ElmoPlace::Both,
                dropout: 0.5,
                layer_norm: mix == MixKind::Layer(1),
            };
            let spec = spec_for(kind, &examples, Some(settings), Some(small_chars()));
            // Drawn under seeded_init's lock, as train_task's draws in the other test are.
            let model =
                elmo_model::seeded_init(&train_device, 1, || spec.model.init(&train_device));
            let chosen: Vec<&Example> = examples.iter().collect();
            let batch = TaskBatch::new(
                &chosen,
                &spec.words,
                spec.uses_chars(),
                Some(&features),
                &train_device,
            )
            .unwrap();
            let gold = GoldIds::new(&chosen, &spec.labels).unwrap();
            let loss = model.loss(&batch, &gold, 0.1);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let found = nonzero_gradients(&model, &grads);
            assert!(found.iter().any(|(p, _)| p.contains("input_mix")));
            assert!(found.iter().any(|(p, _)| p.contains("chars.convolutions")));
            for (path, nonzero) in found {
                let fixed_mix = mix != MixKind::All && path.contains("_mix");
                assert_eq!(nonzero, !fixed_mix, "{kind:?} {mix:?}: {path}");
            }
        }
    }
}

/// Each head learns its small task; the best model reloaded from the task directory scores and
/// predicts exactly as the trained one did (the tagger with a character CNN).
#[test]
fn heads_learn_small_tasks_and_reload() {
    let device = Device::flex();
    let bilm = fixture_bilm(&device);
    for (kind, examples) in all_tasks() {
        let features = features_of(&bilm, &examples, &device);
        let settings = ElmoSettings {
            n_layers: features.n_layers,
            d_layer: features.d_layer,
            mix: MixKind::All,
            place: ElmoPlace::Input,
            dropout: 0.0,
            layer_norm: false,
        };
        let chars = (kind == TaskKind::Tag).then(small_chars);
        let spec = spec_for(kind, &examples, Some(settings), chars);
        let dir = tempfile::tempdir().unwrap();
        let task = TaskDirectory::new(dir.path().join("task"));
        let options = TaskTrainOptions {
            epochs: 80,
            patience: 80,
            batch_size: 4,
            lr: 0.02,
            lambda: 0.0,
            seed: 3,
            break_stale_lock: false,
        };
        let best = train_task(
            &spec,
            &examples,
            &examples,
            Some(&features),
            &options,
            &task,
            &device,
            &mut (),
        )
        .unwrap();
        assert_eq!(
            best.accuracy, 100.0,
            "{kind:?} learns its training set: {best:?}"
        );
        let loaded_spec = task.spec().unwrap();
        assert_eq!(loaded_spec, spec);
        let model = task.load_model(&loaded_spec, &device).unwrap();
        let scores = evaluate(&model, &loaded_spec, &examples, Some(&features), &device).unwrap();
        assert_eq!(scores.accuracy, best.accuracy, "{kind:?}");
        let predicted = predict(&model, &loaded_spec, &examples, Some(&features), &device).unwrap();
        let gold: Vec<Vec<String>> = examples.iter().map(|e| e.labels().to_vec()).collect();
        assert_eq!(predicted, gold, "{kind:?}");
        let lines = std::fs::read_to_string(task.metrics_file()).unwrap();
        assert!(lines.lines().count() >= best.epoch);
    }
}

/// Settings that burn's modules would panic on (a dropout of 1, no BiLSTM units, no input
/// features) or that cannot train (a negative or NaN learning rate or λ) are refused with the
/// setting named, before the task directory exists; a `task.json` edited to hold one is
/// refused with its path named.
#[test]
fn refused_settings_name_the_setting_and_write_nothing() {
    let device = Device::flex();
    let examples = tag_examples();
    let good = spec_for(TaskKind::Tag, &examples, None, None);
    let options = TaskTrainOptions {
        epochs: 1,
        patience: 1,
        batch_size: 4,
        lr: 0.01,
        lambda: 0.0,
        seed: 1,
        break_stale_lock: false,
    };
    let dir = tempfile::tempdir().unwrap();
    let task = TaskDirectory::new(dir.path().join("task"));
    let refused = |spec: &TaskSpec, options: &TaskTrainOptions, words: &[&str]| {
        let error = train_task(
            spec,
            &examples,
            &examples,
            None,
            options,
            &task,
            &device,
            &mut (),
        )
        .expect_err("refused")
        .to_string();
        for word in words {
            assert!(error.contains(word), "{error:?} does not name {word:?}");
        }
        assert!(
            !dir.path().join("task").exists(),
            "{error}: nothing written"
        );
    };
    let with = |edit: &dyn Fn(&mut SentenceEncoderConfig)| {
        let mut spec = good.clone();
        edit(&mut spec.model.encoder);
        spec
    };
    for dropout in [1.0, -0.5, f64::NAN] {
        let spec = with(&|e| e.dropout = dropout);
        refused(&spec, &options, &["encoder.dropout", &dropout.to_string()]);
    }
    let elmo = |dropout| ElmoSettings {
        n_layers: 3,
        d_layer: 8,
        mix: MixKind::All,
        place: ElmoPlace::Output,
        dropout,
        layer_norm: false,
    };
    refused(
        &with(&|e| e.elmo = Some(elmo(1.5))),
        &options,
        &["encoder.elmo.dropout", "1.5"],
    );
    refused(
        &with(&|e| {
            e.elmo = Some(ElmoSettings {
                mix: MixKind::Layer(3),
                ..elmo(0.5)
            })
        }),
        &options,
        &["encoder.elmo.mix", "layer 3", "0-2"],
    );
    refused(&with(&|e| e.d_hidden = 0), &options, &["d_hidden"]);
    // ELMo at the output only: the BiLSTM reads the word embedding alone.
    let no_input = with(&|e| {
        e.d_word = 0;
        e.elmo = Some(elmo(0.5));
    });
    refused(&no_input, &options, &["no input", "d_word"]);
    refused(
        &with(&|e| {
            e.chars = Some(CharCnnSettings {
                filters: vec![],
                ..small_chars()
            })
        }),
        &options,
        &["encoder.chars"],
    );
    for (lr, lambda, word) in [
        (-1.0, 0.0, "learning rate"),
        (f64::NAN, 0.0, "learning rate"),
        (0.01, -1.0, "lambda"),
        (0.01, f64::NAN, "lambda"),
    ] {
        refused(
            &good,
            &TaskTrainOptions {
                lr,
                lambda,
                ..options.clone()
            },
            &[word],
        );
    }

    // Trained with good settings, then `task.json` edited by hand.
    train_task(
        &good,
        &examples,
        &examples,
        None,
        &options,
        &task,
        &device,
        &mut (),
    )
    .unwrap();
    let text = std::fs::read_to_string(task.spec_file()).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["model"]["encoder"]["dropout"] = serde_json::json!(1.0);
    std::fs::write(task.spec_file(), json.to_string()).unwrap();
    let error = task.spec().expect_err("a dropout of 1").to_string();
    for word in ["task.json", "model.encoder.dropout"] {
        assert!(error.contains(word), "{error:?} does not name {word:?}");
    }
}
