//! `cargo xtask fuzz -- --cases N`: seeded mutation fuzzing of every reader of user files, the
//! check that bad input is a clean error and never a panic, an abort or a hang.
//!
//! Readers (`--readers`, all by default): `options` (options.json), `weights` (an HDF5 weight
//! file loaded against its options), `config` (a run's config.json), `vocab` (vocab.txt),
//! `trainer` (a checkpoint's trainer.json), `run` (a whole run directory opened as `elmo embed
//! --model` does, one of its files mutated), `conll` and `tsv` (task files), `input` (the
//! text of `elmo embed`, through the binary), `keys` (the same with `--use-sentence-keys`),
//! `merge` (an `elmo embed` output read as a part by `elmo merge`, through the binary) and
//! `resume` (the partial output of a killed `elmo embed`, one of its three files mutated,
//! continued by the binary: an output of every line, or a clean error that keeps the partial
//! files for `--restart`).
//!
//! Each case mutates a valid file (bit flips, random byte runs, truncation, repeated chunks,
//! extreme numbers in JSON, dropped lines), reads it, and counts the outcome: read, clean error,
//! **panic**, **abort** (the process died) or **hang** (over 30 s). The cases of a reader run in
//! a child process, in-process and under `catch_unwind`; a child that dies names its case, and
//! the parent goes on from the next one. Defects are printed with their case (reproduce with
//! `--readers R --first CASE --cases 1`) and their input is kept in `--keep DIR`. Exit status 1
//! when any defect was found.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn::tensor::Device;
use elmo_test_support::bench::flag_value;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const READERS: [&str; 12] = [
    "options", "weights", "config", "vocab", "trainer", "run", "conll", "tsv", "input", "keys",
    "merge", "resume",
];
/// A case slower than this is a hang.
const HANG: Duration = Duration::from_secs(30);

const DEMO_OPTIONS: &str = include_str!("../../../fixtures/allennlp/options.json");
const DEMO_WEIGHTS: &[u8] = include_bytes!("../../../fixtures/allennlp/lm_weights.hdf5");

/// What one case did.
enum Outcome {
    Read,
    CleanError,
    Panic(String),
}

/// Numbers that break naive readers: huge, negative, zero, non-finite, beyond `u64`.
const EXTREMES: [&str; 10] = [
    "0",
    "-1",
    "1000000000000",
    "18446744073709551615",
    "99999999999999999999999",
    "1e309",
    "-1e309",
    "NaN",
    "4294967296",
    "0.5",
];

/// One mutation of `bytes`.
fn mutate(bytes: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut out = bytes.to_vec();
    // A third of the cases change only numbers (of a UTF-8 file), so that a JSON file still
    // parses and its values reach the checks (and the allocations) behind the parser.
    if let (true, Ok(text)) = (rng.random_bool(0.33), std::str::from_utf8(bytes)) {
        let mut edited = text.to_string();
        for _ in 0..rng.random_range(1..=2) {
            let spans = number_spans(&edited);
            let Some(&(start, end)) = spans.choose(rng) else {
                break;
            };
            edited.replace_range(start..end, EXTREMES.choose(rng).expect("values"));
        }
        return edited.into_bytes();
    }
    // One mutation half of the time, so that many inputs stay nearly valid and reach the
    // checks behind the parser.
    let n_mutations = if rng.random_bool(0.5) {
        1
    } else {
        rng.random_range(2..=3)
    };
    for _ in 0..n_mutations {
        if out.is_empty() {
            out.push(rng.random());
            continue;
        }
        let at = rng.random_range(0..out.len());
        match rng.random_range(0..7) {
            0 => {
                for _ in 0..rng.random_range(1..=8) {
                    let i = rng.random_range(0..out.len());
                    out[i] ^= 1 << rng.random_range(0..8);
                }
            }
            1 => {
                let len = rng.random_range(1..=64).min(out.len() - at);
                for b in &mut out[at..at + len] {
                    *b = rng.random();
                }
            }
            2 => out.truncate(at),
            3 => {
                let len = rng.random_range(1..=256).min(out.len() - at);
                let chunk = out[at..at + len].to_vec();
                for _ in 0..rng.random_range(1..=4) {
                    out.splice(at..at, chunk.iter().copied());
                }
            }
            4 => {
                // A number of the text replaced by an extreme one.
                let text = String::from_utf8_lossy(&out).into_owned();
                let numbers: Vec<(usize, usize)> = number_spans(&text);
                if let Some(&(start, end)) = numbers.choose(rng) {
                    let value = EXTREMES.choose(rng).expect("values");
                    out = [
                        &text.as_bytes()[..start],
                        value.as_bytes(),
                        &text.as_bytes()[end..],
                    ]
                    .concat();
                }
            }
            5 => {
                // A line dropped or repeated many times.
                let text = String::from_utf8_lossy(&out).into_owned();
                let mut lines: Vec<&str> = text.split('\n').collect();
                let i = rng.random_range(0..lines.len());
                if rng.random_bool(0.5) {
                    lines.remove(i);
                } else {
                    let line = lines[i];
                    for _ in 0..rng.random_range(1..=200) {
                        lines.insert(i, line);
                    }
                }
                out = lines.join("\n").into_bytes();
            }
            _ => {
                let insert: Vec<u8> = match rng.random_range(0..3) {
                    0 => vec![0; rng.random_range(1..=16)],
                    1 => "\u{1F600}\t\r\u{0}"
                        .repeat(rng.random_range(1..=8))
                        .into_bytes(),
                    _ => vec![b'x'; rng.random_range(1..=70_000)],
                };
                out.splice(at..at, insert);
            }
        }
    }
    out
}

