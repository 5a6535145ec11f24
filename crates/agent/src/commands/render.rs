//! `verdict render`: the table as nft text, from manifests, without a kernel.

use crate::cli::RenderArgs;
use crate::config::RulesConfig;
use crate::source;
use anyhow::Result;
use verdict_layout::render;
use verdict_nft::text;

/// Prints the nft listing of the table `run` would program.
pub fn run(args: &RenderArgs, cfg: &RulesConfig) -> Result<()> {
    let built = source::model_from_manifests(&args.manifests, cfg, &[])?;
    source::report(&built.problems);
    let rs = render(&built.model, &cfg.render_options());
    print!("{}", text::listing(&rs));
    Ok(())
}
