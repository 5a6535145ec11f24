//! ctnetlink messages, encoded and decoded by hand: requests in [`request`], replies in
//! [`reply`], attributes in [`attr`], numbers from the kernel headers in [`consts`].

pub(crate) mod attr;
pub(crate) mod consts;
pub(crate) mod reply;
pub(crate) mod request;

#[cfg(test)]
mod tests;