/// The byte spans of the ASCII numbers of `text`.
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// The valid inputs every reader's cases start from, made once in `dir`.
struct Seeds {
    dir: PathBuf,
    config: Vec<u8>,
    vocab: Vec<u8>,
    run: PathBuf,
    trainer: Vec<u8>,
    /// `elmo embed`'s output of [`INPUT`]: the part that `merge` cases mutate.
    part: Vec<u8>,
    /// The input of the killed run whose partial output `resume` cases mutate.
    resume_input: Vec<u8>,
    /// That partial output's files (name, bytes).
    partial: Vec<(String, Vec<u8>)>,
}

/// The files of a partial `elmo embed` output named `out.hdf5`.
const PARTIAL_FILES: [&str; 3] = [
    ".out.hdf5.partial",
    ".out.hdf5.partial.json",
    ".out.hdf5.partial.index",
];

/// The arguments of `elmo embed` in the `input`, `keys` and `resume` cases.
const EMBED_ARGS: [&str; 3] = ["--quiet", "--max-tokens", "100000"];

/// The partial output of `elmo embed` of `input` (200 lines) into `dir`, killed half-way: by
/// the kernel's SIGXFSZ at the write that crosses a file-size limit (a signal no destructor
/// sees, as SIGKILL), so the same files each time.
fn killed_embed(dir: &Path) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let input: String = INPUT.repeat(50);
    std::fs::create_dir_all(dir).expect("resume seed dir");
    std::fs::write(dir.join("input"), &input).expect("resume input");
    let whole = dir.join("whole.hdf5");
    if !whole.exists() {
        let status = Command::new(elmo_binary())
            .arg("embed")
            .args(EMBED_ARGS)
            .arg(dir.join("input"))
            .arg(&whole)
            .status()
            .expect("run elmo embed");
        assert!(status.success(), "the resume seed's whole run: {status:?}");
    }
    // Made once (the fuzz children read the parent's).
    if !PARTIAL_FILES.iter().all(|name| dir.join(name).exists()) {
        let size = std::fs::metadata(&whole).expect("whole output").len();
        for name in PARTIAL_FILES {
            let _ = std::fs::remove_file(dir.join(name));
        }
        kill_embed_half_way(dir, size);
    }
    let partial = PARTIAL_FILES
        .iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(name))
                .unwrap_or_else(|e| panic!("the killed run left no {name}: {e}"));
            (name.to_string(), bytes)
        })
        .collect();
    (input.into_bytes(), partial)
}

/// Runs `elmo embed` of `dir/input` into `dir/out.hdf5` under a file-size limit of half the
/// whole output's `size`, and removes the lock the killed run leaves.
fn kill_embed_half_way(dir: &Path, size: u64) {
    // POSIX `ulimit -f` counts 512-byte blocks.
    let killed = Command::new("sh")
        .current_dir(dir)
        .arg("-c")
        .arg(format!("ulimit -f {}; exec \"$0\" \"$@\"", size / 2 / 512))
        .arg(elmo_binary())
        .arg("embed")
        .args(EMBED_ARGS)
        .args(["--commit-mib", "0", "input", "out.hdf5"])
        .status()
        .expect("run elmo embed under a file-size limit");
    assert!(!killed.success(), "the resume seed's run was not killed");
    std::fs::remove_file(dir.join("out.hdf5.lock")).expect("the killed run's lock");
}

