//! End-to-end tests of `elmo embed` (the real binary): AllenNLP's HDF5 layout, values equal to the
//! library's, empty lines, layer selections, statelessness, the token cache, model files named by
//! URL, and clear errors that leave no output.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use elmo_model::options::BiLmOptions;
use elmo_model::weights::{WeightFile, load_bilm_from};

use crate::common::{elmo, elmo_with_env, fails, fixture, ok, path};
use elmo_test_support::{FileServer, Reply};

fn embed(dir: &Path, input: &str, extra: &[&str]) -> (PathBuf, std::process::Output) {
    let input_path = dir.join("input.txt");
    std::fs::write(&input_path, input).expect("write input");
    let output = dir.join("out.hdf5");
    let mut args = vec![
        "embed",
        "--quiet",
        input_path.to_str().expect("utf8"),
        output.to_str().expect("utf8"),
    ];
    args.extend_from_slice(extra);
    let result = elmo(&args);
    (output, result)
}

fn dataset(file: &hdf5_pure::File, name: &str) -> (Vec<usize>, Vec<f32>) {
    let ds = file
        .dataset(name)
        .unwrap_or_else(|e| panic!("dataset {name}: {e}"));
    let shape = ds
        .shape()
        .expect("shape")
        .into_iter()
        .map(|d| d as usize)
        .collect();
    (shape, ds.read_f32().expect("f32"))
}

const TEXT: &str = "The quick brown fox .\n\nI went to the bank to deposit money .\nHi\n";

/// The top-level files of `dir` other than the input.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "input.txt")
        .collect()
}

#[test]
fn writes_allennlp_layout_matching_the_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (output, result) = embed(
        dir.path(),
        TEXT,
        &[
            "--options",
            fixture("tiny/options.json").to_str().expect("utf8"),
            "--weights",
            fixture("tiny/weights.hdf5").to_str().expect("utf8"),
            "--batch-size",
            "2",
        ],
    );
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let file = hdf5_pure::File::open(&output).expect("open output");
    let mut names = file.root().datasets().expect("datasets");
    names.sort();
    assert_eq!(names, vec!["0", "1", "2", "3", "sentence_to_index"]);

    let (shape, _) = dataset(&file, "1");
    assert_eq!(shape, vec![3, 0, 32], "empty line");
    let index_json = file
        .dataset("sentence_to_index")
        .expect("index")
        .read_string()
        .expect("strings");
    let index: serde_json::Value = serde_json::from_str(&index_json[0]).expect("json");
    assert_eq!(index["The quick brown fox ."], "0");
    assert_eq!(index["Hi"], "3");

    // Same values as the library, sentence by sentence from a zero state.
    let device = Device::flex();
    let options = BiLmOptions::from_file(fixture("tiny/options.json")).expect("options");
    let mut weights = WeightFile::open(fixture("tiny/weights.hdf5")).expect("weights");
    let bilm = load_bilm_from(&options, &mut weights, &device).expect("load");
    for (line, text) in TEXT.lines().enumerate().filter(|(_, t)| !t.is_empty()) {
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let out = bilm.forward_sentences(std::slice::from_ref(&tokens), &device);
        let (shape, values) = dataset(&file, &line.to_string());
        assert_eq!(shape, vec![3, tokens.len(), 32]);
        for (layer, tensor) in out.layers.iter().enumerate() {
            let expected = tensor.to_data().try_into_vec_as::<f32>().expect("f32");
            let n = tokens.len();
            let got = &values[layer * n * 32..(layer + 1) * n * 32];
            // Skip the <S> position of the library output.
            for (g, e) in got.iter().zip(&expected[32..32 + n * 32]) {
                assert!(
                    (g - e).abs() <= 1e-6,
                    "line {line} layer {layer}: {g} vs {e}"
                );
            }
        }
    }
    assert_eq!(
        leftovers(dir.path()),
        vec!["out.hdf5"],
        "no temporary file left"
    );
}

#[test]
fn top_and_average_layers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (all_path, all) = embed(dir.path(), TEXT, &[]);
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    let all_values = dataset(&hdf5_pure::File::open(&all_path).expect("open"), "2");
    let n = all_values.0[1];
    assert_eq!(n, 9);
    let d = all_values.0[2];
    for (mode, expected) in [
        ("top", all_values.1[2 * n * d..].to_vec()),
        (
            "average",
            (0..n * d)
                .map(|i| {
                    (all_values.1[i] + all_values.1[n * d + i] + all_values.1[2 * n * d + i]) / 3.0
                })
                .collect(),
        ),
    ] {
        let sub = dir.path().join(mode);
        std::fs::create_dir(&sub).expect("mkdir");
        let (output, result) = embed(&sub, TEXT, &["--layers", mode]);
        assert!(
            result.status.success(),
            "{}",
            String::from_utf8_lossy(&result.stderr)
        );
        let (shape, values) = dataset(&hdf5_pure::File::open(&output).expect("open"), "2");
        assert_eq!(shape, vec![n, d], "{mode}");
        for (g, e) in values.iter().zip(&expected) {
            assert!((g - e).abs() <= 1e-6, "{mode}: {g} vs {e}");
        }
        assert_eq!(
            dataset(&hdf5_pure::File::open(&output).expect("open"), "1").0,
            vec![0, d]
        );
        // AllenNLP's `elmo` command's spelling of the same run: the same file.
        let allennlp = dir.path().join(format!("{mode}-allennlp"));
        std::fs::create_dir(&allennlp).expect("mkdir");
        let (options, weights) = (
            fixture("allennlp/options.json"),
            fixture("allennlp/lm_weights.hdf5"),
        );
        let flag = format!("--{mode}");
        let spelled = [
            "--options-file",
            path(&options),
            "--weight-file",
            path(&weights),
        ];
        let (same, result) = embed(&allennlp, TEXT, &[&spelled[..], &[flag.as_str()]].concat());
        assert!(result.status.success(), "{result:?}");
        assert_eq!(contents(&same), contents(&output), "{mode}");
    }
    let stderr = fails(&["embed", "--top", "--layers", "all", "in.txt", "out.hdf5"]);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// `--pool mean`: one vector per line and layer, the mean of the line's token vectors (zeros
