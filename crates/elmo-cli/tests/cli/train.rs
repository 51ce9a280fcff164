//! End-to-end tests of the training commands (the real binary): `elmo vocab`, `elmo train`
//! (with `--resume`), `elmo eval`'s output line, `elmo export` and `elmo embed --model` on both a
//! run directory and its export, `elmo plot`, and clear errors.

use std::path::{Path, PathBuf};

use crate::common::{elmo, elmo_with_env, ok, path};
use elmo_test_support::{FileServer, Reply};

const CORPUS: &str = "The cat sat on the mat.\nA dog ran in the park!\n\nThe bird sang a song.\n";

fn top_layer(file: &Path) -> Vec<f32> {
    let file = hdf5_pure::File::open(file).expect("open hdf5");
    file.dataset("0")
        .expect("dataset 0")
        .read_f32()
        .expect("f32")
}

/// `CORPUS` written to `dir/corpus.txt` and its vocabulary made by `elmo vocab --tokenize`
/// (`dir/vocab.txt`).
fn corpus_and_vocab(dir: &Path) -> (PathBuf, PathBuf) {
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, CORPUS).expect("write corpus");
    let vocab = dir.join("vocab.txt");
    ok(&[
        "vocab",
        "--quiet",
        "--tokenize",
        "--out",
        path(&vocab),
        path(&corpus),
    ]);
    (corpus, vocab)
}

