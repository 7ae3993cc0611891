//! The PMO, webhook, auth, forge and quota contracts of the store, and their races: decided by
//! the database on both backends (SQLite's single writer, PostgreSQL's row locks and `on
//! conflict`). Journal, snapshot and lease contracts are in the parent module.

use super::*;

on_both_backends!(
    webhook_deliveries_racing_for_one_id_are_claimed_once,
    imports_racing_for_one_forge_item_make_one_spec,
    racing_changes_of_one_spec_let_one_through_and_number_events_in_order,
    racing_report_claims_claim_each_attempt_once,
    racing_drivers_get_one_lease,
    racing_claims_take_each_runnable_unleased_execution_once,
    an_execution_left_waiting_is_claimed_only_once_its_journal_moves,
    board_metrics_and_portfolio_read_the_journal_alike,
    users_tokens_links_and_signatures_round_trip,
    quota_accounts_keep_the_later_reset,
    projects_specs_and_forge_rows_round_trip,
    pull_request_poll_schedules_round_trip_and_leave_with_their_pull_request,
);

fn project(name: &str) -> ProjectRow {
    ProjectRow {
        name: name.to_owned(),
        repo_path: "/srv/repo".to_owned(),
        default_branch: "main".to_owned(),
        agent_profile: "demo".to_owned(),
        test_command: String::new(),
        forge_url: String::new(),
        max_agents: 0,
        created_at: T0.to_owned(),
        require_separate_reviewer: true,
        trigger_label: "baton".to_owned(),
        forge_repo: "Acme/Widgets".to_owned(),
        budget_usd: Some(12.5),
        repo_url: "/srv/git/widgets.git".to_owned(),
    }
}

fn new_spec(project: &str, source_key: &str) -> NewSpec {
    NewSpec {
        project: project.to_owned(),
        title: "Add a widget".to_owned(),
        body: "body".to_owned(),
        source: "github".to_owned(),
        source_url: "https://github.example/acme/widgets/issues/7".to_owned(),
        source_meta: r#"{"item_ref":"github:acme/widgets#7"}"#.to_owned(),
        source_key: source_key.to_owned(),
        priority: 1,
        status: "imported".to_owned(),
        actor: "webhook".to_owned(),
        at: T0.to_owned(),
    }
}

