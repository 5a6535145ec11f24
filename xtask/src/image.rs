//! `cargo xtask image [--base-from-debootstrap] [--prebuilt] [--tag T] [--engine E]`: the
//! container image, also on a machine without registry access (docs/operations.md).

use crate::{cli, deps, run};
use anyhow::{Context, Result, bail};
use std::process::{Command, Stdio};

/// The base image `--base-from-debootstrap` makes (Debian bookworm, minbase, trimmed).
pub const LOCAL_BASE: &str = "verdict-base:bookworm";

/// Where the host-built binary goes for `--target runtime-prebuilt` (allowed by .dockerignore).
const PREBUILT: &str = "target/image/verdict";

/// How to run the container engine: its client, and whether it builds with BuildKit.
pub struct Engine {
    pub client: String,
    buildkit: bool,
}

impl Engine {
    /// `--engine`, else a docker client that can use BuildKit (docker with buildx, or a client
    /// older than 23.0, which has it built in: Debian's `docker.io`), else docker, else podman.
    pub fn pick(chosen: Option<&str>) -> Engine {
        let chosen = chosen.map(str::to_string);
        let podman = |c: &str| c.ends_with("podman");
        if let Some(client) = chosen.clone().filter(|c| podman(c)) {
            return Engine { client, buildkit: false };
        }
        let candidates = match chosen {
            Some(c) => vec![c],
            None => vec!["docker".to_string(), "/usr/bin/docker".to_string()],
        };
        for client in &candidates {
            if buildkit_capable(client) {
                return Engine { client: client.clone(), buildkit: true };
            }
        }
        let works = |e: &str| output(e, &["--version"]).is_some();
        let client = if works(&candidates[0]) || !works("podman") { candidates[0].clone() } else { "podman".into() };
        Engine { client, buildkit: false }
    }

    /// Runs the client with `args`, failing loudly.
    pub fn run(&self, args: &[&str]) -> Result<()> {
        let envs: &[(&str, &str)] = if self.buildkit { &[("DOCKER_BUILDKIT", "1")] } else { &[] };
        run::program_env(&self.client, args, envs)
    }

    /// Whether the engine's daemon answers.
    pub fn daemon_answers(&self) -> bool {
        output(&self.client, &["info", "-f", "{{.ServerVersion}}"]).is_some()
    }

    /// Removes every container with `label` (left by a run that was killed).
    pub fn remove_labelled(&self, label: &str) {
        let filter = format!("label={label}");
        let ids = output(&self.client, &["ps", "-aq", "--filter", &filter]).unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = output(&self.client, &["rm", "-f", id]);
        }
    }

    /// Whether `image` exists locally.
    pub fn has_image(&self, image: &str) -> bool {
        output(&self.client, &["image", "inspect", "-f", "{{.Id}}", image]).is_some()
    }

    /// The image's size in bytes.
    pub fn image_size(&self, image: &str) -> Result<u64> {
        let text = output(&self.client, &["image", "inspect", "-f", "{{.Size}}", image])
            .with_context(|| format!("inspecting {image}"))?;
        text.trim().parse().with_context(|| format!("the size of {image}: {text:?}"))
    }
}

/// stdout of a successful command.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn buildkit_capable(client: &str) -> bool {
    if client.ends_with("podman") {
        return false;
    }
    if output(client, &["buildx", "version"]).is_some() {
        return true;
    }
    let version = output(client, &["version", "-f", "{{.Client.Version}}"]).unwrap_or_default();
    let major: u32 = version.trim().split('.').next().and_then(|m| m.parse().ok()).unwrap_or(u32::MAX);
    major < 23
}

