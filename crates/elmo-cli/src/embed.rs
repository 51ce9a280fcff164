//! `elmo embed`: ELMo vectors for every line of a text file, written in AllenNLP's `elmo` command
//! HDF5 layout; a killed run continues where it stopped, and `--shard K/N` / `--lines A:B` write
//! one worker's part of the input (joined by `elmo merge`).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use clap::ValueEnum;
use elmo_model::{BiLm, EmbedderConfig, KernelSettings, LayerSelection, Pooling, RunLock};
use indicatif::ProgressBar;

use crate::backend::{Backend, PrecisionArg};
use crate::hdf5_output::{Hdf5EmbeddingWriter, Opened, OutputFingerprint, beside};
use crate::input::{InputSummary, InputText, Sentence, SentenceReader};
use crate::model_source::{HeldModel, ModelArgs};
use crate::sentence_index::{MAX_JSON_BYTES, check_json_bytes, json_bytes_of};
use crate::sentence_keys::SentenceKeys;

/// Which biLM layers to write per sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayerArg {
    /// All `L + 1` layers: dataset shape `(L + 1, n_tokens, 2P)`.
    All,
    /// The top LSTM layer: `(n_tokens, 2P)`.
    Top,
    /// The average of all layers: `(n_tokens, 2P)`.
    Average,
}

/// What each line's dataset holds: its tokens' vectors or their mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PoolArg {
    /// Each token's vectors: `(L + 1, n_tokens, 2P)` or `(n_tokens, 2P)`.
    None,
    /// One vector per line and layer, the mean of its tokens' (TF Hub ELMo's `default` output
    /// pools this way): `(L + 1, 2P)` or `(2P,)`; zeros for an empty line.
    Mean,
}

impl From<PoolArg> for Pooling {
    fn from(arg: PoolArg) -> Self {
        match arg {
            PoolArg::None => Self::Tokens,
            PoolArg::Mean => Self::Mean,
        }
    }
}

impl From<LayerArg> for LayerSelection {
    fn from(arg: LayerArg) -> Self {
        match arg {
            LayerArg::All => Self::All,
            LayerArg::Top => Self::Top,
            LayerArg::Average => Self::Average,
        }
    }
}

