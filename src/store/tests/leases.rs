//! Leases and what replicas share on both backends: a lease taken, refused, expired and
//! released; the fencing epoch that every takeover moves and every fenced append checks; a
//! one-shot command's unleased append (issue 14.8); the base and branch recorded when an
//! execution is created, which every replica taking it over reads. Group commit is in
//! `group_commit`, the journal's own contract in the parent module.

use super::*;

on_both_backends!(
    lease_acquired_refused_with_holder_reacquired_after_expiry_and_released,
    every_takeover_moves_the_epoch_and_a_stale_epochs_append_writes_nothing,
    an_unleased_append_lands_only_at_its_head_and_while_no_lease_exists,
    the_first_recorded_base_stays,
);

async fn lease_acquired_refused_with_holder_reacquired_after_expiry_and_released(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let a = holder("driver-a", 100);
    let b = holder("driver-b", 200);

    store.acquire_lease("t1", &a, "2026-01-15T09:00:00Z", 30).await.unwrap();
    let lease = store.lease("t1").await.unwrap().unwrap();
    assert_eq!(lease.holder, "driver-a");
    assert_eq!(lease.pid, 100);
    assert_eq!(lease.acquired_at, "2026-01-15T09:00:00.000000Z");
    assert_eq!(lease.expires_at, "2026-01-15T09:00:30.000000Z");

    // Another holder is refused while it is valid, and told who holds it. The offset form
    // of the same instant compares correctly.
    let err = store.acquire_lease("t1", &b, "2026-01-15T10:00:29+01:00", 30).await.unwrap_err();
    match &err {
        StoreError::LeaseHeld { task_id, holder } => {
            assert_eq!(task_id, "t1");
            assert_eq!(holder.holder, "driver-a");
            assert_eq!(holder.pid, 100);
            assert_eq!(holder.host, "box-1");
        }
        other => panic!("expected LeaseHeld, got {other}"),
    }
    assert_eq!(
        err.to_string(),
        "execution t1 is leased to driver-a (pid 100 on box-1) since \
         2026-01-15T09:00:00.000000Z until 2026-01-15T09:00:30.000000Z"
    );
    assert!(matches!(
        store.renew_lease("t1", "driver-b", "2026-01-15T09:00:10Z", 30).await,
        Err(StoreError::LeaseHeld { .. })
    ));

    // The same holder re-acquires (extends) and keeps its acquired_at; renew extends too.
    store.acquire_lease("t1", &a, "2026-01-15T09:00:10Z", 30).await.unwrap();
    store.renew_lease("t1", "driver-a", "2026-01-15T09:00:20Z", 30).await.unwrap();
    let lease = store.lease("t1").await.unwrap().unwrap();
    assert_eq!(lease.acquired_at, "2026-01-15T09:00:00.000000Z");
    assert_eq!(lease.expires_at, "2026-01-15T09:00:50.000000Z");

    // Exactly at expiry another holder takes over.
    store.acquire_lease("t1", &b, "2026-01-15T09:00:50Z", 30).await.unwrap();
    let lease = store.lease("t1").await.unwrap().unwrap();
    assert_eq!(lease.holder, "driver-b");
    assert_eq!(lease.pid, 200);
    assert_eq!(lease.acquired_at, "2026-01-15T09:00:50.000000Z");
    assert!(matches!(
        store.renew_lease("t1", "driver-a", "2026-01-15T09:00:51Z", 30).await,
        Err(StoreError::LeaseHeld { .. })
    ));

    // Release: only by the holder.
    assert!(!store.release_lease("t1", "driver-a").await.unwrap());
    assert!(store.release_lease("t1", "driver-b").await.unwrap());
    assert_eq!(store.lease("t1").await.unwrap(), None);
    assert!(matches!(
        store.renew_lease("t1", "driver-b", "2026-01-15T09:00:52Z", 30).await,
        Err(StoreError::LeaseNotHeld { .. })
    ));
    store.acquire_lease("t1", &a, "2026-01-15T09:00:52Z", 30).await.unwrap();

    assert!(matches!(store.acquire_lease("ghost", &a, T0, 30).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(store.acquire_lease("t1", &a, T0, 0).await, Err(StoreError::InvalidArgument(_))));
    assert!(matches!(store.acquire_lease("t1", &a, "soon", 30).await, Err(StoreError::InvalidTimestamp { .. })));
}

async fn every_takeover_moves_the_epoch_and_a_stale_epochs_append_writes_nothing(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let (a, b) = (holder("driver-a", 100), holder("driver-b", 200));
    let fence = |who: &LeaseInfo, epoch| Fence { holder: who.holder.clone(), epoch };

    assert_eq!(store.acquire_lease("t1", &a, "2026-01-15T09:00:00Z", 30).await.unwrap(), 1);
    store.append_fenced("t1", &fence(&a, 1), &[ev("k1", "{}")], &summary("running", 1)).await.unwrap();
    // Extending one's own live lease keeps the epoch, and so does a renewal.
    assert_eq!(store.acquire_lease("t1", &a, "2026-01-15T09:00:10Z", 30).await.unwrap(), 1);
    store.renew_lease("t1", "driver-a", "2026-01-15T09:00:20Z", 30).await.unwrap();
    assert_eq!(store.lease("t1").await.unwrap().unwrap().epoch, 1);

    // a is paused past its lease; b takes over with epoch 2.
    assert_eq!(store.acquire_lease("t1", &b, "2026-01-15T09:00:50Z", 30).await.unwrap(), 2);
    let before = store.load("t1").await.unwrap().unwrap();
    for batch in [vec![ev("k2", "{}")], vec![ev("k2", "{}"), ev("k3", "{}")]] {
        let err = store.append_fenced("t1", &fence(&a, 1), &batch, &summary("failed", 2)).await.unwrap_err();
        match &err {
            StoreError::Fenced { task_id, holder, epoch, current_holder, current } => {
                assert_eq!((task_id.as_str(), holder.as_str(), *epoch), ("t1", "driver-a", 1));
                assert_eq!((current_holder.as_str(), *current), ("driver-b", 2));
            }
            other => panic!("expected Fenced, got {other}"),
        }
        assert!(err.to_string().contains("leased to driver-b (epoch 2) now"), "{err}");
    }
    let after = store.load("t1").await.unwrap().unwrap();
    assert_eq!((after.last_seq, &after.summary), (before.last_seq, &before.summary), "nothing written");
    assert_eq!(store.event_by_key("t1", "k2").await.unwrap(), None);
    // The right holder with the wrong epoch is refused too.
    assert!(matches!(
        store.append_fenced("t1", &fence(&b, 1), &[ev("k2", "{}")], &summary("running", 2)).await,
        Err(StoreError::Fenced { .. })
    ));
    store.append_fenced("t1", &fence(&b, 2), &[ev("k2", "{}")], &summary("running", 2)).await.unwrap();
    // The journal answers for the key (what the execution service recalls before applying).
    let k2 = store.event_by_key("t1", "k2").await.unwrap().expect("k2 journaled");
    assert_eq!((k2.seq, k2.idempotency_key.as_str()), (after.last_seq + 1, "k2"));

    // Released and taken again: the epoch keeps growing, so b's old fence stays refused.
    assert!(store.release_lease("t1", "driver-b").await.unwrap());
    assert!(matches!(
        store.append_fenced("t1", &fence(&b, 2), &[ev("k3", "{}")], &summary("running", 2)).await,
        Err(StoreError::Fenced { current: 0, .. })
    ));
    assert_eq!(store.acquire_lease("t1", &a, "2026-01-15T09:01:00Z", 30).await.unwrap(), 3);
    // The same holder leasing again after its lease expired is a takeover as well.
    assert_eq!(store.acquire_lease("t1", &a, "2026-01-15T09:02:00Z", 30).await.unwrap(), 4);
    assert!(matches!(
        store.append_fenced("t1", &fence(&a, 3), &[ev("k3", "{}")], &summary("running", 2)).await,
        Err(StoreError::Fenced { current: 4, .. })
    ));
    store.append_fenced("t1", &fence(&a, 4), &[ev("k3", "{}")], &summary("running", 2)).await.unwrap();
    let end = store.load("t1").await.unwrap().unwrap();
    assert_eq!(end.last_seq, 3);
    assert!(store.verify_chain("t1").await.unwrap().ok);
}

/// Issue 14.8: a one-shot command records without taking a lease when nobody holds one. The
/// append lands only while no lease exists and the head is the one its state was at; every
/// refusal writes nothing (the caller then records under a lease). PostgreSQL always refuses.
async fn an_unleased_append_lands_only_at_its_head_and_while_no_lease_exists(db: Fresh) {
    let store = db.store.clone();
    created(&store, "t1").await;
    let genesis = store.load_latest("t1").await.unwrap().unwrap();
    assert_eq!(genesis.last_seq, 0);
    let unleased = |seq: i64, hash: String, key: &'static str| {
        let store = store.clone();
        async move { store.append_unleased("t1", seq, &hash, &ev(key, "{}"), &summary("running", 1)).await.unwrap() }
    };
    let last_seq = || async { store.load_latest("t1").await.unwrap().unwrap().last_seq };

    if store.backend_name() == "postgres" {
        assert_eq!(unleased(0, genesis.last_hash.clone(), "k1").await, None);
        assert_eq!(last_seq().await, 0, "a refused unleased append writes nothing");
        return;
    }

    // A driver holds the lease: refused, nothing written.
    store.acquire_lease("t1", &holder("driver-a", 100), T0, 30).await.unwrap();
    assert_eq!(unleased(0, genesis.last_hash.clone(), "k1").await, None);
    assert_eq!(last_seq().await, 0);
    // (Expiry is not looked at: only taking a lease over, which fences its holder out, may
    // write past one.)
    assert!(store.release_lease("t1", "driver-a").await.unwrap());

    // No lease, the head the state was at: appended, chained on it.
    let Some(AppendOutcome::Appended { seq: 1, hash: first }) = unleased(0, genesis.last_hash.clone(), "k1").await
    else {
        panic!("the unleased append at the head did not land");
    };
    // The same head again (another process appended since this one loaded): refused.
    assert_eq!(unleased(0, genesis.last_hash.clone(), "k2").await, None);
    assert_eq!(last_seq().await, 1);
    // At the new head it lands, and the chain is whole.
    assert!(matches!(unleased(1, first, "k2").await, Some(AppendOutcome::Appended { seq: 2, .. })));
    assert!(store.verify_chain("t1").await.unwrap().ok);
    let loaded = store.load_latest("t1").await.unwrap().unwrap();
    assert_eq!((loaded.last_seq, loaded.summary), (2, summary("running", 1)));
}

async fn the_first_recorded_base_stays(db: Fresh) {
    let store = &db.store;
    created(store, "t1").await;
    assert_eq!(store.recorded_base("t1").await.unwrap(), None);
    let first = ExecutionBase { branch: "baton/t1".to_owned(), base_sha: "a".repeat(40) };
    assert_eq!(store.record_base("t1", "baton/t1", &"a".repeat(40), T1).await.unwrap(), first);
    // A later record (another replica guessing) changes nothing and is told the recorded one.
    assert_eq!(store.record_base("t1", "baton/t1", &"b".repeat(40), T2).await.unwrap(), first);
    assert_eq!(db.open_again().await.recorded_base("t1").await.unwrap(), Some(first));
    assert!(matches!(store.record_base("ghost", "baton/ghost", "c", T1).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(store.record_base("t1", "baton/t1", "c", "soon").await, Err(StoreError::InvalidTimestamp { .. })));
}
