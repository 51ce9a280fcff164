//! Tiny-shape parity on wgpu (in CI through Mesa's lavapipe software Vulkan): the `main` batch of
//! `fixtures/tiny` through the whole model, compared with AllenNLP within 1e-5.
//!
//! Without any Vulkan/Metal/DX12 adapter the test reports that it could not run, unless
//! `ELMO_REQUIRE_WGPU=1` (set by `.ci/run`) makes a missing adapter a failure.

mod common;

use common::*;
use elmo_model::ElmoConfig;

#[test]
fn tiny_main_batch_matches_allennlp_on_wgpu() {
    let Some(device) =
        elmo_test_support::wgpu_device_or_skip("tiny_main_batch_matches_allennlp_on_wgpu")
    else {
        return;
    };
    let elmo = ElmoConfig::default()
        .from_pretrained(
            fixture("tiny/options.json"),
            fixture("tiny/weights.hdf5"),
            &device,
        )
        .expect("load");
    let out = elmo.forward_sentences(&tiny_sentences("main"), &device);
    for (i, layer) in out.bilm.layers.iter().enumerate() {
        let file = format!("tiny/main/bilm_layer{i}.npy");
        assert_close(&format!("wgpu layer {i}"), layer, &npy(&file), 1e-5, None);
    }
    assert_close(
        "wgpu elmo",
        &out.representations[0],
        &npy("tiny/main/elmo.npy"),
        1e-5,
        None,
    );
}
