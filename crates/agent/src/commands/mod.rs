//! One module per subcommand.

pub mod cleanup;
pub mod explain;
pub mod handback;
pub mod leftovers;
pub mod render;
pub mod run;
pub mod setup;
pub mod trace;
