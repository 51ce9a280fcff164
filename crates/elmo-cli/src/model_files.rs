//! Model files named by URL, downloaded once into a cache folder and read from there afterwards
//! (AllenNLP's `cached_path`, which its `elmo` command and `ElmoEmbedder` apply to
//! `--options-file` and `--weight-file`), and the pretrained English biLMs that AllenNLP
//! publishes, by name (allennlp.org/elmo).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use elmo_model::{ElmoError, RunLock, write_atomic_with};
use elmo_train::TrainError;

/// Where AllenNLP publishes its ELMo models.
const PUBLISHED_ROOT: &str = "https://allennlp.s3.amazonaws.com/models/elmo";

/// A pretrained biLM that AllenNLP publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishedModel {
    /// Its name here (`--model NAME`).
    pub name: &'static str,
    /// Its folder and file stem on AllenNLP's server (`elmo_{stem}_options.json`).
    pub stem: &'static str,
}

/// AllenNLP's English ELMo models, smallest first (allennlp.org/elmo).
pub const PUBLISHED_MODELS: [PublishedModel; 4] = [
    PublishedModel {
        name: "small",
        stem: "2x1024_128_2048cnn_1xhighway",
    },
    PublishedModel {
        name: "medium",
        stem: "2x2048_256_2048cnn_1xhighway",
    },
    PublishedModel {
        name: "original",
        stem: "2x4096_512_2048cnn_2xhighway",
    },
    PublishedModel {
        name: "original-5.5b",
        stem: "2x4096_512_2048cnn_2xhighway_5.5B",
    },
];

impl PublishedModel {
    /// The published model called `name`, if any.
    pub fn named(name: &str) -> Option<Self> {
        PUBLISHED_MODELS.into_iter().find(|m| m.name == name)
    }

    /// The names, for messages: `small, medium, original, original-5.5b`.
    pub fn names() -> String {
        PUBLISHED_MODELS.map(|m| m.name).join(", ")
    }

    /// The URL of its `options.json`.
    pub fn options_url(&self) -> String {
        format!("{PUBLISHED_ROOT}/{0}/elmo_{0}_options.json", self.stem)
    }

    /// The URL of its HDF5 weights.
    pub fn weights_url(&self) -> String {
        format!("{PUBLISHED_ROOT}/{0}/elmo_{0}_weights.hdf5", self.stem)
    }
}

/// The published model that `path` names, where no file or folder of that name exists.
pub fn published_model(path: &Path) -> Option<PublishedModel> {
    match path.exists() {
        true => None,
        false => path.to_str().and_then(PublishedModel::named),
    }
}

/// `path` as an `http://` or `https://` URL, if it is one (the scheme in any case).
pub fn url_of(path: &Path) -> Option<&str> {
    let text = path.to_str()?;
    let scheme = text.get(..8)?.to_ascii_lowercase();
    (scheme.starts_with("http://") || scheme == "https://").then_some(text)
}

/// `path`, or the local copy of the URL it is ([`FileCache::local_copy`] in the cache
/// [`FileCache::from_environment`] names).
///
/// # Errors
/// As [`FileCache::local_copy`].
pub fn local_path(path: &Path, quiet: bool) -> Result<PathBuf> {
    match url_of(path) {
        Some(url) => FileCache::from_environment()?.local_copy(url, quiet),
        None => Ok(path.to_path_buf()),
    }
}

/// A model file that was named by URL, and its copy in the cache: messages about the copy name
/// the URL too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// The URL the user gave.
    pub url: String,
    /// Its copy in the cache.
    pub local: PathBuf,
}

impl Download {
    /// The download of `source`, where `source` is a URL whose copy is `local`.
    pub fn of(source: &Path, local: &Path) -> Option<Self> {
        url_of(source).map(|url| Self {
            url: url.to_string(),
            local: local.to_path_buf(),
        })
    }

    /// `URL, downloaded to PATH (delete it to download again)`: a file that the server sent but
    /// is not what it should be (a web page, an outdated file) stays in the cache until deleted.
    fn describe(&self) -> String {
        format!(
            "{}, downloaded to {} (delete it to download again)",
            self.url,
            self.local.display()
        )
    }
}

/// `result`, naming the URL and the cache file where `source` is a URL whose copy is `local`.
///
/// # Errors
/// `result`'s.
pub fn naming_download<T>(result: Result<T>, source: &Path, local: &Path) -> Result<T> {
    match Download::of(source, local) {
        Some(download) => result.with_context(|| download.describe()),
        None => result,
    }
}

