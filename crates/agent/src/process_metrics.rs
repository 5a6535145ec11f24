//! Placeholder replaced by the metrics branch.
#![allow(dead_code)]
pub fn render_into(_out: &mut String) {}
