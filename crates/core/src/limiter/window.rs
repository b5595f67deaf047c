//! Fixed windows aligned to the Unix epoch, with the reference's unit lengths.

use std::fmt;

use super::calendar;

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

/// The length of a window: one of the reference's units, or any whole number
/// of seconds (`window: 90s`). Windows are aligned to the Unix epoch either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Unit(Unit),
    Seconds(u32),
    /// A UTC calendar month (`--calendar-months`): a fixed window from the
    /// 1st to the next 1st, 28 to 31 days.
    CalendarMonth,
}

/// The longest `window:` accepted: 366 days.
pub const MAX_WINDOW_SECONDS: u32 = 366 * 86_400;

impl Period {
    pub fn seconds(self) -> u64 {
        match self {
            Period::Unit(u) => u.seconds(),
            Period::Seconds(n) => u64::from(n),
            // Nominal: windows of calendar months are worked out by date.
            Period::CalendarMonth => Unit::Month.seconds(),
        }
    }

    /// The unit Envoy is told in `current_limit`, which can only name second
    /// to year: the unit itself, or for other windows the longest unit that
    /// fits in the window (see [`Period::reported_limit`]).
    pub fn reported_unit(self) -> Unit {
        match self {
            Period::Unit(u) => u,
            Period::CalendarMonth => Unit::Month,
            Period::Seconds(n) => Unit::ALL
                .into_iter()
                .rev()
                .find(|u| u.seconds() <= u64::from(n))
                .unwrap_or(Unit::Second),
        }
    }

    /// The limit to report with [`Period::reported_unit`]: scaled to that
    /// unit and rounded down (never below 1), so a client that paces itself by
    /// the report never runs into the real limit. `30 per 90s` is reported as
    /// `20 per minute`.
    pub fn reported_limit(self, limit: u32) -> u32 {
        match self {
            Period::Unit(_) | Period::CalendarMonth => limit,
            Period::Seconds(n) => {
                let unit = self.reported_unit().seconds();
                let scaled = u64::from(limit) * unit / u64::from(n.max(1));
                u32::try_from(scaled).unwrap_or(u32::MAX).max(1).min(limit)
            }
        }
    }
}

impl From<Unit> for Period {
    fn from(u: Unit) -> Period {
        Period::Unit(u)
    }
}

impl fmt::Display for Period {
    /// `MINUTE`, or `90S` for a window of 90 seconds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Period::Unit(u) => f.write_str(u.name()),
            Period::Seconds(n) => write!(f, "{n}S"),
            Period::CalendarMonth => f.write_str(Unit::Month.name()),
        }
    }
}

/// Seconds since the Unix epoch: the clock every decision is made against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Now(pub u64);

impl Now {
    /// The clock decisions follow ([`clock`](super::clock): the shared
    /// store's once read), in microseconds: a request's one reading, from
    /// which its second, its millisecond and its buckets' refill all follow.
    pub fn wall_us() -> u64 {
        super::clock::now_us()
    }

    /// The same clock in milliseconds (sliding windows weigh the previous
    /// window by it).
    pub fn wall_ms() -> u64 {
        Self::wall_us() / 1000
    }

    /// The same clock, in whole seconds.
    pub fn wall() -> Now {
        Now(Self::wall_us() / 1_000_000)
    }
}

/// The first second of a window: `now` rounded down to a multiple of the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowStart(pub u64);

/// One window of one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    pub period: Period,
    pub start: WindowStart,
}

impl Window {
    /// The window of `period` that contains `now`.
    pub fn containing(period: impl Into<Period>, now: Now) -> Window {
        let period = period.into();
        if period == Period::CalendarMonth {
            return Window {
                period,
                start: WindowStart(calendar::month_start(now.0)),
            };
        }
        let len = period.seconds().max(1);
        Window {
            period,
            start: WindowStart(now.0 / len * len),
        }
    }

    /// The window just before this one.
    pub fn previous(&self) -> Window {
        let start = match self.period {
            Period::CalendarMonth => calendar::previous_month(self.start.0),
            p => self.start.0.saturating_sub(p.seconds()),
        };
        Window {
            period: self.period,
            start: WindowStart(start),
        }
    }

    /// The first second after the window.
    pub fn end(&self) -> u64 {
        match self.period {
            Period::CalendarMonth => calendar::next_month(self.start.0),
            p => self.start.0 + p.seconds(),
        }
    }

    /// Whole seconds until the window ends; at least 1, and the full unit at a
    /// boundary, as the reference's `duration_until_reset`.
    pub fn seconds_until_reset(&self, now: Now) -> u64 {
        self.end().saturating_sub(now.0).max(1)
    }
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