/// `cargo xtask image`.
pub fn image(a: &cli::Image) -> Result<()> {
    let engine = Engine::pick(a.engine.as_deref());
    let tag = a.tag.as_str();
    let prebuilt = a.prebuilt;
    let root = run::workspace_root()?;
    let context = root.display().to_string();
    let mut build: Vec<String> = vec!["build".into()];
    if a.base_from_debootstrap {
        make_base(&engine, &a.mirror)?;
        // The build's RUN steps reach the mirror through the host's network: the daemon may
        // run without a bridge (`dockerd --bridge=none`), so the default network has none.
        build.extend(["--network".into(), "host".into(), "--build-arg".into(), format!("RUNTIME_BASE={LOCAL_BASE}")]);
    }
    if let Some(b) = &a.build_image {
        build.extend(["--build-arg".into(), format!("BUILD_IMAGE={b}")]);
    }
    let target = if prebuilt {
        if !engine.buildkit {
            bail!(
                "--prebuilt needs BuildKit (the legacy builder also builds the Rust stage): install \
                 docker buildx, or pass --engine with a docker client that has it"
            );
        }
        // With verdict-e2e, as `cargo xtask e2e` builds: the same features, no second build.
        run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bin", "verdict"])?;
        std::fs::create_dir_all(root.join("target/image"))?;
        let out = root.join(PREBUILT).display().to_string();
        // As the Rust stage does: 88 MB to 14 MB.
        run::program_env("strip", &["-o", &out, &run::release_bin("verdict")?], &[])?;
        "runtime-prebuilt"
    } else {
        "runtime"
    };
    build.extend(["--target".into(), target.into(), "-t".into(), tag.into(), context.clone()]);
    let started = std::time::Instant::now();
    engine.run(&build.iter().map(String::as_str).collect::<Vec<_>>())?;
    let size = engine.image_size(tag)?;
    println!(
        "xtask: built {tag} (--target {target}) in {:.0} s: {:.1} MB ({size} bytes)",
        started.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    if a.with_test_image {
        engine.run(&["build", "--target", "e2e-echo", "-t", "verdict-echo:dev", &context])?;
    }
    Ok(())
}

/// Makes [`LOCAL_BASE`] with debootstrap when it does not exist: what debian:bookworm-slim
/// is, without a registry (minbase, no documentation but copyrights, no apt caches).
pub fn make_base(engine: &Engine, mirror: &str) -> Result<()> {
    if engine.has_image(LOCAL_BASE) {
        println!("xtask: using {LOCAL_BASE} (remove it to make it again)");
        return Ok(());
    }
    deps::require_root("debootstrap makes a root file system")?;
    deps::ensure_packages(&["debootstrap"])?;
    let dir = std::env::temp_dir().join(format!("verdict-rootfs-{}", std::process::id()));
    let dir_s = dir.display().to_string();
    let result = (|| {
        run::program_env("debootstrap", &["--variant=minbase", "bookworm", &dir_s, mirror], &[])?;
        run::program_env("sh", &["-c", TRIM, "trim", &dir_s, mirror], &[])?;
        let script = format!("tar -C '{dir_s}' --numeric-owner -c . | '{}' import - {LOCAL_BASE}", engine.client);
        run::program_env("sh", &["-c", &script], &[])
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    println!("xtask: made {LOCAL_BASE}: {:.1} MB", engine.image_size(LOCAL_BASE)? as f64 / 1e6);
    Ok(())
}

/// Trims a debootstrap tree ($1) as Debian's slim images are, keeping packages installed
/// later trimmed too; apt sources with updates and security ($2: the mirror).
const TRIM: &str = r#"set -e
cd "$1"
printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
  'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
  > etc/dpkg/dpkg.cfg.d/verdict-slim
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' "$2" "$2" \
  > etc/apt/sources.list
find usr/share/doc -type f ! -name copyright -delete
find usr/share/doc -depth -type d -empty -delete
rm -rf usr/share/man/* usr/share/info/* usr/share/locale/* var/cache/apt/archives/*.deb var/cache/apt/*.bin \
  var/lib/apt/lists/* var/log/*.log var/log/apt var/cache/debconf/*-old
"#;
