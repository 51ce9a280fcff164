//! The packed host copies of weights that inference on burn's flex CPU backend runs with,
//! kept with their module between calls: an LSTMP layer's (`W_x`, `W_h`, bias, projection) for
//! its loop (`elmo_kernels::HostLstm`, AllenNLP's `LstmCellWithProjection` recurrence),
//! [`HostWeights`]; a dense layer's weight rounded to `bf16` for
//! [`Precision::Mixed`]'s products on AMX or AVX512-BF16 (the char CNN's highways and projection),
//! [`HostBf16Weight`]. Each copy is a pass over fresh memory (72 MiB per layer and direction
//! at the `original` size, 16 MiB a highway weight), so an embedding run packs them once, not
//! once per batch.
//!
//! The copy is valid for the exact storage it was packed from: it holds a reference to each
//! weight's flex buffer, so flex cannot update a packed weight in place (it copies a shared
//! buffer before writing), and a call whose weights live in any other buffer (new values
//! loaded, an optimizer step, another device) packs again.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

#[cfg(feature = "flex")]
use burn::backend::Flex;
use burn::tensor::Tensor;
#[cfg(feature = "flex")]
use elmo_kernels::HostLstmWeights;
use elmo_kernels::{Bf16Matrix, Bf16Unit, HostInstructions, HostLstm, KernelSettings, Precision};

use crate::fused_recurrence::GroupLayer;

/// A weight's flex buffer, held, and the values it was read at (pointer and length).
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
struct Source {
    buffer: Arc<dyn Any + Send + Sync>,
    values: (usize, usize),
}

#[cfg_attr(not(feature = "flex"), allow(dead_code))]
impl Source {
    fn is(&self, other: &Source) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.buffer), Arc::as_ptr(&other.buffer))
            && self.values == other.values
    }

    /// A contiguous `f32` flex tensor's buffer and values; `None` for any other tensor.
    #[cfg(feature = "flex")]
    fn of(tensor: &burn::backend::flex::FlexTensor) -> Option<(Self, &[f32])> {
        let slice = tensor.as_slice::<f32>()?;
        let source = Source {
            buffer: tensor.data_arc(),
            values: (slice.as_ptr() as usize, slice.len()),
        };
        Some((source, slice))
    }
}

/// The last packed copy of a weight (or a layer's weights) and the key it was packed for (the
/// buffers it was read from, and the settings it was packed with), shared by clones of the
/// module that keeps it.
struct KeptCopy<K, V> {
    slot: Arc<Mutex<Option<Kept<K, V>>>>,
}

/// A packed copy and its key.
struct Kept<K, V> {
    key: K,
    value: Arc<V>,
}

impl<K, V> Clone for KeptCopy<K, V> {
    fn clone(&self) -> Self {
        Self {
            slot: self.slot.clone(),
        }
    }
}

impl<K, V> Default for KeptCopy<K, V> {
    fn default() -> Self {
        Self {
            slot: Arc::default(),
        }
    }
}

#[cfg_attr(not(feature = "flex"), allow(dead_code))]
impl<K, V> KeptCopy<K, V> {
    /// The kept copy where its key and `key` are the same (`same(kept, key)`), else `pack`'s,
    /// kept with `key` (the previous copy dropped first, so that two are never held at once;
    /// nothing kept where `pack` gives none).
    fn get_or_pack(
        &self,
        key: K,
        same: impl FnOnce(&K, &K) -> bool,
        pack: impl FnOnce() -> Option<V>,
    ) -> Option<Arc<V>> {
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(kept) = slot.as_ref()
            && same(&kept.key, &key)
        {
            return Some(kept.value.clone());
        }
        *slot = None;
        let value = Arc::new(pack()?);
        *slot = Some(Kept {
            key,
            value: value.clone(),
        });
        Some(value)
    }

    /// Whether a copy is kept.
    fn is_packed(&self) -> bool {
        self.slot.lock().map(|slot| slot.is_some()).unwrap_or(false)
    }

    /// `name { packed: bool }`, the `Debug` form of the modules' copies.
    fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("packed", &self.is_packed())
            .finish()
    }
}

/// What a layer's packed weights were packed from and with.
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
struct LayerKey {
    sources: Vec<Source>,
    instructions: HostInstructions,
    precision: Precision,
}

/// The last packed copy of a layer's weights (empty until the first inference call on
/// flex). Clones of a layer share it. Where a layer's weights change, the buffers of the old ones
/// stay held until the next inference call packs the new ones.
#[derive(Clone, Default)]
pub struct HostWeights {
    kept: KeptCopy<LayerKey, HostLstm>,
}

impl fmt::Debug for HostWeights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kept.debug("HostWeights", f)
    }
}

impl HostWeights {
    /// Without this crate's `flex` feature no tensor is a flex one: `None`.
    #[cfg(not(feature = "flex"))]
    pub(crate) fn layer(
        &self,
        _weights: &GroupLayer,
        _instructions: HostInstructions,
        _precision: Precision,
    ) -> Option<Arc<HostLstm>> {
        None
    }

