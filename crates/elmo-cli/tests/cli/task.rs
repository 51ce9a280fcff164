//! End-to-end tests of `elmo task train|eval|predict` (the real binary) on tiny data with the
//! embedded demo biLM and without ELMo: eval's exact output line (`accuracy X span-f1 Y`),
//! predictions in the input's layout, and clear errors naming file and line.

use std::path::Path;

use crate::common::{fails, ok, path};

const NER: &str = "# a comment line\nAlice\tB-PER\nmet\tO\nBob\tB-PER\nSmith\tI-PER\n\n\
                   Paris\tB-LOC\nis\tO\nbig\tO\n\nwe\tO\nsaw\tO\nRome\tB-LOC\n";

/// `elmo task eval` or `elmo task predict` of the task directory `model` on `data`.
fn on_data(command: &str, model: &Path, data: &Path) -> String {
    ok(&[
        "task",
        command,
        "--quiet",
        "--model",
        path(model),
        "--data",
        path(data),
    ])
}

/// The arguments of `elmo task train --quiet --task TASK` on `train` and `dev` into `out`,
/// then `extra`.
fn train_args<'a>(
    task: &'a str,
    [train, dev, out]: [&'a Path; 3],
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "task",
        "train",
        "--quiet",
        "--task",
        task,
        "--train",
        path(train),
        "--dev",
        path(dev),
        "--out",
        path(out),
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn tag_train_eval_predict_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let data = d.join("ner.conll");
    std::fs::write(&data, NER).expect("write data");
    let out = d.join("ner-task");
    let train = |extra: &[&str]| {
        let small = ["--epochs", "2", "--d-word", "8", "--d-hidden", "8"];
        let mut args = train_args("tag", [&data, &data, &out], &small);
        args.extend_from_slice(extra);
        ok(&args)
    };
    let report = train(&["--mix", "top", "--elmo-at", "both", "--layer-norm"]);
    assert!(report.starts_with("best epoch "), "{report}");
    let spec = std::fs::read_to_string(out.join("task.json")).expect("task.json");
    assert!(spec.contains("\"layer_norm\": true"), "{spec}");
    let line = on_data("eval", &out, &data);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{line}");
    assert_eq!((words[0], words[2]), ("accuracy", "span-f1"), "{line}");
    for value in [words[1], words[3]] {
        let v: f64 = value.parse().expect("a number");
        assert!((0.0..=100.0).contains(&v), "{line}");
    }
    let predicted = on_data("predict", &out, &data);
    // `--out` writes the same text to a file (whole, through a rename).
    let file = d.join("predicted.conll");
    let printed = ok(&[
        "task",
        "predict",
        "--quiet",
        "--model",
        path(&out),
        "--data",
        path(&data),
        "--out",
        path(&file),
    ]);
    assert_eq!(printed, "");
    assert_eq!(
        std::fs::read_to_string(&file).expect("predictions"),
        predicted
    );
    let tokens: Vec<&str> = predicted
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').next().unwrap_or(""))
        .collect();
    assert_eq!(
        tokens,
        [
            "Alice", "met", "Bob", "Smith", "Paris", "is", "big", "we", "saw", "Rome"
        ]
    );

    // One biLM layer alone (the paper's probes, §5.3): kept in task.json; a layer the biLM
    // does not have is refused by name.
    train(&["--mix", "1"]);
    let spec = std::fs::read_to_string(out.join("task.json")).expect("task.json");
    assert!(
        spec.contains("\"mix\": {\n") && spec.contains("\"layer\": 1"),
        "{spec}"
    );
    assert!(on_data("eval", &out, &data).starts_with("accuracy "));
    let error = fails(&train_args(
        "tag",
        [&data, &data, &d.join("y")],
        &["--mix", "3"],
    ));
    assert!(
        error.contains("encoder.elmo.mix is layer 3") && error.contains("0-2"),
        "{error}"
    );

    // The baseline writes a task without ELMo.
    let base = d.join("base");
    ok(&train_args(
        "tag",
        [&data, &data, &base],
        &["--epochs", "1", "--no-elmo", "--char-cnn"],
    ));
    let spec = std::fs::read_to_string(base.join("task.json")).expect("task.json");
    assert!(spec.contains("\"elmo\": null"), "{spec}");
    assert!(spec.contains("\"chars\": {"), "{spec}");
    let line = on_data("eval", &base, &data);
    assert!(line.contains("span-f1"), "{line}");

    // Errors name the file and line.
    let bad = d.join("bad.conll");
    std::fs::write(&bad, "Alice\tB-PER\nlonely\n").expect("write");
    let error = fails(&train_args(
        "tag",
        [&bad, &data, &d.join("x")],
        &["--no-elmo"],
    ));
    assert!(error.contains("bad.conll:2"), "{error}");
    // Settings burn's modules would panic on, or that cannot train, are refused by flag before
    // anything is read or written.
    for (flag, value) in [
        ("--dropout", "1"),
        ("--elmo-dropout", "-0.1"),
        ("--lr", "nan"),
        ("--lambda", "-1"),
        ("--d-hidden", "0"),
        ("--mix", "first"),
    ] {
        let refused = d.join("refused");
        let setting = format!("{flag}={value}");
        let error = fails(&train_args("tag", [&data, &data, &refused], &[&setting]));
        assert!(error.contains(&format!("'{value}' for '{flag}")), "{error}");
        assert!(!refused.exists(), "{flag}={value}");
    }
    let error = fails(&[
        "task",
        "eval",
        "--quiet",
        "--model",
        path(d),
        "--data",
        path(&data),
    ]);
    assert!(error.contains("not a task directory"), "{error}");
}

