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
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// [`write_atomic`] for content that `write` streams into the temporary file (a download, a
/// file too large to hold in memory): `path` appears only once `write` has returned `Ok` and
/// the file is flushed to disk.
///
/// # Errors
/// The error of `write`, or the I/O error of the create, flush or rename; the temporary file
/// is removed.
pub fn write_atomic_with<E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> Result<(), E>,
) -> Result<(), E> {
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
        write(&mut file)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)?;
        Ok(())
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

    #[test]
    fn a_streamed_write_that_fails_leaves_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.hdf5");
        let failed = write_atomic_with(&path, |file| {
            file.write_all(b"half")?;
            Err(std::io::Error::other("connection closed"))
        });
        assert_eq!(failed.expect_err("fails").to_string(), "connection closed");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
        write_atomic_with(&path, |file| file.write_all(b"whole")).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"whole");
    }
}