/// Arguments of `elmo embed`.
#[derive(Debug, clap::Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// UTF-8 text, one sentence per line, tokens separated by whitespace; `-` reads standard
    /// input (copied to a hidden file beside OUTPUT while the run lasts, e.g. `zcat corpus.gz |
    /// elmo embed - out.hdf5`).
    pub input: PathBuf,
    /// Output file; `.hdf5` or `.h5` gives AllenNLP's layout (one dataset per line, named by its
    /// 0-based index, and `sentence_to_index`).
    pub output: PathBuf,
    /// Layers written for each sentence.
    #[arg(long, value_enum, default_value_t = LayerArg::All)]
    pub layers: LayerArg,
    /// `--layers all`, as AllenNLP's `elmo` command spells it.
    #[arg(long, conflicts_with_all = ["layers", "top", "average"])]
    pub all: bool,
    /// `--layers top`, as AllenNLP's `elmo` command spells it.
    #[arg(long, conflicts_with_all = ["layers", "average"])]
    pub top: bool,
    /// `--layers average`, as AllenNLP's `elmo` command spells it.
    #[arg(long, conflicts_with = "layers")]
    pub average: bool,
    /// `mean`: one vector per line (and layer), the mean of its tokens' vectors, for
    /// sentence-level uses (an output a token count smaller).
    #[arg(long, value_enum, default_value_t = PoolArg::None)]
    pub pool: PoolArg,
    /// Name each line's dataset by its sentence (the line without surrounding whitespace)
    /// instead of its line number, with no `sentence_to_index` (AllenNLP's
    /// `--use-sentence-keys`). No two lines may be equal, empty, `.` or hold a `/`: checked over
    /// the whole input before anything is computed.
    #[arg(long)]
    pub use_sentence_keys: bool,
    /// Write no `sentence_to_index` (AllenNLP's `--forget-sentences`): datasets are named by line
    /// number, and no sentence is kept in memory for the index.
    #[arg(long)]
    pub forget_sentences: bool,
    /// Sentences per biLM call [default: 64 with --stateful (AllenNLP's); otherwise 256 on a
    /// CPU and 1024 on a GPU (wgpu, vulkan): stateless vectors do not depend on it, and more rows
    /// per LSTM step run faster].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: Option<u32>,
    /// Carry the LSTM state from batch to batch, row by row, in input order (AllenNLP's
    /// `ElmoEmbedder` behaviour). By default every sentence starts from a zero state, so its
    /// vectors do not depend on its neighbours or the batch size.
    #[arg(long)]
    pub stateful: bool,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    pub backend: Backend,
    /// AllenNLP's `--cuda-device N`: -1 the CPU (`--backend flex`), N ≥ 0 GPU N (`--gpu N`)
    /// through `--backend cuda` in a build with the `cuda` feature, else `--backend wgpu`.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        conflicts_with = "backend",
        value_parser = clap::value_parser!(i64).range(-1..)
    )]
    pub cuda_device: Option<i64>,
    /// Precision of the large products: `mixed` runs their operands in 16-bit floats (tensor
    /// cores with `--backend vulkan` or `cuda` where the GPU offers them; the LSTM's products
    /// and the char CNN's highways and projection in `bf16` with `--backend flex` on a CPU
    /// with AMX's tiles, Intel Xeon from the 4th generation, or AVX512-BF16, AMD Zen 4 and 5),
    /// vectors within ~1e-2 of `f32`'s (docs/benchmarks.md).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    /// With `--backend cuda`: the products through CubeCL's kernels instead of NVIDIA's cuBLAS
    /// (the same values to float rounding; for comparisons and as a workaround).
    #[cfg(feature = "cuda-runtime")]
    #[arg(long)]
    pub no_cublas: bool,
    /// Split each line with the built-in tokenizer, as `elmo train --tokenize` splits raw text
    /// (punctuation apart, `n't` and `'s`-style clitics; rules in
    /// crates/elmo-model/src/tokenizer.rs), instead of on whitespace (AllenNLP's `elmo`
    /// command). Datasets and `sentence_to_index` stay one per line.
    #[arg(long)]
    pub tokenize: bool,
    /// Refuse lines with more tokens than this (a line's output is held in memory while written).
    #[arg(long, default_value_t = 10_000)]
    pub max_tokens: usize,
    /// Memory for the embeddings of tokens already seen, in MiB (the char CNN is context-free,
    /// so a word of an earlier batch is not encoded again; least recently used words are
    /// dropped when full). 0 encodes every batch's words anew. Outputs are the same either way.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub token_cache_mib: usize,
    /// Stateless mode: at most this many padded positions (rows x longest row) per batch, so
    /// that a few very long lines do not make a huge batch. Stateful batches keep their size.
    /// [default: 8192 on a CPU, 65536 on a GPU]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch_positions: Option<u64>,
    /// Embed only lines A to B−1 (0-based; `A:` to the end), with their global line numbers as
    /// dataset names: one worker's part of a corpus, joined by `elmo merge`.
    #[arg(long, value_name = "A:B", value_parser = parse_lines, conflicts_with = "shard")]
    pub lines: Option<LineRange>,
    /// Embed part K of N (0-based) of the input's lines, contiguous and of near-equal size
    /// (e.g. `--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`); joined by `elmo merge`.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Output written between commits, in MiB: at a commit the values are synced to disk and
    /// their lines recorded as done, so this is what a killed run loses at most (0: commit
    /// every line).
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub commit_mib: usize,
    /// Discard the partial output of an interrupted run instead of continuing it. (A run
    /// continues its own partial output by default: same input, model and settings.)
    #[arg(long)]
    pub restart: bool,
    /// Remove a lock on OUTPUT (`OUTPUT.lock`) left by an `elmo` process that is no longer
    /// running (another process writing OUTPUT is always refused).
    #[arg(long)]
    pub break_stale_lock: bool,
    /// No progress bar (AllenNLP's `--file-friendly-logging` too).
    #[arg(long, short, alias = "file-friendly-logging", overrides_with = "quiet")]
    pub quiet: bool,
}

