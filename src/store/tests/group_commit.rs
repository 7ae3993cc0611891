//! Single-event appends that know their chain head (issue 14.9): the one-round-trip append
//! that falls back when another process moved the head (both backends), and on SQLite the
//! journal thread's group commit — appends queued behind a commit share the next one, a bad
//! append fails alone, a caller that gave up leaves nothing, a dead thread fails appends at
//! once. Leases are in `leases`, the journal's own contract in the parent module.

use super::*;

on_both_backends!(the_one_round_trip_append_falls_back_when_another_process_moved_the_head);

async fn the_one_round_trip_append_falls_back_when_another_process_moved_the_head(db: Fresh) {
    let a = db.store.clone();
    created(&a, "t1").await;
    let b = db.open_again().await;
    behind_its_back(&a, &b).await;
    let report = a.verify_chain("t1").await.unwrap();
    assert!(report.ok && report.events == 4, "{report:?}");
    assert_eq!(a.load("t1").await.unwrap().unwrap().summary, summary("running", 4));
}

/// `a` appends k1 and k2 on its fast path; `b` (another process) appends k3, so `a`'s known
/// head is stale: its k4 must not be written at the head it knows, and lands at seq 4 through
/// the general path; k1 again is a duplicate.
async fn behind_its_back(a: &Store, b: &Store) {
    a.append("t1", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
    let second = a.append("t1", &[ev("k2", "{}")], &summary("running", 2)).await.unwrap();
    assert!(matches!(second[0], AppendOutcome::Appended { seq: 2, .. }), "{second:?}");
    b.append("t1", &[ev("k3", "{}")], &summary("running", 3)).await.unwrap();
    let fourth = a.append("t1", &[ev("k4", "{}")], &summary("running", 4)).await.unwrap();
    assert!(matches!(fourth[0], AppendOutcome::Appended { seq: 4, .. }), "stale head falls back: {fourth:?}");
    let dup = a.append("t1", &[ev("k1", "{}")], &summary("running", 4)).await.unwrap();
    assert_eq!(dup, vec![AppendOutcome::Duplicate { seq: 1 }]);
}

/// Issue 14.8: a one-shot process's store (`Workload::OneShot`) appends on its writer
/// connection and never starts the journal thread (a third connection, which would parse the
/// schema again, and a thread): the same guards hold — a stale head falls back to the general
/// path, a duplicate key is reported, an unleased append lands only with no lease at its head
/// — and the chain stays whole.
#[tokio::test]
async fn a_one_shot_store_appends_on_its_writer_connection_with_the_same_guards() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("baton.db");
    let a = Store::open_for(&path, Workload::OneShot).await.unwrap();
    created(&a, "t1").await;
    let b = Store::open(&path).await.unwrap();
    behind_its_back(&a, &b).await;

    let head = a.load_latest("t1").await.unwrap().unwrap();
    let (k5, fifth) = (ev("k5", "{}"), summary("running", 5));
    b.acquire_lease("t1", &holder("driver-a", 100), T0, 30).await.unwrap();
    let unleased = a.append_unleased("t1", 4, &head.last_hash, &k5, &fifth).await.unwrap();
    assert_eq!(unleased, None, "refused while a lease exists");
    assert!(b.release_lease("t1", "driver-a").await.unwrap());
    let stale = a.append_unleased("t1", 3, &head.last_hash, &k5, &fifth).await.unwrap();
    assert_eq!(stale, None, "refused at a head that is not the execution's");
    let landed = a.append_unleased("t1", 4, &head.last_hash, &k5, &fifth).await.unwrap();
    assert!(matches!(landed, Some(AppendOutcome::Appended { seq: 5, .. })), "{landed:?}");

    let report = b.verify_chain("t1").await.unwrap();
    assert!(report.ok && report.events == 5, "{report:?}");
    assert_eq!(b.load("t1").await.unwrap().unwrap().summary, summary("running", 5));
    assert!(!a.lite().writer.journal_thread_started(), "a one-shot store starts no journal thread");
    // k1 (the head known since the execution was created), k2 and k5 were appended on the
    // writer-connection path, one commit each; k4 and the duplicate fell back.
    assert_eq!(a.lite().writer.group_stats(), (3, 3));
}

