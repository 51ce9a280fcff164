//! The frozen biLM's layers for every sentence of a task, computed once and kept on the host:
//! the biLM never changes while a task trains, so each sentence is run through it a single time
//! (Peters et al. 2018, §3.3: the biLM weights are frozen; only the mix is learned). Beyond a
//! memory budget the layers go to an unnamed temporary file and are read back per batch, so a
//! large task runs in bounded memory (`original`'s layers take 12 KiB a token, 12 GiB a
//! million tokens).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use burn::tensor::{Device, Tensor, TensorData};
use elmo_model::{BiLm, Embedder, EmbedderConfig, LayerSelection, Pooling, TokenEmbeddingCache};

use crate::error::{Result, TaskError, io_error};

/// Sentences encoded per biLM call by [`BiLmFeatures::new`] (as `elmo embed` on a CPU: more
/// rows per LSTM step run faster; the stateless vectors do not depend on it).
pub const BATCH_SENTENCES: usize = 256;

/// Padded positions (rows × longest row) per biLM call by [`BiLmFeatures::new`].
pub const BATCH_POSITIONS: usize = 8192;

/// Memory for the token embeddings of words already encoded (the char CNN runs once per word
/// while it stays in the cache).
const TOKEN_CACHE_BYTES: usize = 64 << 20;

/// Where a sentence's layers are kept.
#[derive(Debug)]
enum Stored {
    /// In memory.
    Memory(Vec<f32>),
    /// In the spill file: `len` values from byte `offset`.
    Spilled { offset: u64, len: usize },
}

/// The memory budget of the layers, and the temporary file that those beyond it go to.
#[derive(Debug)]
struct Spill {
    /// Host memory the layers may take before they go to the file.
    memory_bytes: usize,
    /// The folder it is made in (named in errors; the file itself has no name).
    dir: PathBuf,
    /// The file, made at the first sentence that does not fit in memory.
    file: Option<Mutex<File>>,
    /// Bytes written.
    end: u64,
}

/// biLM layers (`L + 1` tensors of `[fwd; bwd]`, sentence boundaries removed) per sentence.
#[derive(Debug)]
pub struct BiLmFeatures {
    /// Layers per token (`L + 1`).
    pub n_layers: usize,
    /// Width of each layer (`2P`).
    pub d_layer: usize,
    sentences: HashMap<Vec<String>, Stored>,
    embedder: Embedder,
    /// Bytes of layers in memory.
    in_memory: usize,
    /// Without one, every layer stays in memory.
    spill: Option<Spill>,
}

impl BiLmFeatures {
    /// An empty cache for `bilm`, which runs on `device` in batches of [`BATCH_SENTENCES`]
    /// sentences and at most [`BATCH_POSITIONS`] padded positions.
    pub fn new(bilm: &BiLm, device: &Device) -> Result<Self> {
        Self::with_batches(bilm, device, BATCH_SENTENCES, BATCH_POSITIONS)
    }

    /// An empty cache for `bilm`, which runs on `device` in batches of at most `batch_size`
    /// sentences and `max_batch_positions` padded positions (a GPU runs faster with more:
    /// `elmo embed` gives it 1,024 and 65,536).
    ///
    /// # Errors
    /// Where the embedder refuses the sizes (zero).
    pub fn with_batches(
        bilm: &BiLm,
        device: &Device,
        batch_size: usize,
        max_batch_positions: usize,
    ) -> Result<Self> {
        let embedder = EmbedderConfig {
            layers: LayerSelection::All,
            pooling: Pooling::Tokens,
            stateful: false,
            batch_size,
            max_batch_positions,
            token_cache_bytes: TOKEN_CACHE_BYTES,
        }
        .init(bilm.clone(), device)?;
        Ok(Self {
            n_layers: embedder.n_layers(),
            d_layer: embedder.d_output(),
            sentences: HashMap::new(),
            embedder,
            in_memory: 0,
            spill: None,
        })
    }

    /// The same, keeping at most `memory_bytes` of layers in memory: the sentences after that
    /// go to an unnamed temporary file made in `dir` (removed when the features are dropped,
    /// and on Unix also when the process is killed) and are read back per batch.
    pub fn spilling(mut self, memory_bytes: usize, dir: impl Into<PathBuf>) -> Self {
        self.spill = Some(Spill {
            memory_bytes,
            dir: dir.into(),
            file: None,
            end: 0,
        });
        self
    }

    /// The token embeddings kept between biLM calls.
    pub fn token_cache(&self) -> Option<&TokenEmbeddingCache> {
        self.embedder.token_cache()
    }

    /// Sentences cached.
    pub fn len(&self) -> usize {
        self.sentences.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.sentences.is_empty()
    }

