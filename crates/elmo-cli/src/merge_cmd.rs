//! `elmo merge`: joins the parts that `elmo embed --shard K/N` or `--lines A:B` wrote (one per
//! worker) into one file in AllenNLP's `elmo` layout, with the global line numbers (or, with
//! `--use-sentence-keys`, the sentences) that name their datasets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use elmo_model::RunLock;

use crate::hdf5_output::{Hdf5EmbeddingWriter, OutputFingerprint};
use crate::hdf5_walk;
use crate::sentence_index::MAX_JSON_BYTES;

/// Arguments of `elmo merge`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example (4 workers, then one merge):\n  \
    for k in 0 1 2 3; do elmo embed --shard $k/4 corpus.txt part-$k.hdf5 & done; wait\n  \
    elmo merge corpus.hdf5 part-*.hdf5")]
pub struct MergeArgs {
    /// The merged output (`.hdf5` or `.h5`).
    pub output: PathBuf,
    /// The parts, in any order.
    #[arg(required = true, num_args = 1..)]
    pub parts: Vec<PathBuf>,
    /// Accept parts whose lines leave gaps (by default every line from 0 to the last one must be
    /// in exactly one part).
    #[arg(long)]
    pub allow_gaps: bool,
    /// The parts were written by `elmo embed --use-sentence-keys`: their datasets are named by
    /// sentence, and no sentence may be in two parts (without line numbers, gaps go unseen).
    #[arg(long, conflicts_with = "allow_gaps")]
    pub use_sentence_keys: bool,
    /// Remove a lock on OUTPUT left by an `elmo` process that is no longer running.
    #[arg(long)]
    pub break_stale_lock: bool,
    /// No summary line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// What names a line's dataset: its 0-based line number, or its sentence
/// (`--use-sentence-keys`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Line(usize),
    Sentence(String),
}

impl Key {
    /// The key a dataset `name` stands for; `None` for a name that is no line number.
    fn of(name: &str, use_sentence_keys: bool) -> Option<Self> {
        if use_sentence_keys {
            Some(Self::Sentence(name.to_string()))
        } else {
            name.parse().ok().map(Self::Line)
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Line(line) => write!(f, "line {line}"),
            Self::Sentence(sentence) => write!(f, "sentence {sentence:?}"),
        }
    }
}

/// A JSON object's members in the order they are written (a `serde_json::Map` sorts them by
/// key): `sentence_to_index` lists sentences in the order they first appear.
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

/// A part's datasets and its `sentence_to_index`.
struct Part {
    file: hdf5_pure::File,
    /// The keys of its line datasets, sorted.
    keys: Vec<Key>,
    /// `sentence_to_index` (sentence, line), in its order; `None` for a part written without
    /// it. Moved to the output's as soon as that is open.
    sentences: Option<Vec<(String, usize)>>,
}

/// The part's dataset `sentence_to_index`, read. With `--use-sentence-keys` one that holds no
/// strings is a sentence's dataset (`None`), and one that does is an error.
fn sentence_index(
    file: &hdf5_pure::File,
    path: &Path,
    use_sentence_keys: bool,
) -> Result<Option<Vec<(String, usize)>>> {
    let texts = match file
        .dataset("sentence_to_index")
        .and_then(|d| d.read_string())
    {
        Ok(texts) => texts,
        Err(_) if use_sentence_keys => return Ok(None),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("{}: reading sentence_to_index", path.display()));
        }
    };
    if use_sentence_keys {
        bail!(
            "{}: has a sentence_to_index, so its datasets are named by line number: merge it \
             without --use-sentence-keys",
            path.display()
        );
    }
    let Members(members) = match texts.as_slice() {
        [json] => serde_json::from_str(json).with_context(|| {
            format!("{}: sentence_to_index is not a JSON object", path.display())
        })?,
        _ => bail!(
            "{}: sentence_to_index holds {} strings, expected 1",
            path.display(),
            texts.len()
        ),
    };
    members
        .into_iter()
        .map(
            |(text, index)| match index.as_str().and_then(|i| i.parse::<usize>().ok()) {
                Some(line) => Ok((text, line)),
                None => bail!(
                    "{}: sentence_to_index names {index} for {text:?}, not a line number",
                    path.display()
                ),
            },
        )
        .collect::<Result<_>>()
        .map(Some)
}