/// for the empty line), in the same file layout.
#[test]
fn pooled_lines_are_the_means_of_their_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (all_path, all) = embed(dir.path(), TEXT, &[]);
    assert!(all.status.success(), "{all:?}");
    let file = hdf5_pure::File::open(&all_path).expect("open");
    for (extra, layers) in [(&[][..], 3), (&["--layers", "top"][..], 1)] {
        let sub = dir.path().join(format!("pooled-{layers}"));
        std::fs::create_dir(&sub).expect("mkdir");
        let (output, result) = embed(&sub, TEXT, &[extra, &["--pool", "mean"]].concat());
        assert!(result.status.success(), "{result:?}");
        let pooled = hdf5_pure::File::open(&output).expect("open");
        for line in ["0", "1", "2", "3"] {
            let (shape, values) = dataset(&file, line);
            let [_, n, d] = shape[..] else {
                panic!("{shape:?}")
            };
            let expected: Vec<f32> = (3 - layers..3)
                .flat_map(|l| {
                    let layer = &values[l * n * d..(l + 1) * n * d];
                    (0..d).map(move |j| {
                        (0..n).map(|t| layer[t * d + j]).sum::<f32>() / n.max(1) as f32
                    })
                })
                .collect();
            let (got_shape, got) = dataset(&pooled, line);
            let want_shape = match layers {
                1 => vec![d],
                _ => vec![layers, d],
            };
            assert_eq!(got_shape, want_shape, "line {line}");
            assert_eq!(got.len(), expected.len());
            for (g, e) in got.iter().zip(&expected) {
                assert!((g - e).abs() <= 1e-6, "line {line}: {g} vs {e}");
            }
            if n == 0 {
                assert!(got.iter().all(|&v| v == 0.0), "the empty line");
            }
        }
    }
}

#[test]
fn stateless_output_does_not_depend_on_batch_size_and_stateful_does() {
    let text = "a b c d e f\nthe cat sat on the mat\nhello world\nx\n".repeat(3);
    let run = |name: &str, extra: &[&str]| {
        let sub = tempfile::tempdir().expect("tempdir");
        let (path, result) = embed(sub.path(), &text, extra);
        assert!(
            result.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        let file = hdf5_pure::File::open(&path).expect("open");
        (0..12)
            .map(|i| dataset(&file, &i.to_string()).1)
            .collect::<Vec<_>>()
    };
    let assert_same = |a: &[Vec<f32>], b: &[Vec<f32>], tol: f32, what: &str| {
        for (a, b) in a.iter().zip(b) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= tol, "{what}: {x} vs {y}");
            }
        }
    };
    let one = run("batch 1", &["--batch-size", "1"]);
    let five = run("batch 5", &["--batch-size", "5"]);
    assert_same(
        &one,
        &five,
        1e-5,
        "stateless results differ with batch size",
    );
    // The token cache (on by default; the text repeats its words) changes nothing.
    let uncached = run("no cache", &["--batch-size", "5", "--token-cache-mib", "0"]);
    assert_same(&uncached, &five, 1e-6, "token cache changed a vector");
    // One thread (the directions one after the other) and three (products shared among them).
    for threads in ["1", "3"] {
        let other = run(threads, &["--batch-size", "5", "--threads", threads]);
        assert_same(&other, &five, 1e-6, "the thread count changed a vector");
    }
    let stateful = run("stateful", &["--batch-size", "4", "--stateful"]);
    // Lines 4.. are read after the state has moved on: their vectors change.
    let differs = stateful[4]
        .iter()
        .zip(&one[4])
        .any(|(x, y)| (x - y).abs() > 1e-4);
    assert!(differs, "stateful mode should carry state across batches");
}

