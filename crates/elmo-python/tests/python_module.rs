//! The `elmo_rs` extension module as Python imports it: the cdylib that this test's build made,
//! copied as `elmo_rs.so` and run by `python3 tests/elmo_rs_test.py` against AllenNLP 2.10.1's
//! outputs of fixtures/tiny (stateless and stateful vectors, `batch_to_ids`, token embeddings,
//! `embed_file` read through h5py, errors).

use std::path::{Path, PathBuf};
use std::process::Command;

use elmo_test_support::{FileServer, Reply};

/// The extension module this test's build made (`libelmo_rs.so` beside the test's deps).
fn built_module() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe
        .parent()
        .expect("the test lies in target/<profile>/deps");
    let name = format!(
        "{}elmo_rs{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    [deps.join(&name), deps.join("..").join(&name)]
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} not found beside {}", deps.display()))
}

/// Whether `python3` imports numpy and h5py; a missing one fails the test where
/// `ELMO_REQUIRE_H5PY` is set (CI), and skips it elsewhere.
fn python_ready() -> bool {
    let ready = Command::new("python3")
        .args(["-c", "import numpy, h5py"])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        ready || std::env::var("ELMO_REQUIRE_H5PY").is_err(),
        "ELMO_REQUIRE_H5PY is set but python3 cannot import numpy and h5py"
    );
    ready
}

#[test]
fn the_python_module_gives_allennlp_vectors() {
    if !python_ready() {
        eprintln!("skipped: python3 with numpy and h5py is not installed");
        return;
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tiny = crate_dir.join("../../fixtures/tiny");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let module_dir = dir.path().join("module");
    std::fs::create_dir(&module_dir).expect("a folder for the module");
    std::fs::copy(built_module(), module_dir.join("elmo_rs.so")).expect("copy the module");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("a work folder");
    // The tiny model's files by URL too (downloaded into the folder's cache).
    let served = |name: &str| Reply::File(std::fs::read(tiny.join(name)).expect("a tiny file"));
    let server = FileServer::start(vec![
        ("/tiny/options.json", served("options.json")),
        ("/tiny/weights.hdf5", served("weights.hdf5")),
    ]);
    let out = Command::new("python3")
        .arg(crate_dir.join("tests/elmo_rs_test.py"))
        .arg(&tiny)
        .arg(&work)
        .arg(server.url("/tiny"))
        .env("PYTHONPATH", &module_dir)
        .env("ELMO_CACHE_DIR", dir.path().join("cache"))
        // The module computes on flex; a thread each is enough for the tiny model.
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "elmo_rs_test.py failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}\n{stderr}");
}