#[test]
fn vocab_train_resume_eval_export_embed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (corpus, vocab) = corpus_and_vocab(d);
    let tokens = std::fs::read_to_string(&vocab).expect("vocab");
    let tokens: Vec<&str> = tokens.lines().collect();
    assert_eq!(tokens[..4], ["<S>", "</S>", "<UNK>", "."]);
    assert!(
        tokens.contains(&"!"),
        "tokenizer split the punctuation: {tokens:?}"
    );

    let run = d.join("run");
    let train_logged = |steps: &str, extra: &[&str], quiet: bool| {
        let mut args = vec![
            "train",
            "--preset",
            "tiny",
            "--tokenize",
            "--train",
            path(&corpus),
            "--vocab",
            path(&vocab),
            "--out",
            path(&run),
            "--valid",
            path(&corpus),
            "--steps",
            steps,
            "--checkpoint-every",
            "2",
            "--seed",
            "3",
            "--backend",
            "ndarray",
        ];
        args.extend_from_slice(extra);
        if quiet {
            args.push("--quiet");
        }
        // burn-optim reads a resumed optimizer state onto burn's default device, which panics on
        // an unknown `BURN_DEVICE`: the CLI must pin the default to `--backend` itself (before,
        // a CPU resume started wgpu).
        elmo_with_env(&args, &[("BURN_DEVICE", "no-such-device")])
    };
    let train = |steps: &str, extra: &[&str]| train_logged(steps, extra, true);
    assert!(train("2", &[]).status.success());
    // A second fresh start is refused; --resume continues to step 4.
    let refused = train("4", &[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--resume"));
    let resumed = train("4", &["--resume"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(
        run.join("checkpoints/step-000000004/trainer.json")
            .is_file()
    );
    // Resuming may change the learning rate and its schedule (the run's config.json follows),
    // nothing else.
    let refused = train("6", &["--resume", "--dropout", "0.3"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("only the learning rate"));
    // Without --quiet and with stderr not a terminal (no bar drawn), the log lines go to stderr.
    // The resume also switches weight averaging on.
    let resumed = train_logged(
        "6",
        &[
            "--resume",
            "--lr",
            "0.1",
            "--plateau-decay",
            "0.5",
            "--average-from",
            "5",
        ],
        false,
    );
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{log}");
    for line in [
        "resuming from step 4 to 6",
        "step 6: loss",
        "step 6: valid perplexity forward",
        "weight averaging started at step 5",
        "(mean of the last 2 steps' weights)",
        "checkpoint ",
    ] {
        assert!(log.contains(line), "{line:?} missing from:\n{log}");
    }
    let config = std::fs::read_to_string(run.join("config.json")).expect("config");
    assert!(
        config.contains("\"plateau\"") && config.contains("0.1"),
        "{config}"
    );
    assert!(run.join("curves.svg").is_file());
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics");
    assert_eq!(
        metrics.lines().filter(|l| l.contains("\"valid\"")).count(),
        3
    );
    assert!(metrics.contains("\"lr\":0.1"), "{metrics}");

    let line = ok(&[
        "eval",
        "--quiet",
        "--model",
        path(&run),
        "--data",
        path(&corpus),
    ]);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        [words[0], words[1], words[3], words[4], words[6], words[7]],
        [
            "forward",
            "perplexity",
            "backward",
            "perplexity",
            "average",
            "perplexity"
        ],
        "{line}"
    );
    for value in [words[2], words[5], words[8]] {
        let v: f64 = value.parse().expect("a number");
        assert!(v > 1.0 && v < 1000.0, "{line}");
    }
    // That was the mean of the last two steps' weights; the trained weights evaluate otherwise.
    let eval = elmo(&["eval", "--model", path(&run), "--data", path(&corpus)]);
    let said = String::from_utf8_lossy(&eval.stderr);
    assert!(
        said.contains("the mean of the weights of its last 2 steps"),
        "{said}"
    );
    let trained = ok(&[
        "eval",
        "--quiet",
        "--trained-weights",
        "--model",
        path(&run),
        "--data",
        path(&corpus),
    ]);
    assert_ne!(trained, line);
    // Another batching of the same text: other carried states, other perplexities.
    for batching in ["contiguous", "sentences"] {
        let other = ok(&[
            "eval",
            "--quiet",
            "--batching",
            batching,
            "--model",
            path(&run),
            "--data",
            path(&corpus),
        ]);
        assert!(other.starts_with("forward perplexity"), "{other}");
        assert_ne!(other, line, "--batching {batching}");
    }

    let export = d.join("export");
    ok(&["export", "--model", path(&run), "--out", path(&export)]);
    assert!(export.join("options.json").is_file() && export.join("weights.hdf5").is_file());

    // Fine-tuning from the export: the architecture comes from its options.json.
    let tuned = d.join("tuned");
    let options = export.join("options.json");
    let weights = export.join("weights.hdf5");
    let try_fine_tune = |out: &Path, options: &str, weights: &str, cache: &Path| {
        let args = [
            "train",
            "--quiet",
            "--preset",
            "small",
            "--tokenize",
            "--train",
            path(&corpus),
            "--vocab",
            path(&vocab),
            "--out",
            path(out),
            "--steps",
            "1",
            "--init-from",
            options,
            weights,
        ];
        elmo_with_env(&args, &[("ELMO_CACHE_DIR", path(cache))])
    };
    let fine_tune = |out: &Path, options: &str, weights: &str, cache: &Path| {
        let out = try_fine_tune(out, options, weights, cache);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let cache = d.join("cache");
    fine_tune(&tuned, path(&options), path(&weights), &cache);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tuned.join("config.json")).expect("config"))
            .expect("json");
    let exported: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&options).expect("options")).expect("json");
    assert_eq!(config["model"], exported);
    // The same from URLs (downloaded into ELMO_CACHE_DIR): the same architecture and first step.
    let server = FileServer::start(vec![
        (
            "/e/options.json",
            Reply::File(std::fs::read(&options).expect("options")),
        ),
        (
            "/e/weights.hdf5",
            Reply::File(std::fs::read(&weights).expect("weights")),
        ),
    ]);
    let remote = d.join("tuned-from-urls");
    let (options_url, weights_url) = (server.url("/e/options.json"), server.url("/e/weights.hdf5"));
    fine_tune(&remote, &options_url, &weights_url, &cache);
    let first_loss = |run: &Path| -> serde_json::Value {
        let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics");
        let line = metrics.lines().next().expect("a line");
        serde_json::from_str::<serde_json::Value>(line).expect("json")["loss"].clone()
    };
    let remote_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(remote.join("config.json")).expect("config"))
            .expect("json");
    assert_eq!(remote_config["model"], exported);
    assert!(first_loss(&tuned).is_number());
    assert_eq!(first_loss(&remote), first_loss(&tuned));
    assert_eq!(server.requests(), 2);
    // A download that is not what its name says (a web page) is named by its URL and its copy.
    let (web_page, options_json) = (
        b"<html>moved</html>".to_vec(),
        std::fs::read(&options).expect("options"),
    );
    // Options that parse but ask for a model that cannot be built (a field out of bounds).
    let mut too_wide: serde_json::Value = serde_json::from_slice(&options_json).expect("json");
    too_wide["lstm"]["dim"] = serde_json::json!(1u64 << 40);
    let broken = FileServer::start(vec![
        ("/b/options.json", Reply::File(web_page.clone())),
        ("/b/weights.hdf5", Reply::File(web_page)),
        ("/c/options.json", Reply::File(options_json)),
        (
            "/d/options.json",
            Reply::File(too_wide.to_string().into_bytes()),
        ),
    ]);
    // The options are read first, then the weights.
    for (options, weights, named) in [
        ("/b/options.json", "/b/weights.hdf5", "/b/options.json"),
        ("/c/options.json", "/b/weights.hdf5", "/b/weights.hdf5"),
        ("/d/options.json", "/b/weights.hdf5", "/d/options.json"),
    ] {
        let out = try_fine_tune(
            &d.join("not-tuned"),
            &broken.url(options),
            &broken.url(weights),
            &cache,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        let named = format!("{}, downloaded to ", broken.url(named));
        assert!(
            stderr.contains(&named) && stderr.contains("delete it to download again"),
            "{stderr}"
        );
    }
    assert!(!d.join("not-tuned").join("checkpoints").exists());

    // A run directory as --init-from: with no --preset the run's config (tiny, --tokenize, the
    // plateau schedule, which needs --valid), here continued with another optimizer.
    let continued = d.join("continued");
    let from_run = |out: &Path, from: &Path| {
        elmo(&[
            "train",
            "--quiet",
            "--train",
            path(&corpus),
            "--vocab",
            path(&vocab),
            "--out",
            path(out),
            "--valid",
            path(&corpus),
            "--steps",
            "1",
            "--optimizer",
            "sgd",
            "--lr",
            "0.5",
            "--init-from",
            path(from),
        ])
    };
    let out = from_run(&continued, &run);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let continued_config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(continued.join("config.json")).expect("config"),
    )
    .expect("json");
    let run_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).expect("config"))
            .expect("json");
    assert_eq!(continued_config["model"], run_config["model"]);
    assert_eq!(continued_config["tokenize"], true);
    assert_eq!(
        continued_config["optimizer"],
        serde_json::json!({"kind": "sgd", "lr": 0.5})
    );
    // One path that is not a run directory: the error says what --init-from takes.
    let out = from_run(&d.join("refused"), &options);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("OPTIONS_JSON WEIGHTS_HDF5"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let text = d.join("text.txt");
    std::fs::write(&text, "The cat sang .\nA park\n").expect("write text");
    let from_run = d.join("run.hdf5");
    let from_export = d.join("export.hdf5");
    ok(&[
        "embed",
        "--quiet",
        "--model",
        path(&run),
        path(&text),
        path(&from_run),
    ]);
    ok(&[
        "embed",
        "--quiet",
        "--model",
        path(&export),
        path(&text),
        path(&from_export),
    ]);
    let (a, b) = (top_layer(&from_run), top_layer(&from_export));
    assert_eq!(a.len(), b.len());
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "run and export embed differently: {diff}");

    let empty = d.join("empty.txt");
    std::fs::write(&empty, "\n\n").expect("write");
    let out = elmo(&[
        "eval",
        "--quiet",
        "--model",
        path(&run),
        "--data",
        path(&empty),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no sentence to evaluate on"));

    let svg = d.join("curves.svg");
    ok(&["plot", "--model", path(&run), "--out", path(&svg)]);
    assert!(std::fs::read_to_string(&svg).expect("svg").contains("<svg"));
}

#[test]
fn training_errors_name_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bad = d.join("bad.txt");
    std::fs::write(&bad, b"fine line\nbroken \xff line\n").expect("write");
    let out = elmo(&[
        "vocab",
        "--quiet",
        "--out",
        path(&d.join("v.txt")),
        path(&bad),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.txt:2") && err.contains("UTF-8"), "{err}");
    assert!(!d.join("v.txt").exists());

    let out = elmo(&[
        "train",
        "--preset",
        "huge",
        "--train",
        path(&bad),
        "--vocab",
        path(&bad),
        "--out",
        path(&d.join("r")),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither a preset"));
    let out = elmo(&["eval", "--model", path(d), "--data", path(&bad)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a training run directory"));

    // Regression: a bad byte in a later training file ended the run only when the batcher
    // reached that file; every file is read through before anything is built or written.
    let (corpus, vocab) = corpus_and_vocab(d);
    let run = d.join("bad-run");
    let out = elmo(&[
        "train",
        "--preset",
        "tiny",
        "--tokenize",
        "--train",
        path(&corpus),
        path(&bad),
        "--vocab",
        path(&vocab),
        "--out",
        path(&run),
        "--steps",
        "2",
        "--backend",
        "ndarray",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad.txt:2"), "{err}");
    assert!(!run.exists());

    // Towers: GPUs only through a GPU backend, one per tower, and not beside --gpu; each
    // refused before anything is written.
    let towers = |extra: &[&str]| train_tiny(&corpus, &vocab, &run, extra);
    for (extra, expected) in [
        (&["--gpus", "0"][..], "--gpus picks GPUs of --backend wgpu"),
        (
            &["--towers", "3", "--gpus", "0,1"],
            "--towers 3 with 2 --gpus",
        ),
        (&["--towers", "0"], "towers must be positive"),
    ] {
        let out = towers(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expected),
            "{extra:?}: {err}"
        );
        assert!(!run.exists(), "{extra:?}");
    }
    let mut both = vec!["--gpu", "0"];
    both.extend([
        "train", "--train", "x", "--vocab", "x", "--out", "x", "--gpus", "0",
    ]);
    let out = elmo(&both);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--gpu and --gpus both name GPUs"), "{err}");
    // Two towers on the one CPU device: the run's config says so.
    let out = towers(&["--towers", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read_to_string(run.join("config.json")).expect("config.json");
    assert!(config.contains("\"towers\": 2"), "{config}");
    let out = towers(&["--towers", "3", "--resume"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("trains 2 tower(s); this command gives 3"),
        "{err}"
    );
    let out = towers(&["--towers", "2", "--resume"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Regression (issue 49): a checkpoint write that fails (a file-size limit standing in for a
/// full disk) is a clear error naming the file; the previous checkpoint stays loadable and
/// `--resume`-able, and no partial checkpoint or file is left behind.
// A file-size limit is POSIX's (`ulimit -f`, run by `sh`).
#[cfg(unix)]
#[test]
fn a_failed_checkpoint_write_keeps_the_previous_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let corpus = d.join("corpus.txt");
    std::fs::write(&corpus, CORPUS).expect("write corpus");
    let vocab = d.join("vocab.txt");
    ok(&["vocab", "--quiet", "--out", path(&vocab), path(&corpus)]);
    let run = d.join("run");
    let args = |steps: &'static str| -> Vec<String> {
        [
            "train",
            "--quiet",
            "--preset",
            "tiny",
            "--train",
            path(&corpus),
            "--vocab",
            path(&vocab),
            "--out",
            path(&run),
            "--steps",
            steps,
            "--checkpoint-every",
            "2",
            "--seed",
            "3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let first: Vec<String> = args("2");
    ok(&first.iter().map(String::as_str).collect::<Vec<_>>());
    // The resumed run may write files of at most 100 KiB (a model record is larger): the
    // signal of an exceeded limit is ignored, so the write fails with EFBIG instead.
    let mut limited = std::process::Command::new("sh");
    limited
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 200; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_elmo"))
        .args(args("4"))
        .arg("--resume");
    let failed = limited.output().expect("run elmo under a file-size limit");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{stderr}");
    assert!(
        stderr.contains(".bpk"),
        "the error names the file: {stderr}"
    );
    let checkpoints: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .expect("checkpoints")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(checkpoints, ["step-000000002"], "nothing partial is left");
    let leftovers: Vec<String> = std::fs::read_dir(&run)
        .expect("run")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The step-2 checkpoint still loads, and the run resumes from it once there is room.
    ok(&[
        "eval",
        "--quiet",
        "--model",
        path(&run),
        "--data",
        path(&corpus),
    ]);
    let mut resume = args("4");
    resume.push("--resume".into());
    ok(&resume.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        run.join("checkpoints/step-000000004/trainer.json")
            .is_file()
    );
}

/// `elmo train --quiet --preset tiny --tokenize` of `corpus` with `vocab` into `run` for 2 steps,
/// then `extra`.
fn train_tiny(corpus: &Path, vocab: &Path, run: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "train",
        "--quiet",
        "--preset",
        "tiny",
        "--tokenize",
        "--train",
        path(corpus),
        "--vocab",
        path(vocab),
        "--out",
        path(run),
        "--steps",
        "2",
    ];
    args.extend_from_slice(extra);
    elmo(&args)
}

/// `elmo train --precision mixed` is refused before anything is written on `ndarray`, and on
/// flex where the CPU has no unit for `bf16` products; on flex with one (AMX, AVX512-BF16) it
/// trains without a loss scale (`bf16` keeps `f32`'s range) and records its precision, so that
/// `--resume` without the flag is refused; on wgpu (lavapipe in CI) it trains with a loss scale
/// in its metrics and records its precision, and on a GPU device without 16-bit floats (wgpu on
/// OpenGL) it is refused before anything is written.
#[test]
fn mixed_precision_training_runs_where_16_bit_products_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (corpus, vocab) = corpus_and_vocab(d);
    let run = d.join("run");
    let train = |extra: &[&str]| train_tiny(&corpus, &vocab, &run, extra);
    // A refusal that names its cause and writes nothing.
    let assert_refused = |refused: &std::process::Output, cause: &str| {
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(cause),
            "{stderr}"
        );
        assert!(!run.exists(), "a refused run wrote {}", run.display());
    };
    assert_refused(
        &train(&["--backend", "ndarray", "--precision", "mixed"]),
        "not on ndarray",
    );
    let on_flex = train(&["--precision", "mixed"]);
    if elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Widest) {
        let stderr = String::from_utf8_lossy(&on_flex.stderr);
        assert!(on_flex.status.success(), "{stderr}");
        let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics");
        assert!(
            metrics.contains("\"kind\":\"train\"") && !metrics.contains("loss_scale"),
            "{metrics}"
        );
        let resumed = train(&["--resume"]);
        let stderr = String::from_utf8_lossy(&resumed.stderr);
        assert!(
            !resumed.status.success() && stderr.contains("--precision"),
            "{stderr}"
        );
        std::fs::remove_dir_all(&run).expect("a fresh run directory");
    } else {
        assert_refused(&on_flex, "this one has none");
    }
    let Some(gpu) = elmo_test_support::wgpu_device_or_skip(
        "mixed_precision_training_runs_where_16_bit_products_do",
    ) else {
        return;
    };
    if !elmo_test_support::sixteen_bit_floats(&gpu) {
        assert_refused(
            &train(&["--backend", "wgpu", "--precision", "mixed"]),
            "has none",
        );
        return;
    }
    let trained = train(&["--backend", "wgpu", "--precision", "mixed"]);
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics");
    assert!(metrics.contains("\"loss_scale\":65536"), "{metrics}");
    let resumed = train(&["--backend", "wgpu", "--resume"]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        !resumed.status.success() && stderr.contains("--precision"),
        "{stderr}"
    );
}
