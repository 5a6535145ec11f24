//! Deleting entries: `IPCTNL_MSG_CT_DELETE` by original tuple, many per datagram, each acknowledged.

use super::Conntrack;
use crate::entry::Entry;
use crate::error::{ConntrackError, Errno, Operation};
use crate::wire::reply::{CtMessage, Messages};
use crate::wire::request::delete_request;
use std::collections::HashSet;

/// Delete requests per datagram. Every request is acknowledged; an error acknowledgement echoes
/// the request, so 128 of them stay far below the socket's receive buffer.
const BATCH: usize = 128;

impl Conntrack {
    pub(crate) fn delete_all<'a>(&mut self, entries: impl Iterator<Item = &'a Entry>) -> Result<usize, ConntrackError> {
        let entries: Vec<&Entry> = entries.collect();
        let mut deleted = 0;
        for chunk in entries.chunks(BATCH) {
            deleted += self.delete_batch(chunk)?;
        }
        Ok(deleted)
    }

    fn delete_batch(&mut self, entries: &[&Entry]) -> Result<usize, ConntrackError> {
        let op = Operation::Delete;
        let mut datagram = Vec::with_capacity(entries.len() * 112);
        let mut pending = HashSet::with_capacity(entries.len());
        for entry in entries {
            let seq = self.next_seq();
            datagram.extend_from_slice(&delete_request(seq, entry));
            pending.insert(seq);
        }
        self.channel.send(op, &datagram)?;
        let mut deleted = 0;
        while !pending.is_empty() {
            let received = self.channel.recv(op)?;
            for message in Messages::new(received) {
                let (header, reply) = message.map_err(|detail| ConntrackError::Malformed { op, detail })?;
                let CtMessage::Error(code) = reply else { continue };
                if !pending.remove(&header.seq) {
                    continue;
                }
                match Errno::from_raw(-code) {
                    _ if code == 0 => deleted += 1,
                    // Expired or deleted by someone else since the dump: nothing left to do.
                    Errno::ENOENT => {}
                    errno => return Err(ConntrackError::Kernel { op, errno }),
                }
            }
        }
        Ok(deleted)
    }
}