fn read_part(path: &Path, use_sentence_keys: bool) -> Result<Part> {
    // Streaming: a part is read a dataset at a time, never whole, so merging parts larger than
    // memory works (`File::open` would buffer every part at once).
    let file = hdf5_pure::File::open_streaming(path)
        .with_context(|| format!("{}: not a readable HDF5 file", path.display()))?;
    let mut names = file
        .root()
        .datasets()
        .with_context(|| format!("{}: listing datasets", path.display()))?;
    let sentences = if names.iter().any(|name| name == "sentence_to_index") {
        sentence_index(&file, path, use_sentence_keys)?
    } else {
        None
    };
    if sentences.is_some() {
        names.retain(|name| name != "sentence_to_index");
    }
    let mut keys = names
        .iter()
        .map(|name| {
            Key::of(name, use_sentence_keys).with_context(|| {
                format!(
                    "{}: dataset `{name}` is not a line number (parts written by `elmo embed \
                     --use-sentence-keys` merge with `elmo merge --use-sentence-keys`)",
                    path.display()
                )
            })
        })
        .collect::<Result<Vec<Key>>>()?;
    keys.sort_unstable();
    Ok(Part {
        file,
        keys,
        sentences,
    })
}

/// Which part holds each line (or sentence): an error when two parts hold one, or (unless
/// `allow_gaps`) a line below the last is in none.
fn owners(args: &MergeArgs, parts: &[Part]) -> Result<BTreeMap<Key, usize>> {
    let mut owner: BTreeMap<Key, usize> = BTreeMap::new();
    for (p, part) in parts.iter().enumerate() {
        for key in &part.keys {
            if let Some(other) = owner.insert(key.clone(), p) {
                bail!(
                    "{key} is in both {} and {} (parts must not overlap)",
                    args.parts[other].display(),
                    args.parts[p].display()
                );
            }
        }
    }
    if !args.use_sentence_keys && !args.allow_gaps {
        let last = match owner.last_key_value() {
            Some((Key::Line(last), _)) => *last,
            _ => 0,
        };
        if let Some(missing) = (0..last).find(|line| !owner.contains_key(&Key::Line(*line))) {
            bail!(
                "line {missing} is in no part (a part is missing?); pass --allow-gaps to merge \
                 anyway"
            );
        }
    }
    Ok(owner)
}

/// The order in which the parts' `sentence_to_index` entries go to the output, each checked
/// (it names a line of its part): part by part in the order of their lines, each part's in its
/// own order (that of their first lines), which is the order a single run over every line
/// gives them.
fn sentence_order(
    args: &MergeArgs,
    parts: &[Part],
    owner: &BTreeMap<Key, usize>,
) -> Result<Vec<usize>> {
    let mut by_lines: Vec<usize> = (0..parts.len()).collect();
    by_lines.sort_by_key(|&p| parts[p].keys.first().cloned());
    for &p in &by_lines {
        for (text, line) in parts[p].sentences.iter().flatten() {
            if owner.get(&Key::Line(*line)) != Some(&p) {
                bail!(
                    "{}: sentence_to_index names {line} for {text:?}, not one of its lines",
                    args.parts[p].display()
                );
            }
        }
    }
    Ok(by_lines)
}

/// A dataset's name in the merged output: a line number in its canonical spelling, as the
/// keys read it.
fn merged_name(name: &str, use_sentence_keys: bool) -> String {
    match Key::of(name, use_sentence_keys) {
        Some(Key::Line(line)) => line.to_string(),
        _ => name.to_string(),
    }
}

