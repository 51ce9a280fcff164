//! Helpers of elmo-rs's tests and benchmarks, outside the libraries' public API (not
//! published): a wgpu device where one opens, the parameters a gradient reaches, one
//! differentiating test at a time, values compared at their scale, and the flags, devices and
//! memory measure of the benchmark programs, and a loopback file server for the download tests.

mod autodiff_lock;
pub mod bench;
mod compare;
mod file_server;
mod gradients;
mod npy;
mod wgpu_probe;

pub use autodiff_lock::autodiff_one_at_a_time;
pub use compare::scaled_difference;
pub use file_server::{FileServer, Reply};
pub use gradients::nonzero_gradients;
pub use npy::{Array, NpyElement, read_npy};
pub use wgpu_probe::{
    flex_and_wgpu, sixteen_bit_floats, wgpu_device_or_skip, wgpu_sixteen_bit_device_or_skip,
};

/// The repository's root directory, from the `CARGO_MANIFEST_DIR` that `cargo test` gives the
/// test at run time (a crate's directory, two levels down), the compile-time value only as a
/// fallback: a test binary reused from a build cache made in another clone must read this
/// clone's files.
pub fn repository_root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        )
        .join("../..")
}

/// A file under the repository's `fixtures/`.
pub fn fixture(rel: &str) -> std::path::PathBuf {
    repository_root().join("fixtures").join(rel)
}
