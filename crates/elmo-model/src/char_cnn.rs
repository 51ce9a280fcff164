//! Character-CNN token encoder of ELMo (Peters et al. 2018, §3.4; Kim et al. 2016): char embedding,
//! 1-D convolutions of several widths, max over positions, activation, highway layers, projection.
//! Follows AllenNLP's `_ElmoCharacterEncoder` (allennlp/modules/elmo.py).

use std::cell::RefCell;

use burn::module::{Module, Param, ParamId};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::{relu, tanh};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};

use elmo_kernels::{
    HostWindowMax, KernelSettings, Precision, half_product, host_window_max, product, slices_when,
    to_half,
};

use crate::char_ids::MAX_CHARS_PER_TOKEN;
use crate::convolution_record::{ConvolutionRecord, PaddingWindow, RecordedWindows};
use crate::highway::{Highway, HighwayConfig, HighwayRecord, linear_in};
use crate::host_weights::HostBf16Weight;
use crate::options::{BiLmOptions, CnnActivation};

/// Configuration of a [`CharCnnEncoder`], taken from [`BiLmOptions`].
#[derive(Debug, Clone)]
pub struct CharCnnEncoderConfig {
    /// Character vocabulary size including the padding id 0.
    pub n_characters: usize,
    /// Character embedding width (`E`).
    pub d_char: usize,
    /// `[width, n_filters]` of each convolution.
    pub filters: Vec<[usize; 2]>,
    /// Number of highway layers.
    pub n_highway: usize,
    /// Output width (`P`).
    pub d_output: usize,
    /// Activation after max-pooling.
    pub activation: CnnActivation,
    /// Which custom kernels run on a CubeCL device (the char lookup's gradient as a scatter,
    /// the convolutions' weight gradients split over the windows).
    pub kernels: KernelSettings,
}

impl CharCnnEncoderConfig {
    /// The token encoder described by `options`.
    pub fn from_options(options: &BiLmOptions) -> Self {
        let cnn = &options.char_cnn;
        Self {
            n_characters: crate::char_ids::N_CHARACTERS,
            d_char: cnn.embedding.dim,
            filters: cnn.filters.clone(),
            n_highway: cnn.n_highway,
            d_output: options.lstm.projection_dim,
            activation: cnn.activation,
            kernels: KernelSettings::default(),
        }
    }

    /// Total number of filters (`F`).
    pub fn n_filters(&self) -> usize {
        self.filters.iter().map(|[_, n]| n).sum()
    }

    /// Creates the encoder with random weights; row 0 of the char embedding (padding) is zero.
    pub fn init(&self, device: &Device) -> CharCnnEncoder {
        // Drawn lazily like every other parameter (constructing a model to load weights into
        // then draws nothing from the backend's global RNG): U(−1, 1), the padding row zero.
        let (n_characters, d_char) = (self.n_characters, self.d_char);
        let char_embedding = Param::uninitialized(
            ParamId::new(),
            move |device, require_grad| {
                // Drawn and edited untracked (no autodiff step is left behind), then made a leaf.
                let table: Tensor<2> = Tensor::random(
                    [n_characters, d_char],
                    Distribution::Uniform(-1.0, 1.0),
                    device,
                );
                let table =
                    table.slice_assign([0..1, 0..d_char], Tensor::zeros([1, d_char], device));
                if require_grad {
                    table.require_grad()
                } else {
                    table
                }
            },
            device.clone(),
            true,
            [n_characters, d_char].into(),
        );
        let convolutions = self
            .filters
            .iter()
            .map(|&[width, n_filters]| {
                let fan_in = width * self.d_char;
                let bound = (1.0 / fan_in as f64).sqrt();
                let init = Initializer::Uniform {
                    min: -bound,
                    max: bound,
                };
                CharConvolution {
                    weight: init.init_with(
                        [fan_in, n_filters],
                        Some(fan_in),
                        Some(n_filters),
                        device,
                    ),
                    bias: init.init_with([n_filters], Some(fan_in), Some(n_filters), device),
                    width,
                    kernels: self.kernels,
                }
            })
            .collect();
        let n_filters = self.n_filters();
        CharCnnEncoder {
            char_embedding,
            convolutions,
            highways: (0..self.n_highway)
                .map(|_| HighwayConfig { d_model: n_filters }.init(device))
                .collect(),
            projection: LinearConfig::new(n_filters, self.d_output).init(device),
            activation: self.activation,
            kernels: self.kernels,
            projection_bf16: HostBf16Weight::default(),
        }
    }
}