#[test]
fn classify_tsv_columns_and_pairs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let data = d.join("sentiment.tsv");
    std::fs::write(
        &data,
        "id\tstars\tsentence\n1\tpos\tA good film.\n2\tneg\tA bad film!\n3\tpos\tReally good.\n",
    )
    .expect("write");
    let out = d.join("sentiment-task");
    let common = train_args(
        "classify",
        [&data, &data, &out],
        &["--epochs", "1", "--tokenize"],
    );
    let error = fails(&common);
    assert!(
        error.contains("no column `text`") && error.contains("sentiment.tsv:1"),
        "{error}"
    );
    let mut args = common.to_vec();
    args.extend_from_slice(&["--text-column", "sentence", "--label-column", "stars"]);
    ok(&args);
    let line = on_data("eval", &out, &data);
    assert!(
        line.starts_with("accuracy ") && !line.contains("span-f1"),
        "{line}"
    );
    let labels = on_data("predict", &out, &data);
    assert_eq!(labels.lines().count(), 3);
    assert!(labels.lines().all(|l| l == "pos" || l == "neg"), "{labels}");
    // The same columns by number.
    let mut args = common.to_vec();
    args.extend_from_slice(&["--text-column", "3", "--label-column", "2"]);
    ok(&args);
    assert_eq!(on_data("predict", &out, &data).lines().count(), 3);

    // `label<TAB>text` lines without a header (SentEval's and Pang & Lee's layout): every
    // line is an example, for training and for the task directory's eval and predict.
    let headerless = d.join("polarity.tsv");
    std::fs::write(
        &headerless,
        "pos\tA good film.\nneg\tA bad film!\npos\tReally good.\nneg\tBad.\n",
    )
    .expect("write");
    let plain_out = d.join("polarity-task");
    let plain = |out: &Path, extra: &[&str]| {
        let mut args = train_args(
            "classify",
            [&headerless, &headerless, out],
            &["--epochs", "1"],
        );
        args.push("--no-header");
        ok(&[args.as_slice(), extra].concat());
    };
    plain(&plain_out, &[]);
    let labels = on_data("predict", &plain_out, &headerless);
    assert_eq!(labels.lines().count(), 4, "{labels}");
    assert!(labels.lines().all(|l| l == "pos" || l == "neg"), "{labels}");
    assert!(on_data("eval", &plain_out, &headerless).starts_with("accuracy "));
    // The biLM's layers kept in a temporary file instead of memory: the same training, the
    // same predictions, and no file left.
    let spilled_out = d.join("polarity-spilled");
    plain(&spilled_out, &["--features-memory-mib", "0"]);
    let best = |dir: &Path| std::fs::read_to_string(dir.join("best.json")).expect("best.json");
    assert_eq!(best(&spilled_out), best(&plain_out));
    let spilled = ok(&[
        "task",
        "predict",
        "--quiet",
        "--model",
        path(&plain_out),
        "--data",
        path(&headerless),
        "--features-memory-mib",
        "0",
    ]);
    assert_eq!(spilled, labels);
    let mut left: Vec<_> = std::fs::read_dir(d)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "polarity-spilled",
            "polarity-task",
            "polarity.tsv",
            "sentiment-task",
            "sentiment.tsv"
        ]
        .map(std::ffi::OsString::from)
    );
    let mut args = train_args("classify", [&headerless, &headerless, &plain_out], &[]);
    args.extend_from_slice(&["--no-header", "--text-column", "text"]);
    let error = fails(&args);
    assert!(
        error.contains("polarity.tsv:1") && error.contains("no header"),
        "{error}"
    );
    // A task directory written before `header` and `layer_norm` were settings reads its files
    // with a header, and mixes without layer norm.
    let spec_file = out.join("task.json");
    let mut spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec_file).expect("task.json"))
            .expect("json");
    assert_eq!(spec["format"]["header"], serde_json::json!(true), "{spec}");
    spec["format"]
        .as_object_mut()
        .expect("format")
        .remove("header");
    let elmo = &mut spec["model"]["encoder"]["elmo"];
    assert_eq!(elmo["layer_norm"], serde_json::json!(false), "{elmo}");
    elmo.as_object_mut().expect("elmo").remove("layer_norm");
    std::fs::write(&spec_file, spec.to_string()).expect("write");
    assert_eq!(on_data("predict", &out, &data).lines().count(), 3);

    let pairs = d.join("pairs.tsv");
    std::fs::write(
        &pairs,
        "text_a\ttext_b\tlabel\na b\ta b\tsame\na b\tc d\tdifferent\n",
    )
    .expect("write");
    let pair_out = d.join("pair-task");
    let pair_args = train_args("pair", [&pairs, &pairs, &pair_out], &["--epochs", "1"]);
    ok(&pair_args);
    let line = on_data("eval", &pair_out, &pairs);
    assert!(line.starts_with("accuracy "), "{line}");
    // Pairs without a header: `label<TAB>text_a<TAB>text_b`.
    std::fs::write(&pairs, "same\ta b\ta b\ndifferent\ta b\tc d\n").expect("write");
    ok(&[pair_args.as_slice(), &["--no-header"]].concat());
    let labels = on_data("predict", &pair_out, &pairs);
    assert_eq!(labels.lines().count(), 2, "{labels}");
}
