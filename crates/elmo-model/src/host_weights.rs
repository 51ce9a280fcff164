//! The packed host copies of weights that inference on burn's flex CPU backend runs with,
//! kept with their module between calls: an LSTMP layer's (`W_x`, `W_h`, bias, projection) for
//! its loop (`elmo_kernels::HostLstm`, AllenNLP's `LstmCellWithProjection` recurrence),
//! [`HostWeights`]; a dense layer's weight rounded to `bf16` for
//! [`Precision::Mixed`]'s products on AMX (the char CNN's highways and projection),
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
use elmo_kernels::{Bf16Matrix, HostInstructions, HostLstm, KernelSettings, Precision};

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

/// A packed layer's weights and the buffers they were packed from.
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
struct Packed {
    sources: Vec<Source>,
    instructions: HostInstructions,
    precision: Precision,
    layer: Arc<HostLstm>,
}

/// The last packed copy of a layer's weights (empty until the first inference call on
/// flex). Clones of a layer share it. Where a layer's weights change, the buffers of the old ones
/// stay held until the next inference call packs the new ones.
#[derive(Clone, Default)]
pub struct HostWeights {
    slot: Arc<Mutex<Option<Packed>>>,
}

impl fmt::Debug for HostWeights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let packed = self.slot.lock().map(|slot| slot.is_some()).unwrap_or(false);
        f.debug_struct("HostWeights")
            .field("packed", &packed)
            .finish()
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
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let kept = slot.as_ref().filter(|packed| {
            packed.instructions == instructions
                && packed.precision == precision
                && packed.sources.len() == sources.len()
                && packed.sources.iter().zip(&sources).all(|(a, b)| a.is(b))
        });
        let layer = match kept {
            Some(packed) => packed.layer.clone(),
            None => {
                // The previous copy goes first, so that two are never held at once.
                *slot = None;
                let layer = Arc::new(HostLstm::new(HostLstmWeights {
                    input_weight: values[0],
                    state_weight: values[1],
                    bias: values[2],
                    projection: values[3],
                    cell_clip: weights.cell_clip,
                    projection_clip: weights.projection_clip,
                    instructions,
                    precision,
                }));
                *slot = Some(Packed {
                    sources,
                    instructions,
                    precision,
                    layer: layer.clone(),
                });
                layer
            }
        };
        Some(layer)
    }

    /// Whether a packed copy is kept (for tests).
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        self.slot.lock().map(|slot| slot.is_some()).unwrap_or(false)
    }
}

/// The last `bf16` copy of a dense layer's weight `[K, N]`, packed for AMX's tiles
/// ([`elmo_kernels::bf16_product`]), kept between inference calls (empty until the first
/// product with [`Precision::Mixed`] on flex on a CPU with AMX). Clones of a layer share it.
/// Valid for the storage it was packed from, as [`HostWeights`] is.
#[derive(Clone, Default)]
pub struct HostBf16Weight {
    #[cfg_attr(not(feature = "flex"), allow(dead_code))]
    slot: Arc<Mutex<Option<PackedBf16>>>,
}

/// A packed `bf16` weight and the buffer it was packed from.
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
struct PackedBf16 {
    source: Source,
    packed: Arc<Bf16Matrix>,
}

impl fmt::Debug for HostBf16Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let packed = self.slot.lock().map(|slot| slot.is_some()).unwrap_or(false);
        f.debug_struct("HostBf16Weight")
            .field("packed", &packed)
            .finish()
    }
}

impl HostBf16Weight {
    /// `x · weight` in `bf16` on AMX's tiles, `f32` sums ([`elmo_kernels::bf16_product`]),
    /// `weight` packed once and kept: where `kernels` asks for [`Precision::Mixed`] on the
    /// host, `x` and `weight` are `f32` flex tensors outside autodiff (`weight` contiguous)
    /// and this CPU has AMX; `None` otherwise (the caller runs the product in `f32`).
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
        if !elmo_kernels::host_bf16_products() {
            return None;
        }
        let flex = weight.clone().try_into_primitive::<Flex>().ok()?;
        let (source, values) = Source::of(&flex)?;
        let n = weight.dims()[1];
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let packed = match slot.as_ref().filter(|kept| kept.source.is(&source)) {
            Some(kept) => kept.packed.clone(),
            None => {
                // The previous copy goes first, so that two are never held at once.
                *slot = None;
                let packed = Arc::new(Bf16Matrix::pack(values, n)?);
                *slot = Some(PackedBf16 {
                    source,
                    packed: packed.clone(),
                });
                packed
            }
        };
        drop(slot);
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
        self.slot.lock().map(|slot| slot.is_some()).unwrap_or(false)
    }
}
