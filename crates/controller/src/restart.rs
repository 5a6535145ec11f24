//! Warm restarts: the table's elements saved when the agent stops, and adopted at the next
//! start instead of dumped (see [`verdict_nft::snapshot`] for why and when that is safe).

use std::path::Path;
use std::time::Instant;
use verdict_nft::Kernel;
use verdict_nft::Ruleset;
use verdict_nft::snapshot::{self, Snapshot, Stamp};

/// Takes the snapshot of `table` from `dir` and returns it when it may still describe the
/// kernel: same boot, same network namespace, and no commit by anybody since it was saved.
/// Logs why not. (Its structure digest is checked against the kernel's table once read: see
/// [`adoptable`].)
pub(crate) fn load(dir: &Path, table: &str, nl: &mut impl Kernel) -> Option<(Stamp, Snapshot)> {
    let started = Instant::now();
    let netns = match snapshot::current_netns() {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("cannot identify the network namespace, reading the whole table: {e}");
            return None;
        }
    };
    let (stamp, known) = match snapshot::take(dir, table, netns) {
        Ok(Some(found)) => found,
        Ok(None) => {
            tracing::info!(dir = %dir.display(), "no saved table state: reading the whole table from the kernel");
            return None;
        }
        Err(e) => {
            tracing::warn!("saved table state unusable, reading the whole table from the kernel: {e}");
            return None;
        }
    };
    let genid = match nl.generation() {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!("reading the nftables generation failed, reading the whole table: {e}");
            return None;
        }
    };
    let boot_id = snapshot::current_boot_id().unwrap_or_default();
    if stamp.boot_id != boot_id {
        tracing::info!("the table state was saved before the node restarted: reading the whole table from the kernel");
        return None;
    }
    if stamp.netns != netns || stamp.table != table {
        tracing::warn!(file_table = stamp.table, "saved table state belongs to another table or namespace; ignored");
        return None;
    }
    if stamp.genid != genid {
        tracing::info!(
            saved_generation = stamp.genid,
            generation = genid,
            "nftables changed since the table state was saved (another program committed): \
             reading the whole table from the kernel"
        );
        return None;
    }
    let elements: usize = known.sets.values().map(|e| e.len()).sum();
    tracing::info!(
        elements,
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "adopting the table state saved at the last stop (nothing committed since)"
    );
    Some((stamp, known))
}

/// Whether the table read from the kernel (its elements taken from the snapshot) is the one
/// the snapshot was saved from: the same chains, rule counts and sets. Logs why not.
pub(crate) fn adoptable(stamp: &Stamp, observed: &Ruleset) -> bool {
    let digest = snapshot::structure_digest(observed);
    if digest != stamp.structure {
        tracing::warn!(
            saved = format!("{:016x}", stamp.structure),
            kernel = format!("{digest:016x}"),
            "the kernel's table is not the one the saved state describes (its chains or sets differ): \
             reading the whole table from the kernel"
        );
        metrics::counter!(crate::metrics::TABLE_DRIFT).increment(1);
    }
    digest == stamp.structure
}

/// Saves `ruleset` (what the kernel holds) for the next start.
pub(crate) fn save(dir: &Path, table: &str, nl: &mut impl Kernel, ruleset: &Ruleset) {
    let started = Instant::now();
    let stamp = match (snapshot::current_netns(), nl.generation(), snapshot::current_boot_id()) {
        (Ok(netns), Ok(genid), Ok(boot_id)) => {
            Stamp { netns, genid, boot_id, structure: snapshot::structure_digest(ruleset), table: table.to_string() }
        }
        (Err(e), _, _) | (_, _, Err(e)) => return tracing::warn!("not saving the table state: {e}"),
        (_, Err(e), _) => return tracing::warn!("not saving the table state: {e}"),
    };
    match snapshot::save(dir, &stamp, ruleset) {
        Ok((file, bytes)) => tracing::info!(
            file = %file.display(),
            bytes,
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "saved the table state for the next start"
        ),
        Err(e) => tracing::warn!("not saving the table state (the next start reads the whole table): {e}"),
    }
}