impl EmbedArgs {
    /// `--backend`, or the one AllenNLP's `--cuda-device` names.
    pub fn backend(&self) -> Backend {
        self.cuda_device
            .map_or(self.backend, Backend::of_cuda_device)
    }

    /// The GPU AllenNLP's `--cuda-device N` names (N ≥ 0).
    pub fn cuda_gpu(&self) -> Option<usize> {
        self.cuda_device.and_then(|n| usize::try_from(n).ok())
    }

    /// `--layers`, or AllenNLP's spelling of it (`--all`, `--top`, `--average`).
    fn layer_selection(&self) -> LayerArg {
        match (self.all, self.top, self.average) {
            (true, _, _) => LayerArg::All,
            (_, true, _) => LayerArg::Top,
            (_, _, true) => LayerArg::Average,
            _ => self.layers,
        }
    }
}

/// `--lines A:B`: lines `start .. end` (0-based, end excluded; `None`: to the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    /// First line.
    pub start: u64,
    /// One past the last line.
    pub end: Option<u64>,
}

/// `--shard K/N`: part `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// K, 0-based.
    pub index: u64,
    /// N.
    pub count: u64,
}

fn parse_lines(text: &str) -> std::result::Result<LineRange, String> {
    let (start, end) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}`: expected A:B (0-based lines, B excluded) or A:"))?;
    let number = |part: &str| {
        part.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{text}`: `{part}` is not a line number"))
    };
    let start = number(start)?;
    let end = match end.trim() {
        "" => None,
        end => Some(number(end)?),
    };
    if end.is_some_and(|end| end < start) {
        return Err(format!("`{text}`: the range ends before it starts"));
    }
    Ok(LineRange { start, end })
}

fn parse_shard(text: &str) -> std::result::Result<Shard, String> {
    let parsed = text
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse::<u64>().ok()?, n.trim().parse::<u64>().ok()?)));
    match parsed {
        Some((index, count)) if count > 0 && index < count => Ok(Shard { index, count }),
        _ => Err(format!(
            "`{text}`: expected K/N with 0 <= K < N (part K of N, 0-based)"
        )),
    }
}

impl Shard {
    /// The lines of this part of `total`: `[K·total/N, (K+1)·total/N)`.
    fn lines(self, total: u64) -> LineRange {
        let at = |k: u64| (u128::from(k) * u128::from(total) / u128::from(self.count)) as u64;
        LineRange {
            start: at(self.index),
            end: Some(at(self.index + 1)),
        }
    }
}

impl LineRange {
    fn contains(self, line: u64) -> bool {
        line >= self.start && self.end.is_none_or(|end| line < end)
    }

    /// The number of lines of `total` in the range.
    fn len_of(self, total: u64) -> u64 {
        self.end
            .unwrap_or(total)
            .min(total)
            .saturating_sub(self.start)
    }

    /// The next sentence of `reader` in the range; `None` past it or at the end of the input.
    fn next_sentence(self, reader: &mut SentenceReader) -> Result<Option<Sentence>> {
        while let Some(sentence) = reader.next_sentence()? {
            let line = sentence.index as u64;
            if self.contains(line) {
                return Ok(Some(sentence));
            }
            if self.end.is_some_and(|end| line >= end) {
                break;
            }
        }
        Ok(None)
    }
}

