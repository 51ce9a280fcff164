//! `elmo merge`: joins the parts that `elmo embed --shard K/N` or `--lines A:B` wrote (one per
//! worker) into one file in AllenNLP's `elmo` layout, with the global line numbers (or, with
//! `--use-sentence-keys`, the sentences) that name their datasets.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use elmo_model::RunLock;

use crate::hdf5_layout;
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

/// A part's `sentence_to_index`, flat: its sentences one after another in the object's order,
/// and per member where its sentence ends and its line.
#[derive(Debug, Default)]
struct PartSentences {
    texts: String,
    members: Vec<(usize, usize)>,
}

impl PartSentences {
    /// The members (sentence, line), in the object's order.
    fn iter(&self) -> impl Iterator<Item = (&str, usize)> {
        let mut start = 0;
        self.members.iter().map(move |&(end, line)| {
            let text = &self.texts[start..end];
            start = end;
            (text, line)
        })
    }
}

/// The visitor of a `sentence_to_index` object: each key appended to `sentences` as it is
/// parsed, each value read as a line number; the first value that is not one is kept in
/// `not_a_line` (with its sentence).
struct Members<'a> {
    sentences: &'a mut PartSentences,
    not_a_line: &'a mut Option<(String, serde_json::Value)>,
}

impl<'de> serde::de::Visitor<'de> for Members<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Members {
            sentences,
            not_a_line,
        } = self;
        while map.next_key_seed(AppendTo(&mut sentences.texts))?.is_some() {
            let value: serde_json::Value = map.next_value()?;
            match value.as_str().and_then(|line| line.parse::<usize>().ok()) {
                Some(line) => sentences.members.push((sentences.texts.len(), line)),
                None => {
                    let start = sentences.members.last().map_or(0, |&(end, _)| end);
                    *not_a_line = Some((sentences.texts[start..].to_string(), value));
                    return Err(serde::de::Error::custom("not a line number"));
                }
            }
        }
        Ok(())
    }
}

/// A JSON string appended to a `String` (a key, without a `String` of its own).
struct AppendTo<'a>(&'a mut String);

impl<'de> serde::de::DeserializeSeed<'de> for AppendTo<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for AppendTo<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<(), E> {
        self.0.push_str(text);
        Ok(())
    }
}

/// Parses the `sentence_to_index` object that `reader` gives, member by member, into
/// [`PartSentences`] (neither the object nor a member is held as a value of its own).
fn parse_sentence_index(reader: impl std::io::Read, path: &Path) -> Result<PartSentences> {
    let mut sentences = PartSentences::default();
    let mut not_a_line = None;
    let mut parser =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    let members = Members {
        sentences: &mut sentences,
        not_a_line: &mut not_a_line,
    };
    let parsed =
        serde::Deserializer::deserialize_map(&mut parser, members).and_then(|()| parser.end());
    if let Some((text, value)) = not_a_line {
        bail!(
            "{}: sentence_to_index names {value} for {text:?}, not a line number",
            path.display()
        );
    }
    parsed
        .with_context(|| format!("{}: sentence_to_index is not a JSON object", path.display()))?;
    Ok(sentences)
}

/// A part's datasets and its `sentence_to_index`.
struct Part {
    /// The keys of its line datasets, sorted.
    keys: Vec<Key>,
    /// `sentence_to_index`; `None` for a part written without it.
    sentences: Option<PartSentences>,
}

/// The error for a part with a `sentence_to_index` merged with `--use-sentence-keys`.
fn has_line_numbers(path: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: has a sentence_to_index, so its datasets are named by line number: merge it without \
         --use-sentence-keys",
        path.display()
    )
}

/// The part's dataset `sentence_to_index`, read with hdf5-pure. With `--use-sentence-keys` one
/// that holds no strings is a sentence's dataset (`None`), and one that does is an error.
fn sentence_index(
    file: &hdf5_pure::File,
    path: &Path,
    use_sentence_keys: bool,
) -> Result<Option<PartSentences>> {
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
        return Err(has_line_numbers(path));
    }
    match texts.as_slice() {
        [json] => parse_sentence_index(json.as_bytes(), path).map(Some),
        _ => bail!(
            "{}: sentence_to_index holds {} strings, expected 1",
            path.display(),
            texts.len()
        ),
    }
}

/// The sorted keys of a part's datasets `names`.
fn keys_of<'a>(
    names: impl Iterator<Item = &'a str>,
    path: &Path,
    use_sentence_keys: bool,
) -> Result<Vec<Key>> {
    let mut keys = names
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
    Ok(keys)
}

