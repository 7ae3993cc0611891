//! Quota waits (issue 18.1): an attempt stopped on its account's limit is no failed attempt;
//! the step waits with a WAIT naming its end, and is offered again once resumed. The engine
//! never reads a clock: the driver says when the wait is over.

use super::*;

fn quota_wait(step_id: &str, until: &str, cost_usd: f64) -> Event {
    ev(EventKind::QuotaWait {
        step_id: step_id.into(),
        agent_name: "dev".into(),
        account: "claude".into(),
        until: until.into(),
        reason: "Claude AI usage limit reached".into(),
        cost_usd,
        tokens: 10,
    })
}

#[test]
fn a_quota_stop_is_no_failure_and_the_step_waits_until_resumed() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])]);
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &quota_wait("1.1", "2026-12-02T16:00:00+00:00", 0.02));
    assert_eq!(state.step_status("1.1"), StepStatus::Pending);
    assert_eq!(state.status, ExecutionStatus::Running);
    assert!(state.failure.is_none());
    assert!((state.counters.spend_usd - 0.02).abs() < 1e-9, "its spend counts");
    assert!(next_actions(&state).is_empty(), "a waiting step is not offered");
    let Action::Wait { message, until } = next_action(&state) else { panic!("{:?}", next_action(&state)) };
    assert_eq!(until.as_deref(), Some("2026-12-02T16:00:00+00:00"));
    assert!(message.contains("waiting for claude quota until 16:00 UTC"), "{message}");
    ok(&mut state, &ev(EventKind::QuotaResumed { step_id: "1.1".into() }));
    assert!(state.quota_waits.is_empty());
    let d = dispatch_of(&state, "1.1");
    assert_eq!(d.attempt, 2, "a new attempt in a fresh worktree");
    ok(&mut state, &dispatched("1.1"));
    ok(&mut state, &record("1.1", RecordStatus::Complete));
    assert_eq!(dispatch_ids(&state), ["1.2"]);
}

#[test]
fn a_ready_step_may_wait_before_its_dispatch_and_a_dispatch_ends_the_wait() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &[])])]);
    ok(&mut state, &quota_wait("1.1", "2026-12-02T16:00:00+00:00", 0.0));
    assert_eq!(dispatch_ids(&state), ["1.2"], "the other step still runs");
    ok(&mut state, &dispatched("1.2"));
    let Action::Wait { message, until } = next_action(&state) else { panic!() };
    assert!(until.is_some());
    assert!(message.contains("In flight: 1.2"), "{message}");
    ok(&mut state, &ev(EventKind::QuotaResumed { step_id: "1.1".into() }));
    ok(&mut state, &dispatched("1.1"));
    assert!(state.quota_waits.is_empty());
}

#[test]
fn quota_events_are_checked() {
    let mut state = started(vec![phase(1, vec![step("1.1", &[]), step("1.2", &["1.1"])])]);
    let err = refused(&mut state, &ev(EventKind::QuotaResumed { step_id: "1.1".into() }));
    assert!(err.to_string().contains("does not wait for quota"), "{err}");
    let err = refused(&mut state, &quota_wait("1.2", "2026-12-02T16:00:00+00:00", 0.0));
    assert!(err.to_string().contains("waits for 1.1"), "{err}");
    let err = refused(&mut state, &quota_wait("1.1", " ", 0.0));
    assert!(err.to_string().contains("until"), "{err}");
    let err = refused(&mut state, &quota_wait("1.1", "2026-12-02T16:00:00+00:00", -1.0));
    assert!(err.to_string().contains("cost_usd"), "{err}");
    let err = refused(&mut state, &quota_wait("9.9", "2026-12-02T16:00:00+00:00", 0.0));
    assert!(err.to_string().contains("9.9"), "{err}");
}

#[test]
fn quota_notes_read_the_time_in_utc() {
    use crate::model::state::quota_note;
    assert_eq!(quota_note("claude", "2026-12-02T16:00:00+00:00"), "waiting for claude quota until 16:00 UTC");
    assert_eq!(quota_note("codex", "2026-12-02T16:05:09Z"), "waiting for codex quota until 16:05 UTC");
    assert_eq!(quota_note("codex", "soon"), "waiting for codex quota until soon");
}
