//! Builds the task splits of docs/tasks.md from the shared data (decompressed): Brown POS with
//! coarse tags, WNUT-16 NER, RT sentiment (label5 and label2) and two next-sentence pair tasks
//! from the LM corpora (`pair`: negatives from the same file; `nsp`: BERT's negatives from the
//! whole corpus). Every split is a seeded shuffle, so the command reproduces the files exactly.
//! It also writes `lm-train-clean/`: the LM corpus without the lines of any dev or test split,
//! for pretraining a biLM that has not read the evaluation sentences.
//!
//! `cargo run --release -p elmo-cli --example prepare_tasks -- DATA_DIR OUT_DIR [N_POS_TRAIN]`
//! where DATA_DIR holds `brown.conll`, `wnut16.conll`, `rt_snippets.tsv` and a `lm/` folder of
//! text files (one sentence per line).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

use elmo_tasks::brown_tags::coarse_tag;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Sentence = Vec<(String, String)>;

/// The splits every task is written as, in this order.
const SPLITS: [&str; 3] = ["train", "dev", "test"];

/// Header of the pair task files.
const PAIR_HEADER: &str = "text_a\ttext_b\tlabel";

fn read_conll(path: &Path) -> Vec<Sentence> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut sentences = vec![Vec::new()];
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        match line.split_once('\t') {
            Some((token, tag)) => sentences
                .last_mut()
                .unwrap()
                .push((token.into(), tag.into())),
            None if !sentences.last().unwrap().is_empty() => sentences.push(Vec::new()),
            None => {}
        }
    }
    sentences.retain(|s| !s.is_empty());
    sentences
}

