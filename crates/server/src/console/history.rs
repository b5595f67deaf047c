//! What the console remembers besides rates: a short journal of store
//! failovers and config loads, a fixed number of events each.

use std::collections::VecDeque;

use serde::Serialize;

/// Events kept per journal.
pub const EVENTS: usize = 50;

/// Something that happened, for the console's histories.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Unix seconds.
    pub at: u64,
    pub what: String,
}

/// A bounded journal, newest last.
#[derive(Debug, Default)]
pub struct Journal {
    events: VecDeque<Event>,
}

impl Journal {
    pub fn push(&mut self, at: u64, what: String) {
        if self.events.len() == EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Event { at, what });
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.iter().cloned().collect()
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