/// `error`, naming the download that it is about: the one whose cached copy is the file of an
/// [`ElmoError`] in its chain (also behind a [`TrainError::Model`]). Other errors are returned
/// as they are.
pub fn naming_downloads(error: anyhow::Error, downloads: &[Download]) -> anyhow::Error {
    let about = error
        .chain()
        .filter_map(|e| match e.downcast_ref::<TrainError>() {
            Some(TrainError::Model(model)) => Some(model),
            _ => e.downcast_ref::<ElmoError>(),
        })
        .filter_map(ElmoError::path)
        .find_map(|path| downloads.iter().find(|d| d.local == path));
    match about {
        Some(download) => error.context(download.describe()),
        None => error,
    }
}

/// The folder that downloaded model files are kept in, one sub-folder per URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCache {
    /// The folder.
    pub dir: PathBuf,
}

impl FileCache {
    /// `ELMO_CACHE_DIR` where it is set, else `elmo-rs` in the user's cache folder
    /// (`$XDG_CACHE_HOME` or `~/.cache` on Linux, `~/Library/Caches` on macOS,
    /// `%LOCALAPPDATA%` on Windows).
    ///
    /// # Errors
    /// Where neither gives a folder (no home folder).
    pub fn from_environment() -> Result<Self> {
        if let Some(dir) = std::env::var_os("ELMO_CACHE_DIR").filter(|d| !d.is_empty()) {
            return Ok(Self { dir: dir.into() });
        }
        let base = dirs::cache_dir().ok_or_else(|| {
            anyhow!("no cache folder for downloads (no home folder): set ELMO_CACHE_DIR")
        })?;
        Ok(Self {
            dir: base.join("elmo-rs"),
        })
    }

    /// Where `url`'s file is kept: `DIR/<hash of the URL>/<the URL's file name>`, so that two
    /// URLs never share a file and the name stays readable.
    pub fn path_of(&self, url: &str) -> PathBuf {
        let hash = xxhash_rust::xxh3::xxh3_128(url.as_bytes());
        let path = url.split(['?', '#']).next().unwrap_or(url);
        let name: String = (path.rsplit('/').next().unwrap_or(""))
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() || "._-".contains(c) {
                true => c,
                false => '_',
            })
            .collect();
        let name = match name.trim_start_matches('.') {
            "" => "download".to_string(),
            kept => kept.to_string(),
        };
        self.dir.join(format!("{hash:032x}")).join(name)
    }

    /// The local copy of `url`: the cached file where there is one (no request is made), else
    /// the file downloaded into the cache first, with a progress bar on a terminal unless
    /// `quiet`. A download is written beside its place and renamed into it once every byte the
    /// server announced has arrived, so the cache never holds a partial file; delete the
    /// file (or its folder) to download it again. One process downloads a URL at a time (a
    /// lock in its folder); what a killed download left there is removed by the next.
    ///
    /// # Errors
    /// The URL, with the server's status or the connection's error, or the process that is
    /// downloading it already; the cache file, with the I/O error.
    pub fn local_copy(&self, url: &str, quiet: bool) -> Result<PathBuf> {
        let path = self.path_of(url);
        if path.is_file() {
            return Ok(path);
        }
        let folder = path.parent().unwrap_or(&self.dir).to_path_buf();
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("{}: cannot create the cache folder", folder.display()))?;
        let downloaded = download(url, &path, quiet);
        if downloaded.is_err() {
            // The URL's folder, where the failure left it empty (the lock is gone by now).
            let _ = std::fs::remove_dir(&folder);
        }
        downloaded.map(|()| path)
    }
}

/// Downloads `url` to `path` under the lock of its folder (see [`FileCache::local_copy`]).
fn download(url: &str, path: &Path, quiet: bool) -> Result<()> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let _lock = match RunLock::acquire(folder.join(".download.lock"), true) {
        Ok(lock) => lock,
        Err(ElmoError::Locked { pid, host, .. }) => bail!(
            "{url}: process {pid} on {host} is downloading it into {}; run again once it \
             has finished",
            folder.display()
        ),
        Err(e) => return Err(e.into()),
    };
    // Another process may have finished it between the caller's look and the lock.
    if path.is_file() {
        return Ok(());
    }
    remove_leftovers(path)?;
    if !quiet {
        eprintln!("downloading {url}\n         to {}", path.display());
    }
    let (length, mut body) = fetch(url)?;
    let bar = crate::progress::bar(
        length.unwrap_or(0),
        quiet,
        "{bytes:>10} / {total_bytes} {bar:30} {bytes_per_sec} (ETA {eta})",
    );
    write_atomic_with(path, |file| -> Result<()> {
        let mut buffer = vec![0u8; 1 << 16];
        let mut received = 0u64;
        loop {
            let n = match body.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("{url}: the download broke off after {received} bytes: {e}"),
            };
            file.write_all(&buffer[..n])
                .with_context(|| format!("{}: cannot write the download", path.display()))?;
            received += n as u64;
            bar.set_position(received);
        }
        if let Some(length) = length.filter(|&l| l != received) {
            bail!("{url}: the server announced {length} bytes and sent {received}");
        }
        Ok(())
    })
    .inspect_err(|_| bar.abandon())?;
    bar.finish_and_clear();
    Ok(())
}

