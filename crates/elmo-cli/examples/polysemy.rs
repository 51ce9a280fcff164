//! Polysemy with a biLM, as Table 4 of Peters et al. (2018): for each sentence that uses a word
//! (default "play"), the sentences of a corpus whose use of the same word is nearest in the
//! biLM's top layer (cosine), next to what the context-free token layer can tell (it gives every
//! use the same vector, so it cannot rank them).
//!
//! ```sh
//! cargo run --release -p elmo-cli --example polysemy -- MODEL_DIR CORPUS.txt [WORD]
//! ```
//! MODEL_DIR holds `options.json` + `weights.hdf5` (`elmo export`) or is a training run directory;
//! CORPUS.txt has one tokenised sentence per line. Without arguments it uses the small demo biLM
//! of the test fixtures and `examples/sentences.txt` (whose untrained-for-English vectors make
//! the neighbours arbitrary: use a real model).

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use elmo_model::BiLm;
use elmo_model::options::BiLmOptions;
use elmo_model::weights::{WeightFile, load_bilm_from};
use elmo_tasks::BiLmFeatures;

fn load(dir: &Path, device: &Device) -> Result<BiLm, Box<dyn std::error::Error>> {
    if elmo_train::TrainedRun::is_run_directory(dir) {
        return Ok(elmo_train::TrainedRun::load(dir, device)?.model.bilm);
    }
    let (options, weights) = if dir.join("lm_weights.hdf5").is_file() {
        (dir.join("options.json"), dir.join("lm_weights.hdf5"))
    } else {
        (dir.join("options.json"), dir.join("weights.hdf5"))
    };
    let options = BiLmOptions::from_file(options)?;
    let mut file = WeightFile::open(weights)?;
    let bilm = load_bilm_from(&options, &mut file, device)?;
    file.finish()?;
    Ok(bilm)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    dot / (norm(a) * norm(b))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args
        .first()
        .map_or(root.join("fixtures/allennlp"), PathBuf::from);
    let corpus = args
        .get(1)
        .map_or(root.join("examples/sentences.txt"), PathBuf::from);
    let word = args.get(2).map_or("play", String::as_str);
    let device = Device::flex();
    let bilm = load(&model, &device)?;
    let text =
        std::fs::read_to_string(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let mut seen = std::collections::HashSet::new();
    let sentences: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|s| s.iter().any(|t| t.eq_ignore_ascii_case(word)) && s.len() <= 100)
        .filter(|s| seen.insert(s.clone()))
        .collect();
    if sentences.len() < 2 {
        return Err(format!(
            "{}: fewer than two sentences use `{word}`",
            corpus.display()
        )
        .into());
    }
    let mut features = BiLmFeatures::new(&bilm, &device)?;
    features.add(sentences.iter().map(Vec::as_slice), || {})?;
    // The top layer's vector at the first use of the word in each sentence.
    let uses: Vec<Vec<f32>> = sentences
        .iter()
        .map(|s| {
            let position = s
                .iter()
                .position(|t| t.eq_ignore_ascii_case(word))
                .unwrap_or(0);
            let layers = features.batch(&[s.as_slice()], &device)?;
            let top = layers.last().expect("a biLM has layers").clone();
            let d = features.d_layer;
            Ok(top
                .narrow(1, position, 1)
                .reshape([d])
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default())
        })
        .collect::<Result<_, elmo_tasks::TaskError>>()?;
    println!(
        "`{word}` in {} sentences of {}; the token layer gives every use the same vector.\n",
        sentences.len(),
        corpus.display()
    );
    for (i, query) in uses.iter().enumerate().take(4) {
        let mut others: Vec<(f32, usize)> = uses
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(j, v)| (cosine(query, v), j))
            .collect();
        others.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!("{}", sentences[i].join(" "));
        for (similarity, j) in others.iter().take(3) {
            println!("    {similarity:.3}  {}", sentences[*j].join(" "));
        }
        println!();
    }
    Ok(())
}
