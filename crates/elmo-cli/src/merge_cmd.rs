//! `elmo merge`: joins the parts that `elmo embed --shard K/N` or `--lines A:B` wrote (one per
//! worker) into one file in AllenNLP's `elmo` layout, with the global line numbers they carry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use elmo_model::RunLock;

use crate::hdf5_output::{Hdf5EmbeddingWriter, OutputFingerprint};

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
    /// Remove a lock on OUTPUT left by an `elmo` process that is no longer running.
    #[arg(long)]
    pub break_stale_lock: bool,
    /// No summary line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A part's line datasets and its `sentence_to_index`.
struct Part {
    file: hdf5_pure::File,
    lines: Vec<usize>,
    sentences: serde_json::Map<String, serde_json::Value>,
}

fn read_part(path: &Path) -> Result<Part> {
    // Streaming: a part is read a dataset at a time, never whole, so merging parts larger than
    // memory works (`File::open` would buffer every part at once).
    let file = hdf5_pure::File::open_streaming(path)
        .with_context(|| format!("{}: not a readable HDF5 file", path.display()))?;
    let names = file
        .root()
        .datasets()
        .with_context(|| format!("{}: listing datasets", path.display()))?;
    let mut lines = Vec::with_capacity(names.len());
    let mut has_index = false;
    for name in names {
        match name.as_str() {
            "sentence_to_index" => has_index = true,
            _ => lines.push(name.parse::<usize>().map_err(|_| {
                anyhow::anyhow!(
                    "{}: dataset `{name}` is not a line of an `elmo embed` output",
                    path.display()
                )
            })?),
        }
    }
    if !has_index {
        bail!(
            "{}: no sentence_to_index (not a finished `elmo embed` output)",
            path.display()
        );
    }
    let texts = file
        .dataset("sentence_to_index")
        .and_then(|d| d.read_string())
        .with_context(|| format!("{}: reading sentence_to_index", path.display()))?;
    let sentences = match texts.as_slice() {
        [json] => serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
            .with_context(|| {
                format!("{}: sentence_to_index is not a JSON object", path.display())
            })?,
        _ => bail!(
            "{}: sentence_to_index holds {} strings, expected 1",
            path.display(),
            texts.len()
        ),
    };
    lines.sort_unstable();
    Ok(Part {
        file,
        lines,
        sentences,
    })
}

/// Runs `elmo merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    let _lock = RunLock::acquire(crate::embed::lock_path(&args.output), args.break_stale_lock)?;
    // Every part is read and checked before anything is written.
    let parts: Vec<Part> = args
        .parts
        .iter()
        .map(|path| read_part(path))
        .collect::<Result<_>>()?;
    let mut owner: BTreeMap<usize, usize> = BTreeMap::new();
    for (p, part) in parts.iter().enumerate() {
        for &line in &part.lines {
            if let Some(other) = owner.insert(line, p) {
                bail!(
                    "line {line} is in both {} and {} (parts must not overlap)",
                    args.parts[other].display(),
                    args.parts[p].display()
                );
            }
        }
    }
    let last = owner.keys().next_back().copied();
    if !args.allow_gaps
        && let Some(missing) = (0..last.unwrap_or(0)).find(|line| !owner.contains_key(line))
    {
        bail!(
            "line {missing} is in no part (a part is missing?); pass --allow-gaps to merge anyway"
        );
    }
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
    )?
    .writer;
    for (p, (part, path)) in parts.iter().zip(&args.parts).enumerate() {
        // One walk over the part's members (a lookup by name per line would scan the group's
        // links again for every line).
        let datasets = part
            .file
            .root()
            .iter_datasets()
            .with_context(|| format!("{}: listing datasets", path.display()))?;
        for (name, dataset) in datasets {
            let Ok(line) = name.parse::<usize>() else {
                continue; // sentence_to_index
            };
            let shape: Vec<usize> = dataset
                .shape()
                .with_context(|| format!("{}: dataset {line}", path.display()))?
                .into_iter()
                .map(|d| d as usize)
                .collect();
            let values = dataset
                .read_f32()
                .with_context(|| format!("{}: dataset {line}", path.display()))?;
            writer.add(line, &values, &shape)?;
        }
        for (text, index) in &part.sentences {
            let index = index
                .as_str()
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| owner.get(i) == Some(&p))
                .with_context(|| {
                    format!(
                        "{}: sentence_to_index names {index} for {text:?}, not one of its lines",
                        path.display()
                    )
                })?;
            writer.note(index, text);
        }
    }
    writer
        .finish()
        .with_context(|| format!("{}: finishing output", args.output.display()))?;
    if !args.quiet {
        eprintln!(
            "merged {} lines from {} parts -> {}",
            owner.len(),
            parts.len(),
            args.output.display()
        );
    }
    Ok(())
}
