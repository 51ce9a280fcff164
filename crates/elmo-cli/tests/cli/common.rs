//! Helpers shared by the CLI tests: run the real binary, paths, fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `elmo ARGS`.
pub fn elmo(args: &[&str]) -> std::process::Output {
    elmo_with_env(args, &[])
}

/// Runs `elmo ARGS` with extra environment variables.
pub fn elmo_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_elmo"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run elmo")
}

/// Runs `elmo ARGS`, asserts success and returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = elmo(args);
    assert!(
        out.status.success(),
        "elmo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `elmo ARGS`, asserts failure and returns its standard error.
pub fn fails(args: &[&str]) -> String {
    let out = elmo(args);
    assert!(!out.status.success(), "elmo {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A path as `&str`.
pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A file under `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    elmo_test_support::fixture(rel)
}
