//! One writer per run directory or output: a lock file created exclusively (`O_EXCL`) that
//! holds the writer's process id and host, removed when the writer ends. A second writer gets
//! [`ElmoError::Locked`]; a lock whose writer is no longer running on this host is reported as
//! [`ElmoError::StaleLock`] and removed only when the caller asks for it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{ElmoError, Result};

/// The lock of a run directory or output, held until dropped (the lock file is removed then).
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
}

/// What a lock file says: `pid host`.
fn holder(path: &Path) -> Result<Option<(u32, String)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        // Released between our create and our read: try again.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ElmoError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut fields = text.split_whitespace();
    match (fields.next().map(str::parse::<u32>), fields.next()) {
        (Some(Ok(pid)), Some(host)) => Ok(Some((pid, host.to_string()))),
        _ => Err(ElmoError::BadLock {
            path: path.to_path_buf(),
        }),
    }
}

/// This machine's name (lock files name the host of their writer).
fn host_name() -> String {
    let name = gethostname::gethostname().to_string_lossy().into_owned();
    match name.split_whitespace().next() {
        Some(name) => name.to_string(),
        None => "unknown-host".to_string(),
    }
}

/// Whether process `pid` runs on this host: `/proc/PID` on Linux (assumed running where `/proc`
/// is not mounted), `kill(pid, 0)` on other Unix systems (macOS), `OpenProcess` and its exit
/// code on Windows; assumed running elsewhere, so that a lock is never taken for stale there.
fn is_running(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let proc = Path::new("/proc");
        !proc.is_dir() || proc.join(pid.to_string()).exists()
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
        let found = unsafe { libc::kill(pid, 0) } == 0;
        // EPERM: it exists, under another user.
        found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::Foundation::{
            CloseHandle, ERROR_ACCESS_DENIED, GetLastError, STILL_ACTIVE,
        };
        use windows_sys::Win32::System::Threading::{
            GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
        };
        // SAFETY: plain Win32 calls on a handle this function opens and closes.
        unsafe {
            let handle = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
            if handle.is_null() {
                // No such process, or one of another user's that this one may not query.
                return GetLastError() == ERROR_ACCESS_DENIED;
            }
            let mut code = 0u32;
            let queried = GetExitCodeProcess(handle, &mut code) != 0;
            CloseHandle(handle);
            !queried || code == STILL_ACTIVE as u32
        }
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = pid;
        true
    }
}

impl RunLock {
    /// Takes the lock at `path` (e.g. `RUN_DIR/.lock`, `OUTPUT.lock`). When a writer that is
    /// no longer running left it (same host, no such process), `break_stale` removes it and
    /// takes it; otherwise that is [`ElmoError::StaleLock`].
    ///
    /// # Errors
    /// [`ElmoError::Locked`] while another writer holds it, [`ElmoError::StaleLock`],
    /// [`ElmoError::BadLock`] for a file that is not a lock, [`ElmoError::Io`].
    pub fn acquire(path: impl Into<PathBuf>, break_stale: bool) -> Result<Self> {
        let path = path.into();
        let io = |source| ElmoError::Io {
            path: path.clone(),
            source,
        };
        let (pid, host) = (std::process::id(), host_name());
        // A few rounds: a holder may release the lock between our attempt and our read of it.
        for _ in 0..3 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    let written = file
                        .write_all(format!("{pid} {host}\n").as_bytes())
                        .and_then(|()| file.sync_all());
                    if let Err(source) = written {
                        let _ = std::fs::remove_file(&path);
                        return Err(io(source));
                    }
                    return Ok(Self { path });
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    let Some((their_pid, their_host)) = holder(&path)? else {
                        continue;
                    };
                    let stale = their_host == host && !is_running(their_pid);
                    if !stale {
                        return Err(ElmoError::Locked {
                            path,
                            pid: their_pid,
                            host: their_host,
                        });
                    }
                    if !break_stale {
                        return Err(ElmoError::StaleLock {
                            path,
                            pid: their_pid,
                            host: their_host,
                        });
                    }
                    std::fs::remove_file(&path).map_err(io)?;
                }
                Err(source) => return Err(io(source)),
            }
        }
        Err(ElmoError::Locked {
            path: path.clone(),
            pid: 0,
            host: "another process (the lock changed hands during three attempts)".into(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(".lock");
        let first = RunLock::acquire(&path, false).expect("free");
        let text = std::fs::read_to_string(&path).expect("lock file");
        assert!(
            text.starts_with(&format!("{} ", std::process::id())),
            "{text}"
        );
        match RunLock::acquire(&path, true) {
            Err(ElmoError::Locked { pid, .. }) => assert_eq!(pid, std::process::id()),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(first);
        assert!(!path.exists());
        RunLock::acquire(&path, false).expect("free again");
    }

    #[test]
    fn a_dead_writers_lock_is_stale_and_cleared_only_when_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(".lock");
        // A process id above the kernel's largest (4,194,304) is never running.
        std::fs::write(&path, format!("4294967295 {}\n", host_name())).expect("write");
        match RunLock::acquire(&path, false) {
            Err(error @ ElmoError::StaleLock { .. }) => {
                assert!(error.to_string().contains("--break-stale-lock"), "{error}");
            }
            other => panic!("expected StaleLock, got {other:?}"),
        }
        assert!(path.exists(), "a stale lock is not removed unless asked");
        let lock = RunLock::acquire(&path, true).expect("cleared");
        assert!(lock.path().exists());
    }

    #[test]
    fn another_hosts_lock_is_never_taken_for_stale() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(".lock");
        std::fs::write(&path, "4294967295 some-other-host\n").expect("write");
        assert!(matches!(
            RunLock::acquire(&path, true),
            Err(ElmoError::Locked { .. })
        ));
        std::fs::write(&path, "not a lock").expect("write");
        assert!(matches!(
            RunLock::acquire(&path, true),
            Err(ElmoError::BadLock { .. })
        ));
    }
}
