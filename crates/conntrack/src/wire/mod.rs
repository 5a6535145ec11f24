//! ctnetlink messages: requests in [`request`], replies in [`reply`]. The framing and the
//! kernel's numbers are `verdict_netlink`'s.

pub(crate) mod reply;
pub(crate) mod request;

#[cfg(test)]
mod tests;
