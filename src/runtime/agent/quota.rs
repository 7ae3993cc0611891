//! Quota and rate limits: recognising, in an attempt's captured output, that the agent stopped
//! on its account's usage limit rather than failing the work (issue 18.1), and when the limit
//! resets. One parser per agent CLI:
//!
//! - claude: the result text `Claude AI usage limit reached|<unix epoch of reset>`; the newer
//!   `You've hit your limit · resets 4pm (Europe/Berlin)` (the next such wall-clock time in that
//!   zone, UTC when none is named); a `429 … rate_limit_error` in stderr; and the stream's
//!   `rate_limit_event` lines, whose `status: "rejected"` is a stop and whose `resetsAt` (unix
//!   seconds) is the reset time for any of the forms;
//! - codex: an `error` / `turn.failed` event (or an stderr line) saying "usage limit" or "rate
//!   limit", with `resets_in_seconds` or "try again in 2 hours 5 minutes" when it gives them;
//! - gemini: `RESOURCE_EXHAUSTED` / "Quota exceeded" / code 429, in its JSON error or stderr,
//!   with the `retryDelay` ("37s") or "retry in 37.5s" when given.
//!
//! A run that succeeded is never a quota stop. Pure functions over strings and the time given
//! (no IO, no clock): the driver decides what a stop means ([`backoff`] when no reset was given).

use std::time::Duration;

use chrono::{DateTime, NaiveTime, TimeZone as _, Utc};
use serde_json::Value;

use super::profile::AgentProfile;
use crate::model::state::QuotaWait;

/// Whether `wait` is over at `now`: its `until` has come, or cannot be read (an `until` no
/// clock can reach would hold the step for ever; dispatching it again asks the agent, which
/// names its reset anew). The one rule the driver and `execute next` / `status` both follow.
pub fn wait_is_due(wait: &QuotaWait, now: DateTime<Utc>) -> bool {
    DateTime::parse_from_rfc3339(&wait.until).map_or(true, |until| until <= now)
}

/// The first wait after a stop that named no reset time.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(60);
/// The longest wait after a stop that named no reset time.
pub const BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// Characters of the agent's words kept in [`QuotaHit::message`].
const MESSAGE_CHARS: usize = 300;

/// An agent stopped on its account's usage or rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaHit {
    /// When the limit resets, when the agent said (UTC).
    pub resets_at: Option<DateTime<Utc>>,
    /// The agent's words for it (one line, at most 300 characters).
    pub message: String,
}

/// Whether the captured output of a run of `profile` is a quota stop; `now` is when the run
/// ended (a reset named as a wall-clock time is the next one after it). The plain command
/// profile is never read for quota (its output is free-form); the demo agent speaks claude.
pub fn detect(profile: &AgentProfile, stdout: &str, stderr: &str, now: DateTime<Utc>) -> Option<QuotaHit> {
    match profile {
        AgentProfile::Claude | AgentProfile::Demo => claude(stdout, stderr, now),
        AgentProfile::Codex => codex(stdout, stderr, now),
        AgentProfile::Gemini => gemini(stdout, stderr, now),
        AgentProfile::Command { .. } => None,
    }
}

/// The wait after a stop that named no reset: one minute after a first stop, then double the
/// `previous` wait, at most an hour.
pub fn backoff(previous: Option<Duration>) -> Duration {
    match previous {
        None => BACKOFF_FIRST,
        Some(p) => (p.max(BACKOFF_FIRST / 2) * 2).min(BACKOFF_MAX),
    }
}

fn json_lines(stdout: &str) -> impl Iterator<Item = Value> + '_ {
    stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok()).filter(Value::is_object)
}

fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().take(MESSAGE_CHARS).collect()
}

fn epoch(v: &Value) -> Option<DateTime<Utc>> {
    let secs = v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)).or_else(|| v.as_str()?.trim().parse().ok())?;
    // Milliseconds when it is too large to be seconds.
    let secs = if secs > 100_000_000_000 { secs / 1000 } else { secs };
    Utc.timestamp_opt(secs, 0).single()
}

