//! Writing a file so that a crash, a full disk or a write error never leaves a partial file
//! under its name: the bytes go to a temporary file in the same directory, are flushed to disk,
//! and the file is renamed into place (POSIX `rename` replaces the old one atomically).

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed. On
/// any error the temporary file is removed and `path` keeps its previous content (or stays
/// absent).
///
/// # Errors
/// The I/O error of the create, write, flush or rename (the caller names `path` in its error).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_and_a_failed_one_leaves_it_alone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f.json");
        write_atomic(&path, b"one").expect("first write");
        write_atomic(&path, b"two").expect("second write");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        // A directory cannot be renamed over: the write fails, the old directory stays, and no
        // temporary file is left behind.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).expect("dir");
        std::fs::write(blocked.join("inside"), b"x").expect("file");
        assert!(write_atomic(&blocked, b"three").is_err());
        assert!(blocked.is_dir());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