/// Runs `n` copies of `f` at once, each on its own clone of `store`.
async fn race<T, F, Fut>(store: &Store, n: usize, f: F) -> Vec<T>
where
    F: Fn(Store, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = (0..n).map(|i| tokio::spawn(f(store.clone(), i))).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

async fn webhook_deliveries_racing_for_one_id_are_claimed_once(db: Fresh) {
    let claims = race(&db.store, 8, |s, _| async move { s.claim_delivery("github", "d-1", T0).await.unwrap() }).await;
    assert_eq!(claims.iter().filter(|c| **c).count(), 1, "{claims:?}");
    db.store.set_delivery_outcome("github", "d-1", "imported spec 1").await.unwrap();
    assert_eq!(db.store.deliveries("github").await.unwrap(), vec![("d-1".to_owned(), "imported spec 1".to_owned())]);
    db.store.release_delivery("github", "d-1").await.unwrap();
    assert!(db.store.claim_delivery("github", "d-1", T1).await.unwrap(), "a released delivery is claimed again");
    db.store.set_item_rev("ado", "u", 5).await.unwrap();
    db.store.set_item_rev("ado", "u", 3).await.unwrap();
    assert_eq!(db.store.item_rev("ado", "u").await.unwrap(), Some(5), "an older revision never wins");
}

async fn imports_racing_for_one_forge_item_make_one_spec(db: Fresh) {
    db.store.insert_project(&project("widgets")).await.unwrap();
    let inserts = race(&db.store, 8, |s, _| async move {
        s.insert_spec(&new_spec("widgets", "github:acme/widgets#7")).await.unwrap()
    })
    .await;
    let created: Vec<i64> =
        inserts.iter().filter_map(|i| if let SpecInsert::Created(id) = i { Some(*id) } else { None }).collect();
    assert_eq!(created.len(), 1, "{inserts:?}");
    assert!(inserts
        .iter()
        .all(|i| matches!(i, SpecInsert::Created(id) | SpecInsert::Existing(id) if *id == created[0])));
    let found = db.store.spec_by_source_key("github:acme/widgets#7").await.unwrap().unwrap();
    assert_eq!(found.spec_id, created[0]);
    assert_eq!(db.store.spec_events(created[0]).await.unwrap().len(), 1, "one create event");
    // Board specs (no key) are always new.
    let a = db.store.insert_spec(&new_spec("widgets", "")).await.unwrap();
    let b = db.store.insert_spec(&new_spec("widgets", "")).await.unwrap();
    assert!(matches!((a, b), (SpecInsert::Created(x), SpecInsert::Created(y)) if x != y));
    assert!(matches!(db.store.insert_spec(&new_spec("nope", "k")).await, Err(StoreError::NoSuchProject { .. })));
}

async fn racing_changes_of_one_spec_let_one_through_and_number_events_in_order(db: Fresh) {
    db.store.insert_project(&project("widgets")).await.unwrap();
    let SpecInsert::Created(id) = db.store.insert_spec(&new_spec("widgets", "")).await.unwrap() else {
        panic!("a board spec is created")
    };
    let results = race(&db.store, 6, move |s, i| async move {
        let change = SpecChange {
            action: "enrich".to_owned(),
            expected: "imported".to_owned(),
            to: "enriched".to_owned(),
            actor: format!("reviewer-{i}"),
            reason: String::new(),
            at: T1.to_owned(),
            risk: Some("LOW".to_owned()),
            plan_json: Some(Some(
                r#"{"phases":[{"steps":[{"agent_name":"coder"},{"agent_name":"tester"},{"agent_name":"coder"}]}]}"#
                    .to_owned(),
            )),
            ..SpecChange::default()
        };
        s.change_spec(id, &change).await
    })
    .await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| matches!(e, StoreError::SpecChanged { current, .. } if current == "enriched")));
    db.store.note_spec_event(id, "forge_update", "webhook", "title changed", T2).await.unwrap();
    let events = db.store.spec_events(id).await.unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    assert_eq!((events[2].from_status.as_str(), events[2].to_status.as_str()), ("enriched", "enriched"));
    let spec = db.store.spec(id).await.unwrap().unwrap();
    assert_eq!((spec.status.as_str(), spec.risk.as_str()), ("enriched", "LOW"));
    let (cards, _) = db.store.card_page("'queued'", None, false, 0, 10).await.unwrap();
    assert_eq!(cards[0].agents.as_deref(), Some("coder,tester"), "the plan's agents, in order, once each");
    assert!(matches!(db.store.change_spec(999, &SpecChange::default()).await, Err(StoreError::NoSuchSpec { .. })));
}

async fn racing_report_claims_claim_each_attempt_once(db: Fresh) {
    let claims = race(&db.store, 6, |s, _| async move { s.claim_report(1, "fired", 3, T0).await.unwrap() }).await;
    let granted: Vec<_> = claims.iter().flatten().collect();
    assert_eq!(granted.len(), 3, "three attempts, each claimed once: {claims:?}");
    assert_eq!(granted.iter().filter(|c| c.retry_of.is_none()).count(), 1, "{claims:?}");
    db.store.finish_report(1, "fired", "", T1).await.unwrap();
    assert_eq!(db.store.claim_report(1, "fired", 9, T2).await.unwrap(), None, "a posted report is never claimed");
    db.store.claim_report(1, "failed", 3, T2).await.unwrap();
    let reports = db.store.reports(1).await.unwrap();
    let keys: Vec<&str> = reports.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(keys, ["fired", "failed"], "in the order they were first claimed");
}

