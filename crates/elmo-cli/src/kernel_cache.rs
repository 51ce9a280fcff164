//! Keeping the kernels that the `cuda` backend compiles (NVRTC, up to a second each) across
//! processes: CubeCL's on-disk compilation cache, which this build turns on for `--backend cuda`
//! (the `cuda` feature enables burn's `persistence`; `cuda-runtime` alone, CI's build, compiles
//! every kernel anew in each process). Also compiled into the benchmark examples.
//! The cache is CubeCL's environment database: `target/environment/` of the Cargo workspace the
//! process runs in, else the user's cache folder (`~/.cache/cubecl/` on Linux), or where a
//! `cubecl.toml`'s `[environment] path` says; entries are keyed by the binary's build id and the
//! GPU's architecture, so a rebuilt binary or another GPU generation compiles anew.

/// Turns on CubeCL's compilation cache for this process, keeping the rest of CubeCL's
/// configuration as a `cubecl.toml` (in the current directory or above) and its `CUBECL_*`
/// variables set it. Call before the first CubeCL device is made: where CubeCL has read its
/// configuration already, it stays as it was (returns `false`), as it does in a build without
/// the cache (`cuda-runtime` without `cuda`).
#[cfg(feature = "cuda-runtime")]
pub fn cache_compiled_kernels() -> bool {
    #[cfg(feature = "cuda")]
    {
        use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        config.compilation.cache = true;
        CubeClRuntimeConfig::try_set(config)
    }
    #[cfg(not(feature = "cuda"))]
    false
}
