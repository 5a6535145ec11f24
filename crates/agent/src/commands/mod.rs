//! One module per subcommand.

pub mod cleanup;
pub mod render;
pub mod run;