async fn racing_drivers_get_one_lease(db: Fresh) {
    created(&db.store, "t1").await;
    let results = race(&db.store, 6, |s, i| async move {
        s.acquire_lease("t1", &holder(&format!("driver-{i}"), 10 + i as u32), T0, 30).await
    })
    .await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, StoreError::LeaseHeld { .. })));
}

async fn racing_claims_take_each_runnable_unleased_execution_once(db: Fresh) {
    let store = db.store.clone();
    store.insert_project(&project("widgets")).await.unwrap();
    for i in 0..8 {
        let SpecInsert::Created(id) =
            store.insert_spec(&new_spec("widgets", &format!("github:acme/widgets#{i}"))).await.unwrap()
        else {
            panic!("created")
        };
        let status = if i == 5 { "approval_pending" } else { "running" };
        store.create_execution(&format!("t{i}"), PLAN, &summary(status, 0), T0).await.unwrap();
        db.raw(&format!("update specs set task_id = 't{i}' where spec_id = {id}")).await.unwrap();
    }
    // Not a spec's (an `execute run` of the CLI): never claimed.
    store.create_execution("cli", PLAN, &summary("running", 0), T0).await.unwrap();
    store.set_paused("t6", true).await.unwrap();
    store.acquire_lease("t7", &holder("driver-x", 9), "2026-01-15T09:00:00Z", 30).await.unwrap();

    // Two replicas claim at once, on their own connections.
    let (a, b) = (holder("replica-a", 1), holder("replica-b", 2));
    let other = db.open_again().await;
    let now = "2026-01-15T09:00:10Z";
    let t0 = ["t0".to_owned()];
    let (got_a, got_b) =
        tokio::join!(store.claim_leases(&a, &[], now, 30, 10), other.claim_leases(&b, &t0, now, 30, 10));
    let (got_a, got_b) = (got_a.unwrap(), got_b.unwrap());
    let mut all: Vec<&str> = got_a.iter().chain(&got_b).map(|(t, _)| t.as_str()).collect();
    all.sort_unstable();
    assert_eq!(all, ["t0", "t1", "t2", "t3", "t4"], "a: {got_a:?}, b: {got_b:?}");
    assert!(got_b.iter().all(|(t, _)| t != "t0"), "b excluded t0: {got_b:?}");
    for (task_id, epoch) in got_a.iter().chain(&got_b) {
        assert_eq!(*epoch, 1);
        let lease = store.lease(task_id).await.unwrap().unwrap();
        let mine = if got_a.iter().any(|(t, _)| t == task_id) { "replica-a" } else { "replica-b" };
        assert_eq!((lease.holder.as_str(), lease.epoch), (mine, 1));
    }
    // Nothing left while the leases live; the limit caps a claim.
    assert_eq!(store.claim_leases(&a, &[], "2026-01-15T09:00:20Z", 30, 10).await.unwrap(), vec![]);
    // t7's holder stopped renewing: once its lease expired it is claimable, as a takeover.
    let late = store.claim_leases(&b, &[], "2026-01-15T09:00:30Z", 30, 1).await.unwrap();
    assert_eq!(late, vec![("t7".to_owned(), 2)]);
}

