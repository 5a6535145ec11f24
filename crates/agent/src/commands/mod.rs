//! One module per subcommand.

pub mod cleanup;
pub mod explain;
pub mod render;
pub mod run;
pub mod setup;
pub mod trace;