/// Reads a part's names and `sentence_to_index`: with [`hdf5_walk`] where the part is in its
/// layout (the object parsed from the file where it lies), else with hdf5-pure.
fn read_part(path: &Path, use_sentence_keys: bool) -> Result<Part> {
    if let Some(mut root) = hdf5_walk::read_root(path, "sentence_to_index")? {
        let sentences = match root
            .string_reader()
            .with_context(|| format!("{}: reading sentence_to_index", path.display()))?
        {
            Some(_) if use_sentence_keys => return Err(has_line_numbers(path)),
            Some(reader) => Some(parse_sentence_index(reader, path)?),
            None => None,
        };
        let names = (0..root.datasets.len()).map(|i| root.datasets.get(i).name);
        return Ok(Part {
            keys: keys_of(names, path, use_sentence_keys)?,
            sentences,
        });
    }
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
    Ok(Part {
        keys: keys_of(names.iter().map(String::as_str), path, use_sentence_keys)?,
        sentences,
    })
}

/// Which part holds each line (or sentence), sorted by key.
struct Owners<'a>(Vec<(&'a Key, usize)>);

impl Owners<'_> {
    /// The part that holds `key`.
    fn get(&self, key: &Key) -> Option<usize> {
        let found = self.0.binary_search_by(|&(k, _)| k.cmp(key));
        found.ok().map(|i| self.0[i].1)
    }
}

/// Which part holds each line (or sentence) of the parts' `keys`: an error when two parts hold
/// one, or (unless `allow_gaps`) a line below the last is in none.
fn owners<'a>(args: &MergeArgs, keys: &'a [Vec<Key>]) -> Result<Owners<'a>> {
    let mut owner: Vec<(&Key, usize)> = keys
        .iter()
        .enumerate()
        .flat_map(|(p, keys)| keys.iter().map(move |key| (key, p)))
        .collect();
    owner.sort_unstable();
    if let Some(pair) = owner.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        bail!(
            "{} is in both {} and {} (parts must not overlap)",
            pair[0].0,
            args.parts[pair[0].1].display(),
            args.parts[pair[1].1].display()
        );
    }
    if !args.use_sentence_keys && !args.allow_gaps {
        // Distinct and sorted: every line below the last is there when the i-th is line i.
        let missing = owner
            .iter()
            .enumerate()
            .find(|&(i, &(key, _))| *key != Key::Line(i));
        if let Some((missing, _)) = missing {
            bail!(
                "line {missing} is in no part (a part is missing?); pass --allow-gaps to merge \
                 anyway"
            );
        }
    }
    Ok(Owners(owner))
}