/// The files of `dir` and below (sorted).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for file in files_under(from) {
        let target = to.join(file.strip_prefix(from).expect("under"));
        std::fs::create_dir_all(target.parent().expect("parent")).expect("dir");
        std::fs::copy(&file, &target).expect("copy");
    }
}

impl Seeds {
    /// A tiny trained run (two steps) and its files.
    fn make(dir: &Path) -> Self {
        use elmo_train::{TrainConfig, TrainOptions, Vocabulary, train};
        std::fs::create_dir_all(dir).expect("fuzz dir");
        let corpus = dir.join("corpus.txt");
        std::fs::write(
            &corpus,
            "the cat sat on the mat .\na dog ran in the park .\nthe bank by the river .\n",
        )
        .expect("corpus");
        let vocab = Vocabulary::from_tokens(
            [
                "the", "cat", "sat", "on", "mat", ".", "a", "dog", "ran", "in", "park", "bank",
            ]
            .map(String::from),
        );
        let mut config = TrainConfig::preset("tiny").expect("tiny preset");
        config.batch_size = 2;
        config.unroll_steps = 4;
        let run = dir.join("run");
        if !run.join("config.json").exists() {
            let options = TrainOptions {
                run_dir: run.clone(),
                train_files: vec![corpus],
                valid_file: None,
                steps: 2,
                checkpoint_every: 2,
                keep_checkpoints: 1,
                log_every: 1,
                seed: 1,
                resume: false,
                init_from: None,
                kernels: Default::default(),
                break_stale_lock: false,
                tower_devices: Vec::new(),
            };
            train(&config, vocab, &options, &Device::flex(), &mut ()).expect("seed run");
        }
        let part = dir.join("part.hdf5");
        if !part.exists() {
            let input = dir.join("part-input.txt");
            std::fs::write(&input, INPUT).expect("part input");
            let status = Command::new(elmo_binary())
                .args(["embed", "--quiet"])
                .arg(&input)
                .arg(&part)
                .status()
                .expect("run elmo embed");
            assert!(status.success(), "the seed part: {status:?}");
        }
        let read = |p: &Path| std::fs::read(p).expect("seed file");
        let trainer = files_under(&run)
            .into_iter()
            .find(|p| p.ends_with("trainer.json"))
            .expect("trainer.json");
        let (resume_input, partial) = killed_embed(&dir.join("resume-seed"));
        Self {
            dir: dir.to_path_buf(),
            config: read(&run.join("config.json")),
            vocab: read(&run.join("vocab.txt")),
            trainer: read(&trainer),
            run,
            part: read(&part),
            resume_input,
            partial,
        }
    }
}

const CONLL: &str = "# a comment\nThe\tDET\ncat\tNOUN\nsat\tVERB\n.\tPUNCT\n\nA\tDET\ndog\tNOUN\n";
const TSV: &str = "text\tlabel\nthe film was great\tpos\na dull , long film\tneg\nfine\tpos\n";
const INPUT: &str = "The quick brown fox .\n\nI went to the bank to deposit money .\nHi\n";

