//! Helpers shared by the benchmark programs (`bench_embed`, `bench_train`): flag values, the
//! backend of a name, and the process's peak resident memory.

use burn::tensor::{Device, DeviceKind};

/// The device of a backend name (`flex`, `ndarray`, `wgpu`). For flex, the caller makes the
/// application's matmul setting (`elmo_model::cpu_matmul`) as the CLI does.
#[allow(deprecated)]
pub fn device(backend: &str) -> Device {
    match backend {
        "flex" => Device::flex(),
        "ndarray" => Device::ndarray(),
        "wgpu" => Device::wgpu(DeviceKind::DefaultDevice),
        other => panic!("unknown backend {other}"),
    }
}

/// Peak resident set size of this process (`VmHWM`), in MiB.
pub fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The value after `flag` in `args`, or `default`.
pub fn flag_value(args: &[String], flag: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}
