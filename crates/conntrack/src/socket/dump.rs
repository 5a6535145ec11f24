//! Listing entries: one `NLM_F_DUMP` request, replies until `NLMSG_DONE`.

use super::Conntrack;
use crate::entry::{Entry, Family};
use crate::error::{ConntrackError, Errno, Operation};
use crate::wire::reply::{CtMessage, Messages, parse_entry};
use crate::wire::request::dump_request;
use verdict_netlink::consts::NLM_F_DUMP_INTR;

impl Conntrack {
    /// Dumps a family's entries, asking the kernel to keep only `protocol` if given. Falls back
    /// to an unfiltered dump (for good) if the kernel refuses the filter.
    pub(super) fn dump(&mut self, family: Family, protocol: Option<u8>) -> Result<Vec<Entry>, ConntrackError> {
        let filter = protocol.filter(|_| self.kernel_filter);
        match self.dump_once(family, filter) {
            Err(ConntrackError::Kernel { errno: Errno::EINVAL | Errno::EOPNOTSUPP, .. }) if filter.is_some() => {
                self.kernel_filter = false;
                self.dump_once(family, None)
            }
            result => result,
        }
    }

    fn dump_once(&mut self, family: Family, protocol: Option<u8>) -> Result<Vec<Entry>, ConntrackError> {
        let op = Operation::Dump(family);
        let seq = self.next_seq();
        self.channel.send(op, &dump_request(seq, family, protocol))?;
        let mut entries = Vec::new();
        let mut received = 0;
        loop {
            let datagram = self.channel.recv(op)?;
            for message in Messages::new(datagram) {
                let (header, reply) = message.map_err(|detail| ConntrackError::Malformed { op, detail })?;
                if header.seq != seq {
                    continue; // left over from an earlier, abandoned request
                }
                if header.flags & NLM_F_DUMP_INTR != 0 {
                    return Err(ConntrackError::Kernel { op, errno: Errno::EINTR });
                }
                match reply {
                    CtMessage::Conntrack { family, attrs } => {
                        received += 1;
                        let entry =
                            parse_entry(family, attrs).map_err(|detail| ConntrackError::Malformed { op, detail })?;
                        entries.extend(entry);
                    }
                    CtMessage::Done(0) => {
                        self.last_dump_size = received;
                        return Ok(entries);
                    }
                    CtMessage::Done(code) | CtMessage::Error(code) if code != 0 => {
                        return Err(ConntrackError::Kernel { op, errno: Errno::from_raw(-code) });
                    }
                    CtMessage::Done(_) | CtMessage::Error(_) | CtMessage::Other => {}
                }
            }
        }
    }
}
