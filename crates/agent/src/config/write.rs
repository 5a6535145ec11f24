//! `--write-config-to`: the configuration in effect written as a KubeProxyConfiguration, as
//! kube-proxy writes its own (defaults filled in), for an operator to start a file from.

use super::file::{API_VERSION, KubeProxyConfiguration};
use std::path::Path;

/// Writes the configuration as YAML.
pub fn write(config: &KubeProxyConfiguration, path: &Path) -> std::io::Result<()> {
    let mut config = config.clone();
    config.api_version = Some(API_VERSION.into());
    config.kind = Some("KubeProxyConfiguration".into());
    let text = serde_yaml::to_string(&config).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_with_no_unknown_field() {
        let mut c = KubeProxyConfiguration::parse("mode: ipvs\nconntrack: {maxPerCore: 0}\n").unwrap().config;
        super::super::defaults::apply(&mut c);
        let path = std::env::temp_dir().join(format!("verdict-write-config-{}.yaml", std::process::id()));
        write(&c, &path).unwrap();
        let back = KubeProxyConfiguration::parse(&std::fs::read_to_string(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        let back = back.unwrap();
        assert!(back.unknown_fields.is_empty(), "{:?}", back.unknown_fields);
        assert_eq!(back.config.mode.as_deref(), Some("ipvs"));
        assert_eq!(back.config.conntrack.unwrap().max_per_core, Some(0));
        assert_eq!(back.config.nftables.unwrap().sync_period.as_deref(), Some("30s"));
    }
}