/// Runs case `case` of `reader` in this process.
fn run_case(reader: &str, case: u64, seeds: &Seeds, keep: Option<&Path>) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(case ^ (reader.len() as u64) << 40);
    let work = seeds.dir.join(format!("case-{reader}"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("case dir");
    let file = work.join("input");
    let write = |bytes: &[u8]| std::fs::write(&file, bytes).expect("case file");
    let device = Device::flex();
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(), String> {
            let text = |e: &dyn std::fmt::Display| e.to_string();
            match reader {
                "options" => {
                    let bytes = mutate(DEMO_OPTIONS.as_bytes(), &mut rng);
                    write(&bytes);
                    elmo_model::BiLmOptions::from_file(&file)
                        .map(drop)
                        .map_err(|e| text(&e))
                }
                "weights" => {
                    let bytes = mutate(DEMO_WEIGHTS, &mut rng);
                    write(&bytes);
                    let options =
                        elmo_model::BiLmOptions::from_json_str(DEMO_OPTIONS, "options.json")
                            .map_err(|e| text(&e))?;
                    let mut weights =
                        elmo_model::weights::WeightFile::open(&file).map_err(|e| text(&e))?;
                    elmo_model::weights::load_bilm_from(&options, &mut weights, &device)
                        .map_err(|e| text(&e))?;
                    weights.finish().map_err(|e| text(&e))
                }
                "config" => {
                    write(&mutate(&seeds.config, &mut rng));
                    elmo_train::TrainConfig::from_file(&file)
                        .map(drop)
                        .map_err(|e| text(&e))
                }
                "vocab" => {
                    write(&mutate(&seeds.vocab, &mut rng));
                    elmo_train::Vocabulary::from_file(&file)
                        .map(drop)
                        .map_err(|e| text(&e))
                }
                "trainer" => {
                    let checkpoint = work.join("checkpoint");
                    std::fs::create_dir_all(&checkpoint).expect("dir");
                    std::fs::write(
                        checkpoint.join("trainer.json"),
                        mutate(&seeds.trainer, &mut rng),
                    )
                    .expect("write");
                    elmo_train::checkpoint::Checkpoint {
                        dir: checkpoint,
                        step: 2,
                    }
                    .trainer_state()
                    .map(drop)
                    .map_err(|e| text(&e))
                }
                "run" => {
                    let run = work.join("run");
                    copy_dir(&seeds.run, &run);
                    let files = files_under(&run);
                    let target = files.choose(&mut rng).expect("run files");
                    let bytes = std::fs::read(target).expect("read");
                    std::fs::write(target, mutate(&bytes, &mut rng)).expect("write");
                    elmo_train::TrainedRun::load(&run, &device)
                        .map(drop)
                        .map_err(|e| text(&e))
                }
                "conll" | "tsv" => {
                    let (seed, kind) = match reader {
                        "conll" => (CONLL, elmo_tasks::TaskKind::Tag),
                        _ => (TSV, elmo_tasks::TaskKind::Classify),
                    };
                    write(&mutate(seed.as_bytes(), &mut rng));
                    let tokenize = rng.random_bool(0.5);
                    // Columns by name or by number; a quarter of the cases read the header
                    // line as a row.
                    let header = rng.random_bool(0.75);
                    let (text_column, label_column) = match header && rng.random_bool(0.5) {
                        true => ("text", "label"),
                        false => ("1", "2"),
                    };
                    elmo_tasks::DataFormat {
                        kind,
                        text_column: text_column.into(),
                        label_column: label_column.into(),
                        header,
                        tokenize,
                        max_tokens: 200,
                    }
                    .read(&file)
                    .map(drop)
                    .map_err(|e| text(&e))
                }
                "input" | "keys" => {
                    // Sentence keys refuse empty lines: their seed has none.
                    let seed = match reader {
                        "keys" => INPUT.replace("\n\n", "\n"),
                        _ => INPUT.to_string(),
                    };
                    write(&mutate(seed.as_bytes(), &mut rng));
                    let keys: &[&str] = match reader {
                        "keys" => &["--use-sentence-keys"],
                        _ => &[],
                    };
                    through_binary(&work, "embed", |command| {
                        command.args(EMBED_ARGS).args(keys).arg(&file);
                    })
                }
                "resume" => {
                    write(&seeds.resume_input);
                    // The index most often: the file a continuing run trusts most.
                    let target = if rng.random_bool(0.6) {
                        2
                    } else {
                        rng.random_range(0..2)
                    };
                    for (k, (name, bytes)) in seeds.partial.iter().enumerate() {
                        let bytes = if k == target {
                            mutate(bytes, &mut rng)
                        } else {
                            bytes.clone()
                        };
                        std::fs::write(work.join(name), bytes).expect("partial file");
                    }
                    continued(&work, &file, &seeds.resume_input)
                }
                "merge" => {
                    write(&mutate(&seeds.part, &mut rng));
                    through_binary(&work, "merge", |command| {
                        command.arg("--quiet").arg(work.join("out.hdf5")).arg(&file);
                    })
                }
                other => panic!("unknown reader {other}"),
            }
        }));
    let outcome = match result {
        Ok(Ok(())) => Outcome::Read,
        Ok(Err(message)) if !message.trim().is_empty() => Outcome::CleanError,
        Ok(Err(_)) => Outcome::Panic("an error without a message".into()),
        Err(payload) => Outcome::Panic(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        ),
    };
    if let (Outcome::Panic(_), Some(keep)) = (&outcome, keep) {
        keep_case(&work, keep, reader, case);
    }
    outcome
}

