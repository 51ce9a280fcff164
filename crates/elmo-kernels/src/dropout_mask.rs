//! Dropout masks from a counter-based hash (as Salmon et al. 2011's Philox serves PyTorch's and
//! TensorFlow's GPU dropout): element `i` of draw `(stream, draw)` is kept when
//! `hash(i, key(stream, draw)) < keep · 2³²`, so a mask needs no generator state carried from
//! draw to draw, is made where it is used (one kernel on a CubeCL device, nothing uploaded) and
//! is the same on every backend. The hash is Chris Wellons' `lowbias32` (an integer hash of 32-bit
//! multiplies, shifts and xors, which WGSL, SPIR-V and CUDA all have), keyed with two words.
//!
//! Why: drawn on the host with ChaCha8 and uploaded, `original`'s activation masks were ~8
//! million values a training step: a quarter of the host thread's time (perf, stand-in CUDA
//! driver) and ~30 MB copied to the device.

use burn::tensor::{Tensor, TensorData};

use crate::KernelSettings;
#[cfg(feature = "cubecl")]
use crate::cube_tensor::ElementwiseOutput;

/// Chris Wellons' `lowbias32` integer hash (hash-prospector): a bijection on `u32` with a
/// bias of 0.17 (close to the best two-multiply hash).
fn lowbias32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Which mask: a stream (a seed) and the draw's number in it, hashed into the two key words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskKey {
    words: [u32; 2],
}

impl MaskKey {
    /// The key of draw `draw` of `stream`.
    pub fn new(stream: u64, draw: u64) -> Self {
        let words = [
            stream as u32,
            (stream >> 32) as u32,
            draw as u32,
            (draw >> 32) as u32,
        ];
        let chain = |start: u32| words.iter().fold(start, |h, &w| lowbias32(h ^ w));
        Self {
            words: [chain(0x9e37_79b9), chain(0x85eb_ca6b)],
        }
    }

    /// The hash of element `index` under this key.
    pub fn hash(&self, index: u32) -> u32 {
        lowbias32(lowbias32(index ^ self.words[0]).wrapping_add(self.words[1]))
    }
}

/// The hashes below which an element is kept: `keep · 2³²`, all of them for `keep ≥ 1`.
fn threshold(keep: f64) -> u64 {
    (keep.clamp(0.0, 1.0) * 4_294_967_296.0).round() as u64
}