/// Issue 14.9: on a multi-threaded runtime a lone append commits on its caller's thread (no
/// hand-off to the journal thread and back); one that finds the write lock taken is queued for
/// the journal thread as before, and on a current-thread runtime (where the caller's thread
/// may not block) every append goes to the journal thread. The chain is whole either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_append_commits_on_its_callers_thread_and_one_behind_the_lock_on_the_journal_thread() {
    let (_dir, path, store) = fresh().await;
    created(&store, "t1").await;
    let writer = &store.lite().writer;
    store.append("t1", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
    store.append("t1", &[ev("k2", "{}")], &summary("running", 2)).await.unwrap();
    assert_eq!(writer.inline_commits(), 2, "both lone appends committed inline");
    assert_eq!(writer.group_stats(), (2, 2));

    // The write lock is held (a general write transaction): the append waits in the queue and
    // the journal thread commits it once the lock is free.
    let held = writer.conn().await.unwrap();
    let queued = tokio::spawn({
        let store = store.clone();
        async move { store.append("t1", &[ev("k3", "{}")], &summary("running", 3)).await }
    });
    while writer.queued() == 0 {
        tokio::task::yield_now().await;
    }
    drop(held);
    let third = queued.await.unwrap().unwrap();
    assert!(matches!(third[0], AppendOutcome::Appended { seq: 3, .. }), "{third:?}");
    assert_eq!(writer.inline_commits(), 2, "the queued append went to the journal thread");
    assert_eq!(writer.group_stats(), (3, 3));
    assert!(store.verify_chain("t1").await.unwrap().ok);

    // A current-thread runtime never commits inline.
    let other = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = Store::open(&path).await.unwrap();
            created(&store, "t2").await;
            store.append("t2", &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
            (store.lite().writer.inline_commits(), store.lite().writer.group_stats())
        })
    });
    assert_eq!(other.join().unwrap(), (0, (1, 1)));
}

