//! `cargo xtask`: project automation (std only).
//!
//! - `cargo xtask ci`: the module-cycle check, `bash -n` on every shell script of `xtask/device/`
//!   and `.ci/`, `cargo fmt --check`, `cargo clippy -D warnings`,
//!   `cargo doc` without warnings, `cargo test --workspace` (the framework-native example `examples/elmo-tagger` runs as one
//!   of its tests, on flex), then ~1,440 fuzz cases.
//! - `cargo xtask spirv`: `cargo test --workspace` again with the `elmo` binary's opt-in `vulkan`
//!   and `cuda-runtime` features ([`GPU_FEATURES`]), so that every wgpu test (f32 and mixed
//!   precision) runs through burn's SPIR-V compiler, and the `cuda` build's code is compiled and
//!   tested too; a second build of burn. CI runs it after `ci`.
//! - `cargo xtask cublas`: clippy on that same build, then its cuBLAS path (device pointers,
//!   strides, streams: `bench_train --blas-check cuda`) against the stand-in CUDA driver and
//!   cuBLAS of `xtask/device/fake-cuda/` (built with `cc`), which compute its products on the
//!   host; no GPU and no CUDA toolkit. It reuses `spirv`'s build (no third build of burn); CI
//!   runs it after `spirv`.
//! - `cargo xtask aarch64 [--test]`: clippy `-D warnings` on every target of the workspace for
//!   64-bit ARM Linux ([`ARM_TARGET`]: Graviton, Ampere, Raspberry Pi 5; the code that x86-64
//!   leaves out, the host kernels' portable path, is compiled and linted there); with `--test`,
//!   the workspace's tests built for it and run under `qemu-aarch64` (Debian's `qemu-user` and
//!   `gcc-aarch64-linux-gnu`), but the two that run an ARM binary or extension from a host
//!   process. Needs `rustup target add aarch64-unknown-linux-gnu`. CI runs the lint, last.
//! - `cargo xtask cycles`: no import cycles among the modules of any workspace crate.
//! - `cargo xtask scripts`: `bash -n` on the shell scripts (also part of `ci`).
//! - `cargo xtask fuzz [-- --cases N]`: mutation fuzzing of every reader of user files.
//! - `cargo xtask bench [embed|train] [-- ARGS]`: the benchmarks (tokens/s, peak RSS), built in the
//!   dev profile with the `elmo` binary's features, so no second build of burn (see Cargo.toml).

use std::path::PathBuf;
use std::process::{Command, ExitCode};

mod module_cycles;

