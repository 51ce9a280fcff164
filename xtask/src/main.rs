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
//! - `cargo xtask platforms [--test aarch64|windows]`: clippy `-D warnings` on every target of
//!   the workspace for 64-bit ARM Linux (Graviton, Ampere, Raspberry Pi 5), macOS on Apple
//!   silicon and Windows ([`LINT_TARGETS`]; the code that x86-64 Linux leaves out, the host
//!   kernels' portable path among it, is compiled and linted there); with `--test aarch64`, the
//!   workspace's tests built for ARM Linux and run under `qemu-aarch64`, with `--test windows`
//!   built for Windows (MinGW) and run under wine ([`EMULATED`]: the Debian packages each needs).
//!   Needs `rustup target add` of each target. CI runs the lint, last.
//! - `cargo xtask features`: clippy `-D warnings` on the feature sets a user builds besides the
//!   workspace's one ([`FEATURE_SETS`]): the `elmo` binary for the CPU alone (the README's
//!   shorter first build) or for wgpu alone, and the library crates on a backend that a burn
//!   project picks. CI runs it before `platforms`.
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

/// Cargo's target directory: `CARGO_TARGET_DIR`, else `target/` of the workspace at `root`.
fn target_dir(root: &std::path::Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
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

/// The feature sets of [`features`]: each is a build of its own that the workspace's build
/// (every feature of the `elmo` binary) does not compile, so code behind a `cfg(feature)` that
/// one of them leaves out can break or warn there unseen.
const FEATURE_SETS: [&[&str]; 3] = [
    // The `elmo` binary for the CPU only (README: the shorter first build).
    &[
        "-p",
        "elmo-cli",
        "--no-default-features",
        "--features",
        "flex,download",
    ],
    // ... and for wgpu only, with the project's kernels.
    &[
        "-p",
        "elmo-cli",
        "--no-default-features",
        "--features",
        "wgpu,kernels",
    ],
    // The libraries in a burn project that picked ndarray (no flex, no CubeCL kernels).
    &[
        "-p",
        "elmo-model",
        "-p",
        "elmo-train",
        "-p",
        "elmo-tasks",
        "--features",
        "burn/ndarray",
    ],
];

/// Clippy `-D warnings` on the library and binaries of each of [`FEATURE_SETS`].
fn features() -> Result<(), String> {
    for set in FEATURE_SETS {
        let mut clippy = cargo();
        clippy.args(["clippy", "--lib", "--bins"]);
        clippy.args(set).args(["--", "-D", "warnings"]);
        run(clippy)?;
    }
    Ok(())
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
    let target = target_dir(&root);
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

/// The platforms besides x86-64 Linux that [`platforms`] lints: 64-bit ARM Linux (Graviton,
/// Ampere, Raspberry Pi 5), macOS on Apple silicon, and Windows (its usual MSVC toolchain).
const LINT_TARGETS: [&str; 3] = [
    "aarch64-unknown-linux-gnu",
    "aarch64-apple-darwin",
    "x86_64-pc-windows-msvc",
];

/// A platform whose tests [`platforms`] runs here, through an emulator.
struct Emulated {
    /// The name `--test` takes.
    name: &'static str,
    /// Rust's target.
    target: &'static str,
    /// The linker of that target (a cross gcc).
    linker: &'static str,
    /// The command that runs one of its binaries here.
    runner: &'static str,
    /// Whether a test binary must be run through `runner` to start one of its own kind (true
    /// under qemu-user, which runs one process; wine starts Windows processes itself).
    children_need_runner: bool,
    /// Whether the runner needs the stand-in DLLs of `xtask/wine/` ([`wine_dlls`]).
    needs_wine_dlls: bool,
    /// Packages left out: `elmo-python`'s unit tests link Python's DLL on Windows, which wine
    /// has not.
    excluded: &'static [&'static str],
    /// Integration tests that cannot run there from this host: `cli` runs the `elmo` binary as a
    /// child process of the host's test process under qemu-user (wine runs it as it runs the
    /// test), `python_module` loads the extension into the host's Python.
    host_only: &'static [&'static str],
}