/// One convolution of a single width over the 50 character slots, stored as a matrix.
#[derive(Module, Debug)]
pub struct CharConvolution {
    /// `[width * d_char, n_filters]`: bilm-tf's `W_cnn_i` `(1, width, d_char, n_filters)` flattened.
    pub weight: Param<Tensor<2>>,
    /// `[n_filters]`.
    pub bias: Param<Tensor<1>>,
    /// Kernel width in characters.
    #[module(skip)]
    pub width: usize,
    /// Which custom kernels run on a CubeCL device.
    #[module(skip)]
    pub kernels: KernelSettings,
}

impl CharConvolution {
    /// Valid (unpadded) convolution followed by max over positions.
    ///
    /// # Shapes
    /// - chars: `[n_tokens, 50, d_char]`
    /// - output: `[n_tokens, n_filters]`
    pub fn forward(&self, chars: Tensor<3>) -> Tensor<2> {
        let n_slots = chars.dims()[1];
        self.forward_with_extent(chars, n_slots, None)
    }

    /// Like [`forward`](Self::forward), when every token of the batch holds only the padding
    /// character from slot `extent` on. The windows that lie entirely in the padding all give the
    /// same value, so only the windows starting before `extent` are computed, and the value of
    /// an all-padding window (from `padding_char`, the `[d_char]` embedding of the padding
    /// character) stands for the rest: the same maximum as over all positions, for fewer FLOPs.
    ///
    /// # Shapes
    /// - chars: `[n_tokens, 50, d_char]`; padding_char: `[d_char]`
    /// - output: `[n_tokens, n_filters]`
    pub fn forward_with_extent(
        &self,
        chars: Tensor<3>,
        extent: usize,
        padding_char: Option<Tensor<1>>,
    ) -> Tensor<2> {
        let n_slots = chars.dims()[1];
        let n_positions = self.positions(n_slots, extent);
        // On flex outside autodiff: from the chars on the host, no window or position's value
        // through memory.
        if self.kernels.host_for(&chars) {
            let weight = self.weight.val();
            let instructions = self.kernels.host_instructions;
            let max = host_window_max(
                &chars,
                &weight,
                self.width,
                n_positions,
                false,
                instructions,
                self.kernels.precision,
            );
            if let Some(max) = max {
                return self.pooled(max.pooled, n_slots, n_positions, padding_char);
            }
        }
        let windows = self.windows(chars, n_positions);
        self.convolve_windows(windows, n_slots, padding_char)
    }

    /// The windows [`Self::forward_with_extent`] convolves with `extent`: those starting
    /// before it (at least one), of `n_slots` slots.
    pub fn positions(&self, n_slots: usize, extent: usize) -> usize {
        extent.clamp(1, n_slots - self.width + 1)
    }

    /// The windows of `chars` starting at the first `n_positions` slots, each flat in the
    /// layout of `weight` (width-major, then char dimension), so that a convolution is one
    /// matmul: `[t, p, k · d_char + c]` holds char `c` of slot `p + k` of token `t`.
    ///
    /// # Shapes
    /// - chars: `[n_tokens, 50, d_char]`; output: `[n_tokens, n_positions, width · d_char]`
    pub fn windows(&self, chars: Tensor<3>, n_positions: usize) -> Tensor<3> {
        let [n_tokens, _, d_char] = chars.dims();
        // The slots are gathered in one `select` (slot `p + k` for position `p`, offset `k`),
        // whose gradient is one scatter-add: on a GPU two kernels in all, where a `cat` of
        // `width` shifted slices costs `width` copies forward and `3 · width` kernels backward.
        let windows = if self.width == 1 {
            chars.narrow(1, 0, n_positions)
        } else {
            let slots: Vec<i64> = (0..n_positions)
                .flat_map(|p| (0..self.width).map(move |k| (p + k) as i64))
                .collect();
            let slots = Tensor::<1, Int>::from_data(
                TensorData::new(slots, [n_positions * self.width]),
                &chars.device(),
            );
            chars.select(1, slots)
        };
        windows.reshape([n_tokens, n_positions, self.width * d_char])
    }

