//! The packed host copy of an LSTMP layer's weights (`W_x`, `W_h`, bias, projection) that the
//! inference loop on burn's flex CPU backend runs with (`elmo_kernels::HostLstm`, AllenNLP's
//! `LstmCellWithProjection` recurrence), kept with the layer between calls: [`HostWeights`].
//! Each copy is a pass over fresh memory (72 MiB per layer and direction at the `original`
//! size), so an embedding run packs them once, not once per batch.
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
#[cfg(feature = "flex")]
use burn::tensor::Tensor;
#[cfg(feature = "flex")]
use elmo_kernels::HostLstmWeights;
use elmo_kernels::{HostInstructions, HostLstm, Precision};

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
            let slice = tensor.as_slice::<f32>()?;
            sources.push(Source {
                buffer: tensor.data_arc(),
                values: (slice.as_ptr() as usize, slice.len()),
            });
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