/// Removes the temporary files of `path` that a killed download left beside it
/// (`write_atomic_with`'s `.NAME.PID.tmp`); the caller holds the folder's lock, so no other
/// download is writing one.
fn remove_leftovers(path: &Path) -> Result<()> {
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let entries = std::fs::read_dir(folder)
        .with_context(|| format!("{}: cannot list the cache folder", folder.display()))?;
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if entry_name.starts_with(&prefix) && entry_name.ends_with(".tmp") {
            std::fs::remove_file(entry.path()).with_context(|| {
                format!(
                    "{}: cannot remove a killed download",
                    entry.path().display()
                )
            })?;
        }
    }
    Ok(())
}

/// A GET of `url`: the length the server announces (`Content-Length`) and the body.
#[cfg(all(
    feature = "download",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn fetch(url: &str) -> Result<(Option<u64>, Box<dyn Read>)> {
    use std::time::Duration;
    use ureq::tls::{RootCerts, TlsConfig, TlsProvider};

    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if https && !tls_cpu_features() {
        bail!(
            "{url}: HTTPS here needs a CPU with {} (graviola's cryptography); download the \
             file another way and pass its path",
            TLS_CPU_FEATURES
        );
    }
    let provider = std::sync::Arc::new(rustls_graviola::default_provider());
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(provider)
        .root_certs(RootCerts::PlatformVerifier)
        .build();
    // The environment's proxy (`HTTPS_PROXY`, `NO_PROXY`, ...), but none for this machine.
    let proxy = (!is_loopback(url))
        .then(ureq::Proxy::try_from_env)
        .flatten();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .proxy(proxy)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .user_agent(concat!("elmo-rs/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let response = agent.get(url).call().map_err(|e| match e {
        ureq::Error::StatusCode(status) => anyhow!("{url}: the server answered HTTP {status}"),
        e => anyhow!("{url}: {e}"),
    })?;
    let length = (response.headers().get("content-length"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    Ok((length, Box::new(response.into_body().into_reader())))
}

/// Without the `download` feature, or on a target graviola does not support.
#[cfg(not(all(
    feature = "download",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn fetch(url: &str) -> Result<(Option<u64>, Box<dyn Read>)> {
    bail!(
        "{url}: this build of elmo-rs downloads nothing (the `download` feature, on x86-64 and \
         64-bit ARM); download the file another way and pass its path"
    )
}

/// Whether `url`'s host is this machine (`localhost`, `127.0.0.1`, `[::1]`).
#[cfg_attr(
    not(all(
        feature = "download",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    allow(dead_code)
)]
fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What graviola needs of the CPU.
#[cfg(all(feature = "download", target_arch = "x86_64"))]
const TLS_CPU_FEATURES: &str = "AES-NI, PCLMULQDQ, AVX2, BMI1 and ADX";
#[cfg(all(feature = "download", target_arch = "aarch64"))]
const TLS_CPU_FEATURES: &str = "AES, SHA-2, PMULL and NEON";

/// Whether the CPU has [`TLS_CPU_FEATURES`] (graviola panics without them).
#[cfg(all(feature = "download", target_arch = "x86_64"))]
fn tls_cpu_features() -> bool {
    is_x86_feature_detected!("aes")
        && is_x86_feature_detected!("pclmulqdq")
        && is_x86_feature_detected!("avx")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("bmi1")
        && is_x86_feature_detected!("adx")
}
#[cfg(all(feature = "download", target_arch = "aarch64"))]
fn tls_cpu_features() -> bool {
    std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("sha2")
        && std::arch::is_aarch64_feature_detected!("pmull")
        && std::arch::is_aarch64_feature_detected!("neon")
}

#[cfg(test)]
mod tests {
    use elmo_test_support::{FileServer, Reply};

    use super::*;

    /// A download under way elsewhere (the folder's lock held by a running process) is not
    /// raced; what a killed one left (its lock, its temporary file) is removed by the next.
    #[test]
    fn a_running_download_is_not_raced_and_a_killed_one_is_cleaned_up() {
        let weights = b"weights".repeat(1000);
        let server = FileServer::start(vec![("/m/weights.hdf5", Reply::File(weights.clone()))]);
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache {
            dir: dir.path().join("cache"),
        };
        let url = server.url("/m/weights.hdf5");
        let path = cache.path_of(&url);
        let folder = path.parent().expect("folder").to_path_buf();
        std::fs::create_dir_all(&folder).expect("folder");
        let lock_path = folder.join(".download.lock");
        let running = RunLock::acquire(&lock_path, false).expect("lock");
        let error = format!("{:#}", cache.local_copy(&url, true).expect_err("locked"));
        assert!(error.contains("is downloading it into"), "{error}");
        assert_eq!(server.requests(), 0);
        // Killed: its lock names a process that has ended, its temporary file stays.
        let host = std::fs::read_to_string(&lock_path).expect("lock file");
        let host = host.split_whitespace().nth(1).expect("host").to_string();
        drop(running);
        let mut child = std::process::Command::new(std::env::current_exe().expect("this test"))
            .arg("--list")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("a child");
        let dead = child.id();
        child.wait().expect("it ends");
        std::fs::write(&lock_path, format!("{dead} {host}\n")).expect("stale lock");
        let leftover = folder.join(format!(".weights.hdf5.{dead}.tmp"));
        std::fs::write(&leftover, b"half a down").expect("leftover");
        assert_eq!(cache.local_copy(&url, true).expect("download"), path);
        assert_eq!(std::fs::read(&path).expect("read"), weights);
        let names: Vec<_> = std::fs::read_dir(&folder)
            .expect("folder")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["weights.hdf5"]);
    }

    #[test]
    fn published_models_name_allennlps_files() {
        let original = PublishedModel::named("original").expect("original");
        assert_eq!(
            original.weights_url(),
            "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/\
             elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"
        );
        let large = PublishedModel::named("original-5.5b").expect("5.5B");
        assert_eq!(
            large.options_url(),
            "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway_5.5B/\
             elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json"
        );
        assert_eq!(PublishedModel::named("Original"), None);
        assert_eq!(
            PublishedModel::names(),
            "small, medium, original, original-5.5b"
        );
    }

    #[test]
    fn urls_are_told_from_paths() {
        assert!(url_of(Path::new("https://host/a.json")).is_some());
        assert!(url_of(Path::new("HTTP://host/a.json")).is_some());
        for path in [
            "options.json",
            "/tmp/https:/x",
            "http:/x",
            "ftp://host/a",
            "https:",
        ] {
            assert_eq!(url_of(Path::new(path)), None, "{path}");
        }
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        for url in [
            "http://127.0.0.1:8080/a",
            "http://localhost/a",
            "https://[::1]:9/x",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://allennlp.s3.amazonaws.com/a",
            "http://10.0.0.1/",
            "http://127.evil/",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
        assert!(is_loopback("http://user@127.0.0.2/a"));
    }

    /// A file is fetched once; a reply that breaks off, or a status that is not success, names
    /// the URL and leaves nothing in the cache.
    #[test]
    fn a_download_is_kept_once_whole_and_never_in_part() {
        let weights: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let server = FileServer::start(vec![
            ("/m/weights.hdf5", Reply::File(weights.clone())),
            (
                "/m/cut.hdf5",
                Reply::BrokenOff {
                    body: vec![7; 1000],
                    announced: 5000,
                },
            ),
            ("/m/error.json", Reply::Status(500)),
        ]);
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache {
            dir: dir.path().join("cache"),
        };
        let url = server.url("/m/weights.hdf5");
        let path = cache.local_copy(&url, true).expect("download");
        assert_eq!(std::fs::read(&path).expect("read"), weights);
        assert_eq!(cache.local_copy(&url, true).expect("cached"), path);
        assert_eq!(server.requests(), 1);
        for (route, expected) in [
            (
                "/m/cut.hdf5",
                "cut.hdf5: the download broke off after 1000 bytes",
            ),
            ("/m/error.json", "error.json: the server answered HTTP 500"),
        ] {
            let url = server.url(route);
            let error = format!("{:#}", cache.local_copy(&url, true).expect_err(route));
            assert!(error.contains(expected), "{error}");
            let folder = cache.path_of(&url).parent().expect("folder").to_path_buf();
            assert!(!folder.exists(), "{route}");
        }
    }

    #[test]
    fn each_url_has_its_own_readable_cache_file() {
        let cache = FileCache {
            dir: PathBuf::from("/c"),
        };
        let a = cache.path_of("https://h/models/elmo_weights.hdf5");
        let b = cache.path_of("https://other/models/elmo_weights.hdf5");
        assert_ne!(a, b);
        assert_eq!(a.file_name().expect("name"), "elmo_weights.hdf5");
        assert_eq!(a.parent().expect("folder").parent(), Some(Path::new("/c")));
        let odd = cache.path_of("http://h/dir/..?x=/y");
        assert_eq!(odd.file_name().expect("name"), "download");
        let spaced = cache.path_of("http://h/my%20file.json#part");
        assert_eq!(spaced.file_name().expect("name"), "my_20file.json");
    }
}