    /// [`Self::forward_with_extent`] from its [`Self::windows`] of tokens of `n_slots` slots:
    /// their convolution, its max over positions (and the all-padding window's value, from
    /// `padding_char`, where the windows stop before the last), plus the bias.
    ///
    /// # Shapes
    /// - windows: `[n_tokens, n_positions, width · d_char]`; padding_char: `[d_char]`
    /// - output: `[n_tokens, n_filters]`
    ///
    /// # Panics
    /// If the windows stop before the last and there is no `padding_char`.
    pub fn convolve_windows(
        &self,
        windows: Tensor<3>,
        n_slots: usize,
        padding_char: Option<Tensor<1>>,
    ) -> Tensor<2> {
        let [n_tokens, n_positions, flat_width] = windows.dims();
        let weight = self.weight.val();
        let windows = windows.reshape([n_tokens * n_positions, flat_width]);
        let convolved = windows_product(windows, weight, self.kernels);
        let [_, n_filters] = convolved.dims();
        let pooled = convolved
            .reshape([n_tokens, n_positions, n_filters])
            .max_dim(1)
            .reshape([n_tokens, n_filters]);
        self.pooled(pooled, n_slots, n_positions, padding_char)
    }

    /// The max over the first `n_positions` windows of tokens of `n_slots` slots, with the
    /// all-padding window's value where they stop before the last, plus the bias.
    ///
    /// # Shapes
    /// - max: `[n_tokens, n_filters]`; padding_char: `[d_char]`; output: as `max`
    ///
    /// # Panics
    /// If the windows stop before the last and there is no `padding_char`.
    fn pooled(
        &self,
        max: Tensor<2>,
        n_slots: usize,
        n_positions: usize,
        padding_char: Option<Tensor<1>>,
    ) -> Tensor<2> {
        let mut pooled = max;
        if n_positions < n_slots - self.width + 1 {
            let window = self.padding_window(padding_char);
            let value = window.matmul(self.weight.val()).expand(pooled.dims());
            pooled = pooled.max_pair(value);
        }
        pooled + self.bias.val().unsqueeze_dim(0)
    }

    /// [`Self::forward_with_extent`] outside autodiff, before the activation, with what its
    /// backward pass needs: the windows, the position of each filter's max and where the
    /// all-padding window wins. The product runs as [`product`] runs it (on CUDA through cuBLAS;
    /// with mixed precision in 16 bits with `f32` accumulation: the chars may be in 16 bits
    /// already), not split, or on flex in `f32` with the max on the host ([`host_window_max`]);
    /// the output is `f32`.
    ///
    /// # Shapes
    /// - chars: `[n_tokens, n_slots, d_char]`; padding_char: `[d_char]`
    ///
    /// # Panics
    /// If the windows stop before the last and there is no `padding_char`.
    pub fn convolve_recorded(
        &self,
        chars: Tensor<3>,
        n_positions: usize,
        padding_char: Option<Tensor<1>>,
    ) -> ConvolutionPass {
        let [n_tokens, n_slots, _] = chars.dims();
        let all_positions = n_slots - self.width + 1;
        let weight = self.weight.val().inner();
        let chars = chars.inner();
        // On flex in `f32` whatever the precision: the positions of the maxima pick the windows
        // that the backward pass sends each filter's gradient to, and `bf16`'s rounding moves
        // near-ties to another window (a training step gains nothing measurable from it).
        let instructions = self.kernels.host_instructions;
        let host = (self.kernels.host_for(&chars))
            .then(|| {
                host_window_max(
                    &chars,
                    &weight,
                    self.width,
                    n_positions,
                    true,
                    instructions,
                    Precision::F32,
                )
            })
            .flatten();
        let (mut pooled, windows) = match host {
            // The backward pass reads the windows from the chars too.
            Some(HostWindowMax { pooled, positions }) => {
                let positions = positions.expect("positions asked for");
                (pooled, RecordedWindows::Chars { chars, positions })
            }
            None => {
                let windows = self.windows(chars, n_positions);
                let [_, _, flat_width] = windows.dims();
                let windows = windows.reshape([n_tokens * n_positions, flat_width]);
                let convolved = product(windows.clone(), weight.clone(), self.kernels);
                let [_, n_filters] = convolved.dims();
                let (pooled, argmax) = convolved
                    .reshape([n_tokens, n_positions, n_filters])
                    .max_dim_with_indices(1);
                let windows = RecordedWindows::Flat { windows, argmax };
                (pooled.reshape([n_tokens, n_filters]), windows)
            }
        };
        let n_filters = pooled.dims()[1];
        // As `max_pair`: the padding window's value where it is strictly larger.
        let padding = (n_positions < all_positions).then(|| {
            let window = self.padding_window(padding_char.map(Tensor::inner));
            let value = window.clone().matmul(weight).expand([n_tokens, n_filters]);
            let wins = pooled.clone().lower(value.clone());
            pooled = pooled.clone().mask_where(wins.clone(), value);
            PaddingWindow { window, wins }
        });
        ConvolutionPass {
            pooled: pooled + self.bias.val().inner().unsqueeze_dim(0),
            windows,
            padding,
        }
    }

