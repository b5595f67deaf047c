//! UTC calendar months for `--calendar-months` (the reference's
//! `USE_CALENDAR_MONTH_RATE_LIMIT`): a month window starts at 00:00:00 UTC
//! on the 1st and ends when the next month starts, whatever its length.

const DAY: u64 = 86_400;

/// The first second of the UTC month holding `now` (seconds since the epoch).
pub fn month_start(now: u64) -> u64 {
    let (y, m, _) = civil(now / DAY);
    days(y, m, 1) * DAY
}

/// The first second of the month after the one starting at `start`.
pub fn next_month(start: u64) -> u64 {
    let (y, m, _) = civil(start / DAY);
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    days(y, m, 1) * DAY
}

/// The first second of the month before the one starting at `start`
/// (the epoch's own month for anything earlier).
pub fn previous_month(start: u64) -> u64 {
    month_start(start.saturating_sub(1))
}

/// Days since 1970-01-01 to a date of the proleptic Gregorian calendar
/// (from 1970 on), counted in 400-year eras from 0000-03-01.
fn days(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// The date of a day count since 1970-01-01: (year, month 1-12, day 1-31).
fn civil(z: u64) -> (u64, u64, u64) {
    let z = z + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
#[path = "calendar_tests.rs"]
mod tests;