async fn an_execution_left_waiting_is_claimed_only_once_its_journal_moves(db: Fresh) {
    let store = db.store.clone();
    store.insert_project(&project("widgets")).await.unwrap();
    let SpecInsert::Created(id) = store.insert_spec(&new_spec("widgets", "github:acme/widgets#1")).await.unwrap()
    else {
        panic!("created")
    };
    store.create_execution("t1", PLAN, &summary("running", 0), T0).await.unwrap();
    db.raw(&format!("update specs set task_id = 't1' where spec_id = {id}")).await.unwrap();
    store.append("t1", &[ev("asked", "{}")], &summary("running", 0)).await.unwrap();
    let driver = holder("replica-a", 1);
    assert_eq!(store.acquire_lease("t1", &driver, "2026-01-15T09:00:00Z", 30).await.unwrap(), 1);

    // Only the holder's release marks it; a stranger's leaves the lease alone.
    assert!(!store.release_lease_waiting("t1", "replica-x").await.unwrap());
    assert!(store.release_lease_waiting("t1", "replica-a").await.unwrap());
    assert_eq!(store.lease("t1").await.unwrap(), None);
    let b = holder("replica-b", 2);
    for now in ["2026-01-15T09:00:10Z", "2026-01-15T09:10:00Z"] {
        assert_eq!(store.claim_leases(&b, &[], now, 30, 10).await.unwrap(), vec![], "left waiting at {now}");
    }
    // The decision is journaled: the next claim takes it, as a takeover.
    store.append("t1", &[ev("answered", "{}")], &summary("running", 0)).await.unwrap();
    let claimed = store.claim_leases(&b, &[], "2026-01-15T09:10:01Z", 30, 10).await.unwrap();
    assert_eq!(claimed, vec![("t1".to_owned(), 2)]);
}