    /// The window of `width` padding chars from `padding_char`, flat as the windows.
    ///
    /// # Shapes
    /// - padding_char: `[d_char]`; output: `[1, width · d_char]`
    ///
    /// # Panics
    /// Without `padding_char`.
    fn padding_window(&self, padding_char: Option<Tensor<1>>) -> Tensor<2> {
        let padding_char = padding_char.expect("an extent below 50 needs the padding character");
        let [d_char] = padding_char.dims();
        padding_char
            .unsqueeze_dim::<2>(0)
            .repeat_dim(0, self.width)
            .reshape([1, self.width * d_char])
    }
}

/// A convolution's pass outside autodiff ([`CharConvolution::convolve_recorded`]).
#[derive(Debug, Clone)]
pub struct ConvolutionPass {
    /// `[n_tokens, F]`: the max over positions plus the bias, before the activation.
    pub pooled: Tensor<2>,
    /// The windows, flat, or the chars the host read them from.
    pub windows: RecordedWindows,
    /// The all-padding window and where it wins, where the windows stop before the last.
    pub padding: Option<PaddingWindow>,
}

/// `windows · weight`. Where `kernels` splits products ([`KernelSettings::split_for`]) as a
/// batched product over S
/// slices of the windows against the one weight, the same values: the weight's gradient
/// `windowsᵀ · ∂`, whose inner dimension is every window of the batch (~98,000 at `ptb-large`
/// 64 × 35) and whose output is one or two cubes, then comes as S partial products summed by
/// autodiff (split-K, `split_product`): profiled on an H200, these products took 1.4-2.4 ms each,
/// 14 a training step.
///
/// # Shapes
/// - windows: `[n_windows, width · d_char]`; weight: `[width · d_char, n_filters]`
/// - output: `[n_windows, n_filters]`
fn windows_product(windows: Tensor<2>, weight: Tensor<2>, kernels: KernelSettings) -> Tensor<2> {
    let [n_windows, d_window] = windows.dims();
    let n_filters = weight.dims()[1];
    let n_slices = slices_when(kernels.split_for(&weight), n_windows);
    if n_slices == 1 {
        return product(windows, weight, kernels);
    }
    let mode = kernels.product_mode(&weight);
    half_product(
        windows.reshape([n_slices, n_windows / n_slices, d_window]),
        weight.unsqueeze_dim(0),
        mode,
    )
    .reshape([n_windows, n_filters])
}

/// Rows `start..start + len` of `tensor` (the tensor itself when that is all of it).
fn rows<const D: usize, K>(tensor: &Tensor<D, K>, start: usize, len: usize) -> Tensor<D, K>
where
    K: burn::tensor::kind::Basic,
{
    match start == 0 && len == tensor.dims()[0] {
        true => tensor.clone(),
        false => tensor.clone().narrow(0, start, len),
    }
}

/// The id of the padding character after the end of a word (AllenNLP's 260, plus one).
pub const PADDING_CHAR_ID: u16 = 261;