/// Writes every dataset of `part` (but its `sentence_to_index` where it `has_index`) to
/// `writer`: read with
/// [`hdf5_walk`] (names, shapes and addresses only, then each dataset's values) where the part
/// is in its layout and holds exactly the datasets [`read_part`] listed, else with hdf5-pure.
fn copy_part(
    writer: &mut Hdf5EmbeddingWriter,
    part: &Part,
    path: &Path,
    has_index: bool,
    use_sentence_keys: bool,
) -> Result<()> {
    let skip = if has_index { "sentence_to_index" } else { "" };
    if let Some(mut root) = hdf5_walk::read_root(path, skip)? {
        let datasets = &root.datasets;
        let same = datasets.len() == part.keys.len()
            && datasets
                .iter()
                .zip(datasets.iter().skip(1))
                .all(|(a, b)| a.name.as_bytes() < b.name.as_bytes())
            && datasets.iter().all(|d| {
                Key::of(d.name, use_sentence_keys)
                    .is_some_and(|k| part.keys.binary_search(&k).is_ok())
            });
        if same {
            for i in 0..root.datasets.len() {
                let values = root
                    .values(i)
                    .with_context(|| format!("{}: reading", path.display()))?;
                let dataset = root.datasets.get(i);
                let shape: Vec<usize> = dataset.shape.iter().map(|&d| d as usize).collect();
                writer.add(
                    &merged_name(dataset.name, use_sentence_keys),
                    &values,
                    &shape,
                )?;
            }
            return Ok(());
        }
    }
    // One walk over the part's members (a lookup by name per line would scan the group's
    // links again for every line).
    let datasets = part
        .file
        .root()
        .iter_datasets()
        .with_context(|| format!("{}: listing datasets", path.display()))?;
    for (name, dataset) in datasets {
        if has_index && name == "sentence_to_index" {
            continue;
        }
        let name = merged_name(&name, use_sentence_keys);
        let shape: Vec<usize> = dataset
            .shape()
            .with_context(|| format!("{}: dataset {name:?}", path.display()))?
            .into_iter()
            .map(|d| d as usize)
            .collect();
        let values = dataset
            .read_f32()
            .with_context(|| format!("{}: dataset {name:?}", path.display()))?;
        writer.add(&name, &values, &shape)?;
    }
    Ok(())
}

/// Runs `elmo merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    let _lock = RunLock::acquire(crate::embed::lock_path(&args.output), args.break_stale_lock)?;
    // Every part is read and checked before anything is written.
    let mut parts: Vec<Part> = args
        .parts
        .iter()
        .map(|path| read_part(path, args.use_sentence_keys))
        .collect::<Result<_>>()?;
    let owner = owners(args, &parts)?;
    // The output has a sentence_to_index when the parts have one: all of them, or none.
    let with = parts.iter().position(|part| part.sentences.is_some());
    let without = parts.iter().position(|part| part.sentences.is_none());
    if let (Some(with), Some(without)) = (with, without) {
        bail!(
            "{} has no sentence_to_index but {} has one (parts of `elmo embed` with and without \
             --forget-sentences)",
            args.parts[without].display(),
            args.parts[with].display()
        );
    }
    let order = sentence_order(args, &parts, &owner)?;
    let names: Vec<String> = args.parts.iter().map(|p| p.display().to_string()).collect();
    let fingerprint = OutputFingerprint {
        input: format!("merge of {}", names.join(", ")),
        model: String::new(),
        settings: String::new(),
    };
    let mut writer = Hdf5EmbeddingWriter::open(
        &args.output,
        &fingerprint,
        true,
        crate::hdf5_output::COMMIT_BYTES,
        with.is_some(),
        // A merge starts over (restart above): nothing is continued.
        &|_| true,
    )?
    .writer;
    let mut position = 0;
    for &p in &order {
        for (text, line) in parts[p].sentences.take().into_iter().flatten() {
            writer.note_at(position, line, &text);
            position += 1;
        }
    }
    // Before any values are copied: writing the object is the last step.
    writer.check_sentence_index(MAX_JSON_BYTES).context(
        "the parts' sentences are too many for one output with sentence_to_index; keep them as \
         separate outputs",
    )?;
    for (part, path) in parts.iter().zip(&args.parts) {
        copy_part(
            &mut writer,
            part,
            path,
            with.is_some(),
            args.use_sentence_keys,
        )?;
    }
    writer
        .finish()
        .with_context(|| format!("{}: finishing output", args.output.display()))?;
    if !args.quiet {
        let what = if args.use_sentence_keys {
            "sentences"
        } else {
            "lines"
        };
        eprintln!(
            "merged {} {what} from {} parts -> {}",
            owner.len(),
            parts.len(),
            args.output.display()
        );
    }
    Ok(())
}