fn write_conll(path: &Path, sentences: &[Sentence], map: impl Fn(&str) -> String) {
    let mut out = String::new();
    for sentence in sentences {
        for (token, tag) in sentence {
            let _ = writeln!(out, "{token}\t{}", map(tag));
        }
        out.push('\n');
    }
    std::fs::write(path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Shuffled, then `train`, `dev`, `test` sizes from the front.
fn split<T: Clone>(mut items: Vec<T>, sizes: [usize; 3], rng: &mut ChaCha8Rng) -> [Vec<T>; 3] {
    items.shuffle(rng);
    let mut start = 0;
    sizes.map(|n| {
        let end = (start + n).min(items.len());
        let part = items[start..end].to_vec();
        start = end;
        part
    })
}

/// What makes two lines the same sentence here: their ASCII letters (lowercased) and digits.
fn text_key(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .collect()
}

/// The keys of both texts of every `text_a<TAB>text_b<TAB>label` row.
fn pair_texts(parts: &[Vec<String>]) -> Vec<String> {
    parts
        .iter()
        .flatten()
        .flat_map(|row| row.split('\t').take(2).map(text_key))
        .filter(|key| !key.is_empty())
        .collect()
}

/// Writes `{stem}.{train,dev,test}.tsv`: `header`, then the rows of each part.
fn write_tsv(out: &Path, stem: &str, header: &str, parts: &[Vec<String>; 3]) {
    for (name, part) in SPLITS.iter().zip(parts) {
        let path = out.join(format!("{stem}.{name}.tsv"));
        let text = std::iter::once(header)
            .chain(part.iter().map(String::as_str))
            .collect::<Vec<_>>();
        std::fs::write(&path, text.join("\n") + "\n")
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Balanced "is B the next line of A" rows `A<TAB>B<TAB>label` over consecutive lines of one
/// file (10% of the pairs where both lines are `ok`): B is the next line (`next`) or
/// `random_b(rng, file, line)`, a negative drawn for that line (`random`; `None`: no row).
fn next_sentence_pairs<'a>(
    corpus: &[Vec<&'a str>],
    ok: impl Fn(&str) -> bool,
    rng: &mut ChaCha8Rng,
    mut random_b: impl FnMut(&mut ChaCha8Rng, usize, usize) -> Option<&'a str>,
) -> Vec<String> {
    let mut pairs = Vec::new();
    for (f, lines) in corpus.iter().enumerate() {
        for i in 0..lines.len().saturating_sub(1) {
            if !(ok(lines[i]) && ok(lines[i + 1]) && rng.random_bool(0.1)) {
                continue;
            }
            let (b, label) = if rng.random_bool(0.5) {
                (lines[i + 1], "next")
            } else {
                match random_b(rng, f, i) {
                    Some(b) => (b, "random"),
                    None => continue,
                }
            };
            pairs.push(format!("{}\t{b}\t{label}", lines[i]));
        }
    }
    pairs
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (data, out) = match (args.get(1), args.get(2)) {
        (Some(d), Some(o)) => (Path::new(d).to_path_buf(), Path::new(o).to_path_buf()),
        _ => {
            eprintln!("usage: prepare_tasks DATA_DIR OUT_DIR [N_POS_TRAIN]");
            std::process::exit(2);
        }
    };
    let n_pos: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(5000);
    std::fs::create_dir_all(&out).expect("create OUT_DIR");
    let mut rng = ChaCha8Rng::seed_from_u64(2018);

    let brown = read_conll(&data.join("brown.conll"));
    let parts = split(brown, [n_pos, 1000, 2000], &mut rng);
    for (name, part) in SPLITS.iter().zip(&parts) {
        write_conll(&out.join(format!("pos.{name}.conll")), part, |t| {
            coarse_tag(t).into()
        });
    }
    // Sentences of the dev and test splits, to keep out of the biLM's pretraining text.
    let mut held_out: HashSet<String> = parts[1..]
        .iter()
        .flatten()
        .map(|sentence| {
            let tokens: Vec<&str> = sentence.iter().map(|(t, _)| t.as_str()).collect();
            text_key(&tokens.concat())
        })
        .collect();

    let wnut = read_conll(&data.join("wnut16.conll"));
    let n = wnut.len();
    let parts = split(wnut, [n * 7 / 10, n * 15 / 100, n], &mut rng);
    for (name, part) in SPLITS.iter().zip(&parts) {
        write_conll(&out.join(format!("ner.{name}.conll")), part, |t| t.into());
    }

    let rt = std::fs::read_to_string(data.join("rt_snippets.tsv")).expect("rt_snippets.tsv");
    let mut lines = rt.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let rows: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    let n = rows.len();
    let parts = split(rows, [n * 7 / 10, n * 15 / 100, n], &mut rng);
    write_tsv(&out, "sentiment", &header, &parts);

    // Next-sentence pairs: consecutive lines of one file (label `next`) or a line and a random
    // other line of the same file (`random`), balanced; lines of 5 to 40 tokens.
    let mut files: Vec<_> = std::fs::read_dir(data.join("lm"))
        .expect("DATA_DIR/lm")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .map(|file| std::fs::read_to_string(file).unwrap_or_default())
        .collect();
    let corpus: Vec<Vec<&str>> = texts.iter().map(|t| t.lines().collect()).collect();
    let ok = |l: &str| (5..=40).contains(&l.split_whitespace().count()) && !l.contains('\t');
    let pairs = next_sentence_pairs(&corpus, ok, &mut rng, |rng, f, i| {
        let lines = &corpus[f];
        let j = rng.random_range(0..lines.len());
        (j != i + 1 && ok(lines[j])).then(|| lines[j])
    });
    let parts = split(pairs, [4000, 1000, 1000], &mut rng);
    held_out.extend(pair_texts(&parts[1..]));
    write_tsv(&out, "pair", PAIR_HEADER, &parts);

    // BERT's next-sentence recipe (Devlin et al. 2019, §3.1): B is the next line or a random
    // line of the whole corpus (any file but never the true next line), balanced. Written after
    // the splits above, so those stay the same files.
    let pool: Vec<(usize, usize)> = corpus
        .iter()
        .enumerate()
        .flat_map(|(f, lines)| (0..lines.len()).map(move |j| (f, j)))
        .filter(|&(f, j)| ok(corpus[f][j]))
        .collect();
    let pairs = next_sentence_pairs(&corpus, ok, &mut rng, |rng, f, i| {
        let (g, j) = pool[rng.random_range(0..pool.len())];
        ((g, j) != (f, i + 1)).then(|| corpus[g][j])
    });
    let parts = split(pairs, [4000, 1000, 1000], &mut rng);
    held_out.extend(pair_texts(&parts[1..]));
    write_tsv(&out, "nsp", PAIR_HEADER, &parts);

    // The LM corpus without any line of a dev or test split: a biLM pretrained on
    // OUT_DIR/lm-train-clean has not read the sentences it is evaluated on (Brown holds every
    // POS sentence; the pair tasks are lines of the corpus itself).
    held_out.remove("");
    let clean = out.join("lm-train-clean");
    std::fs::create_dir_all(&clean).expect("create lm-train-clean");
    for (file, lines) in files.iter().zip(&corpus) {
        let mut kept = String::new();
        for line in lines.iter().filter(|l| !held_out.contains(&text_key(l))) {
            kept.push_str(line);
            kept.push('\n');
        }
        let name = file.file_name().expect("a file name");
        std::fs::write(clean.join(name), kept).expect("write lm-train-clean");
    }
    eprintln!("task splits written to {}", out.display());
}