/// claude's forms (see the module doc).
pub fn claude(stdout: &str, stderr: &str, now: DateTime<Utc>) -> Option<QuotaHit> {
    let mut rejected = false;
    let mut stream_reset = None;
    let mut result: Option<Value> = None;
    for v in json_lines(stdout) {
        match v.get("type").and_then(Value::as_str) {
            Some("rate_limit_event") => {
                let info = v.get("rate_limit_info").unwrap_or(&v);
                let status = info.get("status").and_then(Value::as_str).unwrap_or("");
                if status == "rejected" {
                    rejected = true;
                    stream_reset = info.get("resetsAt").and_then(epoch).or(stream_reset);
                }
            }
            Some("result") => result = Some(v),
            _ => {}
        }
    }
    let text = result.as_ref().and_then(|r| r.get("result")).and_then(Value::as_str).unwrap_or("");
    if let Some(r) = &result {
        let is_error = match r.get("is_error").and_then(Value::as_bool) {
            Some(flag) => flag,
            None => r.get("subtype").and_then(Value::as_str) != Some("success"),
        };
        if !is_error {
            return None;
        }
    }
    if let Some((head, rest)) = text.split_once("usage limit reached|") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let at = epoch(&Value::String(digits.clone()));
        // The epoch is machine-readable only: the message a person reads ends at "reached".
        let message = format!("{head}usage limit reached{}", &rest[digits.len()..]);
        return Some(QuotaHit { resets_at: at.or(stream_reset), message: one_line(&message) });
    }
    let lower = text.to_lowercase();
    if lower.contains("hit your limit") || lower.contains("limit reached") || lower.contains("usage limit") {
        let at = resets_clock_time(text, now).or(stream_reset);
        return Some(QuotaHit { resets_at: at, message: one_line(text) });
    }
    if stderr.contains("rate_limit_error") || (stderr.contains("429") && stderr.to_lowercase().contains("rate limit")) {
        let line = stderr.lines().find(|l| l.contains("rate_limit_error") || l.contains("429")).unwrap_or(stderr);
        return Some(QuotaHit { resets_at: stream_reset, message: one_line(line) });
    }
    if text.contains("rate_limit_error") {
        return Some(QuotaHit { resets_at: stream_reset, message: one_line(text) });
    }
    rejected.then(|| QuotaHit {
        resets_at: stream_reset,
        message: if text.is_empty() { "rate limit rejected the request".into() } else { one_line(text) },
    })
}

/// The reset of `resets 4pm (Europe/Berlin)`, `resets 4:30pm`, `resets at 16:00 (UTC)`: the
/// next such time after `now` in the named zone (UTC without one, or with a zone unknown).
fn resets_clock_time(text: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let lower = text.to_lowercase();
    let at = lower.find("resets")?;
    let rest = lower[at + "resets".len()..].trim_start();
    let rest = rest.strip_prefix("at ").unwrap_or(rest).trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == ':').collect();
    let after = rest[digits.len()..].trim_start();
    let (hour, minute) = match digits.split_once(':') {
        Some((h, m)) => (h.parse::<u32>().ok()?, m.parse::<u32>().ok()?),
        None => (digits.parse::<u32>().ok()?, 0),
    };
    let hour = if after.starts_with("pm") && hour < 12 {
        hour + 12
    } else if after.starts_with("am") && hour == 12 {
        0
    } else {
        hour
    };
    let time = NaiveTime::from_hms_opt(hour, minute, 0)?;
    // The zone keeps its spelling (`Europe/Berlin`), so it is read from the original text.
    let zone = text[at..]
        .split_once('(')
        .and_then(|(_, z)| z.split_once(')'))
        .and_then(|(z, _)| z.trim().parse::<chrono_tz::Tz>().ok())
        .unwrap_or(chrono_tz::UTC);
    let local_today = now.with_timezone(&zone).date_naive();
    (0..=2)
        .filter_map(|d| local_today.checked_add_days(chrono::Days::new(d)))
        .filter_map(|day| zone.from_local_datetime(&day.and_time(time)).earliest())
        .map(|t| t.with_timezone(&Utc))
        .find(|t| *t > now)
}

