//! A kernel image built here rather than fetched from Debian: `--kernel-image PATH [--label
//! NAME]`, or `--build-unfixed-6.1`, which builds Debian 12's 6.1 without the chain-deletion
//! fix (`build-6.1-unfixed.sh`) and boots that. Such an image has everything built in, so the
//! initramfs carries no modules.

use super::fetch::Kernel;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The local kernel the arguments ask for, if any (building it first for `--build-unfixed-6.1`).
pub fn chosen(a: &crate::cli::Kernels, root: &Path) -> Result<Option<Kernel>> {
    if a.build_unfixed_6_1 {
        let image = build_unfixed_6_1(root)?;
        return kernel(&image, a.label.as_deref().unwrap_or("6.1-unfixed")).map(Some);
    }
    let Some(image) = &a.kernel_image else { return Ok(None) };
    let label = a.label.as_deref().unwrap_or("local");
    kernel(image, label).map(Some)
}

/// Runs the build script into `target/kernel-build/6.1-unfixed` (kept between runs, so a second
/// call rebuilds nothing) and returns the image.
fn build_unfixed_6_1(root: &Path) -> Result<PathBuf> {
    let dir = root.join("target/kernel-build/6.1-unfixed");
    let script = root.join("xtask/src/kernels/build-6.1-unfixed.sh");
    let started = Instant::now();
    eprintln!("xtask: building 6.1 without 628bd3e49cba in {} (make -j2)", dir.display());
    let (script, out) = (script.display().to_string(), dir.display().to_string());
    crate::run::program_env("sh", &[&script, &out], &[("JOBS", "2")])?;
    eprintln!("xtask: kernel built in {:.0} s", started.elapsed().as_secs_f64());
    Ok(dir.join("bzImage"))
}

fn kernel(image: &Path, label: &str) -> Result<Kernel> {
    let release = release(image)?;
    Ok(Kernel {
        name: label.to_string(),
        package: format!("local image {}", image.display()),
        release,
        vmlinuz: image.to_path_buf(),
        modules: None,
    })
}

/// The release an x86 bzImage announces (`uname -r` once booted): the boot protocol's
/// `kernel_version` field, at 0x20e, points to a string 0x200 bytes before where it says.
fn release(image: &Path) -> Result<String> {
    let bytes = std::fs::read(image).with_context(|| format!("reading {}", image.display()))?;
    let (Some(b"HdrS"), Some(&[lo, hi])) = (bytes.get(0x202..0x206), bytes.get(0x20e..0x210)) else {
        bail!("{}: not an x86 bzImage (no HdrS boot header)", image.display());
    };
    let at = u16::from_le_bytes([lo, hi]) as usize + 0x200;
    let text = bytes.get(at..).unwrap_or_default();
    let end = text.iter().position(|b| *b == b' ' || *b == 0).unwrap_or(0);
    match std::str::from_utf8(&text[..end]) {
        Ok(r) if !r.is_empty() => Ok(r.to_string()),
        _ => bail!("{}: no kernel version string in the boot header", image.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::release;

    /// A boot sector as the x86 boot protocol lays it out, its version string at `0x200 + at`.
    fn image(at: u16, version: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x1000];
        bytes[0x202..0x206].copy_from_slice(b"HdrS");
        bytes[0x20e..0x210].copy_from_slice(&at.to_le_bytes());
        let start = 0x200 + at as usize;
        bytes[start..start + version.len()].copy_from_slice(version);
        bytes
    }

    #[test]
    fn the_release_is_read_from_the_boot_header() {
        let dir = std::env::temp_dir().join(format!("xtask-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bzImage");
        std::fs::write(&path, image(0x300, b"6.1.192-unfixed628bd3e (root@host) #1 SMP\0")).unwrap();
        assert_eq!(release(&path).unwrap(), "6.1.192-unfixed628bd3e");
        std::fs::write(&path, image(0x300, b"\0")).unwrap();
        assert!(release(&path).is_err(), "an empty version string");
        let mut not_x86 = image(0x300, b"6.1.0 ");
        not_x86[0x202] = b'X';
        std::fs::write(&path, not_x86).unwrap();
        assert!(release(&path).is_err(), "no HdrS");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