    /// Host memory held by the cached layers, in bytes.
    pub fn n_bytes(&self) -> usize {
        self.in_memory
    }

    /// Bytes of layers in the temporary file, and the folder it is in (`None`: nothing
    /// spilled).
    pub fn spilled(&self) -> Option<(u64, &Path)> {
        (self.spill.as_ref())
            .filter(|s| s.file.is_some())
            .map(|s| (s.end, s.dir.as_path()))
    }

    /// Runs the biLM (from a zero state, per sentence) over every sentence not cached yet, in
    /// batches of similar length, taking the words seen before from the token cache.
    /// `on_sentence()` is called once per sentence encoded.
    pub fn add<'a>(
        &mut self,
        sentences: impl IntoIterator<Item = &'a [String]>,
        mut on_sentence: impl FnMut(),
    ) -> Result<()> {
        let mut seen = HashSet::new();
        let missing: Vec<&[String]> = sentences
            .into_iter()
            .filter(|s| !self.sentences.contains_key(*s) && seen.insert(*s))
            .collect();
        let (cached, spill) = (&mut self.sentences, &mut self.spill);
        let in_memory = &mut self.in_memory;
        self.embedder.embed_each(&missing, |i, vectors| {
            // `[L + 1, n, 2P]`, layer by layer: the layout `batch` reads.
            let bytes = 4 * vectors.values.len();
            let stored = match spill {
                Some(spill) if in_memory.saturating_add(bytes) > spill.memory_bytes => {
                    spill.write(&vectors.values)?
                }
                _ => {
                    *in_memory += bytes;
                    Stored::Memory(vectors.values)
                }
            };
            cached.insert(missing[i].to_vec(), stored);
            on_sentence();
            Ok::<(), TaskError>(())
        })
    }

    /// The layers of a batch of cached sentences, zero-padded to the longest.
    ///
    /// # Shapes
    /// - output: `n_layers` tensors `[B, T, d_layer]` (no gradient)
    ///
    /// # Errors
    /// Where layers kept in the temporary file cannot be read back.
    ///
    /// # Panics
    /// When a sentence was not [`add`](Self::add)ed first (a programming error).
    pub fn batch(&self, sentences: &[&[String]], device: &Device) -> Result<Vec<Tensor<3>>> {
        let batch = sentences.len();
        let n_steps = sentences.iter().map(|s| s.len()).max().unwrap_or(0);
        let d = self.d_layer;
        let mut layers = vec![vec![0.0f32; batch * n_steps * d]; self.n_layers];
        let mut read_back = Vec::new();
        for (row, sentence) in sentences.iter().enumerate() {
            let values = match self.sentences.get(*sentence) {
                Some(Stored::Memory(values)) => values,
                Some(&Stored::Spilled { offset, len }) => {
                    let spill = self
                        .spill
                        .as_ref()
                        .expect("spilled layers have a spill file");
                    spill.read(offset, len, &mut read_back)?;
                    &read_back
                }
                None => panic!("biLM features are computed before batching"),
            };
            let n = sentence.len();
            for (j, layer) in layers.iter_mut().enumerate() {
                let start = row * n_steps * d;
                layer[start..start + n * d].copy_from_slice(&values[j * n * d..(j + 1) * n * d]);
            }
        }
        Ok(layers
            .into_iter()
            .map(|values| Tensor::from_data(TensorData::new(values, [batch, n_steps, d]), device))
            .collect())
    }
}

impl Spill {
    /// Appends `values` (little-endian `f32`), making the file first where it is not yet.
    fn write(&mut self, values: &[f32]) -> Result<Stored> {
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let file = tempfile::tempfile_in(&self.dir).map_err(io_error(&self.dir))?;
                self.file.insert(Mutex::new(file))
            }
        };
        let file = file
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        (file.seek(SeekFrom::Start(self.end)))
            .and_then(|_| file.write_all(&bytes))
            .map_err(io_error(&self.dir))?;
        let offset = self.end;
        self.end += bytes.len() as u64;
        Ok(Stored::Spilled {
            offset,
            len: values.len(),
        })
    }

    /// Reads the `len` values written at `offset` into `values`.
    fn read(&self, offset: u64, len: usize, values: &mut Vec<f32>) -> Result<()> {
        let file = self.file.as_ref().expect("a spilled sentence was written");
        let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut bytes = vec![0u8; 4 * len];
        (file.seek(SeekFrom::Start(offset)))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(io_error(&self.dir))?;
        values.clear();
        let decoded = bytes.chunks_exact(4).map(|b| [b[0], b[1], b[2], b[3]]);
        values.extend(decoded.map(f32::from_le_bytes));
        Ok(())
    }
}
