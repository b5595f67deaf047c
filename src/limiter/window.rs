//! Fixed windows aligned to the Unix epoch, with the reference's unit lengths.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// The length of a limit's window. Months are 30 days and years 365 days, and
/// weeks start on Thursday, because the windows are epoch-aligned buckets as in
/// envoyproxy/ratelimit (not calendar periods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The window length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The upper-case name used by Envoy's enum and the reference's config dump.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// Parses a config unit in any case (`minute`, `MINUTE`, `Minute`).
    pub fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(s))
    }

    /// The value of `RateLimitResponse.RateLimit.Unit` (UNKNOWN is 0, WEEK is 7).
    pub const fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of a proto enum value; `None` for UNKNOWN and anything new.
    pub fn from_proto(v: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.proto() == v)
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Seconds since the Unix epoch: the clock every decision is made against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Now(pub u64);

impl Now {
    /// The wall clock, in whole seconds.
    pub fn wall() -> Now {
        Now(SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0))
    }
}

/// The first second of a window: `now` rounded down to a multiple of the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowStart(pub u64);

/// One window of one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    pub unit: Unit,
    pub start: WindowStart,
}

impl Window {
    /// The window of `unit` that contains `now`.
    pub fn containing(unit: Unit, now: Now) -> Window {
        let len = unit.seconds();
        Window {
            unit,
            start: WindowStart(now.0 / len * len),
        }
    }

    /// The first second after the window.
    pub fn end(&self) -> u64 {
        self.start.0 + self.unit.seconds()
    }

    /// Whole seconds until the window ends; at least 1, and the full unit at a
    /// boundary, as the reference's `duration_until_reset`.
    pub fn seconds_until_reset(&self, now: Now) -> u64 {
        self.end().saturating_sub(now.0).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_the_epoch() {
        let w = Window::containing(Unit::Minute, Now(1_000_059));
        assert_eq!(w.start, WindowStart(1_000_020));
        assert_eq!(w.seconds_until_reset(Now(1_000_059)), 21);
        assert_eq!(
            Window::containing(Unit::Hour, Now(1_000_000)).start.0,
            997_200
        );
        assert_eq!(Window::containing(Unit::Second, Now(1234)).start.0, 1234);
    }

    #[test]
    fn reset_is_the_full_unit_at_a_boundary() {
        let w = Window::containing(Unit::Minute, Now(120));
        assert_eq!(w.seconds_until_reset(Now(120)), 60);
        let s = Window::containing(Unit::Second, Now(5));
        assert_eq!(s.seconds_until_reset(Now(5)), 1);
    }

    #[test]
    fn weeks_start_on_thursday_and_months_are_30_days() {
        // 1970-01-01 was a Thursday; 1970-01-08 00:00 UTC is the next week.
        assert_eq!(Window::containing(Unit::Week, Now(604_799)).start.0, 0);
        assert_eq!(
            Window::containing(Unit::Week, Now(604_800)).start.0,
            604_800
        );
        assert_eq!(Unit::Month.seconds(), 30 * 86_400);
        assert_eq!(Unit::Year.seconds(), 365 * 86_400);
    }

    #[test]
    fn units_parse_in_any_case_and_map_to_proto() {
        assert_eq!(Unit::parse("minute"), Some(Unit::Minute));
        assert_eq!(Unit::parse("HoUr"), Some(Unit::Hour));
        assert_eq!(Unit::parse("unknown"), None);
        assert_eq!(Unit::parse("foo"), None);
        for u in Unit::ALL {
            assert_eq!(Unit::from_proto(u.proto()), Some(u));
        }
        assert_eq!(Unit::from_proto(0), None);
        assert_eq!(Unit::Week.proto(), 7);
    }
}