/// The workspace root (xtask's parent): from the `CARGO_MANIFEST_DIR` that `cargo run` sets for
/// this run, so that a binary built in another clone sharing the target dir (cargo does not
/// rebuild it there) checks this clone; the path it was built at otherwise.
fn workspace_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("..")
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(mut command: Command) -> Result<(), String> {
    eprintln!("xtask: running {command:?}");
    let status = command.status().map_err(|e| format!("{command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}

/// `bash -n` (parse without running) on the shell scripts that run where no one watches them:
/// `.ci/run` and the lent GPU machine's `xtask/device/*.sh` (a quote left open there once made
/// `setup.sh` skip its second half on the GPU, unnoticed until the call's results came back).
fn shell_syntax(root: &std::path::Path) -> Result<(), String> {
    let device = root.join("xtask/device");
    let entries = std::fs::read_dir(&device).map_err(|e| format!("{}: {e}", device.display()))?;
    let mut scripts: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "sh"))
        .collect();
    scripts.sort();
    scripts.push(root.join(".ci/run"));
    for script in scripts {
        let mut check = Command::new("bash");
        check.arg("-n").arg(&script);
        run(check)?;
    }
    Ok(())
}

/// `cargo clippy -D warnings` on every target of the workspace, with cargo's further `args`
/// (features, a target; none for the default build).
fn clippy(args: &[&str]) -> Result<(), String> {
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets"]);
    clippy.args(args).args(["--", "-D", "warnings"]);
    run(clippy)
}

fn ci() -> Result<(), String> {
    module_cycles::check(&workspace_root())?;
    shell_syntax(&workspace_root())?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    clippy(&[])?;
    // The API docs without a broken or private link.
    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run(doc)?;
    let mut test = cargo();
    test.args(["test", "--workspace"]);
    run(test)?;
    // ~1,440 fuzz cases over every reader (`cargo xtask fuzz -- --cases N` for long runs).
    fuzz(&["--cases".into(), "120".into()])
}

/// The opt-in GPU backends that CI builds beside the default ones, in one feature resolution:
/// every feature set is a build of burn from `cubecl-ir` up, so the SPIR-V tests and the cuBLAS
/// check share one instead of building two. `cuda-runtime` is the `cuda` backend without
/// CubeCL's on-disk kernel cache (burn's `persistence`), whose database engine and feature
/// changes would rebuild 275 crates instead of 57 (burn's, CubeCL's, cudarc) after the default
/// build (times: README's "Continuous integration"). The cache's few lines go uncompiled here.
const GPU_FEATURES: &str = "elmo-cli/vulkan,elmo-cli/cuda-runtime";

/// The workspace's tests with [`GPU_FEATURES`]: with burn's `vulkan` feature `wgpu` compiles
/// its kernels to SPIR-V on a Vulkan adapter (lavapipe in CI), so the wgpu tests (parity with
/// AllenNLP, the fused kernels, mixed precision, training against autodiff) check that compiler
/// and `--backend vulkan`; with `cuda` its code (cuBLAS in elmo-kernels) runs beside them, on no
/// CUDA device. burn's default device is then CUDA, the first of its order, which a CI machine
/// lacks: nothing in the tests may use it (the resume tests check that).
fn spirv() -> Result<(), String> {
    let mut test = cargo();
    test.args(["test", "--workspace", "--features", GPU_FEATURES]);
    run(test)
}

/// Clippy on [`GPU_FEATURES`]' build (the default build does not compile its cuBLAS and Vulkan
/// code), then the `cuda` build's cuBLAS products of uploaded operands, in every layout the
/// build hands cuBLAS, against the host's products, through the stand-in driver and cuBLAS (no
/// kernel of CubeCL runs, so nothing needs NVRTC).
fn cublas() -> Result<(), String> {
    clippy(&["--features", GPU_FEATURES])?;
    let mut build = cargo();
    build.args([
        "build",
        "-p",
        "elmo-cli",
        "--features",
        GPU_FEATURES,
        "--example",
        "bench_train",
    ]);
    run(build)?;
    let root = workspace_root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let libraries = target.join("cublas-check");
    std::fs::create_dir_all(&libraries).map_err(|e| format!("{}: {e}", libraries.display()))?;
    let stand_ins = root.join("xtask/device/fake-cuda");
    for (source, library) in [
        ("libcuda.c", "libcuda.so.1"),
        ("libcublas.c", "libcublas.so"),
    ] {
        let mut cc = Command::new("cc");
        cc.args(["-O1", "-shared", "-fPIC", "-Wall", "-o"])
            .arg(libraries.join(library))
            .arg(stand_ins.join(source))
            .arg("-lm");
        run(cc)?;
    }
    let mut check = Command::new(target.join("debug/examples/bench_train"));
    check
        .args(["--blas-check", "cuda"])
        .env("LD_LIBRARY_PATH", &libraries)
        .env("FAKECUBLAS_COMPUTE", "1")
        .env("CUBECL_ENVIRONMENT", "elmo-cublas-check");
    run(check)
}

/// The 64-bit ARM Linux target of [`aarch64`].
const ARM_TARGET: &str = "aarch64-unknown-linux-gnu";

/// `cargo xtask aarch64 [--test]`: clippy `-D warnings` on the workspace for [`ARM_TARGET`];
/// with `--test`, its unit tests and integration tests run under `qemu-aarch64`, linked by
/// `aarch64-linux-gnu-gcc`, but for [`HOST_ONLY_TESTS`]. Tests are chosen by target, not by
/// package, so that the build has the workspace's one feature resolution.
fn aarch64(args: &[String]) -> Result<(), String> {
    clippy(&["--target", ARM_TARGET])?;
    if !args.iter().any(|a| a == "--test") {
        return Ok(());
    }
    let target_env = ARM_TARGET.to_uppercase().replace('-', "_");
    let mut test = cargo();
    test.args([
        "test",
        "--workspace",
        "--target",
        ARM_TARGET,
        "--lib",
        "--bins",
    ]);
    for name in integration_tests(&workspace_root())? {
        if !HOST_ONLY_TESTS.contains(&name.as_str()) {
            test.args(["--test", &name]);
        }
    }
    test.env(
        format!("CARGO_TARGET_{target_env}_LINKER"),
        "aarch64-linux-gnu-gcc",
    )
    .env(format!("CARGO_TARGET_{target_env}_RUNNER"), QEMU)
    // A test that runs itself again in a child process runs it through qemu too.
    .env("ELMO_TEST_RUNNER", QEMU)
    // Under qemu there is no GPU adapter: the wgpu tests report themselves skipped.
    .env_remove("ELMO_REQUIRE_WGPU");
    run(test)
}

/// The command that runs an ARM test binary here (Debian's `qemu-user` and the cross gcc's
/// libraries).
const QEMU: &str = "qemu-aarch64 -L /usr/aarch64-linux-gnu";

/// Integration tests that cannot run under `qemu-aarch64` from a host process: `cli` runs the
/// `elmo` binary (an ARM one) as a child process, `python_module` loads the ARM extension into
/// the host's Python.
const HOST_ONLY_TESTS: [&str; 2] = ["cli", "python_module"];

/// The names of the workspace crates' integration tests: each `crates/*/tests/NAME.rs`, and
/// each `crates/*/tests/NAME/main.rs`.
fn integration_tests(root: &std::path::Path) -> Result<Vec<String>, String> {
    let list = |dir: &std::path::Path| -> Result<Vec<PathBuf>, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
    };
    let mut names = Vec::new();
    for krate in list(&root.join("crates"))? {
        let tests = krate.join("tests");
        if !tests.is_dir() {
            continue;
        }
        for path in list(&tests)? {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string);
            let is_test = match path.is_dir() {
                true => path.join("main.rs").is_file(),
                false => path.extension().is_some_and(|e| e == "rs"),
            };
            if let (true, Some(stem)) = (is_test, stem) {
                names.push(stem);
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

fn bench(args: &[String]) -> Result<(), String> {
    let (which, rest) = match args.split_first() {
        Some((first, rest)) if !first.starts_with('-') => (first.as_str(), rest),
        _ => ("embed", args),
    };
    match which {
        "embed" => {
            let mut command = cargo();
            command.args(["run", "-p", "elmo-cli", "--example", "bench_embed", "--"]);
            command.args(rest.iter().filter(|a| *a != "--"));
            run(command)
        }
        "train" => {
            let mut command = cargo();
            command.args(["run", "-p", "elmo-cli", "--example", "bench_train", "--"]);
            command.args(rest.iter().filter(|a| *a != "--"));
            run(command)
        }
        other => Err(format!(
            "unknown benchmark `{other}` (available: embed, train)"
        )),
    }
}

/// `cargo xtask fuzz [-- ARGS]`: the readers' mutation fuzzing (`--cases N`, `--readers`,
/// `--keep DIR`), with the `elmo` binary built first (the `input` reader runs it).
fn fuzz(args: &[String]) -> Result<(), String> {
    let mut build = cargo();
    build.args(["build", "--quiet", "-p", "elmo-cli"]);
    run(build)?;
    let mut command = cargo();
    command.args([
        "run",
        "--quiet",
        "-p",
        "elmo-cli",
        "--example",
        "fuzz",
        "--",
    ]);
    command.args(args.iter().filter(|a| *a != "--"));
    run(command)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("spirv") => spirv(),
        Some("cublas") => cublas(),
        Some("aarch64") => aarch64(&args[1..]),
        Some("cycles") => module_cycles::check(&workspace_root()),
        Some("scripts") => shell_syntax(&workspace_root()),
        Some("bench") => bench(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        _ => Err(
            "usage: cargo xtask ci | cargo xtask spirv | cargo xtask cublas | cargo xtask aarch64 [--test] | cargo xtask cycles | cargo xtask scripts | cargo xtask bench [embed|train] [-- ARGS] | cargo xtask fuzz [-- ARGS]"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
