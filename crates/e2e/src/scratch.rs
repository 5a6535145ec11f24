//! Temporary directories for tests, removed pass or fail.

use std::path::{Path, PathBuf};

/// A directory under the system's temporary directory, named for the test and this process,
/// removed with everything in it when dropped: at the end of a test that passed, and while a
/// failed one unwinds.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `$TMPDIR/{name}-{pid}`, empty.
    pub fn new(name: &str) -> std::io::Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(ScratchDir(dir))
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::ScratchDir;

    #[test]
    fn a_scratch_directory_is_gone_after_a_panic_too() {
        let path = std::panic::catch_unwind(|| {
            let dir = ScratchDir::new("verdict-scratch-test").unwrap();
            std::fs::write(dir.join("file"), "x").unwrap();
            let path = dir.to_path_buf();
            assert!(path.join("file").exists());
            std::panic::panic_any(path);
        })
        .unwrap_err()
        .downcast::<std::path::PathBuf>()
        .unwrap();
        assert!(!path.exists(), "{} is left", path.display());
    }
}