#[test]
fn invalid_utf8_names_the_line_and_leaves_no_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.txt");
    std::fs::write(&input, b"good line\nalso good\nbad \xff byte\n").expect("write");
    let output = dir.path().join("out.hdf5");
    let result = elmo(&[
        "embed",
        "--quiet",
        input.to_str().expect("utf8"),
        output.to_str().expect("utf8"),
    ]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("input.txt:3") && stderr.contains("invalid UTF-8"),
        "{stderr}"
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "left behind: {:?}",
        leftovers(dir.path())
    );
    // Regression: a bad line near the end of a corpus ended the run only when the embedding
    // pass reached it, discarding the vectors of every line before it. The input is read
    // through first, before the model is even opened (here it does not exist).
    let mut text = "a good line\n".repeat(50);
    text.push_str(&"word ".repeat(30));
    std::fs::write(&input, text).expect("write");
    let missing = dir.path().join("missing.json");
    let stderr = fails(&[
        "embed",
        "--max-tokens",
        "20",
        "--options",
        path(&missing),
        "--weights",
        path(&missing),
        path(&input),
        path(&output),
    ]);
    assert!(
        stderr.contains("input.txt:51: 30 tokens, more than --max-tokens 20"),
        "{stderr}"
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, result) = embed(dir.path(), TEXT, &["--max-tokens", "3"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success()
            && stderr.contains("input.txt:1")
            && stderr.contains("--max-tokens"),
        "{stderr}"
    );

    let input = dir.path().join("input.txt");
    let result = elmo(&[
        "embed",
        input.to_str().expect("utf8"),
        dir.path().join("out.txt").to_str().expect("utf8"),
    ]);
    assert!(String::from_utf8_lossy(&result.stderr).contains("unsupported output format"));
    // An output in a folder that does not exist is refused before anything runs.
    let result = elmo(&[
        "embed",
        input.to_str().expect("utf8"),
        dir.path().join("no/such/out.hdf5").to_str().expect("utf8"),
    ]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && stderr.contains("folder") && stderr.contains("does not exist"),
        "{stderr}"
    );

    let (_, result) = embed(dir.path(), TEXT, &["--threads", "0"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && stderr.contains("--threads"),
        "{stderr}"
    );

    let result = elmo(&[
        "embed",
        "--weights",
        "w.hdf5",
        input.to_str().expect("utf8"),
        "o.hdf5",
    ]);
    assert!(
        !result.status.success(),
        "--weights without --options must be refused"
    );

    let missing = dir.path().join("nope.txt");
    let result = elmo(&[
        "embed",
        missing.to_str().expect("utf8"),
        dir.path().join("o.hdf5").to_str().expect("utf8"),
    ]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(stderr.contains("nope.txt"), "{stderr}");

    // A foreign file and a truncated one: the error names the file, and says the reader's
    // cause once (hdf5-pure's errors print their own source too; the CLI drops the repeat).
    let weights = std::fs::read(fixture("tiny/weights.hdf5")).expect("read");
    for (name, content) in [
        ("bad.hdf5", b"not hdf5".to_vec()),
        ("truncated.hdf5", weights[..3000].to_vec()),
    ] {
        let bad_weights = dir.path().join(name);
        std::fs::write(&bad_weights, content).expect("write");
        let result = elmo(&[
            "embed",
            "--options",
            fixture("tiny/options.json").to_str().expect("utf8"),
            "--weights",
            bad_weights.to_str().expect("utf8"),
            input.to_str().expect("utf8"),
            dir.path().join("o.hdf5").to_str().expect("utf8"),
        ]);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(stderr.contains(name), "{stderr}");
        let cause = stderr.rsplit(": ").next().unwrap_or_default().trim();
        assert!(
            !cause.is_empty() && stderr.matches(cause).count() == 1,
            "{stderr}"
        );
    }
}

/// Every dataset of an output by name (shape and values).
type Datasets = std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// Every dataset of an output (shape and values) and its `sentence_to_index`.
fn contents(path: &Path) -> (Datasets, String) {
    let file = hdf5_pure::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut datasets = std::collections::BTreeMap::new();
    let mut index = String::new();
    for name in file.root().datasets().expect("datasets") {
        if name == "sentence_to_index" {
            index = file
                .dataset(&name)
                .expect("dataset")
                .read_string()
                .expect("string")
                .concat();
        } else {
            datasets.insert(name.clone(), dataset(&file, &name));
        }
    }
    (datasets, index)
}

/// `n` lines of varied length (with repeats and an empty line), from a fixed rule.
fn corpus(n: usize) -> String {
    let words = [
        "the", "bank", "river", "money", "deposit", "a", "went", "I", ".", "quick",
    ];
    (0..n)
        .map(|i| match i % 17 {
            5 => String::new(),
            _ => (0..(i * 7 % 13) + 1)
                .map(|k| words[(i * 3 + k * 5) % words.len()])
                .collect::<Vec<_>>()
                .join(" "),
        })
        .map(|line| line + "\n")
        .collect()
}

/// [`corpus`] with every line's number appended: no two lines equal, none empty.
fn distinct_corpus(n: usize) -> String {
    corpus(n)
        .lines()
        .enumerate()
        .map(|(i, line)| format!("{line} {i}\n").trim_start().to_string())
        .collect()
}

/// Kills (SIGKILL) `elmo embed EXTRA` over `text` mid-run, runs the same command again, and
/// checks that it continued from the committed lines to the output of an uninterrupted run.
fn killed_and_continued(text: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.txt");
    std::fs::write(&input, text).expect("write");
    let lines = text.lines().count();
    let whole = dir.path().join("whole.hdf5");
    let out = dir.path().join("out.hdf5");
    let args = |output: &Path| -> Vec<String> {
        [
            "embed",
            "--quiet",
            "--commit-mib",
            "0",
            "--batch-size",
            "16",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .chain([path(&input).to_string(), path(output).to_string()])
        .collect()
    };
    fn as_str(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    ok(&as_str(&args(&whole)));

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_elmo"))
        .args(args(&out))
        .spawn()
        .expect("spawn");
    let partial = dir.path().join(".out.hdf5.partial");
    let started = std::time::Instant::now();
    // Killed once a good share of the lines is on disk (the partial file grows at commits).
    while std::fs::metadata(&partial).map_or(0, |m| m.len()) < 400_000 {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended before it could be killed"
        );
        assert!(started.elapsed().as_secs() < 120, "no progress");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert!(!out.exists(), "nothing under the output name");

    // The dead writer's lock is reported, and cleared on request.
    let stderr = fails(&as_str(&args(&out)));
    assert!(stderr.contains("stale lock"), "{stderr}");
    let mut again = args(&out);
    again.retain(|a| a != "--quiet");
    again.push("--break-stale-lock".into());
    let result = elmo(&as_str(&again));
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let stderr = String::from_utf8_lossy(&result.stderr);
    let continued: usize = stderr
        .split("continuing an interrupted run: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("did not continue: {stderr}"));
    assert!(continued > 0 && continued < lines, "{continued} lines kept");
    assert_eq!(contents(&out), contents(&whole));
    assert_eq!(
        leftovers(dir.path()).len(),
        2,
        "{:?}",
        leftovers(dir.path())
    );
}

/// Regression (issue 49): a killed `elmo embed` lost everything. Killed (SIGKILL) mid-run, the
/// next run of the same command continues from the committed lines, and the output equals an
/// uninterrupted run's: every dataset and `sentence_to_index`.
#[test]
fn a_killed_run_continues_to_the_same_output() {
    killed_and_continued(&corpus(4000), &[]);
}

/// The same with datasets named by their sentences: the committed datasets are found by name.
#[test]
fn a_killed_run_with_sentence_keys_continues_to_the_same_output() {
    killed_and_continued(&distinct_corpus(4000), &["--use-sentence-keys"]);
}

/// AllenNLP's `--use-sentence-keys` (each dataset named by its sentence, no `sentence_to_index`)
/// and `--forget-sentences` (line numbers, no `sentence_to_index`): the same vectors as the
/// default layout; an input that cannot be keyed is refused before anything is written.
#[test]
fn sentence_keys_and_forgotten_sentences_hold_the_same_vectors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = distinct_corpus(40);
    let input = dir.path().join("input.txt");
    std::fs::write(&input, &text).expect("write");
    let run = |name: &str, extra: &[&str]| {
        let output = dir.path().join(name);
        let mut args = vec!["embed", "--quiet", path(&input), path(&output)];
        args.extend_from_slice(extra);
        ok(&args);
        contents(&output)
    };
    let (lines, index) = run("lines.hdf5", &[]);
    assert!(index.contains("\"39\""), "{index}");
    let (keyed, keyed_index) = run("keyed.hdf5", &["--use-sentence-keys"]);
    assert_eq!(keyed_index, "", "no sentence_to_index with sentence keys");
    let by_sentence: Datasets = text
        .lines()
        .enumerate()
        .map(|(i, line)| (line.trim().to_string(), lines[&i.to_string()].clone()))
        .collect();
    assert_eq!(keyed, by_sentence);
    let (forgotten, forgotten_index) = run("forgotten.hdf5", &["--forget-sentences"]);
    assert_eq!(forgotten_index, "");
    assert_eq!(forgotten, lines);

    for (bad, expected) in [
        ("a b\nc\na b\n", "input.txt:3: the same sentence as line 1"),
        ("a b\n\nc\n", "input.txt:2: an empty line"),
        ("a\n.\n", "input.txt:2: `.`"),
        ("a\nb / c\n", "input.txt:2: a sentence with `/`"),
    ] {
        let bad_dir = tempfile::tempdir().expect("tempdir");
        let (_, result) = embed(bad_dir.path(), bad, &["--use-sentence-keys"]);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(
            !result.status.success() && stderr.contains(expected),
            "{bad:?}: {stderr}"
        );
        assert!(
            leftovers(bad_dir.path()).is_empty(),
            "{:?}",
            leftovers(bad_dir.path())
        );
    }
}

/// Parts written with `--use-sentence-keys` merge with `elmo merge --use-sentence-keys` to the
/// output of one run; parts with `--forget-sentences` merge to one without `sentence_to_index`;
/// mixed-up parts are clear errors.
#[test]
fn keyed_and_forgetful_shards_merge_to_the_output_of_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.txt");
    std::fs::write(&input, distinct_corpus(30)).expect("write");
    let run = |output: &Path, extra: &[&str]| {
        let mut args = vec!["embed", "--quiet", path(&input), path(output)];
        args.extend_from_slice(extra);
        ok(&args);
    };
    let shards = |flag: &str| -> Vec<PathBuf> {
        (0..2)
            .map(|k| {
                let part = dir.path().join(format!("part{flag}-{k}.hdf5"));
                run(&part, &["--shard", &format!("{k}/2"), flag]);
                part
            })
            .collect()
    };
    let merge = |output: &Path, parts: &[PathBuf], extra: &[&str]| {
        let mut args = vec!["merge", "--quiet", path(output)];
        args.extend_from_slice(extra);
        args.extend(parts.iter().map(|p| path(p)));
        elmo(&args)
    };
    for flag in ["--use-sentence-keys", "--forget-sentences"] {
        let whole = dir.path().join(format!("whole{flag}.hdf5"));
        run(&whole, &[flag]);
        let merged = dir.path().join(format!("merged{flag}.hdf5"));
        let extra: &[&str] = if flag == "--use-sentence-keys" {
            &[flag]
        } else {
            &[]
        };
        let result = merge(&merged, &shards(flag), extra);
        assert!(
            result.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        assert_eq!(contents(&merged), contents(&whole), "{flag}");
    }

    let keyed = shards("--use-sentence-keys");
    let failed = |parts: &[PathBuf], extra: &[&str]| {
        let output = dir.path().join("bad.hdf5");
        let result = merge(&output, parts, extra);
        assert!(!result.status.success() && !output.exists());
        String::from_utf8_lossy(&result.stderr).into_owned()
    };
    let stderr = failed(&keyed, &[]);
    assert!(
        stderr.contains("merge with `elmo merge --use-sentence-keys`"),
        "{stderr}"
    );
    let stderr = failed(
        &[keyed[0].clone(), keyed[0].clone()],
        &["--use-sentence-keys"],
    );
    assert!(stderr.contains("is in both"), "{stderr}");
    let indexed = dir.path().join("indexed.hdf5");
    run(&indexed, &["--shard", "1/2"]);
    let stderr = failed(
        &[keyed[0].clone(), indexed.clone()],
        &["--use-sentence-keys"],
    );
    assert!(stderr.contains("without --use-sentence-keys"), "{stderr}");
    let forgotten = shards("--forget-sentences");
    let stderr = failed(&[forgotten[0].clone(), indexed], &[]);
    assert!(
        stderr.contains("has no sentence_to_index but") && stderr.contains("--forget-sentences"),
        "{stderr}"
    );
}

/// `elmo embed - OUTPUT` reads standard input (AllenNLP's `elmo` takes `-` too): the output of
/// the same text read from a file; an error names `<stdin>` and its line; the copy of the input
/// is gone afterwards either way.
#[test]
fn standard_input_embeds_as_a_file_does() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let (from_file, result) = embed(dir.path(), &corpus(30), &[]);
    assert!(result.status.success());
    let piped = |text: &[u8], output: &Path| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_elmo"))
            .args(["embed", "--quiet", "-", path(output)])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text)
            .expect("write stdin");
        child.wait_with_output().expect("wait")
    };
    let from_stdin = dir.path().join("stdin.hdf5");
    let result = piped(corpus(30).as_bytes(), &from_stdin);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_eq!(contents(&from_stdin), contents(&from_file));
    let bad = dir.path().join("bad.hdf5");
    let result = piped(b"fine\nbad \xff byte\n", &bad);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && stderr.contains("<stdin>:2: invalid UTF-8"),
        "{stderr}"
    );
    let mut left = leftovers(dir.path());
    left.sort();
    assert_eq!(left, ["out.hdf5", "stdin.hdf5"]);
}

