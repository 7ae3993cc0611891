//! How pages show times and durations: a relative time ("4 min ago") with the exact time in
//! a `<time datetime=…>` element (`static/live.js` re-renders both in the browser's time
//! zone), and durations in a unit a person reads ("6 ms", "1.4 s", "3 min 12 s").
//!
//! Presentation only: templates call these functions (`templates/macros.html`).

use chrono::{DateTime, Utc};

/// `at` (RFC 3339) relative to now: `just now`, `4 min ago`, `3 h ago`, `2 days ago`, or `in
/// 5 min` for a time ahead; `at` itself when it does not parse (empty: empty).
pub fn ago(at: &str) -> String {
    match DateTime::parse_from_rfc3339(at) {
        Ok(t) => relative(t.with_timezone(&Utc), crate::clock::now()),
        Err(_) => at.to_string(),
    }
}

/// `at` relative to `now` (see [`ago`]).
pub fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds();
    let (n, ahead) = (secs.unsigned_abs(), secs < 0);
    let amount = match n {
        0..=44 => return "just now".into(),
        45..=5399 => format!("{} min", n.div_ceil(60).max(1)),
        5400..=172_799 => format!("{} h", (n + 1800) / 3600),
        _ => format!("{} days", (n + 43_200) / 86_400),
    };
    if ahead {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// `at` (RFC 3339) as an exact UTC time, `2026-12-01 18:58:36 UTC` (the page's text before
/// its script shows it in the browser's zone); `at` itself when it does not parse.
pub fn exact(at: &str) -> String {
    match DateTime::parse_from_rfc3339(at) {
        Ok(t) => t.with_timezone(&Utc).format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        Err(_) => at.to_string(),
    }
}

/// A duration in seconds for people: `6 ms`, `1.4 s`, `42 s`, `3 min 12 s`, `2 h 5 min`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds <= 0.0 {
        return "–".into();
    }
    if seconds < 1.0 {
        return format!("{} ms", (seconds * 1000.0).round().max(1.0));
    }
    if seconds < 10.0 {
        return format!("{seconds:.1} s");
    }
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// The seconds from `from` to `to` (both RFC 3339), `None` when either does not parse.
pub fn between(from: &str, to: &str) -> Option<f64> {
    let a = DateTime::parse_from_rfc3339(from).ok()?;
    let b = DateTime::parse_from_rfc3339(to).ok()?;
    Some((b - a).num_milliseconds() as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn relative_times_read_like_a_person_says_them() {
        let now = t("2026-12-01T19:00:00+00:00");
        assert_eq!(relative(t("2026-12-01T18:59:50+00:00"), now), "just now");
        assert_eq!(relative(t("2026-12-01T18:56:00+00:00"), now), "4 min ago");
        assert_eq!(relative(t("2026-12-01T16:00:00+00:00"), now), "3 h ago");
        assert_eq!(relative(t("2026-11-28T19:00:00+00:00"), now), "3 days ago");
        assert_eq!(relative(t("2026-12-01T19:05:00+00:00"), now), "in 5 min");
        assert_eq!(exact("2026-12-01T18:58:36+00:00"), "2026-12-01 18:58:36 UTC");
        assert_eq!(ago("not a time"), "not a time");
    }

    #[test]
    fn durations_have_a_readable_unit() {
        assert_eq!(duration(0.006), "6 ms");
        assert_eq!(duration(1.44), "1.4 s");
        assert_eq!(duration(42.2), "42 s");
        assert_eq!(duration(192.0), "3 min 12 s");
        assert_eq!(duration(7500.0), "2 h 5 min");
        assert_eq!(duration(0.0), "–");
        assert_eq!(between("2026-12-01T18:58:36+00:00", "2026-12-01T18:59:00+00:00"), Some(24.0));
    }
}