/// The padding character's row of a char embedding `table`, which the convolutions' windows read
/// past the longest word ([`CharConvolution::forward_with_extent`]).
///
/// # Shapes
/// - table: `[n_characters, d_char]`; output: `[d_char]`
fn padding_row(table: &Tensor<2>) -> Tensor<1> {
    let d_char = table.dims()[1];
    table
        .clone()
        .narrow(0, usize::from(PADDING_CHAR_ID), 1)
        .reshape([d_char])
}

/// Slots up to the last non-padding character of a token's char ids (50 for an all-zero row).
pub fn char_extent(ids: &[u16]) -> usize {
    ids.iter()
        .rposition(|&c| c != PADDING_CHAR_ID)
        .map_or(0, |last| last + 1)
}

/// The char-CNN token encoder.
#[derive(Module, Debug)]
pub struct CharCnnEncoder {
    /// `[n_characters, d_char]`; row 0 is the padding id and is zero in pretrained models.
    pub char_embedding: Param<Tensor<2>>,
    /// One convolution per filter width.
    pub convolutions: Vec<CharConvolution>,
    /// Highway layers over the concatenated filters.
    pub highways: Vec<Highway>,
    /// `[n_filters, d_output]` projection (bilm-tf `CNN_proj`).
    pub projection: Linear,
    /// Activation after max-pooling.
    #[module(skip)]
    pub activation: CnnActivation,
    /// Which custom kernels run on a CubeCL device.
    #[module(skip)]
    pub kernels: KernelSettings,
    /// The projection weight's `bf16` copy for [`Precision::Mixed`]'s products on a CPU with
    /// AMX or AVX512-BF16 ([`HostBf16Weight`]; empty elsewhere).
    ///
    /// [`Precision::Mixed`]: elmo_kernels::Precision::Mixed
    #[module(skip)]
    pub projection_bf16: HostBf16Weight,
}

/// The encoder's highways and projection over given convolutions
/// ([`CharCnnEncoder::dense_recorded`]).
#[derive(Debug, Clone)]
pub struct DenseRecord {
    /// Each highway layer's pass, in order.
    pub highways: Vec<HighwayRecord>,
    /// After the highway layers (the projection's input), `[N, n_filters]`.
    pub highway: Tensor<2>,
    /// The token embeddings, `[N, d_output]`.
    pub token_embedding: Tensor<2>,
}

/// Every stage of the token encoder, for inspection and parity tests.
#[derive(Debug, Clone)]
pub struct CharCnnOutput {
    /// Concatenated activated max-pooled convolutions, `[B, T, n_filters]`.
    pub convolutions: Tensor<3>,
    /// After the highway layers, `[B, T, n_filters]`.
    pub highway: Tensor<3>,
    /// The token embedding, `[B, T, d_output]`.
    pub token_embedding: Tensor<3>,
}

impl CharCnnEncoder {
    /// This encoder running `kernels` on a CubeCL device.
    pub fn with_kernels(mut self, kernels: KernelSettings) -> Self {
        self.kernels = kernels;
        for convolution in &mut self.convolutions {
            convolution.kernels = kernels;
        }
        self
    }

    /// Width of the token embeddings (`P`, the projection's output).
    pub fn d_output(&self) -> usize {
        self.projection.weight.dims()[1]
    }

    /// Encodes character ids into token embeddings.
    ///
    /// # Shapes
    /// - char_ids: `[B, T, 50]`
    /// - output: `[B, T, d_output]`
    pub fn forward(&self, char_ids: Tensor<3, Int>) -> Tensor<3> {
        self.forward_stages(char_ids).token_embedding
    }

    /// Like [`forward`](Self::forward), keeping the intermediate stages.
    pub fn forward_stages(&self, char_ids: Tensor<3, Int>) -> CharCnnOutput {
        self.forward_stages_with_extent(char_ids, MAX_CHARS_PER_TOKEN)
    }