/// xxh3-128 of a biLM's architecture and every parameter value, in module order.
fn model_fingerprint(bilm: &BiLm) -> Result<String> {
    struct Hash {
        hasher: xxhash_rust::xxh3::Xxh3,
        failed: Option<String>,
    }
    impl ModuleVisitor for Hash {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let tensor = param.val();
            for d in tensor.dims() {
                self.hasher.update(&(d as u64).to_le_bytes());
            }
            match tensor.into_data().try_to_vec::<f32>() {
                Ok(values) => values
                    .iter()
                    .for_each(|v| self.hasher.update(&v.to_le_bytes())),
                Err(error) => self.failed = Some(format!("{error:?}")),
            }
        }
    }
    let mut hash = Hash {
        hasher: xxhash_rust::xxh3::Xxh3::new(),
        failed: None,
    };
    bilm.visit(&mut hash);
    if let Some(error) = hash.failed {
        bail!("reading the model's weights back from the device: {error}");
    }
    hash.hasher
        .update(format!("skip={}", bilm.use_skip_connections).as_bytes());
    Ok(format!("{:032x}", hash.hasher.digest128()))
}

/// Number of batches read ahead and sorted by length in stateless mode (less padding).
const SORT_WINDOW_BATCHES: usize = 8;

fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
    crate::progress::bar(
        total,
        quiet,
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} sentences ({per_sec}) {msg} ETA {eta}",
    )
}