/// A dropout mask of `dims` on `like`'s device: `1 / keep` where kept, 0 elsewhere, for draw
/// `key`. One kernel where the fused kernels run ([`KernelSettings::fused_for`]), else drawn on
/// the host; the same values either way.
///
/// # Panics
/// If the mask has more than 2³² elements (its element index is a `u32`).
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn dropout_mask<const D: usize, const E: usize>(
    dims: [usize; D],
    key: MaskKey,
    keep: f64,
    like: &Tensor<E>,
    kernels: KernelSettings,
) -> Tensor<D> {
    let n: usize = dims.iter().product();
    assert!(
        n as u64 <= 1 << 32,
        "a dropout mask of {n} elements is larger than its u32 index"
    );
    let scale = (1.0 / keep) as f32;
    let threshold = threshold(keep);
    if threshold > u32::MAX as u64 {
        // Everything kept (no hash is 2³² or more).
        return Tensor::full(dims, scale, &like.device());
    }
    let threshold = threshold as u32;
    #[cfg(feature = "cubecl")]
    if n > 0 && kernels.fused_for(like) {
        let output = ElementwiseOutput::new(dims, &like.device());
        kernels::dropout_mask_kernel::launch(
            &output.client,
            output.count.clone(),
            output.dim,
            output.primitive.into_tensor_arg(),
            key.words[0],
            key.words[1],
            threshold,
            scale,
            output.dtype,
        );
        return output.tensor;
    }
    let values: Vec<f32> = (0..n)
        .map(|i| {
            if key.hash(i as u32) < threshold {
                scale
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_data(TensorData::new(values, dims), &like.device())
}

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    /// [`super::lowbias32`].
    #[cube]
    fn lowbias32(x: u32) -> u32 {
        let mut x = x;
        x ^= x >> 16;
        x *= 0x7feb_352d;
        x ^= x >> 15;
        x *= 0x846c_a68b;
        x ^= x >> 16;
        x
    }

    /// One unit per element: `scale` where its hash is below `threshold`, else 0.
    #[cube(launch)]
    pub(super) fn dropout_mask_kernel<F: Float>(
        mask: &mut Tensor<F>,
        key0: u32,
        key1: u32,
        threshold: u32,
        scale: f32,
        #[define(F)] _dtype: ElemType,
    ) {
        let position = ABSOLUTE_POS;
        if position >= mask.len() {
            terminate!();
        }
        let hash = lowbias32(lowbias32(u32::cast_from(position) ^ key0) + key1);
        mask[position] = if hash < threshold {
            F::cast_from(scale)
        } else {
            F::new(0.0)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    use elmo_test_support::flex_and_wgpu;

    #[test]
    fn lowbias32_keeps_its_values() {
        // The masks of a run being resumed come from these values: a change would change them.
        assert_eq!(lowbias32(0), 0);
        assert_eq!(lowbias32(1), 0x6889_90c0);
        assert_eq!(lowbias32(0x1234_5678), 0xf5e7_1c96);
        assert_eq!(lowbias32(u32::MAX), 0x6768_824a);
    }

    #[test]
    fn masks_are_the_same_on_every_device_and_keep_their_share() {
        let keep = 0.9;
        let key = MaskKey::new(0xdead_beef_1234, 7);
        let mut reference: Option<Vec<f32>> = None;
        let devices = flex_and_wgpu("dropout_mask");
        let n_devices = devices.len();
        let mut by_kernel = 0;
        for device in devices {
            let name = format!("{device:?}");
            let like = Tensor::<1>::zeros([1], &device);
            by_kernel += usize::from(KernelSettings::ALL.fused_for(&like));
            let mask = dropout_mask([64, 33, 17], key, keep, &like, KernelSettings::ALL);
            let values = mask.into_data().try_to_vec::<f32>().expect("f32 mask");
            let scale = (1.0 / keep) as f32;
            assert!(values.iter().all(|&v| v == 0.0 || v == scale), "{name}");
            let kept = values.iter().filter(|&&v| v != 0.0).count() as f64 / values.len() as f64;
            assert!((kept - keep).abs() < 0.01, "{name}: kept {kept}");
            match &reference {
                None => reference = Some(values),
                Some(reference) => assert_eq!(&values, reference, "{name} differs from the CPU"),
            }
        }
        // flex draws on the host; wgpu, where it runs, through the kernel (with the `cubecl`
        // feature, which `cargo test -p elmo-kernels` alone leaves off).
        let on_cube = if cfg!(feature = "cubecl") {
            n_devices - 1
        } else {
            0
        };
        assert_eq!(by_kernel, on_cube);
    }

    #[test]
    fn draws_and_streams_differ_and_repeat() {
        let device = Device::flex();
        let like = Tensor::<1>::zeros([1], &device);
        let mask = |stream, draw| {
            dropout_mask(
                [4096],
                MaskKey::new(stream, draw),
                0.5,
                &like,
                KernelSettings::ALL,
            )
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32 mask")
        };
        assert_eq!(mask(1, 2), mask(1, 2));
        assert_ne!(mask(1, 2), mask(1, 3));
        assert_ne!(mask(1, 2), mask(2, 2));
        assert_ne!(mask(1 << 32, 2), mask(1, 2));
        // Neighbouring elements of one mask and the same element of neighbouring draws are
        // independent: about half of them agree at keep 0.5.
        let (a, b) = (mask(5, 0), mask(5, 1));
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64;
        assert!((same - 0.5).abs() < 0.05, "draws agree on {same}");
        let pairs = a.windows(2).filter(|w| w[0] == w[1]).count() as f64 / (a.len() - 1) as f64;
        assert!((pairs - 0.5).abs() < 0.05, "neighbours agree on {pairs}");
        assert!(mask(9, 9).iter().all(|&v| v == 0.0 || v == 2.0));
        let all = dropout_mask([100], MaskKey::new(3, 4), 1.0, &like, KernelSettings::ALL);
        assert!(
            all.into_data()
                .try_to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|&v| v == 1.0)
        );
    }
}