async fn board_metrics_and_portfolio_read_the_journal_alike(db: Fresh) {
    let store = &db.store;
    store.insert_project(&project("widgets")).await.unwrap();
    let SpecInsert::Created(id) = store.insert_spec(&new_spec("widgets", "github:acme/widgets#7")).await.unwrap()
    else {
        panic!("created")
    };
    let plan = concat!(
        r#"{"phases":[{"phase_id":1,"name":"build","gate":{"gate_type":"test"},"#,
        r#""steps":[{"step_id":"1.1","agent_name":"coder"}]}]}"#
    );
    store.create_execution("t1", plan, &summary("running", 0), T0).await.unwrap();
    store
        .change_spec(
            id,
            &SpecChange {
                action: "fire".to_owned(),
                expected: "imported".to_owned(),
                to: "executing".to_owned(),
                actor: "lead".to_owned(),
                at: T1.to_owned(),
                task_id: Some(Some("t1".to_owned())),
                forecast_json: Some(Some(r#"{"mid_usd":2.5}"#.to_owned())),
                ..SpecChange::default()
            },
        )
        .await
        .unwrap();
    let event = |key: &str, kind: &str, payload: &str| NewEvent {
        kind: kind.to_owned(),
        payload: payload.to_owned(),
        idempotency_key: key.to_owned(),
        at: T1.to_owned(),
    };
    let version_before = store.board_version().await.unwrap();
    store
        .append(
            "t1",
            &[
                event("f", "forecasted", r#"{"steps":{"1.1":{"mid_usd":1.5},"1.2":{"mid_usd":0.5}}}"#),
                event("b", "budget_set", r#"{"ceiling_usd":10.0}"#),
                event("d1", "step_dispatched", r#"{"step_id":"1.1","agent_name":"coder"}"#),
                event("d2", "step_dispatched", r#"{"step_id":"1.2","agent_name":"tester"}"#),
            ],
            &summary("running", 0),
        )
        .await
        .unwrap();
    let (cards, counts) = store.card_page("'executing'", Some("widgets"), false, 0, 10).await.unwrap();
    assert_eq!(counts, vec![("executing".to_owned(), 1)]);
    let card = &cards[0];
    assert_eq!(card.forecast_mid_usd, Some(2.5));
    assert_eq!(card.execution_forecast_usd, Some(2.0));
    assert_eq!(card.ceiling_usd, Some(10.0));
    assert_eq!(card.running.as_deref(), Some("1.1 coder\n1.2 tester"));
    assert!(!card.paused);
    assert_ne!(store.board_version().await.unwrap(), version_before, "an append moves the board");

    store
        .append(
            "t1",
            &[
                event(
                    "r1",
                    "step_recorded",
                    concat!(
                        r#"{"step_id":"1.1","agent_name":"coder","status":"complete","cost_usd":0.75,"#,
                        r#""duration_seconds":12.0,"usage":{"model":"opus","cost_estimated":true}}"#
                    ),
                ),
                event("g1", "gate_recorded", r#"{"phase_id":1,"passed":false}"#),
                event("g2", "gate_recorded", r#"{"phase_id":1,"passed":true}"#),
            ],
            &summary("running", 1),
        )
        .await
        .unwrap();
    store.park("t1", "switch the checkout away").await.unwrap();
    let (cards, _) = store.card_page("'executing'", None, false, 0, 10).await.unwrap();
    let card = &cards[0];
    assert_eq!(card.running.as_deref(), Some("1.2 tester"));
    assert_eq!(card.spend_estimated_usd, 0.75);
    assert!(card.paused);
    assert_eq!(card.park_reason.as_deref(), Some("switch the checkout away"));
    assert_eq!(store.park_reason("t1").await.unwrap().as_deref(), Some("switch the checkout away"));
    store.set_paused("t1", false).await.unwrap();
    assert!(!store.is_paused("t1").await.unwrap());
    let (archived, _) = store.card_page("'executing'", None, true, 0, 10).await.unwrap();
    assert!(archived.is_empty());

    let totals = store.metric_totals().await.unwrap();
    assert_eq!(totals.executions_by_status, vec![("running".to_owned(), 1)]);
    assert_eq!((totals.dispatches, totals.gates_passed, totals.gates_failed), (2, 1, 1));
    assert_eq!(totals.agent_seconds, 12.0);
    assert_eq!(store.spend_history(5).await.unwrap(), vec![("coder".to_owned(), "opus".to_owned(), 0.75)]);
    assert_eq!(store.count_executions_in(&["running", "failed"]).await.unwrap(), 1);
    let queue = store.executions_in(&["running"]).await.unwrap();
    assert_eq!(queue[0].spec_title.as_deref(), Some("Add a widget"));
    assert_eq!(store.reportable_specs(T0).await.unwrap(), vec![(id, "t1".to_owned())]);

    let rows = store
        .portfolio_rows(&PortfolioFilter {
            project: Some("widgets".to_owned()),
            from: "2026-01-01".to_owned(),
            until: "2026-02-01".to_owned(),
        })
        .await
        .unwrap();
    assert_eq!(rows.transitions.len(), 2);
    assert_eq!(rows.executions[0].forecast_usd, Some(2.0));
    assert_eq!(rows.weekly_spend.len(), 1);
    assert_eq!(rows.weekly_spend[0].week, "2026-01-12", "the Monday of the week of the 15th");
    assert_eq!((rows.weekly_spend[0].attempts, rows.weekly_spend[0].usd), (1, 0.75));
    assert_eq!(
        rows.gates,
        vec![GateRunsRow { gate_type: "test".to_owned(), runs: 2, failed: 1 }],
        "gate runs by the plan's gate type"
    );
}

async fn users_tokens_links_and_signatures_round_trip(db: Fresh) {
    let store = &db.store;
    assert!(!store.has_users().await.unwrap());
    let id = store.add_token("ana", "lead", "hash-1", "laptop", T0).await.unwrap();
    assert!(store.has_users().await.unwrap());
    assert_eq!(store.user_of_token("hash-1").await.unwrap().map(|u| u.role), Some("lead".to_owned()));
    assert_eq!(store.token_login("hash-1").await.unwrap().map(|(_, t)| t), Some(id));
    assert!(store.session_user("ana", id).await.unwrap().is_some());
    assert_eq!(store.list_tokens().await.unwrap().len(), 1);
    assert!(store.revoke_token(id, T1).await.unwrap());
    assert!(!store.revoke_token(id, T1).await.unwrap());
    assert_eq!(store.user_of_token("hash-1").await.unwrap(), None);
    assert!(store.set_identity("ana", ForgeIdentity::GitHubLogin, "AnaDev").await.unwrap());
    assert_eq!(
        store.user_by_identity(ForgeIdentity::GitHubLogin, "anadev").await.unwrap().map(|u| u.name),
        Some("ana".to_owned())
    );
    assert!(store.use_approval_link("link-1", "ana", T1).await.unwrap());
    assert!(!store.use_approval_link("link-1", "ana", T2).await.unwrap(), "a link is single-use");
    assert!(store.approval_link_used("link-1").await.unwrap());
    created(store, "t1").await;
    store.put_decision_signature("t1", 3, "sig-a").await.unwrap();
    store.put_decision_signature("t1", 3, "sig-b").await.unwrap();
    assert_eq!(store.decision_signatures("t1").await.unwrap(), vec![(3, "sig-b".to_owned())]);
    assert!(store.add_token("bob", "emperor", "hash-2", "", T0).await.is_err(), "roles are the four");
}

async fn quota_accounts_keep_the_later_reset(db: Fresh) {
    let store = &db.store;
    let at = |s: &str| parse_time(s).unwrap();
    store.set_quota_account("claude", at("2026-01-15T10:00:00Z"), 60, "limit").await.unwrap();
    store.set_quota_account("claude", at("2026-01-15T09:30:00Z"), 120, "again").await.unwrap();
    let account = store.quota_account("claude").await.unwrap().unwrap();
    assert_eq!((account.until, account.backoff_secs), (at("2026-01-15T10:00:00Z"), 120));
    store.clear_quota_account("claude").await.unwrap();
    assert_eq!(store.quota_account("claude").await.unwrap(), None);
}

async fn projects_specs_and_forge_rows_round_trip(db: Fresh) {
    let store = &db.store;
    store.insert_project(&project("widgets")).await.unwrap();
    assert!(matches!(store.insert_project(&project("widgets")).await, Err(StoreError::ProjectExists { .. })));
    assert_eq!(store.project("widgets").await.unwrap(), Some(project("widgets")));
    assert_eq!(store.projects_by_forge_repo(&["acme/widgets"]).await.unwrap().len(), 1);
    let SpecInsert::Created(id) = store.insert_spec(&new_spec("widgets", "")).await.unwrap() else { panic!() };
    assert!(matches!(store.delete_project("widgets").await, Err(StoreError::ProjectInUse { specs: 1, .. })));
    assert!(matches!(store.delete_project("nope").await, Err(StoreError::NoSuchProject { .. })));
    assert_eq!(store.specs_without_source_key().await.unwrap().len(), 1);
    assert_eq!(
        store.claim_source_key(id, "github:acme/widgets#7", |h| format!("dup of {h}"), "baton", T1).await.unwrap(),
        None
    );
    let SpecInsert::Created(dup) = store.insert_spec(&new_spec("widgets", "")).await.unwrap() else { panic!() };
    assert_eq!(
        store.claim_source_key(dup, "github:acme/widgets#7", |h| format!("dup of {h}"), "baton", T1).await.unwrap(),
        Some(id)
    );
    assert_eq!(store.spec(dup).await.unwrap().unwrap().status, "imported");
    assert_eq!(store.spec_events(dup).await.unwrap().last().unwrap().reason, format!("dup of {id}"));
    let listed = store
        .list_specs(&SpecFilter { status: Some("imported".to_owned()), project: None, limit: 10, offset: 0 })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        store.spec_by_source_url("github", &new_spec("widgets", "").source_url).await.unwrap().unwrap().spec_id,
        id
    );
    store.set_source_meta(id, r#"{"labels":["x"]}"#).await.unwrap();
    created(store, "t1").await;
    let merge = MergeRow {
        task_id: "t1".to_owned(),
        spec_id: Some(id),
        forge_repo: "acme/widgets".to_owned(),
        branch: "baton/t1".to_owned(),
        base_branch: "main".to_owned(),
        state: "opened".to_owned(),
        pushed_sha: "abc".to_owned(),
        pr_number: Some(12),
        pr_url: "https://github.example/acme/widgets/pull/12".to_owned(),
        error: String::new(),
        updated_at: T2.to_owned(),
    };
    store.put_merge(&merge).await.unwrap();
    assert_eq!(store.merge("t1").await.unwrap(), Some(merge));
    assert_eq!(store.head_seq("t1").await.unwrap(), Some(0));
    assert_eq!(store.spec_of_execution("t1").await.unwrap(), None);
}

/// Issue 19: the poll schedule of open pull requests is the store's, the same on both backends.
async fn pull_request_poll_schedules_round_trip_and_leave_with_their_pull_request(db: Fresh) {
    let store = &db.store;
    let merge = |task_id: &str, state: &str| MergeRow {
        task_id: task_id.to_owned(),
        spec_id: None,
        forge_repo: "acme/widgets".to_owned(),
        branch: format!("baton/{task_id}"),
        base_branch: "main".to_owned(),
        state: state.to_owned(),
        pushed_sha: "abc".to_owned(),
        pr_number: Some(12),
        pr_url: format!("https://github.example/acme/widgets/pull/{task_id}"),
        error: String::new(),
        updated_at: T2.to_owned(),
    };
    let poll = |task_id: &str, interval_ms: i64, next_at: &str| PrPollRow {
        task_id: task_id.to_owned(),
        sha: "abc".to_owned(),
        interval_ms,
        next_at: next_at.to_owned(),
    };
    store.put_merge(&merge("t1", "opened")).await.unwrap();
    store.put_merge(&merge("t2", "opened")).await.unwrap();
    store.put_pr_poll(&poll("t1", 30_000, T1)).await.unwrap();
    store.put_pr_poll(&poll("t2", 30_000, T1)).await.unwrap();
    store.put_pr_poll(&poll("t1", 60_000, T2)).await.unwrap();
    assert_eq!(store.pr_polls().await.unwrap(), vec![poll("t1", 60_000, T2), poll("t2", 30_000, T1)]);
    store.put_merge(&merge("t2", "merged")).await.unwrap();
    store.prune_pr_polls().await.unwrap();
    assert_eq!(store.pr_polls().await.unwrap(), vec![poll("t1", 60_000, T2)]);
}

/// Issue 17: the two dialects' migrations stay in step, by number and name.
#[test]
fn every_migration_has_a_postgresql_dialect_and_back() {
    let names = |dir: &std::path::Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let sqlite = names(&root);
    let postgres = names(&root.join("postgres"));
    assert!(sqlite.len() >= 14, "{sqlite:?}");
    let only_sqlite: Vec<_> = sqlite.difference(&postgres).collect();
    let only_postgres: Vec<_> = postgres.difference(&sqlite).collect();
    assert!(
        only_sqlite.is_empty() && only_postgres.is_empty(),
        "migrations/ and migrations/postgres/ must hold the same migrations (number and name): only in \
         migrations/: {only_sqlite:?}; only in migrations/postgres/: {only_postgres:?}"
    );
}

/// Replicas opening one new PostgreSQL database together apply each migration once.
#[tokio::test]
async fn concurrent_connects_to_a_new_postgres_database_both_succeed() {
    let Some(url) = pg::testing::fresh_database().await else { return };
    let (a, b) = tokio::join!(Store::connect(&url), Store::connect(&url));
    let (a, b) = (a.unwrap(), b.unwrap());
    created(&a, "t1").await;
    assert!(b.summary("t1").await.unwrap().is_some());
    assert_eq!(a.backend_name(), "postgres");
}

#[tokio::test]
async fn a_database_url_that_is_not_postgres_is_refused_naming_it_without_its_password() {
    let err = Store::connect("mysql://root:hunter2@db/baton").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("mysql://root:***@db/baton") && !text.contains("hunter2"), "{text}");
}