/// The lock of an output file: `OUTPUT.lock` beside it.
pub fn lock_path(output: &std::path::Path) -> PathBuf {
    let mut name = output.as_os_str().to_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// Reads every line of `range` once, as the embedding pass will, before the model runs: invalid
/// UTF-8 or a line over `max_tokens` is an error here, not after the vectors of every line
/// before it were computed (an error discards the partial output). With `json_limit`, the same
/// pass refuses an input whose `sentence_to_index` would take over that many bytes (one HDF5
/// string holds [`MAX_JSON_BYTES`]; writing it is the last step): a bound from the input's size
/// first (each byte escaped as `\uXXXX`, each line a key of its own), and the lines' exact count
/// only past it.
fn check_input(
    text: &InputText,
    input: &InputSummary,
    range: LineRange,
    max_tokens: usize,
    tokenize: bool,
    json_limit: Option<u64>,
) -> Result<()> {
    let mut reader = SentenceReader::open(text, max_tokens, tokenize)?;
    let mut lines = std::iter::from_fn(|| {
        range
            .next_sentence(&mut reader)
            .map(|sentence| sentence.map(|s| (s.index, s.text)))
            .transpose()
    });
    let bound = input
        .bytes
        .saturating_mul(6)
        .saturating_add(input.lines.saturating_mul(32))
        .saturating_add(2);
    let Some(limit) = json_limit.filter(|&limit| bound > limit) else {
        return lines.try_for_each(|line| line.map(drop));
    };
    let bytes = json_bytes_of(lines)?;
    check_json_bytes(bytes, limit).with_context(|| {
        format!(
            "{}: too many sentences for one output with sentence_to_index; pass \
             --forget-sentences (or --use-sentence-keys), or embed it in parts (--shard K/N) \
             kept as separate outputs",
            text.label()
        )
    })
}

/// Runs `elmo embed` on `args.model`, or on `held` where a front end gives its model (and the
/// state a stateful run carries on from).
pub fn run(args: &EmbedArgs, held: Option<HeldModel<'_>>) -> Result<()> {
    crate::hdf5_output::check_output_path(&args.output)?;
    // One writer per output, held until this function returns.
    let _lock = RunLock::acquire(lock_path(&args.output), args.break_stale_lock)?;
    let text = InputText::open(&args.input, beside(&args.output, ".stdin")?)?;
    let keys = if args.use_sentence_keys {
        Some(SentenceKeys::scan(&text, args.max_tokens, args.tokenize)?)
    } else {
        None
    };
    let input = SentenceReader::scan(&text)?;
    let range = match (args.lines, args.shard) {
        (Some(lines), _) => lines,
        (None, Some(shard)) => shard.lines(input.lines),
        (None, None) => LineRange {
            start: 0,
            end: None,
        },
    };
    let sentence_to_index = !(args.use_sentence_keys || args.forget_sentences);
    if keys.is_none() {
        // (`SentenceKeys::scan` read every line already, and keyed outputs have no
        // `sentence_to_index`.)
        let json_limit = sentence_to_index.then_some(MAX_JSON_BYTES);
        check_input(
            &text,
            &input,
            range,
            args.max_tokens,
            args.tokenize,
            json_limit,
        )?;
    }
    let backend = args.backend();
    let device = backend.device()?;
    args.precision.check_device(backend, &device)?;
    let (model, carried) = match held {
        Some(HeldModel { model, state }) => (model, Some(state)),
        None => (args.model.load(&device, args.quiet)?, None),
    };
    let (stateless_batch, positions) = backend.stateless_batches();
    let batch_size = args
        .batch_size
        .map_or(if args.stateful { 64 } else { stateless_batch }, |n| {
            n as usize
        });
    let max_batch_positions = args.max_batch_positions.map_or(positions, |n| n as usize);
    let fingerprint = OutputFingerprint {
        input: format!("{:032x} {} lines", input.hash, input.lines),
        model: model_fingerprint(&model.bilm)?,
        settings: format!(
            "layers={:?} lines={}:{} stateful={} batch={} max_tokens={}",
            args.layer_selection(),
            range.start,
            range.end.map_or(String::new(), |end| end.to_string()),
            args.stateful,
            if args.stateful { batch_size } else { 0 },
            args.max_tokens
        ) + match args.precision {
            // Vectors of another precision are other vectors.
            PrecisionArg::Mixed => " precision=mixed",
            PrecisionArg::F32 => "",
        } + if args.use_sentence_keys {
            " keys=sentences"
        } else {
            ""
        } + if args.tokenize { " tokenize" } else { "" }
            + match args.pool {
                PoolArg::Mean => " pool=mean",
                PoolArg::None => "",
            },
    };
    let commit_bytes = args.commit_mib.saturating_mul(1 << 20);
    // The names of this run's datasets: a partial output naming another is damaged.
    let is_line = |name: &str| match &keys {
        Some(keys) => keys
            .line_of(name)
            .is_some_and(|line| range.contains(line as u64)),
        None => name.parse::<usize>().is_ok_and(|line| {
            line.to_string() == name && (line as u64) < input.lines && range.contains(line as u64)
        }),
    };
    let open = |restart| {
        Hdf5EmbeddingWriter::open(
            &args.output,
            &fingerprint,
            restart,
            commit_bytes,
            sentence_to_index,
            &is_line,
        )
    };
    let mut opened = open(args.restart)?;
    if args.stateful && !opened.written.is_empty() {
        // The LSTM state flows through every line, so the lines already written cannot be
        // skipped: start over.
        if !args.quiet {
            eprintln!(
                "note: a stateful run cannot continue an interrupted one (the LSTM state runs \
                 through every line); starting over"
            );
        }
        drop(opened);
        opened = open(true)?;
    }
    let Opened {
        mut writer,
        written,
    } = opened;
    // Every name is one of this run's lines (`is_line`).
    let done: BTreeSet<usize> = written
        .iter()
        .filter_map(|name| match &keys {
            Some(keys) => keys.line_of(name),
            None => name.parse().ok(),
        })
        .collect();
    if !done.is_empty() && !args.quiet {
        eprintln!(
            "continuing an interrupted run: {} lines already written",
            done.len()
        );
    }
    let total = range.len_of(input.lines);
    let mut reader = SentenceReader::open(&text, args.max_tokens, args.tokenize)?;
    if !args.quiet {
        eprintln!(
            "model: {} ({} LSTM layers of {} cells, vectors of width {}); backend: {:?}",
            model.description,
            model.options.lstm.n_layers,
            model.options.lstm.dim,
            model.options.d_output(),
            backend
        );
    }
    let mut embedder = EmbedderConfig {
        layers: args.layer_selection().into(),
        pooling: args.pool.into(),
        stateful: args.stateful,
        batch_size,
        max_batch_positions,
        token_cache_bytes: args.token_cache_mib.saturating_mul(1 << 20),
    }
    .init(
        model.bilm.with_kernels(KernelSettings {
            precision: args.precision.into(),
            #[cfg(feature = "cuda-runtime")]
            vendor_blas: !args.no_cublas,
            ..KernelSettings::default()
        }),
        &device,
    )?;
    if let Some(state) = carried.as_deref()
        && args.stateful
    {
        embedder.set_state(state.clone())?;
    }
    let window = if args.stateful {
        batch_size
    } else {
        batch_size * SORT_WINDOW_BATCHES
    };
    let bar = progress_bar(total, args.quiet);
    let started = Instant::now();
    let mut n_tokens = 0usize;
    let mut n_sentences = 0usize;
    loop {
        let mut chunk: Vec<Sentence> = Vec::with_capacity(window);
        let mut skipped = 0;
        let mut ended = false;
        while chunk.len() < window {
            let Some(sentence) = range.next_sentence(&mut reader)? else {
                ended = true;
                break;
            };
            writer.note(sentence.index, &sentence.text);
            if done.contains(&sentence.index) {
                skipped += 1;
            } else {
                chunk.push(sentence);
            }
        }
        n_sentences += skipped;
        if chunk.is_empty() {
            bar.set_position(n_sentences as u64);
            if ended {
                break;
            }
            continue;
        }
        let tokens: Vec<&[String]> = chunk.iter().map(|s| s.tokens.as_slice()).collect();
        embedder.embed_each_view(&tokens, |i, vectors| -> Result<()> {
            let name = if keys.is_some() {
                Cow::Borrowed(chunk[i].text.as_str())
            } else {
                Cow::Owned(chunk[i].index.to_string())
            };
            writer.add(&name, vectors.values(), vectors.shape())?;
            n_tokens += tokens[i].len();
            Ok(())
        })?;
        n_sentences += chunk.len();
        bar.set_position(n_sentences as u64);
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("{:.0} tokens/s", n_tokens as f64 / seconds));
        if ended {
            break;
        }
    }
    writer
        .finish()
        .with_context(|| format!("{}: finishing output", args.output.display()))?;
    if let Some(state) = carried
        && args.stateful
    {
        *state = embedder.take_state();
    }
    bar.finish_and_clear();
    if !args.quiet {
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        eprintln!(
            "embedded {n_sentences} sentences, {n_tokens} tokens in {seconds:.1} s ({:.0} tokens/s) -> {}",
            n_tokens as f64 / seconds,
            args.output.display()
        );
        if let Some(cache) = embedder.token_cache() {
            let lookups = (cache.hits() + cache.misses()).max(1);
            eprintln!(
                "token cache: {:.1}% of {} look-ups (one per distinct word of a batch) answered, {} words cached",
                100.0 * cache.hits() as f64 / lookups as f64,
                lookups,
                cache.len()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check passes an input whose object fits and refuses one that does not, counting only
    /// the lines of the range, before anything is embedded.
    #[test]
    fn an_input_whose_sentence_to_index_would_not_fit_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("input.txt");
        // Lines 1-3 of the range: {"b": "3", "c": "2"}, 20 bytes.
        std::fs::write(&path, "a a a a a a\nb\nc\nb\nd d d d d d d d\n").expect("write");
        let text = InputText::open(&path, dir.path().join("spool")).expect("open");
        let input = SentenceReader::scan(&text).expect("scan");
        let range = LineRange {
            start: 1,
            end: Some(4),
        };
        let check = |limit| check_input(&text, &input, range, 100, false, Some(limit));
        check(20).expect("fits");
        let refused = check(19).expect_err("does not fit");
        let message = format!("{refused:#}");
        assert!(
            message.contains("would take 20 bytes, over HDF5's limit of 19 bytes for one string")
                && message.contains("--forget-sentences"),
            "{message}"
        );
    }
}
