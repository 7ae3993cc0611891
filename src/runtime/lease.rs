//! One driver per execution: the lease in the database, held by a process.
//!
//! A holder is `<host>:<pid>` (`<host>:<pid>:run` for a driver). A lease held by a process of
//! this host that no longer exists (a driver killed with `kill -9`) is taken over at once rather
//! than waiting for it to expire; any other live holder makes [`acquire`] fail with who holds it,
//! since when. Every lease carries the fencing epoch the store gave it ([`Lease::fence`]): a
//! driver journals through it, so once another replica took the lease over, the driver's next
//! append is refused ([`crate::store::StoreError::Fenced`]) and it stops.
//!
//! The lease lifetime is [`ttl_secs`]: `BATON_LEASE_SECS`, else `[cluster] lease_secs` of
//! `baton.toml` (set by `baton serve` through [`set_ttl_secs`]), else [`LEASE_TTL_SECS`].

use anyhow::Context as _;

use crate::clock;
use crate::runtime::BadInput;
use crate::store::{Fence, LeaseInfo, Store, StoreError};

/// Default lease lifetime, seconds; drivers renew it every third of it.
pub const LEASE_TTL_SECS: i64 = 30;

/// Environment variable that overrides the lease lifetime (whole seconds, at least 1).
pub const LEASE_SECS_ENV: &str = "BATON_LEASE_SECS";

