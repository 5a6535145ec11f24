//! Placeholder replaced by the metrics branch.
pub fn render_into(_out: &mut String) {}