    /// The packed layer for `weights` (this layer's, as the fused recurrence reads them), the
    /// widest instruction set up to `instructions` and the products' `precision`: the kept
    /// copy where the weights are the buffers it was packed from for the same instructions and
    /// precision, else packed now (and kept). `None` where a weight is not a contiguous `f32`
    /// flex tensor.
    #[cfg(feature = "flex")]
    pub(crate) fn layer(
        &self,
        weights: &GroupLayer,
        instructions: HostInstructions,
        precision: Precision,
    ) -> Option<Arc<HostLstm>> {
        let flex = |tensor: &Tensor<2>| tensor.clone().inner().try_into_primitive::<Flex>().ok();
        let bias = weights.bias.clone().unsqueeze_dim::<2>(0);
        let tensors = [
            flex(&weights.input_weight)?,
            flex(&weights.state_weight)?,
            flex(&bias)?,
            flex(&weights.projection)?,
        ];
        let mut values = Vec::with_capacity(tensors.len());
        let mut sources = Vec::with_capacity(tensors.len());
        for tensor in &tensors {
            let (source, slice) = Source::of(tensor)?;
            sources.push(source);
            values.push(slice);
        }
        let same = |kept: &LayerKey, key: &LayerKey| {
            kept.instructions == key.instructions
                && kept.precision == key.precision
                && kept.sources.len() == key.sources.len()
                && kept.sources.iter().zip(&key.sources).all(|(a, b)| a.is(b))
        };
        let pack = || {
            Some(HostLstm::new(HostLstmWeights {
                input_weight: values[0],
                state_weight: values[1],
                bias: values[2],
                projection: values[3],
                cell_clip: weights.cell_clip,
                projection_clip: weights.projection_clip,
                instructions,
                precision,
            }))
        };
        let key = LayerKey {
            sources,
            instructions,
            precision,
        };
        self.kept.get_or_pack(key, same, pack)
    }

    /// Whether a packed copy is kept (for tests).
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        self.kept.is_packed()
    }
}

/// The last `bf16` copy of a dense layer's weight `[K, N]`, packed for the CPU's `bf16` unit
/// (AMX's tiles or AVX512-BF16, [`elmo_kernels::bf16_product`]), kept between inference calls
/// (empty until the first product with [`Precision::Mixed`] on flex on a CPU with such a unit).
/// Clones of a layer share it. Valid for the storage and the unit it was packed for, as
/// [`HostWeights`] is.
#[derive(Clone, Default)]
pub struct HostBf16Weight {
    kept: KeptCopy<(Source, Bf16Unit), Bf16Matrix>,
}

impl fmt::Debug for HostBf16Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kept.debug("HostBf16Weight", f)
    }
}

impl HostBf16Weight {
    /// `x · weight` in `bf16`, `f32` sums ([`elmo_kernels::bf16_product`]), `weight` packed
    /// once and kept: where `kernels` asks for [`Precision::Mixed`] on the host, `x` and
    /// `weight` are `f32` flex tensors outside autodiff (`weight` contiguous) and this CPU has
    /// a `bf16` unit within `kernels.host_instructions` ([`Bf16Unit::at_most`]); `None`
    /// otherwise (the caller runs the product in `f32`).
    ///
    /// # Shapes
    /// - x: `[M, K]`; weight: `[K, N]`; output: `[M, N]`
    #[cfg(feature = "flex")]
    pub(crate) fn product(
        &self,
        x: &Tensor<2>,
        weight: &Tensor<2>,
        kernels: KernelSettings,
    ) -> Option<Tensor<2>> {
        let mixed = kernels.precision == Precision::Mixed;
        if !mixed || x.device().is_autodiff() || !kernels.host_for(x) {
            return None;
        }
        let limit = kernels.host_instructions;
        let unit = Bf16Unit::at_most(limit)?;
        let flex = weight.clone().try_into_primitive::<Flex>().ok()?;
        let (source, values) = Source::of(&flex)?;
        let n = weight.dims()[1];
        let same = |kept: &(Source, Bf16Unit), key: &(Source, Bf16Unit)| {
            kept.0.is(&key.0) && kept.1 == key.1
        };
        let packed =
            (self.kept).get_or_pack((source, unit), same, || Bf16Matrix::pack(values, n, limit))?;
        elmo_kernels::bf16_product(x, &packed)
    }

    /// Without this crate's `flex` feature no tensor is a flex one: `None`.
    #[cfg(not(feature = "flex"))]
    pub(crate) fn product(
        &self,
        _x: &Tensor<2>,
        _weight: &Tensor<2>,
        _kernels: KernelSettings,
    ) -> Option<Tensor<2>> {
        None
    }

    /// Whether a packed copy is kept (for tests).
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        self.kept.is_packed()
    }
}