/// gzip-compressed text in two members (as `cat a.gz b.gz` makes), from a file and from
/// standard input, embeds as the text does: the same file, `sentence_to_index` included; a
/// cut stream is a read error naming the input that leaves no output.
#[test]
fn gzip_input_embeds_as_its_text() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = corpus(30);
    let (plain, result) = embed(dir.path(), &text, &[]);
    assert!(result.status.success(), "{result:?}");
    let (first, second) = text.split_at(text.len() / 2);
    let mut gzip = Vec::new();
    for member in [first, second] {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(member.as_bytes()).expect("compress");
        gzip.extend(encoder.finish().expect("finish"));
    }
    let input = dir.path().join("input.txt.gz");
    std::fs::write(&input, &gzip).expect("write");
    let from_gzip = dir.path().join("gzip.hdf5");
    ok(&["embed", "--quiet", path(&input), path(&from_gzip)]);
    assert_eq!(contents(&from_gzip), contents(&plain));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_elmo"))
        .args([
            "embed",
            "--quiet",
            "-",
            path(&dir.path().join("piped.hdf5")),
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    (child.stdin.take().expect("stdin"))
        .write_all(&gzip)
        .expect("write stdin");
    assert!(child.wait().expect("wait").success());
    assert_eq!(contents(&dir.path().join("piped.hdf5")), contents(&plain));

    std::fs::write(&input, &gzip[..gzip.len() - 20]).expect("write");
    let cut = dir.path().join("cut.hdf5");
    let stderr = fails(&["embed", "--quiet", path(&input), path(&cut)]);
    assert!(stderr.contains("input.txt.gz: read error"), "{stderr}");
    let mut left = leftovers(dir.path());
    left.sort();
    assert_eq!(
        left,
        ["gzip.hdf5", "input.txt.gz", "out.hdf5", "piped.hdf5"]
    );
}

/// AllenNLP's `--cuda-device N`: -1 is the default CPU run, N ≥ 0 is `--gpu N` on the build's
/// NVIDIA backend (`cuda` with that feature, else `wgpu`), with the same outcome (on a machine
/// without such a GPU, the same error); it names the device alone.
#[test]
fn cuda_device_is_the_backend_and_gpu_it_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (default, result) = embed(dir.path(), TEXT, &[]);
    assert!(result.status.success(), "{result:?}");
    let default = contents(&default);
    let run = |name: &str, extra: &[&str]| {
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).expect("mkdir");
        let (output, result) = embed(&sub, TEXT, extra);
        let written = output.exists().then(|| contents(&output));
        let stderr = String::from_utf8_lossy(&result.stderr);
        // The error's line (a runtime may log more after it).
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error"))
            .map(String::from);
        (result.status.success(), written, error)
    };
    let (ok, cpu, _) = run("cpu", &["--cuda-device", "-1", "--file-friendly-logging"]);
    assert!(ok && cpu.as_ref() == Some(&default));
    let backend = if cfg!(feature = "cuda-runtime") {
        "cuda"
    } else {
        "wgpu"
    };
    assert_eq!(
        run("named", &["--cuda-device", "0"]),
        run("spelled", &["--backend", backend, "--gpu", "0"])
    );
    for (extra, problem) in [
        (
            &["--cuda-device", "0", "--backend", "flex"][..],
            "cannot be used with",
        ),
        (
            &["--cuda-device", "0", "--gpu", "0"][..],
            "--gpu and --cuda-device",
        ),
        (&["--cuda-device", "-2"][..], "-2"),
    ] {
        let (ok, written, error) = run(&extra.join(""), extra);
        let error = error.unwrap_or_default();
        assert!(
            !ok && written.is_none() && error.contains(problem),
            "{error}"
        );
    }
}