/// Spawns one append per `(task_id, key, payload)` while the test holds the writer, and waits
/// (by yielding, no clock) until all of them are queued for the next group commit.
async fn queue_appends(
    store: &Store,
    appends: &[(&str, &str, &str)],
) -> Vec<tokio::task::JoinHandle<Result<Vec<AppendOutcome>, StoreError>>> {
    let mut handles = Vec::new();
    for (task_id, key, payload) in appends {
        let (mine, task_id, event) = (store.clone(), task_id.to_string(), ev(key, payload));
        handles.push(tokio::spawn(async move { mine.append(&task_id, &[event], &summary("running", 1)).await }));
        // One at a time, so the queue keeps this order.
        let want = handles.len();
        for _ in 0..10_000 {
            if store.lite().writer.queued() == want {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(store.lite().writer.queued(), want, "append {key} never queued");
    }
    handles
}

#[tokio::test]
async fn appends_queued_behind_a_commit_share_the_next_one_and_keep_their_chains() {
    let (_dir, _path, store) = fresh().await;
    let tasks = ["t1", "t2", "t3", "t4", "t5"];
    for t in tasks {
        started(&store, t).await;
    }
    let before = store.lite().writer.group_stats();
    let held = store.lite().writer.conn().await.unwrap();
    let keys: Vec<String> = tasks.iter().map(|t| format!("{t}-second")).collect();
    let appends: Vec<_> = tasks.iter().zip(&keys).map(|(t, k)| (*t, k.as_str(), r#"{"n":2}"#)).collect();
    let handles = queue_appends(&store, &appends).await;
    drop(held);
    for h in handles {
        let outcome = h.await.unwrap().unwrap();
        assert!(matches!(outcome.as_slice(), [AppendOutcome::Appended { seq: 2, .. }]), "{outcome:?}");
    }
    let after = store.lite().writer.group_stats();
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 5), "one commit carried all five appends");
    for t in tasks {
        let report = store.verify_chain(t).await.unwrap();
        assert!(report.ok && report.events == 2, "{t}: {report:?}");
        assert_eq!(store.summary(t).await.unwrap(), Some(summary("running", 1)));
    }
}

#[tokio::test]
async fn a_bad_append_in_a_group_fails_alone() {
    let (_dir, _path, store) = fresh().await;
    for t in ["good1", "bad", "good2"] {
        started(&store, t).await;
    }
    let held = store.lite().writer.conn().await.unwrap();
    let handles = queue_appends(
        &store,
        &[("good1", "g1", r#"{"ok":1}"#), ("bad", "b", "not json"), ("good2", "g2", r#"{"ok":2}"#)],
    )
    .await;
    drop(held);
    let results: Vec<_> = futures_util::future::join_all(handles).await.into_iter().map(|h| h.unwrap()).collect();
    assert!(matches!(results[0].as_deref(), Ok([AppendOutcome::Appended { seq: 2, .. }])), "{:?}", results[0]);
    assert!(matches!(results[1], Err(StoreError::Sqlx(_))), "the bad payload is refused: {:?}", results[1]);
    assert!(matches!(results[2].as_deref(), Ok([AppendOutcome::Appended { seq: 2, .. }])), "{:?}", results[2]);
    let bad = store.verify_chain("bad").await.unwrap();
    assert!(bad.ok && bad.events == 1, "the bad append wrote nothing: {bad:?}");
    assert_eq!(store.summary("bad").await.unwrap(), Some(summary("running", 0)), "nor its summary");
}

#[tokio::test]
async fn two_appends_to_one_execution_in_one_queue_land_in_order() {
    let (_dir, _path, store) = fresh().await;
    started(&store, "t1").await;
    let held = store.lite().writer.conn().await.unwrap();
    let handles = queue_appends(&store, &[("t1", "a", r#"{"n":"a"}"#), ("t1", "b", r#"{"n":"b"}"#)]).await;
    drop(held);
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let events = store.events("t1", 0).await.unwrap();
    let keys: Vec<_> = events.iter().map(|e| e.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["t1-first", "a", "b"]);
    assert!(store.verify_chain("t1").await.unwrap().ok);
}

#[tokio::test]
async fn an_append_whose_caller_gave_up_while_queued_is_not_written() {
    let (_dir, _path, store) = fresh().await;
    started(&store, "t1").await;
    let held = store.lite().writer.conn().await.unwrap();
    let handles = queue_appends(&store, &[("t1", "abandoned", "{}")]).await;
    for h in &handles {
        h.abort();
    }
    for h in handles {
        assert!(h.await.unwrap_err().is_cancelled());
    }
    drop(held);
    store.append("t1", &[ev("later", "{}")], &summary("running", 1)).await.unwrap();
    let keys: Vec<_> = store.events("t1", 0).await.unwrap().into_iter().map(|e| e.idempotency_key).collect();
    assert_eq!(keys, ["t1-first", "later"]);
}

#[tokio::test]
async fn a_journal_thread_that_died_fails_its_appends_with_a_clear_error_instead_of_a_hang() {
    let (_dir, _path, store) = fresh().await;
    started(&store, "t1").await;
    started(&store, "t2").await;
    let held = store.lite().writer.conn().await.unwrap();
    let handles = queue_appends(&store, &[("t1", "a", "{}"), ("t2", "b", "{}")]).await;
    store.lite().writer.panic_journal_thread();
    drop(held);
    for h in handles {
        let answered = tokio::time::timeout(std::time::Duration::from_secs(60), h).await;
        let err = answered.expect("a caller waited forever for a dead journal thread").unwrap().unwrap_err();
        assert!(matches!(err, StoreError::JournalWriterStopped), "{err}");
        assert!(err.to_string().contains("journal writer thread stopped"), "{err}");
    }
    let err = store.append("t1", &[ev("c", "{}")], &summary("running", 2)).await.unwrap_err();
    assert!(matches!(err, StoreError::JournalWriterStopped), "a later append fails at once: {err}");
    for t in ["t1", "t2"] {
        let keys: Vec<_> = store.events(t, 0).await.unwrap().into_iter().map(|e| e.idempotency_key).collect();
        assert_eq!(keys, [format!("{t}-first")], "nothing unconfirmed was written");
        assert!(store.verify_chain(t).await.unwrap().ok);
    }
    // The general write path (its own connection) still works.
    created(&store, "t3").await;
}
