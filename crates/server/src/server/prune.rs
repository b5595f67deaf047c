//! When the sweep walks the rule table for the series of rules no longer in
//! force. A walk visits every rule (a million take tens of milliseconds of a
//! core), and until a replaced snapshot is freed it holds every old rule, so
//! a walk before then finds nothing: the table is walked on the few seconds
//! after the retiring thread frees a snapshot (the console lets go of the
//! rules it watched within one), and once more past the patience a replaced
//! snapshot may wait for its last holder. A load costs a few walks, not one
//! a second.

/// Sweeps (seconds) after a snapshot is freed that walk the table.
const AFTER_FREED: u32 = 3;
/// Sweeps after a load that walk the table once more: past the 10 s a
/// replaced snapshot may wait for its last holder, who then frees it.
const AFTER_LOAD: u32 = 15;

/// The walks still due, from the last generation and frees seen.
#[derive(Debug, Default)]
pub(super) struct Prune {
    generation: u64,
    freed: u64,
    /// Sweeps left that walk, after the last free.
    walks: u32,
    /// Sweeps until the walk after the last load.
    backstop: u32,
}

impl Prune {
    /// Whether this sweep walks, given the rules' `generation` and how many
    /// replaced snapshots have been `freed`.
    pub(super) fn due(&mut self, generation: u64, freed: u64) -> bool {
        if generation != self.generation {
            self.generation = generation;
            self.backstop = AFTER_LOAD;
        }
        if freed != self.freed {
            self.freed = freed;
            self.walks = AFTER_FREED;
        }
        let due = self.walks > 0 || self.backstop == 1;
        self.walks = self.walks.saturating_sub(1);
        self.backstop = self.backstop.saturating_sub(1);
        due
    }
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;