/// The files a case's run left in `work` besides its input and output.
fn leftovers(work: &Path) -> Vec<String> {
    std::fs::read_dir(work)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "input" && n != "out.hdf5")
        .collect()
}

/// Runs `elmo COMMAND` (its arguments from `args`; for `embed` the output, `out.hdf5`, is
/// added last) in the case directory `work`: a success that leaves nothing but the output, or a
/// clean error (exit status 1) that leaves nothing at all; anything else panics.
fn through_binary(
    work: &Path,
    command: &str,
    args: impl FnOnce(&mut Command),
) -> Result<(), String> {
    let output = work.join("out.hdf5");
    let mut run = Command::new(elmo_binary());
    run.arg(command);
    args(&mut run);
    if command == "embed" {
        run.arg(&output);
    }
    let result = run.output().expect("run elmo");
    let leftovers = leftovers(work);
    match result.status.code() {
        Some(0) if leftovers.is_empty() => Ok(()),
        Some(1) if leftovers.is_empty() && !output.exists() => {
            Err(String::from_utf8_lossy(&result.stderr).into_owned())
        }
        _ => panic!(
            "elmo {command}: {:?}, left {leftovers:?}: {}",
            result.status,
            String::from_utf8_lossy(&result.stderr)
        ),
    }
}

/// Runs `elmo embed` of `input` into `work/out.hdf5`, continuing the partial output there: an
/// output of every line of `text` and nothing else left, or a clean error (exit status 1) with
/// no output that leaves only the partial files (for `--restart`); anything else panics.
fn continued(work: &Path, input: &Path, text: &[u8]) -> Result<(), String> {
    let output = work.join("out.hdf5");
    let result = Command::new(elmo_binary())
        .arg("embed")
        .args(EMBED_ARGS)
        .arg(input)
        .arg(&output)
        .output()
        .expect("run elmo");
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let leftovers = leftovers(work);
    match result.status.code() {
        Some(0) if leftovers.is_empty() => {
            let lines = text.iter().filter(|&&b| b == b'\n').count();
            let mut expected: Vec<String> = (0..lines).map(|i| i.to_string()).collect();
            expected.push("sentence_to_index".into());
            expected.sort();
            let mut names = hdf5_pure::File::open(&output)
                .and_then(|file| file.root().datasets())
                .unwrap_or_else(|e| panic!("elmo embed continued to an unreadable output: {e}"));
            names.sort();
            assert!(
                names == expected,
                "elmo embed continued to an output of other datasets: {names:?}"
            );
            Ok(())
        }
        Some(1)
            if !output.exists()
                && leftovers
                    .iter()
                    .all(|n| PARTIAL_FILES.contains(&n.as_str())) =>
        {
            Err(stderr)
        }
        _ => panic!(
            "elmo embed (continuing): {:?}, left {leftovers:?}: {stderr}",
            result.status
        ),
    }
}

/// The `elmo` binary beside this example (`target/<profile>/elmo`).
fn elmo_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("elmo"))
        .filter(|p| p.exists())
        .expect("the elmo binary (cargo build -p elmo-cli) beside target/*/examples")
}

fn keep_case(work: &Path, keep: &Path, reader: &str, case: u64) {
    let target = keep.join(format!("{reader}-{case}"));
    copy_dir(work, &target);
}

/// The child: runs `cases` of `reader` from `first`, one line per case.
fn child(reader: &str, first: u64, cases: u64, seeds: &Seeds, keep: Option<&Path>) {
    // Panics are counted, not printed: the parent reports them.
    std::panic::set_hook(Box::new(|_| {}));
    let stdout = std::io::stdout();
    for case in first..first + cases {
        writeln!(stdout.lock(), "CASE {case}").expect("stdout");
        let start = Instant::now();
        let outcome = run_case(reader, case, seeds, keep);
        let line = match outcome {
            Outcome::Read => "READ".to_string(),
            Outcome::CleanError => "ERROR".to_string(),
            Outcome::Panic(message) => format!("PANIC {}", message.replace('\n', " ")),
        };
        let slow = if start.elapsed() > HANG { " HANG" } else { "" };
        writeln!(stdout.lock(), "DONE {case} {line}{slow}").expect("stdout");
    }
}

