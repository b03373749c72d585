//! Text helpers of the session commands: UTC timestamps and clipping.

/// `YYYY-MM-DD HH:MM` (UTC) of an epoch-ms timestamp.
pub(crate) fn fmt_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// `s` cut to `max` characters, ending in `...` when cut.
pub(super) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        let cut: String = s.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting() {
        assert_eq!(fmt_utc(0), "1970-01-01 00:00");
        assert_eq!(fmt_utc(1_796_020_861_946), "2026-11-30 06:41");
        assert_eq!(fmt_utc(951_782_400_000), "2000-02-29 00:00");
    }

    #[test]
    fn clipping() {
        assert_eq!(clip("abcdef", 5), "ab...");
        assert_eq!(clip("abc", 5), "abc");
    }
}
