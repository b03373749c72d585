//! The `context:date` runtime-context text: today's date in UTC from an injectable clock.
//!
//! Spec: issue "dsh-context" (dynamic facts go into runtime contexts so the system prompt
//! stays byte-stable across days). No timezone database is linked, so the date is UTC and says
//! so.

use std::time::{SystemTime, UNIX_EPOCH};

const WEEKDAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// `(year, month 1–12, day 1–31)` of the proleptic Gregorian calendar for `days` since
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // day ∈ 1..=31 and month ∈ 1..=12 by construction.
    (year, month as u32, day as u32)
}

/// The date text for `now` (exact): `Today's date is YYYY-MM-DD (<Weekday>, UTC).` A time
/// before the Unix epoch is reported as 1970-01-01.
pub fn date_text(now: SystemTime) -> String {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (y, m, d) = civil_from_days(days);
    let weekday = WEEKDAYS[days.rem_euclid(7) as usize];
    format!("Today's date is {y:04}-{m:02}-{d:02} ({weekday}, UTC).")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(
            date_text(UNIX_EPOCH),
            "Today's date is 1970-01-01 (Thursday, UTC)."
        );
    }
}