#[derive(Default)]
struct Tally {
    read: u64,
    errors: u64,
    panics: Vec<(u64, String)>,
    aborts: Vec<u64>,
    hangs: Vec<u64>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str, default: &str| flag_value(&args, flag, default);
    let cases: u64 = get("--cases", "100").parse().expect("--cases N");
    let first: u64 = get("--first", "0").parse().expect("--first N");
    let readers = get("--readers", &READERS.join(","));
    let dir = PathBuf::from(get(
        "--dir",
        &std::env::temp_dir()
            .join(format!("elmo-fuzz-{}", std::process::id()))
            .to_string_lossy(),
    ));
    let keep = args
        .iter()
        .position(|a| a == "--keep")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let seeds = Seeds::make(&dir);
        child(&args[i + 1], first, cases, &seeds, keep.as_deref());
        return;
    }
    let seeds = Seeds::make(&dir);
    let exe = std::env::current_exe().expect("own path");
    println!("| reader | cases | read | clean errors | panics | aborts | hangs | seconds |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut defects = 0;
    for reader in readers.split(',') {
        assert!(READERS.contains(&reader), "unknown reader {reader}");
        let started = Instant::now();
        let mut tally = Tally::default();
        let mut next = first;
        while next < first + cases {
            let mut command = Command::new(&exe);
            command
                .args(["--child", reader, "--first", &next.to_string()])
                .args(["--cases", &(first + cases - next).to_string()])
                .arg("--dir")
                .arg(&seeds.dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if let Some(keep) = &keep {
                command.arg("--keep").arg(keep);
            }
            let mut running = command.spawn().expect("run fuzz child");
            let stdout = running.stdout.take().expect("piped stdout");
            let (lines, receive) = std::sync::mpsc::channel::<String>();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    if lines.send(line).is_err() {
                        break;
                    }
                }
            });
            let mut last_started = None;
            let mut hung = false;
            loop {
                match receive.recv_timeout(HANG) {
                    Ok(line) => {
                        if let Some(case) = line.strip_prefix("CASE ") {
                            last_started = case.parse::<u64>().ok();
                        } else if let Some(rest) = line.strip_prefix("DONE ") {
                            let mut parts = rest.splitn(2, ' ');
                            let case: u64 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
                            let what = parts.next().unwrap_or("");
                            if what.ends_with(" HANG") {
                                tally.hangs.push(case);
                            }
                            match what.split(' ').next() {
                                Some("READ") => tally.read += 1,
                                Some("ERROR") => tally.errors += 1,
                                _ => tally.panics.push((case, what.to_string())),
                            }
                            next = case + 1;
                            last_started = None;
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        // A case that runs past the limit: a hang. The child is stopped.
                        let _ = running.kill();
                        hung = true;
                        break;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let status = running.wait().expect("wait for the fuzz child");
            match last_started {
                Some(case) => {
                    // The child died (or was stopped) inside a case.
                    if hung {
                        tally.hangs.push(case);
                    } else {
                        tally.aborts.push(case);
                    }
                    if let Some(keep) = &keep {
                        keep_case(
                            &seeds.dir.join(format!("case-{reader}")),
                            keep,
                            reader,
                            case,
                        );
                    }
                    next = case + 1;
                }
                None if !status.success() => {
                    panic!("fuzz child for {reader} failed: {status:?}")
                }
                None => {}
            }
        }
        let n_defects = tally.panics.len() + tally.aborts.len() + tally.hangs.len();
        defects += n_defects;
        println!(
            "| {reader} | {cases} | {} | {} | {} | {} | {} | {:.0} |",
            tally.read,
            tally.errors,
            tally.panics.len(),
            tally.aborts.len(),
            tally.hangs.len(),
            started.elapsed().as_secs_f64()
        );
        for (case, what) in &tally.panics {
            println!("  {reader} case {case}: {what}");
        }
        for case in &tally.aborts {
            println!("  {reader} case {case}: the process died");
        }
        for case in &tally.hangs {
            println!("  {reader} case {case}: over {} s", HANG.as_secs());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if defects > 0 {
        println!("{defects} defects");
        std::process::exit(1);
    }
}