/// `--tokenize` splits raw lines as `elmo train --tokenize` does: the vectors of the text
/// pre-split by the tokenizer, one dataset per line all the same, `sentence_to_index` naming
/// the raw lines.
#[test]
fn tokenize_embeds_the_tokenizers_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let raw = ["The cat's mat isn't red.", "Hello, world!", "(e.g. U.S.A.)"];
    let split: Vec<String> = raw
        .iter()
        .map(|line| elmo_model::tokenizer::tokenize(line).join(" "))
        .collect();
    assert_eq!(split[0], "The cat 's mat is n't red .");
    let (tokenized, result) = embed(dir.path(), &(raw.join("\n") + "\n"), &["--tokenize"]);
    assert!(result.status.success(), "{result:?}");
    let tokenized = contents(&tokenized);
    std::fs::create_dir(dir.path().join("split")).expect("mkdir");
    let (presplit, result) = embed(&dir.path().join("split"), &(split.join("\n") + "\n"), &[]);
    assert!(result.status.success(), "{result:?}");
    assert_eq!(tokenized.0, contents(&presplit).0);
    assert_eq!(tokenized.0["0"].0, [3, 8, 32]);
    assert!(
        tokenized.1.contains("\"The cat's mat isn't red.\": \"0\""),
        "{}",
        tokenized.1
    );
}

/// `--gpu N` picks the GPU of a GPU backend: refused for a CPU backend or a command without
/// one, and a GPU the machine lacks is the device's start error, naming what was asked for.
#[test]
fn a_gpu_index_is_checked_and_reaches_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (output, result) = embed(dir.path(), TEXT, &["--gpu", "1"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && stderr.contains("runs on flex"),
        "{stderr}"
    );
    assert!(!output.exists());
    let input = dir.path().join("input.txt");
    let vocab = dir.path().join("vocab.txt");
    let stderr = fails(&["--gpu", "0", "vocab", "--out", path(&vocab), path(&input)]);
    assert!(stderr.contains("does not compute on a GPU"), "{stderr}");
    if elmo_test_support::wgpu_device_or_skip("a_gpu_index_reaches_the_device").is_some() {
        // The default adapter opens; a hundredth discrete GPU does not.
        let (output, result) = embed(dir.path(), TEXT, &["--backend", "wgpu", "--gpu", "99"]);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(
            !result.status.success()
                && stderr.contains("--backend wgpu could not start")
                && stderr.contains("DiscreteGpu(99)"),
            "{stderr}"
        );
        assert!(!output.exists());
    }
}