    /// Like [`forward_stages`](Self::forward_stages), when every token holds only the padding
    /// character ([`PADDING_CHAR_ID`]) from slot `extent` on (see
    /// [`CharConvolution::forward_with_extent`]; [`char_extent`] computes it).
    pub fn forward_stages_with_extent(
        &self,
        char_ids: Tensor<3, Int>,
        extent: usize,
    ) -> CharCnnOutput {
        let [batch, n_tokens, n_slots] = char_ids.dims();
        let flat = char_ids.reshape([batch * n_tokens, n_slots]);
        let stages = self.in_pieces(batch * n_tokens, extent, |start, len| {
            self.token_stages(rows(&flat, start, len), extent)
        });
        let [convolutions, highway, token_embedding] = stages;
        let n_filters = highway.dims()[1];
        let d_output = token_embedding.dims()[1];
        CharCnnOutput {
            convolutions: convolutions.reshape([batch, n_tokens, n_filters]),
            highway: highway.reshape([batch, n_tokens, n_filters]),
            token_embedding: token_embedding.reshape([batch, n_tokens, d_output]),
        }
    }

    /// The encoder up to its highways (the activated max-pooled convolutions of every token,
    /// concatenated: [`Self::forward_stages_with_extent`]'s `convolutions`, flat) outside
    /// autodiff, with each convolution's pass recorded for a backward pass by hand
    /// ([`ConvolutionRecord`]), for a caller that runs the rest itself
    /// ([`Self::dense_recorded`]). All of `char_ids` is looked up at once (`[B·T, 50, E]`:
    /// meant for a chunk of distinct tokens); the convolutions run in pieces as there.
    ///
    /// # Shapes
    /// - char_ids: `[B, T, 50]`; output: `[B·T, n_filters]`
    pub fn convolutions_recorded(
        &self,
        char_ids: Tensor<3, Int>,
        extent: usize,
    ) -> (Tensor<2>, Vec<ConvolutionRecord>) {
        let [batch, n_tokens, n_slots] = char_ids.dims();
        let flat = char_ids.reshape([batch * n_tokens, n_slots]).inner();
        let table = self.char_embedding.val().inner();
        let padding_char = (extent < n_slots).then(|| padding_row(&table));
        let chars = elmo_kernels::embedding(table, flat, self.kernels);
        // With mixed precision the windows are made in the products' 16-bit type, in which
        // their products (the convolution and its weight's gradient) read them: the chars are
        // cast, not each convolution's windows (~28 times as many values at 7 widths).
        let half = self.kernels.product_mode(&chars).half;
        let chars = to_half(chars, half);
        let records = RefCell::new(Vec::new());
        let [convolutions] = self.in_pieces(batch * n_tokens, extent, |start, len| {
            let chars = rows(&chars, start, len);
            let mut column = 0;
            let pooled = (self.convolutions.iter().enumerate())
                .map(|(convolution, conv)| {
                    let n_positions = conv.positions(n_slots, extent);
                    let ConvolutionPass {
                        pooled,
                        windows,
                        padding,
                    } = conv.convolve_recorded(chars.clone(), n_positions, padding_char.clone());
                    let output = self.activate(pooled);
                    let n_filters = output.dims()[1];
                    records.borrow_mut().push(ConvolutionRecord {
                        convolution,
                        rows: start..start + len,
                        columns: column..column + n_filters,
                        windows,
                        padding,
                        output: output.clone(),
                    });
                    column += n_filters;
                    output
                })
                .collect();
            [Tensor::cat(pooled, 1)]
        });
        (convolutions, records.into_inner())
    }

    /// The highways and the projection over `convolutions`, with each highway's record
    /// ([`Highway::forward_recorded`]), for a hand-written backward pass.
    ///
    /// # Shapes
    /// - convolutions: `[N, n_filters]`
    pub fn dense_recorded(&self, convolutions: Tensor<2>) -> DenseRecord {
        let mut highways: Vec<HighwayRecord> = Vec::with_capacity(self.highways.len());
        for layer in &self.highways {
            let x = highways
                .last()
                .map_or(convolutions.clone(), |r| r.output.clone());
            highways.push(layer.forward_recorded(x, self.kernels));
        }
        let highway = highways.last().map_or(convolutions, |r| r.output.clone());
        let token_embedding = linear_in(
            &self.projection,
            highway.clone(),
            self.kernels,
            &self.projection_bf16,
        );
        DenseRecord {
            highways,
            highway,
            token_embedding,
        }
    }