/// A duration written out: `2 hours 5 minutes`, `45 seconds`, `1 day`, `3h 20m`, `37.5s`.
fn spelled_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut found = false;
    let mut words = text.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).peekable();
    while let Some(word) = words.next() {
        let num_len = word.chars().take_while(|c| c.is_ascii_digit() || *c == '.').count();
        if num_len == 0 {
            if found && word != "and" {
                break;
            }
            continue;
        }
        let Ok(n) = word[..num_len].parse::<f64>() else { break };
        let unit = if num_len < word.len() { word[num_len..].to_string() } else { words.next()?.to_string() };
        let unit = unit.trim_end_matches(['.', ';']).to_lowercase();
        let secs = match unit.as_str() {
            "d" | "day" | "days" => 86_400.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            _ => break,
        };
        total += n * secs;
        found = true;
    }
    (found && total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total.ceil()))
}

/// The duration after `marker` (case-insensitive) in `text`.
fn after_marker(text: &str, marker: &str) -> Option<Duration> {
    let lower = text.to_lowercase();
    let at = lower.find(marker)?;
    spelled_duration(&text[at + marker.len()..])
}

fn plus(now: DateTime<Utc>, d: Duration) -> Option<DateTime<Utc>> {
    now.checked_add_signed(chrono::Duration::from_std(d).ok()?)
}

/// codex's forms (see the module doc).
pub fn codex(stdout: &str, stderr: &str, now: DateTime<Utc>) -> Option<QuotaHit> {
    let is_limit = |m: &str| {
        let l = m.to_lowercase();
        l.contains("usage limit") || l.contains("rate limit") || l.contains("429 too many requests")
    };
    let mut hit: Option<(String, Option<u64>)> = None;
    for v in json_lines(stdout) {
        // `{"type":"error","message":…}`, `{"type":"turn.failed","error":{"message":…}}`, and the
        // older `{"msg":{"type":"error",…}}` envelope.
        let v = v.get("msg").filter(|m| m.is_object()).unwrap_or(&v);
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "error" | "turn.failed" | "stream_error") {
            continue;
        }
        let err = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
        let Some(message) = err.get("message").and_then(Value::as_str) else { continue };
        if is_limit(message) {
            let secs = ["resets_in_seconds", "resets_in"]
                .iter()
                .find_map(|k| err.get(*k).or_else(|| v.get(*k)).and_then(Value::as_u64));
            hit = Some((message.to_string(), secs.or(hit.and_then(|h| h.1))));
        }
    }
    if hit.is_none() {
        hit = stderr.lines().find(|l| is_limit(l)).map(|l| (l.trim().to_string(), None));
    }
    let (message, secs) = hit?;
    let wait = secs.map(Duration::from_secs).or_else(|| after_marker(&message, "try again in"));
    Some(QuotaHit { resets_at: wait.and_then(|d| plus(now, d)), message: one_line(&message) })
}