/// `--shard K/N` parts merge to the output of one run over all lines, `sentence_to_index` byte
/// for byte (sentences repeated within a part and across parts); `--lines A:B` writes the lines
/// it names with their global numbers; overlapping or missing parts are clear errors.
#[test]
fn shards_merge_to_the_output_of_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.txt");
    std::fs::write(&input, corpus(12).repeat(2) + &corpus(36)).expect("write");
    let run = |output: &Path, extra: &[&str]| {
        let mut args = vec!["embed", "--quiet", path(&input), path(output)];
        args.extend_from_slice(extra);
        ok(&args);
    };
    let whole = dir.path().join("whole.hdf5");
    run(&whole, &[]);
    let parts: Vec<PathBuf> = (0..3)
        .map(|k| {
            let part = dir.path().join(format!("part-{k}.hdf5"));
            run(&part, &["--shard", &format!("{k}/3")]);
            part
        })
        .collect();
    let (first, _) = contents(&parts[0]);
    assert_eq!(
        first.keys().map(|k| k.parse::<usize>().unwrap()).max(),
        Some(19)
    );
    let merged = dir.path().join("merged.hdf5");
    let mut args = vec!["merge", "--quiet", path(&merged)];
    args.extend(parts.iter().rev().map(|p| path(p)));
    ok(&args);
    assert_eq!(contents(&merged), contents(&whole));

    let lines = dir.path().join("lines.hdf5");
    run(&lines, &["--lines", "10:13"]);
    let (datasets, index) = contents(&lines);
    assert_eq!(datasets.keys().collect::<Vec<_>>(), ["10", "11", "12"]);
    assert_eq!(datasets["11"], contents(&whole).0["11"]);
    assert!(index.contains("\"11\""), "{index}");

    let overlap = fails(&[
        "merge",
        path(&dir.path().join("m2.hdf5")),
        path(&parts[0]),
        path(&lines),
    ]);
    assert!(overlap.contains("line 10 is in both"), "{overlap}");
    let gap = fails(&[
        "merge",
        path(&dir.path().join("m3.hdf5")),
        path(&parts[0]),
        path(&parts[2]),
    ]);
    assert!(gap.contains("line 20 is in no part"), "{gap}");
    // A line number spelt with a leading zero is the same line.
    let padded = dir.path().join("padded.hdf5");
    let file = hdf5_pure::File::create(&padded).expect("create");
    file.root()
        .create_dataset("07", |b| {
            b.with_f32_data(&[0.0]).with_shape(&[1]);
        })
        .expect("dataset");
    file.close().expect("close");
    let overlap = fails(&[
        "merge",
        path(&dir.path().join("m4.hdf5")),
        path(&parts[0]),
        path(&padded),
    ]);
    assert!(overlap.contains("line 7 is in both"), "{overlap}");
    assert!(!dir.path().join("m2.hdf5").exists() && !dir.path().join("m3.hdf5").exists());
    // The merged output is an HDF5 file in a folder that exists, as `embed`'s.
    let text = fails(&["merge", path(&dir.path().join("m5.txt")), path(&parts[0])]);
    assert!(text.contains("unsupported output format"), "{text}");
    let nowhere = dir.path().join("no/m6.hdf5");
    let folder = fails(&["merge", path(&nowhere), path(&parts[0])]);
    assert!(folder.contains("does not exist"), "{folder}");
    assert!(!dir.path().join("m5.txt").exists() && !dir.path().join("no").exists());
    for bad in ["--shard=3/3", "--shard=1/0", "--lines=5:2", "--lines=x:3"] {
        let stderr = fails(&["embed", path(&input), path(&dir.path().join("b.hdf5")), bad]);
        assert!(
            stderr.contains(bad.split('=').nth(1).unwrap()),
            "{bad}: {stderr}"
        );
    }
}

/// A part whose `sentence_to_index` names a line it does not hold, or no line number, is refused
/// with the part and the sentence named, and nothing is written.
#[test]
fn a_sentence_to_index_naming_another_line_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (k, (index, problem)) in [
        (
            r#"{"a": "0", "b": "5"}"#,
            r#"names 5 for "b", not one of its lines"#,
        ),
        (
            r#"{"a": "0", "b": 1}"#,
            r#"names 1 for "b", not a line number"#,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let part = dir.path().join(format!("part-{k}.hdf5"));
        let file = hdf5_pure::File::create(&part).expect("create");
        for name in ["0", "1"] {
            file.root()
                .create_dataset(name, |b| {
                    b.with_f32_data(&[0.0]).with_shape(&[1]);
                })
                .expect("dataset");
        }
        file.root()
            .create_dataset("sentence_to_index", |b| {
                b.with_vlen_strings(&[index]);
            })
            .expect("string");
        file.close().expect("close");
        let merged = dir.path().join(format!("merged-{k}.hdf5"));
        let stderr = fails(&["merge", path(&merged), path(&part)]);
        assert!(
            stderr.contains(problem) && stderr.contains(&format!("part-{k}.hdf5")),
            "{stderr}"
        );
        assert!(!merged.exists());
    }
}

/// Regression (`cargo xtask fuzz` merge case 702431): a part outside our own layout, read by
/// hdf5-pure, whose dataset declares 2^37 values a row aborted `elmo merge` allocating them
/// (16 TiB); now a clean error naming the part and the dataset, and no output is left.
#[test]
fn a_part_declaring_more_values_than_its_file_holds_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let part = fixture("fuzz/merge-702431-huge-shape.hdf5");
    let merged = dir.path().join("merged.hdf5");
    let stderr = fails(&["merge", path(&merged), path(&part)]);
    assert!(
        stderr.contains("merge-702431-huge-shape.hdf5: dataset")
            && stderr.contains("holds more values than the file's 11744 bytes"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Regression (issue 49): nothing stopped two processes writing one output. A live writer's
/// lock refuses a second one, even with --break-stale-lock.
#[test]
fn a_second_writer_of_an_output_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.txt");
    std::fs::write(&input, TEXT).expect("write");
    let output = dir.path().join("out.hdf5");
    let _held =
        elmo_model::RunLock::acquire(dir.path().join("out.hdf5.lock"), false).expect("lock");
    let stderr = fails(&["embed", "--break-stale-lock", path(&input), path(&output)]);
    assert!(stderr.contains("locked by process"), "{stderr}");
    assert!(!output.exists());
}

/// Regression (issue 49): an output write that fails (a file-size limit standing in for a full
/// disk) is a clear error, and nothing is left: no output, no partial file, no lock.
// A file-size limit is POSIX's (`ulimit -f`, run by `sh`).
#[cfg(unix)]
#[test]
fn a_failed_output_write_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("input.txt");
    std::fs::write(&input, corpus(2000)).expect("write");
    let output = dir.path().join("out.hdf5");
    let failed = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 400; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_elmo"))
        .args([
            "embed",
            "--quiet",
            "--commit-mib",
            "0",
            path(&input),
            path(&output),
        ])
        .output()
        .expect("run elmo under a file-size limit");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{stderr}");
    assert!(
        stderr.contains("out.hdf5"),
        "the error names the output: {stderr}"
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

/// Every dataset's values of an `elmo embed` output, by dataset name.
fn all_values(output: &Path) -> Vec<(String, Vec<f32>)> {
    let file = hdf5_pure::File::open(output).expect("open output");
    let mut names = file.root().datasets().expect("datasets");
    names.retain(|n| n != "sentence_to_index");
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let (_, values) = dataset(&file, &n);
            (n, values)
        })
        .collect()
}

