//! Files in `--state-dir`, written and read so that nobody else on the node can point them
//! elsewhere.
//!
//! The agent runs as root and the state directory is a hostPath (`/run/verdict`): a
//! predictable temporary name opened with `O_CREAT` would follow a symbolic link planted
//! there and truncate whatever it names, and a state file that is a link (or a FIFO) would be
//! read through. So a directory is used only when it is a real directory, owned by the
//! agent's user and writable by nobody else; a file is written to a new temporary file of an
//! unpredictable name (`O_CREAT | O_EXCL`, which never follows a link), synced and renamed
//! over the state file (a rename replaces a link, it does not follow it); and it is read only
//! when it is a regular file, opened with `O_NOFOLLOW` and `O_NONBLOCK` (a FIFO does not block).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Why a state directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeDir {
    /// Reading or creating it failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is a symbolic link (to anywhere).
    #[error("it is a symbolic link")]
    Symlink,
    /// It is a file or something else.
    #[error("it is not a directory")]
    NotADirectory,
    /// Someone else may replace what is in it.
    #[error("it is writable by group or others (mode {0:o})")]
    Writable(u32),
    /// Someone else owns it, and may change its mode.
    #[error("it is owned by uid {0}, not by this process's uid {1}")]
    Owner(u32, u32),
}

/// Checks that `dir` is a directory nobody but this process's user can change, creating it
/// (mode 0700) when it does not exist.
pub fn check_dir(dir: &Path) -> Result<(), UnsafeDir> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            std::fs::symlink_metadata(dir)?
        }
        Err(e) => return Err(e.into()),
    };
    if meta.file_type().is_symlink() {
        return Err(UnsafeDir::Symlink);
    }
    if !meta.is_dir() {
        return Err(UnsafeDir::NotADirectory);
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(UnsafeDir::Writable(mode));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(UnsafeDir::Owner(meta.uid(), me));
    }
    Ok(())
}

/// Writes `bytes` to `file` (in a directory [`check_dir`] accepted): to a new temporary file
/// of an unpredictable name beside it, synced, then renamed over it.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".state-").suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(file).map_err(|e| e.error)?;
    // The rename is durable once the directory is synced.
    File::open(dir)?.sync_all()
}

/// The contents of `file` if it is a regular file (`Ok(None)` when there is none); a link,
/// FIFO or device in its place is an error, and is not read.
pub fn read_regular(file: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let opened = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(file);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a link: ELOOP.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(std::io::Error::other("it is a symbolic link: not read"));
        }
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("it is not a regular file: not read"));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_private_directory_is_used_and_a_missing_one_is_made_private() {
        let dir = private_dir();
        check_dir(dir.path()).unwrap();
        let made = dir.path().join("a/b");
        check_dir(&made).unwrap();
        assert_eq!(std::fs::metadata(&made).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_linked_shared_or_foreign_directory_is_refused() {
        let dir = private_dir();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = dir.path().join("link");
        symlink(&real, &link).unwrap();
        assert!(matches!(check_dir(&link), Err(UnsafeDir::Symlink)));
        for mode in [0o777, 0o1777, 0o770, 0o702] {
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(matches!(check_dir(&real), Err(UnsafeDir::Writable(m)) if m == mode), "{mode:o}");
        }
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_dir(&real).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(check_dir(&file), Err(UnsafeDir::NotADirectory)));
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&real, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            assert!(matches!(check_dir(&real), Err(UnsafeDir::Owner(65534, 0))));
        }
    }

    #[test]
    fn links_planted_at_the_old_temporary_name_and_at_the_file_are_not_written_through() {
        let dir = private_dir();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let file = dir.path().join("kube-proxy-netns1.state");
        // The name earlier versions wrote to first, and the state file itself, both links.
        symlink(&victim, dir.path().join("kube-proxy-netns1.tmp")).unwrap();
        symlink(&victim, &file).unwrap();
        write_atomically(&file, b"state").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink(), "the link was replaced");
        assert_eq!(std::fs::read(&file).unwrap(), b"state");
        assert_eq!(read_regular(&file).unwrap().unwrap(), b"state");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".state-"))
            .collect();
        assert!(names.is_empty(), "no temporary file is left: {names:?}");
    }

    #[test]
    fn a_link_or_fifo_at_the_state_file_is_not_read() {
        let dir = private_dir();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"secret").unwrap();
        let file = dir.path().join("s.state");
        assert!(read_regular(&file).unwrap().is_none(), "none yet");
        symlink(&victim, &file).unwrap();
        let err = read_regular(&file).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::remove_file(&file).unwrap();
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_regular(&file).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