/// The lifetime `baton.toml` asked for (0: not set).
static CONFIGURED_TTL: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Sets this process's lease lifetime from `[cluster] lease_secs` (`BATON_LEASE_SECS` still
/// wins); values below 1 are ignored.
pub fn set_ttl_secs(secs: i64) {
    if secs >= 1 {
        CONFIGURED_TTL.store(secs, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The lease lifetime in seconds: `BATON_LEASE_SECS` when it is a whole number of at least 1,
/// else what [`set_ttl_secs`] set, else [`LEASE_TTL_SECS`]. A replica whose lease expired (it
/// was killed or paused) is taken over by another within about two of these.
pub fn ttl_secs() -> i64 {
    if let Some(secs) = std::env::var(LEASE_SECS_ENV).ok().and_then(|v| v.trim().parse::<i64>().ok()) {
        if secs >= 1 {
            return secs;
        }
    }
    match CONFIGURED_TTL.load(std::sync::atomic::Ordering::Relaxed) {
        0 => LEASE_TTL_SECS,
        secs => secs,
    }
}

/// How often a holder renews its lease: a third of [`ttl_secs`] (at least 200 ms).
pub fn renew_every() -> std::time::Duration {
    let ttl_ms = u64::try_from(ttl_secs()).unwrap_or(1) * 1000;
    std::time::Duration::from_millis((ttl_ms / 3).max(200))
}

/// This host's name (from `/etc/hostname` or `HOSTNAME`, else `localhost`).
pub fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// This process as a lease holder: `<host>:<pid>`.
pub fn this_holder() -> LeaseInfo {
    let pid = std::process::id();
    let host = host_name();
    LeaseInfo {
        holder: format!("{host}:{pid}"),
        pid,
        host,
        acquired_at: String::new(),
        expires_at: String::new(),
        epoch: 0,
        home: String::new(),
    }
}

/// How long a one-shot command (`execute record`, `approve`, …) waits for another one-shot
/// command that holds the lease for a moment; a driver's lease is refused at once.
const BRIEF_HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a one-shot command waits for a driver's lease before it is refused: a driver that
/// just journaled the wait for a human lets its lease go a moment later (a decision racing that
/// moment, typically from another replica, gets through instead of a 409).
const DRIVER_HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Like [`acquire`] for one-shot commands: they hold the lease for milliseconds, so when
/// another one-shot command holds it this waits (up to 10 s) instead of refusing. A lease held
/// by a driver (`execute run`, which marks itself in `holder`) is refused after 2 s.
pub async fn acquire_briefly(store: &Store, task_id: &str) -> anyhow::Result<Lease> {
    acquire_waiting(store, task_id, this_holder(), DRIVER_HOLD_WAIT).await
}

/// Takes the lease for `me`, waiting (up to [`BRIEF_HOLD_WAIT`]) while a one-shot command holds
/// it, and up to `driver_wait` while a driver does.
async fn acquire_waiting(
    store: &Store,
    task_id: &str,
    me: LeaseInfo,
    driver_wait: std::time::Duration,
) -> anyhow::Result<Lease> {
    let watch = crate::clock::Stopwatch::start();
    let mut delay = std::time::Duration::from_millis(5);
    loop {
        match acquire_with(store, task_id, me.clone()).await {
            Ok(lease) => return Ok(lease),
            Err(e) => {
                let driver = store.lease(task_id).await.ok().flatten().is_some_and(|l| l.holder.ends_with(DRIVER_MARK));
                let waited = watch.elapsed();
                if (driver && waited >= driver_wait) || waited > BRIEF_HOLD_WAIT {
                    return Err(e);
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_millis(200));
    }
}

/// The lease of the driver (`execute run`, a server's) that holds `task_id` now: its holder
/// id says it is a driver's (the `:run` suffix) and it has not expired by the clock leases are
/// taken and renewed with. `None` when nobody, or a one-shot command, holds it, when the
/// driver's lease lapsed, or when the store cannot say.
pub async fn driver_lease(store: &Store, task_id: &str) -> Option<LeaseInfo> {
    let lease = store.lease(task_id).await.ok().flatten()?;
    let live = chrono::DateTime::parse_from_rfc3339(&lease.expires_at).is_ok_and(|until| until > clock::now());
    (live && lease.holder.ends_with(DRIVER_MARK)).then_some(lease)
}

/// Suffix of a driver's holder id (`<host>:<pid>:run`).
const DRIVER_MARK: &str = ":run";

/// Takes the lease of `task_id` for this process as its driver (`execute run`, the server's
/// pool). A one-shot command holding it for a moment (a decision being recorded) is waited for,
/// up to 10 s, as [`acquire_briefly`] does; another driver is refused at once.
/// `home` is the driver's data directory, recorded with the lease so that a holder that fences
/// it out knows whether it re-adopts its agents (see [`adopts_agents_of`]).
pub async fn acquire_as_driver(store: &Store, task_id: &str, home: &std::path::Path) -> anyhow::Result<Lease> {
    acquire_waiting(store, task_id, driver_holder(home), std::time::Duration::ZERO).await
}

/// This process as a driver: `<host>:<pid>:run`, with its data directory.
pub fn driver_holder(home: &std::path::Path) -> LeaseInfo {
    let mut me = this_holder();
    me.holder.push_str(DRIVER_MARK);
    me.home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf()).display().to_string();
    me
}

/// Whether `current` (the lease now) re-adopts the agents that `me` (a holder it fenced out)
/// launched: only a holder on the same host with the same data directory finds their run
/// directories and waits on their locks. Otherwise the fenced-out holder must stop its agents
/// itself, or they would keep working for nobody (and the new holder runs the steps again).
pub fn adopts_agents_of(current: Option<&LeaseInfo>, me: &LeaseInfo) -> bool {
    current.is_some_and(|c| c.host == me.host && !c.home.is_empty() && c.home == me.home)
}

/// Whether a process exists and is not a zombie (an exited driver its parent has not reaped
/// yet holds nothing).
/// Whether `holder` is a `baton serve` process: the server lock of its data dir names its
/// pid. A server's drivers run inside it, so it is never signalled to stop one of them.
fn is_server(holder: &LeaseInfo) -> bool {
    !holder.home.is_empty()
        && std::fs::read_to_string(std::path::Path::new(&holder.home).join(crate::runtime::SERVER_LOCK_FILE))
            .is_ok_and(|pid| pid.trim() == holder.pid.to_string())
}

fn alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else { return false };
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state field follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// A held lease; release it with [`Lease::release`].
#[derive(Debug)]
pub struct Lease {
    store: Store,
    task_id: String,
    holder: LeaseInfo,
}

impl Lease {
    /// The fence a driver's appends carry ([`crate::store::Store::append_fenced`]).
    pub fn fence(&self) -> Fence {
        self.holder.fence()
    }

    /// The holder this lease was taken as (with its epoch).
    pub fn holder(&self) -> &LeaseInfo {
        &self.holder
    }

    /// Extends the lease by [`ttl_secs`].
    ///
    /// Errors: the lease was taken over by another holder, or it expired and was released (a
    /// [`StoreError::LeaseHeld`] or [`StoreError::LeaseNotHeld`] inside): the holder has lost it
    /// and must stop.
    pub async fn renew(&self) -> anyhow::Result<()> {
        self.store
            .renew_lease(&self.task_id, &self.holder.holder, &clock::now_rfc3339(), ttl_secs())
            .await
            .context("renewing the lease")
    }

    /// Gives the lease up.
    pub async fn release(self) -> anyhow::Result<()> {
        self.store.release_lease(&self.task_id, &self.holder.holder).await.context("releasing the lease")?;
        Ok(())
    }

    /// Gives the lease up because the execution waits for a human: until the next event is
    /// journaled (the decision), no replica's claim loop takes it
    /// ([`Store::release_lease_waiting`]).
    pub async fn release_waiting(self) -> anyhow::Result<()> {
        self.store.release_lease_waiting(&self.task_id, &self.holder.holder).await.context("releasing the lease")?;
        Ok(())
    }
}

/// Takes the lease of `task_id` for this process.
///
/// Errors ([`BadInput`]): another live process holds it ("… is driven by host:pid (pid N on
/// host) since T").
pub async fn acquire(store: &Store, task_id: &str) -> anyhow::Result<Lease> {
    acquire_with(store, task_id, this_holder()).await
}

async fn acquire_with(store: &Store, task_id: &str, me: LeaseInfo) -> anyhow::Result<Lease> {
    for _ in 0..2 {
        match store.acquire_lease(task_id, &me, &clock::now_rfc3339(), ttl_secs()).await {
            Ok(epoch) => {
                let holder = LeaseInfo { epoch, ..me };
                return Ok(Lease { store: store.clone(), task_id: task_id.to_string(), holder });
            }
            Err(StoreError::LeaseHeld { holder, .. }) => {
                if holder.host == me.host && !alive(holder.pid) {
                    store.release_lease(task_id, &holder.holder).await.context("taking over a dead driver's lease")?;
                    continue;
                }
                return Err(BadInput(format!(
                    "execution {task_id} is driven by another process: {} (pid {} on {}) since {}, lease until {}",
                    holder.holder, holder.pid, holder.host, holder.acquired_at, holder.expires_at
                ))
                .into());
            }
            Err(e) => return Err(e).context("acquiring the lease"),
        }
    }
    Err(BadInput(format!("execution {task_id}: the lease could not be taken over")).into())
}

/// Like [`acquire_briefly`], but a live driver on this host is stopped first (SIGTERM, waiting up to
/// 10 s for it to exit): it stops at once, exactly as after a crash, so nothing it did is lost.
/// Used by `execute cancel`, which must work while `execute run` drives the execution.
///
/// Errors ([`BadInput`]): the holder runs on another host, or does not exit in time, or is a
/// `baton serve` (whose drivers run inside it: the cancel must go through that server).
pub async fn acquire_stopping_driver(store: &Store, task_id: &str) -> anyhow::Result<Lease> {
    let me = this_holder();
    if let Some(holder) = store.lease(task_id).await.context("reading the lease")? {
        let driver = holder.holder.ends_with(DRIVER_MARK);
        if driver && holder.pid != me.pid && holder.host == me.host && alive(holder.pid) {
            if is_server(&holder) {
                // Its drivers run inside it: the SIGTERM stopped the whole server, board and
                // every other execution with it (found by a tester).
                return Err(BadInput(format!(
                    "execution {task_id} is driven by `baton serve` (pid {}) on the data dir {}: cancel it \
                     through that server (the board, `POST /api/v1/executions/{task_id}/cancel`, or \
                     `baton --data-dir {} execute cancel` with the server's environment, which is relayed to \
                     it); stopping its driver would stop the whole server",
                    holder.pid, holder.home, holder.home
                ))
                .into());
            }
            if let Ok(pid) = i32::try_from(holder.pid) {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                tracing::warn!(task.id = %task_id, driver.pid = holder.pid, "stopping the driver of {task_id} (pid {})", holder.pid);
                for _ in 0..100 {
                    if !alive(holder.pid) {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
    acquire_briefly(store, task_id).await
}