/// The largest difference between two outputs' values, and their largest magnitude.
fn difference(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let (mut diff, mut scale) = (0.0f32, 0.0f32);
    for ((name_a, a), (name_b, b)) in a.iter().zip(b) {
        assert_eq!((name_a, a.len()), (name_b, b.len()));
        for (x, y) in a.iter().zip(b) {
            diff = diff.max((x - y).abs());
            scale = scale.max(x.abs());
        }
    }
    (diff, scale)
}

/// `--precision mixed` is refused on ndarray, and on flex where the CPU has no AMX; on flex with
/// AMX (the LSTM's products in bf16) and on wgpu (lavapipe in CI) its vectors differ from
/// `f32`'s by 16-bit rounding only; on a GPU device without 16-bit floats (wgpu on OpenGL) it
/// is refused. `--backend vulkan` needs the opt-in `vulkan` feature.
#[test]
fn mixed_precision_runs_where_it_pays_within_its_tolerance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = fixture("tiny/options.json");
    let weights = fixture("tiny/weights.hdf5");
    let model = ["--options", path(&options), "--weights", path(&weights)];
    let run = |name: &str, extra: &[&str]| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).expect("dir");
        let args: Vec<&str> = model.iter().chain(extra).copied().collect();
        let (output, result) = embed(&sub, TEXT, &args);
        (output, result)
    };
    let (_, refused) = run("ndarray", &["--backend", "ndarray", "--precision", "mixed"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("not on ndarray"),
        "{stderr}"
    );
    let (cpu_mixed, cpu) = run("cpu", &["--precision", "mixed"]);
    let stderr = String::from_utf8_lossy(&cpu.stderr);
    if elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Widest) {
        assert!(cpu.status.success(), "{stderr}");
        let (f32_output, f32_run) = run("cpu-f32", &[]);
        assert!(f32_run.status.success());
        let (mixed, scale) = difference(&all_values(&f32_output), &all_values(&cpu_mixed));
        eprintln!(
            "mixed precision on the CPU: largest difference {mixed:e} of values up to {scale}"
        );
        assert!(mixed > 0.0, "the mixed run computed in f32");
        assert!(mixed <= 1e-2 * scale, "{mixed} of {scale}");
    } else {
        assert!(
            !cpu.status.success() && stderr.contains("this one has none"),
            "{stderr}"
        );
    }
    // A backend this build leaves out is refused with the feature that brings it.
    for (backend, built) in [
        ("vulkan", cfg!(feature = "vulkan")),
        ("cuda", cfg!(feature = "cuda-runtime")),
    ] {
        if !built {
            let (_, refused) = run(backend, &["--backend", backend]);
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert!(
                !refused.status.success() && stderr.contains(&format!("--features {backend}")),
                "{stderr}"
            );
        }
    }
    let Some(gpu) = elmo_test_support::wgpu_device_or_skip("mixed_precision_runs_on_a_gpu") else {
        return;
    };
    if !elmo_test_support::sixteen_bit_floats(&gpu) {
        let (_, refused) = run("no-f16", &["--backend", "wgpu", "--precision", "mixed"]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains("has none"),
            "{stderr}"
        );
        return;
    }
    let outputs: Vec<_> = [
        ("f32", &["--backend", "wgpu"][..]),
        ("mixed", &["--backend", "wgpu", "--precision", "mixed"][..]),
        ("vulkan", &["--backend", "vulkan"][..]),
    ]
    .into_iter()
    .filter(|(name, _)| *name != "vulkan" || cfg!(feature = "vulkan"))
    .map(|(name, extra)| {
        let (output, result) = run(name, extra);
        assert!(
            result.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        all_values(&output)
    })
    .collect();
    let (mixed, scale) = difference(&outputs[0], &outputs[1]);
    eprintln!("mixed precision: largest difference {mixed:e} of values up to {scale}");
    assert!(mixed > 0.0, "the mixed run computed in f32");
    assert!(mixed <= 1e-2 * scale, "{mixed} of {scale}");
    if let Some(spirv) = outputs.get(2) {
        let (spirv, _) = difference(&outputs[0], spirv);
        assert!(spirv <= 1e-5, "vulkan vs wgpu: {spirv}");
    }
}

/// Reads `output` through h5py (libhdf5, as AllenNLP's users read `elmo` outputs): its dataset
/// names, and for each dataset, looked up by name, its shape, type, first value and sum; and
/// `sentence_to_index`. `None` where h5py cannot be imported, unless `ELMO_REQUIRE_H5PY` is set
/// (`.ci/run` sets it and installs h5py).
fn read_with_h5py(output: &Path, input: &Path) -> Option<serde_json::Value> {
    // `allennlp`: the sentence_to_index string AllenNLP's `elmo` command writes for the input
    // (allennlp/commands/elmo.py: `sentence_to_index[sentence] = key` line by line, then
    // `json.dumps`).
    const SCRIPT: &str = r#"
import json, sys
import h5py
allennlp = {}
with open(sys.argv[2], encoding="utf-8") as input_file:
    for i, line in enumerate(input_file):
        allennlp[line.strip()] = str(i)
with h5py.File(sys.argv[1], "r") as f:
    names = list(f.keys())
    datasets = {}
    for name in reversed(sorted(names)):
        if name == "sentence_to_index":
            continue
        d = f[name]
        v = d[()]
        datasets[name] = [list(d.shape), str(d.dtype), v.ravel()[:1].tolist(),
                          float(v.astype("float64").sum())]
    s = f["sentence_to_index"][0]
    print(json.dumps({"names": names, "datasets": datasets,
                      "sentence_to_index": s.decode() if isinstance(s, bytes) else s,
                      "allennlp": json.dumps(allennlp),
                      "hdf5": h5py.version.hdf5_version}))
"#;
    let import = std::process::Command::new("python3")
        .args(["-c", "import h5py"])
        .output();
    if !import.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var("ELMO_REQUIRE_H5PY").is_err(),
            "ELMO_REQUIRE_H5PY is set but python3 cannot import h5py"
        );
        eprintln!("h5py is not installed: the output was not read through libhdf5");
        return None;
    }
    let result = std::process::Command::new("python3")
        .args(["-c", SCRIPT, path(output), path(input)])
        .output()
        .expect("run python3");
    assert!(
        result.status.success(),
        "h5py could not read {}: {}",
        output.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    Some(serde_json::from_slice(&result.stdout).expect("the script's JSON"))
}