    /// `stage` over `n_rows` tokens in pieces (`stage(start, len)` for rows `start..start +
    /// len`) whose largest intermediate fits one piece (`KernelSettings::rows_per_piece`; the
    /// widest convolution's values before the max: 180 KiB a token at `original`'s 1,024 filters
    /// of width 7 over 50 slots), each piece as the whole batch would run; the pieces' outputs
    /// concatenated.
    ///
    /// # Shapes
    /// - each output of `stage`: `[len, _]`; of this: `[n_rows, _]`
    fn in_pieces<const S: usize>(
        &self,
        n_rows: usize,
        extent: usize,
        stage: impl Fn(usize, usize) -> [Tensor<2>; S],
    ) -> [Tensor<2>; S] {
        let piece =
            (self.kernels).rows_per_piece(&self.char_embedding.val(), self.bytes_per_token(extent));
        if n_rows <= piece {
            return stage(0, n_rows);
        }
        let mut parts: [Vec<Tensor<2>>; S] = std::array::from_fn(|_| Vec::new());
        for start in (0..n_rows).step_by(piece) {
            let len = piece.min(n_rows - start);
            for (part, out) in parts.iter_mut().zip(stage(start, len)) {
                part.push(out);
            }
        }
        parts.map(|part| Tensor::cat(part, 0))
    }

    /// The token encoder's stages over a flat list of tokens.
    ///
    /// # Shapes
    /// - flat: `[N, 50]`
    /// - output: `[N, n_filters]` (convolutions), `[N, n_filters]` (highway), `[N, d_output]`
    fn token_stages(&self, flat: Tensor<2, Int>, extent: usize) -> [Tensor<2>; 3] {
        let convolutions = self.convolution_stage(flat, extent);
        let DenseRecord {
            highway,
            token_embedding,
            ..
        } = self.dense_recorded(convolutions.clone());
        [convolutions, highway, token_embedding]
    }

    /// The char lookup, the convolutions, their max over positions and the activation, the
    /// filters concatenated.
    ///
    /// # Shapes
    /// - flat: `[N, 50]`; output: `[N, n_filters]`
    fn convolution_stage(&self, flat: Tensor<2, Int>, extent: usize) -> Tensor<2> {
        let n_slots = flat.dims()[1];
        let table = self.char_embedding.val();
        let padding_char = (extent < n_slots).then(|| padding_row(&table));
        let chars = elmo_kernels::embedding(table, flat, self.kernels);
        self.convolve_chars(chars, padding_char, extent)
    }

    /// [`Self::convolution_stage`] after the lookup: the convolutions of looked-up chars (with
    /// `padding_char`, the padding char's embedding, where windows pass `extent`).
    ///
    /// # Shapes
    /// - chars: `[N, 50, E]`; padding_char: `[E]`; output: `[N, n_filters]`
    fn convolve_chars(
        &self,
        chars: Tensor<3>,
        padding_char: Option<Tensor<1>>,
        extent: usize,
    ) -> Tensor<2> {
        let pooled: Vec<Tensor<2>> = (self.convolutions.iter())
            .map(|conv| {
                self.activate(conv.forward_with_extent(chars.clone(), extent, padding_char.clone()))
            })
            .collect();
        Tensor::cat(pooled, 1)
    }

    /// The activation after the max over positions.
    fn activate(&self, x: Tensor<2>) -> Tensor<2> {
        match self.activation {
            CnnActivation::Relu => relu(x),
            CnnActivation::Tanh => tanh(x),
        }
    }

    /// The bytes of the largest intermediate per token in [`Self::token_stages`]: a
    /// convolution's windows or values before the max over positions (up to `extent`), or a
    /// highway's `[2 · n_filters]` gates.
    fn bytes_per_token(&self, extent: usize) -> usize {
        let d_char = self.char_embedding.dims()[1];
        let n_filters: usize = self.convolutions.iter().map(|c| c.weight.dims()[1]).sum();
        let widest = (self.convolutions.iter())
            .map(|c| {
                let positions = extent.clamp(1, MAX_CHARS_PER_TOKEN + 1 - c.width);
                positions * c.weight.dims()[1].max(c.width * d_char)
            })
            .max()
            .unwrap_or(0);
        4 * widest.max(2 * n_filters).max(MAX_CHARS_PER_TOKEN * d_char)
    }
}