/// gemini's forms (see the module doc).
pub fn gemini(stdout: &str, stderr: &str, now: DateTime<Utc>) -> Option<QuotaHit> {
    let is_quota = |t: &str| {
        t.contains("RESOURCE_EXHAUSTED") || t.to_lowercase().contains("quota exceeded") || t.contains("\"code\":429")
    };
    // Its JSON output's `error` (one object, possibly pretty-printed), else any stream line's.
    let error_text = serde_json::from_str::<Value>(stdout.trim())
        .ok()
        .into_iter()
        .chain(json_lines(stdout))
        .filter_map(|v| v.get("error").cloned())
        .map(|e| {
            let code = e.get("code").and_then(Value::as_u64);
            let message = e.get("message").and_then(Value::as_str).unwrap_or("").to_string();
            if code == Some(429) && !is_quota(&message) {
                format!("RESOURCE_EXHAUSTED (429): {message}")
            } else {
                message
            }
        })
        .find(|m| is_quota(m));
    let text = match error_text {
        Some(t) => t,
        None if is_quota(stderr) => stderr.to_string(),
        None => return None,
    };
    let wait = text
        .find("retryDelay")
        .and_then(|at| {
            let rest = &text[at + "retryDelay".len()..];
            let start = rest.find(|c: char| c.is_ascii_digit())?;
            spelled_duration(&rest[start..].replace(['"', '\\'], " "))
        })
        .or_else(|| after_marker(&text, "retry in"));
    let line = text.lines().find(|l| is_quota(l)).unwrap_or(&text);
    let message = match line.find("Quota exceeded").or_else(|| line.find("Resource has been exhausted")) {
        Some(at) => &line[at..],
        None => line,
    };
    Some(QuotaHit { resets_at: wait.and_then(|d| plus(now, d)), message: one_line(message) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::agent::test_support::fixture;

    fn wait(until: &str) -> QuotaWait {
        QuotaWait {
            step_id: "1.1".into(),
            agent_name: "dev".into(),
            account: "claude".into(),
            until: until.into(),
            reason: String::new(),
        }
    }

    /// The one place the driver and `execute next` / `status` learn whether a quota wait is
    /// over: at and after its `until` (in any offset), and at once when `until` is unreadable.
    #[test]
    fn a_quota_wait_is_due_from_its_until_on_and_at_once_when_until_is_unreadable() {
        let now =
            chrono::DateTime::parse_from_rfc3339("2026-12-02T16:00:00+00:00").unwrap().with_timezone(&chrono::Utc);
        assert!(!wait_is_due(&wait("2026-12-02T16:00:01+00:00"), now));
        assert!(wait_is_due(&wait("2026-12-02T16:00:00+00:00"), now));
        assert!(wait_is_due(&wait("2026-12-02T15:59:59Z"), now));
        assert!(!wait_is_due(&wait("2026-12-02T17:30:00+01:00"), now), "16:30 UTC");
        assert!(wait_is_due(&wait("2026-12-02T16:30:00+01:00"), now), "15:30 UTC");
        assert!(wait_is_due(&wait("tomorrow"), now));
        assert!(wait_is_due(&wait(""), now));
    }

    fn now() -> DateTime<Utc> {
        // 2025-12-02 10:00 UTC (11:00 in Berlin).
        Utc.with_ymd_and_hms(2025, 12, 2, 10, 0, 0).unwrap()
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 12, 2, h, m, 0).unwrap()
    }

    #[test]
    fn claude_usage_limit_with_an_epoch() {
        let hit = claude(&fixture("agents/quota/claude-usage-limit-epoch.jsonl"), "", now()).unwrap();
        assert_eq!(hit.resets_at, Some(at(16, 0)));
        assert_eq!(hit.message, "Claude AI usage limit reached", "the epoch is not part of what a person reads");
    }

    #[test]
    fn claude_hit_your_limit_resets_at_a_time_in_a_zone() {
        let hit = claude(&fixture("agents/quota/claude-hit-your-limit.jsonl"), "", now()).unwrap();
        // 4pm in Berlin in December is 15:00 UTC.
        assert_eq!(hit.resets_at, Some(at(15, 0)));
        // After 4pm Berlin time it is tomorrow's 4pm.
        let late = Utc.with_ymd_and_hms(2025, 12, 2, 15, 30, 0).unwrap();
        let hit = claude(&fixture("agents/quota/claude-hit-your-limit.jsonl"), "", late).unwrap();
        assert_eq!(hit.resets_at, Some(Utc.with_ymd_and_hms(2025, 12, 3, 15, 0, 0).unwrap()));
    }

    #[test]
    fn claude_reset_times_without_a_zone_are_utc_and_minutes_count() {
        assert_eq!(resets_clock_time("You've hit your limit · resets 4:30pm", now()), Some(at(16, 30)));
        assert_eq!(resets_clock_time("limit reached, resets at 11:15 (Not/AZone)", now()), Some(at(11, 15)));
        assert_eq!(
            resets_clock_time("resets 12am (UTC)", now()),
            Some(Utc.with_ymd_and_hms(2025, 12, 3, 0, 0, 0).unwrap())
        );
        assert_eq!(resets_clock_time("resets soon", now()), None);
    }

    #[test]
    fn claude_429_rate_limit_error_in_stderr() {
        let hit =
            claude(&fixture("agents/quota/claude-429.stdout.jsonl"), &fixture("agents/quota/claude-429.stderr"), now())
                .unwrap();
        assert_eq!(hit.resets_at, None);
        assert!(hit.message.contains("rate_limit_error"), "{}", hit.message);
    }

    #[test]
    fn claude_rate_limit_event_gives_the_reset() {
        let hit = claude(&fixture("agents/quota/claude-rate-limit-event.jsonl"), "", now()).unwrap();
        // The rejected event's resetsAt, not the earlier warning's.
        assert_eq!(hit.resets_at, Some(at(17, 0)));
        assert_eq!(hit.message, "5-hour limit reached");
    }

    #[test]
    fn a_successful_or_ordinary_failed_claude_run_is_no_quota_stop() {
        let ok = r#"{"type":"result","is_error":false,"result":"done; mentions usage limit reached|1"}"#;
        assert_eq!(claude(ok, "429 rate_limit_error", now()), None);
        let failed = r#"{"type":"result","is_error":true,"result":"tests failed"}"#;
        assert_eq!(claude(failed, "", now()), None);
        let warned = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1764687600}}
{"type":"result","is_error":true,"result":"compile error"}"#;
        assert_eq!(claude(warned, "", now()), None);
    }

    #[test]
    fn codex_usage_limit_with_and_without_a_time() {
        let hit = codex(&fixture("agents/quota/codex-usage-limit.jsonl"), "", now()).unwrap();
        assert_eq!(hit.resets_at, Some(at(12, 5)));
        assert!(hit.message.contains("usage limit"), "{}", hit.message);
        let hit = codex(&fixture("agents/quota/codex-usage-limit-no-time.jsonl"), "", now()).unwrap();
        assert_eq!(hit.resets_at, None);
        let secs = r#"{"type":"error","message":"usage limit reached","resets_in_seconds":90}"#;
        assert_eq!(codex(secs, "", now()).unwrap().resets_at, Some(now() + chrono::Duration::seconds(90)));
        let other = r#"{"type":"turn.failed","error":{"message":"sandbox denied"}}"#;
        assert_eq!(codex(other, "", now()), None);
    }

    #[test]
    fn gemini_quota_exhausted_in_json_and_stderr() {
        let hit = gemini(&fixture("agents/quota/gemini-quota.json"), "", now()).unwrap();
        assert_eq!(hit.resets_at, Some(now() + chrono::Duration::seconds(37)));
        assert!(hit.message.starts_with("Quota exceeded"), "{}", hit.message);
        let hit = gemini("", &fixture("agents/quota/gemini-quota.stderr"), now()).unwrap();
        assert_eq!(hit.resets_at, None);
        assert!(hit.message.contains("exhausted"), "{}", hit.message);
        assert_eq!(gemini(r#"{"response":"ok","stats":{}}"#, "", now()), None);
    }

    #[test]
    fn durations_are_read_as_written() {
        assert_eq!(spelled_duration("2 hours 5 minutes."), Some(Duration::from_secs(7500)));
        assert_eq!(spelled_duration("3h 20m then"), Some(Duration::from_secs(12_000)));
        assert_eq!(spelled_duration("37.2s"), Some(Duration::from_secs(38)));
        assert_eq!(spelled_duration("1 day and 2 hours"), Some(Duration::from_secs(93_600)));
        assert_eq!(spelled_duration("a while"), None);
    }

    #[test]
    fn backoff_doubles_from_a_minute_to_an_hour() {
        let mut wait = backoff(None);
        let mut seen = vec![wait.as_secs()];
        for _ in 0..8 {
            wait = backoff(Some(wait));
            seen.push(wait.as_secs());
        }
        assert_eq!(seen, [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]);
    }

    #[test]
    fn detect_picks_the_parser_of_the_profile() {
        let text = fixture("agents/quota/claude-usage-limit-epoch.jsonl");
        assert!(detect(&AgentProfile::Claude, &text, "", now()).is_some());
        assert!(detect(&AgentProfile::Command { argv_template: vec![] }, &text, "", now()).is_none());
        let codex_text = fixture("agents/quota/codex-usage-limit.jsonl");
        assert!(detect(&AgentProfile::Codex, &codex_text, "", now()).is_some());
        let gemini_text = fixture("agents/quota/gemini-quota.json");
        assert!(detect(&AgentProfile::Gemini, &gemini_text, "", now()).is_some());
        assert!(detect(&AgentProfile::Claude, &gemini_text, "", now()).is_none());
    }
}