/// libhdf5 reads what `elmo embed` writes, every dataset found by name through the root group's
/// B-tree (301 lines: two levels of it), with the values hdf5-pure reads; `sentence_to_index` is
/// byte for byte AllenNLP's (key order, repeats, Python's escapes, its lines and whitespace).
#[test]
fn h5py_reads_every_dataset_by_name_and_sentence_to_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Lines ending at a lone `\r` and tokens apart by U+001C, as Python reads them.
    let text = corpus(296)
        + "na\u{ef}ve caf\u{e9}\nsay \"hi\" \\ back\n  emoji \u{1f600}\ttab\nthe\ra\u{1c}b\r\n";
    let (output, result) = embed(dir.path(), &text, &[]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let Some(read) = read_with_h5py(&output, &dir.path().join("input.txt")) else {
        return;
    };
    let file = hdf5_pure::File::open(&output).expect("open output");
    let mut names = file.root().datasets().expect("datasets");
    let mut h5py_names: Vec<String> = read["names"]
        .as_array()
        .expect("names")
        .iter()
        .map(|n| n.as_str().expect("a name").to_string())
        .collect();
    names.sort();
    h5py_names.sort();
    assert_eq!(h5py_names, names);
    assert_eq!(names.len(), 302);
    for name in names.iter().filter(|n| *n != "sentence_to_index") {
        let (shape, values) = dataset(&file, name);
        let [h5py_shape, dtype, first, sum] = read["datasets"][name]
            .as_array()
            .expect("a dataset")
            .as_slice()
        else {
            panic!("{name}: {}", read["datasets"][name]);
        };
        let h5py_shape: Vec<usize> = serde_json::from_value(h5py_shape.clone()).expect("shape");
        assert_eq!(h5py_shape, shape, "{name}");
        assert_eq!(dtype, "float32", "{name}");
        let first: Vec<f32> = serde_json::from_value(first.clone()).expect("first");
        assert_eq!(first, values[..values.len().min(1)], "{name}");
        let ours: f64 = values.iter().map(|&v| f64::from(v)).sum();
        let theirs = sum.as_f64().expect("sum");
        assert!(
            (ours - theirs).abs() <= 1e-6 * (1.0 + ours.abs()),
            "{name}: {ours} vs {theirs}"
        );
    }
    let ours = file
        .dataset("sentence_to_index")
        .and_then(|d| d.read_string())
        .expect("sentence_to_index");
    assert_eq!(
        read["sentence_to_index"], ours[0],
        "libhdf5 {}",
        read["hdf5"]
    );
    assert_eq!(read["allennlp"], ours[0]);
}

/// `--options-file URL --weight-file URL` as AllenNLP's `elmo` command takes them: the files
/// are downloaded once into `ELMO_CACHE_DIR`, the vectors are those of the local files, and
/// later runs read the cache without a request (the server gone); a missing file names its URL
/// and status, an unknown model name the names there are.
#[test]
fn files_named_by_url_are_downloaded_once_into_the_cache() {
    let (options, weights) = (
        fixture("allennlp/options.json"),
        fixture("allennlp/lm_weights.hdf5"),
    );
    let read = |p: &Path| std::fs::read(p).expect("fixture");
    let server = FileServer::start(vec![
        ("/elmo/options.json", Reply::File(read(&options))),
        ("/elmo/weights.hdf5", Reply::File(read(&weights))),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let local = dir.path().join("local");
    std::fs::create_dir(&local).expect("mkdir");
    let files = ["--options", path(&options), "--weights", path(&weights)];
    let (expected, result) = embed(&local, TEXT, &files);
    assert!(result.status.success(), "{result:?}");
    let input = local.join("input.txt");
    let (options_url, weights_url) = (
        server.url("/elmo/options.json"),
        server.url("/elmo/weights.hdf5"),
    );
    let remote = |name: &str, options_url: &str| {
        let output = dir.path().join(format!("{name}.hdf5"));
        let args = [
            "embed",
            "--quiet",
            path(&input),
            path(&output),
            "--options-file",
            options_url,
            "--weight-file",
            &weights_url,
        ];
        let result = elmo_with_env(&args, &[("ELMO_CACHE_DIR", path(&cache))]);
        (output, result)
    };
    let (first, result) = remote("first", &options_url);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_eq!(contents(&first), contents(&expected));
    assert_eq!(server.requests(), 2);
    let (_, result) = remote("second", &options_url);
    assert!(result.status.success(), "{result:?}");
    assert_eq!(server.requests(), 2, "the second run downloads nothing");
    let (output, result) = remote("missing", &server.url("/elmo/gone.json"));
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success() && !output.exists(), "{stderr}");
    assert!(
        stderr.contains("/elmo/gone.json: the server answered HTTP 404"),
        "{stderr}"
    );
    drop(server);
    let (third, result) = remote("third", &options_url);
    assert!(result.status.success(), "{result:?}");
    assert_eq!(contents(&third), contents(&expected));
    let stderr = fails(&["embed", "--model", "large", path(&input), "o.hdf5"]);
    assert!(
        stderr.contains(
            "large: not a model directory, nor the name of a model AllenNLP publishes (small, \
             medium, original, original-5.5b)"
        ),
        "{stderr}"
    );
}