/// 64-bit ARM Linux under qemu-user (Debian's `qemu-user` and `gcc-aarch64-linux-gnu`), and
/// Windows under wine (Debian's `wine64` and `gcc-mingw-w64-x86-64`; MinGW's target, as wine
/// runs no MSVC linker).
const EMULATED: [Emulated; 2] = [
    Emulated {
        name: "aarch64",
        target: "aarch64-unknown-linux-gnu",
        linker: "aarch64-linux-gnu-gcc",
        runner: "qemu-aarch64 -L /usr/aarch64-linux-gnu",
        children_need_runner: true,
        needs_wine_dlls: false,
        excluded: &[],
        host_only: &["cli", "python_module"],
    },
    Emulated {
        name: "windows",
        target: "x86_64-pc-windows-gnu",
        linker: "x86_64-w64-mingw32-gcc",
        runner: "wine",
        children_need_runner: false,
        needs_wine_dlls: true,
        excluded: &["elmo-python"],
        host_only: &["python_module"],
    },
];

/// `cargo xtask platforms [--test aarch64|windows]`: clippy `-D warnings` on the workspace for
/// each of [`LINT_TARGETS`] (the code that x86-64 Linux leaves out, such as the host kernels'
/// portable path, compiled and linted); with `--test NAME`, the workspace's unit and
/// integration tests built for that [`EMULATED`] platform and run through its emulator, but its
/// `host_only` ones and `excluded` packages. Tests are chosen by target, not by package, so that
/// the build has the workspace's one feature resolution (leaving `elmo-python` out changes no
/// feature: no crate was rebuilt for it).
fn platforms(args: &[String]) -> Result<(), String> {
    let emulated = match args {
        [] => None,
        [flag, name] if flag == "--test" => Some(
            EMULATED
                .iter()
                .find(|platform| platform.name == name)
                .ok_or_else(|| format!("--test {name}: aarch64 or windows"))?,
        ),
        _ => return Err("usage: cargo xtask platforms [--test aarch64|windows]".into()),
    };
    let targets: Vec<&str> = LINT_TARGETS.iter().flat_map(|t| ["--target", t]).collect();
    clippy(&targets)?;
    let Some(platform) = emulated else {
        return Ok(());
    };
    let target_env = platform.target.to_uppercase().replace('-', "_");
    let mut test = cargo();
    test.args([
        "test",
        "--workspace",
        "--target",
        platform.target,
        "--lib",
        "--bins",
        "--no-fail-fast",
    ]);
    for package in platform.excluded {
        test.args(["--exclude", package]);
    }
    for name in integration_tests(&workspace_root())? {
        if !platform.host_only.contains(&name.as_str()) {
            test.args(["--test", &name]);
        }
    }
    test.env(format!("CARGO_TARGET_{target_env}_LINKER"), platform.linker)
        .env(format!("CARGO_TARGET_{target_env}_RUNNER"), platform.runner)
        // There is no GPU adapter there: the wgpu tests report themselves skipped.
        .env_remove("ELMO_REQUIRE_WGPU");
    if platform.children_need_runner {
        // A test that runs itself again in a child process runs it through the emulator too.
        test.env("ELMO_TEST_RUNNER", platform.runner);
    }
    if platform.needs_wine_dlls {
        // Wine's drive Z: is the root of this machine's file system.
        let dlls = format!("Z:{}", wine_dlls()?.display());
        test.env("WINEPATH", dlls).env("WINEDEBUG", "-all");
    }
    run(test)
}

/// Builds the DLLs that wine lacks (`xtask/wine/`) into the target directory; their folder, for
/// `WINEPATH`.
fn wine_dlls() -> Result<PathBuf, String> {
    let root = workspace_root();
    let dlls = target_dir(&root).join("wine-dlls");
    std::fs::create_dir_all(&dlls).map_err(|e| format!("{}: {e}", dlls.display()))?;
    let mut cc = Command::new("x86_64-w64-mingw32-gcc");
    cc.args(["-O2", "-shared", "-Wall", "-o"])
        .arg(dlls.join("bcryptprimitives.dll"))
        .arg(root.join("xtask/wine/bcryptprimitives.c"))
        .arg("-ladvapi32");
    run(cc)?;
    Ok(dlls)
}

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
        Some("platforms") => platforms(&args[1..]),
        Some("features") => features(),
        Some("cycles") => module_cycles::check(&workspace_root()),
        Some("scripts") => shell_syntax(&workspace_root()),
        Some("bench") => bench(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        _ => Err(
            "usage: cargo xtask ci | cargo xtask spirv | cargo xtask cublas | cargo xtask features | cargo xtask platforms [--test aarch64|windows] | cargo xtask cycles | cargo xtask scripts | cargo xtask bench [embed|train] [-- ARGS] | cargo xtask fuzz [-- ARGS]"
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
