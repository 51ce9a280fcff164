//! Runs the `fixtures/tiny` stateful sequence in float64 and in float32 and prints, per call and
//! layer, how far each is from AllenNLP's float32 outputs: the float64 column is (almost all) the
//! oracle's own float32 rounding error, the yardstick for the float32 parity tolerance.
//!
//! `cargo run --release -p elmo-model --example precision`

use burn::tensor::{Device, FloatDType};
use elmo_model::weights::load_bilm;
use elmo_model::{BiLmState, CharIdBatch};

fn fixture(rel: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

fn npy_f32(rel: &str) -> Vec<f32> {
    elmo_test_support::read_npy::<f32>(&fixture(rel)).data
}

fn sentences(batch: &str) -> Vec<Vec<String>> {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny/meta.json")).expect("meta"))
            .expect("json");
    serde_json::from_value(meta["batches"][batch].clone()).expect("batch")
}

fn run(device: &Device) -> Vec<Vec<f32>> {
    let bilm = load_bilm(
        fixture("tiny/options.json"),
        fixture("tiny/weights.hdf5"),
        device,
    )
    .expect("load");
    let mut state: Option<BiLmState> = None;
    let mut worst = Vec::new();
    for (call, batch) in ["main", "edge", "main_first3", "main"]
        .into_iter()
        .enumerate()
    {
        let ids = CharIdBatch::from_sentences(&sentences(batch));
        let out = bilm.forward_batch(&ids, device, Some(&mut state));
        if call == 0 {
            eprintln!("dtype of the outputs: {:?}", out.layers[2].dtype());
        }
        let mut per_layer = Vec::new();
        for (i, layer) in out.layers.iter().enumerate() {
            let got = layer.to_data().try_into_vec_as::<f32>().expect("f32");
            let expected = npy_f32(&format!("tiny/stateful/call{call}_layer{i}.npy"));
            per_layer.push(
                got.iter()
                    .zip(&expected)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max),
            );
        }
        worst.push(per_layer);
    }
    worst
}

fn main() {
    let mut f64_device = Device::flex();
    f64_device
        .configure(FloatDType::F64)
        .expect("configure float64");
    let wide = run(&f64_device);
    #[allow(deprecated)]
    let narrow = run(&Device::ndarray());
    println!("| call | layer | float64 vs AllenNLP | float32 (ndarray) vs AllenNLP |");
    println!("|---|---|---|---|");
    for (call, (w, n)) in wide.iter().zip(&narrow).enumerate() {
        for (layer, (a, b)) in w.iter().zip(n).enumerate() {
            println!("| {call} | {layer} | {a:.2e} | {b:.2e} |");
        }
    }
}