/// The order in which the parts' `sentence_to_index` members go to the output, each checked
/// (it names a line of its part): part by part in the order of their lines, each part's in its
/// own order (that of their first lines), which is the order a single run over every line
/// gives them.
fn sentence_order(
    args: &MergeArgs,
    keys: &[Vec<Key>],
    sentences: &[Option<PartSentences>],
    owner: &Owners<'_>,
) -> Result<Vec<usize>> {
    let mut by_lines: Vec<usize> = (0..keys.len()).collect();
    by_lines.sort_by_key(|&p| keys[p].first());
    for &p in &by_lines {
        for (text, line) in sentences[p].iter().flat_map(PartSentences::iter) {
            if owner.get(&Key::Line(line)) != Some(p) {
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

/// Writes every dataset of the part at `path` (but its `sentence_to_index` where it
/// `has_index`) to `writer`: read with [`hdf5_walk`] (names, shapes and addresses only, then
/// each dataset's values) where the part is in its layout and holds exactly the datasets of
/// `keys` ([`read_part`]'s), else with hdf5-pure.
fn copy_part(
    writer: &mut Hdf5EmbeddingWriter,
    keys: &[Key],
    path: &Path,
    has_index: bool,
    use_sentence_keys: bool,
) -> Result<()> {
    let skip = if has_index { "sentence_to_index" } else { "" };
    if let Some(mut root) = hdf5_walk::read_root(path, skip)? {
        let datasets = &root.datasets;
        let same = datasets.len() == keys.len()
            && datasets
                .iter()
                .zip(datasets.iter().skip(1))
                .all(|(a, b)| a.name.as_bytes() < b.name.as_bytes())
            && datasets.iter().all(|d| {
                Key::of(d.name, use_sentence_keys).is_some_and(|k| keys.binary_search(&k).is_ok())
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
    // Streaming, as in `read_part`; one walk over the part's members (a lookup by name per line
    // would scan the group's links again for every line).
    let file = hdf5_pure::File::open_streaming(path)
        .with_context(|| format!("{}: not a readable HDF5 file", path.display()))?;
    let file_bytes = std::fs::metadata(path)
        .with_context(|| format!("{}: reading", path.display()))?
        .len();
    let datasets = file
        .root()
        .iter_datasets()
        .with_context(|| format!("{}: listing datasets", path.display()))?;
    for (name, dataset) in datasets {
        if has_index && name == "sentence_to_index" {
            continue;
        }
        let name = merged_name(&name, use_sentence_keys);
        let shape = dataset
            .shape()
            .with_context(|| format!("{}: dataset {name:?}", path.display()))?;
        // Before the values are read (hdf5-pure allocates what the shape declares): a part's
        // values are stored in it, so they fit in the file.
        if hdf5_layout::value_bytes(&shape) > file_bytes {
            bail!(
                "{}: dataset {name:?}: its shape {shape:?} holds more values than the file's \
                 {file_bytes} bytes",
                path.display()
            );
        }
        let shape: Vec<usize> = shape.into_iter().map(|d| d as usize).collect();
        let values = dataset
            .read_f32()
            .with_context(|| format!("{}: dataset {name:?}", path.display()))?;
        writer.add(&name, &values, &shape)?;
    }
    Ok(())
}

/// Runs `elmo merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    crate::hdf5_output::check_output_path(&args.output)?;
    let _lock = RunLock::acquire(crate::embed::lock_path(&args.output), args.break_stale_lock)?;
    // Every part is read and checked before anything is written.
    let (keys, mut sentences): (Vec<Vec<Key>>, Vec<Option<PartSentences>>) = args
        .parts
        .iter()
        .map(|path| read_part(path, args.use_sentence_keys).map(|p| (p.keys, p.sentences)))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    let owner = owners(args, &keys)?;
    // The output has a sentence_to_index when the parts have one: all of them, or none.
    let with = sentences.iter().position(Option::is_some);
    let without = sentences.iter().position(Option::is_none);
    if let (Some(with), Some(without)) = (with, without) {
        bail!(
            "{} has no sentence_to_index but {} has one (parts of `elmo embed` with and without \
             --forget-sentences)",
            args.parts[without].display(),
            args.parts[with].display()
        );
    }
    let order = sentence_order(args, &keys, &sentences, &owner)?;
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
        for (text, line) in sentences[p].take().iter().flat_map(PartSentences::iter) {
            writer.note_at(position, line, text);
            position += 1;
        }
    }
    // Before any values are copied: writing the object is the last step.
    writer.check_sentence_index(MAX_JSON_BYTES).context(
        "the parts' sentences are too many for one output with sentence_to_index; keep them as \
         separate outputs",
    )?;
    for (keys, path) in keys.iter().zip(&args.parts) {
        copy_part(
            &mut writer,
            keys,
            path,
            with.is_some(),
            args.use_sentence_keys,
        )?;
    }
    // What the output's structures do not need goes before they are made.
    let merged = owner.0.len();
    drop(owner);
    drop(keys);
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
            merged,
            args.parts.len(),
            args.output.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(json: &str) -> Result<Vec<(String, usize)>> {
        let sentences = parse_sentence_index(json.as_bytes(), Path::new("part.hdf5"))?;
        Ok(sentences.iter().map(|(t, l)| (t.to_string(), l)).collect())
    }

    /// Members in the object's order, keys with their escapes decoded (as Python's
    /// `json.loads` gives them), values as line numbers.
    #[test]
    fn sentence_to_index_is_parsed_member_by_member() {
        let json = r#"{"b a": "2", "\u00e9t\u00e9 \"q\" \\": "0", "": "07", "\ud83d\ude00": "3"}"#;
        let expected = [("b a", 2), ("été \"q\" \\", 0), ("", 7), ("😀", 3)];
        let expected: Vec<(String, usize)> =
            expected.iter().map(|&(t, l)| (t.to_string(), l)).collect();
        assert_eq!(parsed(json).unwrap(), expected);
        assert_eq!(parsed("{}").unwrap(), []);
        assert_eq!(parsed(" {\"a\": \"1\"}\n").unwrap(), [("a".to_string(), 1)]);
        for (json, problem) in [
            (
                r#"{"a": "1", "b": "x"}"#,
                r#"part.hdf5: sentence_to_index names "x" for "b", not a line number"#,
            ),
            (r#"{"a": "1", "b": ["2"]}"#, r#"names ["2"] for "b", not"#),
            (r#"{"\u00e9": -1}"#, r#"names -1 for "é", not"#),
            (
                r#"["a", "1"]"#,
                "part.hdf5: sentence_to_index is not a JSON object",
            ),
            (r#"{"a": "1"} x"#, "is not a JSON object"),
            (r#"{"a": "1""#, "is not a JSON object"),
            (r#"{"a": "1", 2: "3"}"#, "is not a JSON object"),
        ] {
            let error = format!("{:#}", parsed(json).unwrap_err());
            assert!(error.contains(problem), "{json}: {error}");
        }
    }
}
