//! Every process an attempt started, wherever it went, and ending them all.
//!
//! A process-group kill misses what an agent starts in a session of its own (`setsid`: dev
//! servers, watchers, MCP servers), which then outlives the step with its working directory in
//! a removed worktree. The detached shim therefore tracks an attempt's processes two ways:
//!
//! - a **cgroup v2 per attempt** where the machine allows it ([`Cgroup::create`]: the cgroup2
//!   hierarchy is mounted and the shim may create a child of its own cgroup). No descendant can
//!   leave it, whatever it does with sessions, groups or parents;
//! - always, the shim is a **child subreaper** (`PR_SET_CHILD_SUBREAPER`): a descendant whose
//!   parent exits is re-parented to the shim instead of PID 1, so a walk of the process tree
//!   (`/proc/<pid>/stat`'s ppid) from the shim finds every one of them.
//!
//! When the attempt ends (exit, timeout, a stop after its final result, a kill of its group by a
//! driver or a cancel), [`Tracker::end_all`] sends SIGTERM to every process found, waits a short
//! grace, then SIGKILLs what is left, and reaps the ones re-parented to the shim.
//!
//! In-process callers ([`supervise`](super::shim::supervise) in tests) are neither: they must not
//! make the calling process a subreaper nor move it between cgroups. They walk from the agent and
//! remember every descendant seen while it ran (with its start time, so a reused pid is never
//! signalled), which catches what lived at least one poll.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::clock::Stopwatch;

/// Interval between walks of `/proc` while [`Tracker::end_all`] waits for processes to go.
const END_POLL: Duration = Duration::from_millis(50);
/// How long [`Tracker::end_all`] waits for processes to disappear after the SIGKILL.
const AFTER_KILL: Duration = Duration::from_secs(2);

/// One line of `/proc/<pid>/stat`, the fields that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// State letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// Start time in clock ticks after boot: with `pid`, names one process for good.
    pub start: u64,
}

impl ProcStat {
    /// True for a zombie (exited, not yet reaped) or a dead process.
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`; `None` when it is not one.
///
/// The command name (field 2) is in parentheses and may itself contain `)` or spaces, so the
/// fields are read after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        // field 22 of the line; fields[0] is field 3
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The current `/proc/<pid>/stat` of `pid`, if it exists.
pub fn stat(pid: i32) -> Option<ProcStat> {
    fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|t| parse_stat(&t))
}

/// Every process visible in `/proc` (processes that vanish while it reads are skipped).
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(stat)
        .collect()
}

/// The processes of `procs` that descend from one of `roots` (the roots themselves excluded),
/// following parent links.
pub fn descendants(procs: &[ProcStat], roots: &BTreeSet<i32>) -> Vec<ProcStat> {
    let mut children: BTreeMap<i32, Vec<&ProcStat>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut queue: Vec<i32> = roots.iter().copied().collect();
    let mut visited: BTreeSet<i32> = roots.clone();
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if visited.insert(child.pid) {
                found.push(**child);
                queue.push(child.pid);
            }
        }
    }
    found
}

/// A cgroup v2 made for one attempt, a child of the shim's own cgroup.
#[derive(Debug)]
pub struct Cgroup {
    /// The attempt's cgroup directory.
    dir: PathBuf,
    /// The cgroup the shim came from (it goes back there once the agent is started).
    home: PathBuf,
}

impl Cgroup {
    /// Creates `<the caller's cgroup>/<name>`; `None` when the machine does not allow it (no
    /// cgroup2 hierarchy mounted, no right to create a child, …). Never fails otherwise.
    pub fn create(name: &str) -> Option<Cgroup> {
        let home = own_cgroup_dir()?;
        let dir = home.join(name);
        if let Err(e) = fs::create_dir(&dir) {
            // Left by a shim that was killed and had the same pid: taken over once empty.
            if e.kind() != std::io::ErrorKind::AlreadyExists || !members(&dir).is_empty() {
                return None;
            }
        }
        if !dir.join("cgroup.procs").is_file() {
            let _ = fs::remove_dir(&dir);
            return None;
        }
        Some(Cgroup { dir, home })
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves the calling process into the cgroup, so that what it spawns next is born there.
    ///
    /// Errors: the move was refused (then the cgroup should be dropped).
    pub fn enter(&self) -> std::io::Result<()> {
        fs::write(self.dir.join("cgroup.procs"), std::process::id().to_string())
    }

    /// Moves the calling process back to the cgroup it came from (its children stay).
    ///
    /// Errors: the move was refused; the caller then stays a member, which [`members`] callers
    /// account for by skipping their own pid.
    pub fn leave(&self) -> std::io::Result<()> {
        fs::write(self.home.join("cgroup.procs"), std::process::id().to_string())
    }

    /// Removes the (empty) cgroup, retrying for up to a second while the kernel releases
    /// exited members.
    pub fn remove(&self) {
        remove_when_empty(&self.dir, Duration::from_secs(1));
    }
}

/// Removes the cgroup at `dir` once it is empty, trying for up to `wait`; a cgroup that stays
/// busy (or is already gone) is left as it is.
pub fn remove_when_empty(dir: &Path, wait: Duration) {
    let clock = Stopwatch::start();
    loop {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(Errno::EBUSY as i32) && clock.elapsed() < wait => {
                std::thread::sleep(END_POLL);
            }
            _ => return,
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The pids in the cgroup at `dir` (empty when it is gone or unreadable).
pub fn members(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The calling process's cgroup v2 directory: the cgroup2 mount (`/proc/self/mountinfo`) joined
/// with its path in `/proc/self/cgroup` (`0::<path>`).
fn own_cgroup_dir() -> Option<PathBuf> {
    let cgroup = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim().to_string();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, mount) = cgroup2_mount(&mountinfo)?;
    let relative = if root == "/" { path.as_str() } else { path.strip_prefix(root.as_str())? };
    Some(PathBuf::from(mount).join(relative.trim_start_matches('/')))
}

/// (root inside the hierarchy, mount point) of the first cgroup2 mount in a mountinfo text.
fn cgroup2_mount(mountinfo: &str) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs_part) = line.split_once(" - ")?;
        if fs_part.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        Some(((*fields.get(3)?).to_string(), (*fields.get(4)?).to_string()))
    })
}

/// The processes of one attempt (see the module doc).
#[derive(Debug)]
pub struct Tracker {
    /// The caller's pid, never signalled.
    own: i32,
    /// The agent (the leader of its process group).
    agent: i32,
    /// The caller is a child subreaper: every orphaned descendant becomes its child.
    subreaper: bool,
    /// The attempt's cgroup, if it has one.
    cgroup: Option<PathBuf>,
    /// Descendants seen so far: pid → start time.
    seen: BTreeMap<i32, u64>,
    /// When the last walk of `/proc` ran.
    last_walk: Option<Stopwatch>,
}

impl Tracker {
    /// Tracks the processes of the agent `agent` (which leads its own group). `subreaper`: the
    /// calling process has made itself a child subreaper; `cgroup`: the attempt's cgroup.
    pub fn new(agent: u32, subreaper: bool, cgroup: Option<PathBuf>) -> Tracker {
        let agent = i32::try_from(agent).unwrap_or(i32::MAX);
        let mut seen = BTreeMap::new();
        if let Some(p) = stat(agent) {
            seen.insert(agent, p.start);
        }
        Tracker {
            own: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            agent,
            subreaper,
            cgroup,
            seen,
            last_walk: None,
        }
    }

    /// Called while the agent runs: in-process, remembers the agent's descendants (each call);
    /// as a subreaper, reaps the adopted ones that exited (at most once a second: a walk of
    /// `/proc` is not free).
    pub fn tick(&mut self) {
        let every = if self.subreaper { Duration::from_secs(1) } else { Duration::ZERO };
        if self.last_walk.as_ref().is_some_and(|w| w.elapsed() < every) {
            return;
        }
        self.last_walk = Some(Stopwatch::start());
        let procs = all_processes();
        if self.subreaper {
            self.reap(&procs);
        } else {
            self.live(&procs);
        }
    }

    /// The attempt's processes alive now (zombies and the caller excluded); remembers them.
    ///
    /// They are: the descendants of the caller (as a subreaper) or of the agent, every
    /// remembered process that still is the same process and its descendants, and the members
    /// of the cgroup.
    fn live(&mut self, procs: &[ProcStat]) -> Vec<ProcStat> {
        let by_pid: BTreeMap<i32, &ProcStat> = procs.iter().map(|p| (p.pid, p)).collect();
        let mut roots: BTreeSet<i32> = self
            .seen
            .iter()
            .filter(|(pid, start)| by_pid.get(pid).is_some_and(|p| p.start == **start))
            .map(|(pid, _)| *pid)
            .collect();
        let mut found: BTreeMap<i32, ProcStat> =
            roots.iter().filter_map(|pid| by_pid.get(pid).map(|p| (*pid, **p))).collect();
        if self.subreaper {
            roots.insert(self.own);
        }
        found.extend(descendants(procs, &roots).into_iter().map(|p| (p.pid, p)));
        if let Some(dir) = &self.cgroup {
            found.extend(members(dir).into_iter().filter_map(|pid| by_pid.get(&pid).map(|p| (pid, **p))));
        }
        found.remove(&self.own);
        let live: Vec<ProcStat> = found.into_values().filter(|p| !p.exited()).collect();
        for p in &live {
            self.seen.insert(p.pid, p.start);
        }
        live
    }

    /// As a subreaper, reaps the caller's exited children other than the agent (whose status
    /// its waiter collects). In-process it reaps nothing: the caller's other children belong
    /// to someone else.
    fn reap(&self, procs: &[ProcStat]) {
        if !self.subreaper {
            return;
        }
        for p in procs.iter().filter(|p| p.ppid == self.own && p.pid != self.agent && p.exited()) {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }

    /// Ends every process of the attempt that is still alive: SIGTERM (to the agent's group and
    /// to each process found), up to `grace` for them to go, then SIGKILL; processes that appear
    /// meanwhile are signalled too. Call once the agent itself has exited and been reaped.
    /// Returns how many processes it signalled.
    pub fn end_all(&mut self, grace: Duration) -> usize {
        let group = Pid::from_raw(self.agent);
        let _ = killpg(group, Signal::SIGTERM);
        let mut signalled: BTreeSet<(i32, u64)> = BTreeSet::new();
        let mut signal = Signal::SIGTERM;
        let mut waited = Stopwatch::start();
        let mut limit = grace;
        loop {
            let procs = all_processes();
            self.reap(&procs);
            let live = self.live(&procs);
            if live.is_empty() {
                break;
            }
            for p in &live {
                let first = signalled.insert((p.pid, p.start));
                if first || signal == Signal::SIGKILL {
                    let _ = kill(Pid::from_raw(p.pid), signal);
                }
            }
            if waited.elapsed() >= limit {
                if signal == Signal::SIGKILL {
                    break;
                }
                signal = Signal::SIGKILL;
                let _ = killpg(group, Signal::SIGKILL);
                waited = Stopwatch::start();
                limit = AFTER_KILL;
                continue;
            }
            std::thread::sleep(END_POLL);
        }
        let _ = killpg(group, Signal::SIGKILL);
        let procs = all_processes();
        self.reap(&procs);
        signalled.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn stat_lines_parse_even_with_odd_command_names() {
        let line = "4242 (my (odd) cmd) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 \
                    18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let p = parse_stat(line).unwrap();
        assert_eq!((p.pid, p.ppid, p.pgrp, p.state, p.start), (4242, 17, 4242, 'S', 987654));
        assert!(!p.exited());
        assert!(parse_stat("garbage").is_none());
        let me = stat(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert_eq!(me.pid, i32::try_from(std::process::id()).unwrap());
    }

    #[test]
    fn descendants_follow_parent_links_only() {
        let p = |pid, ppid| ProcStat { pid, ppid, pgrp: pid, state: 'S', start: 1 };
        let procs = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 1), p(21, 20)];
        let found: Vec<i32> = descendants(&procs, &BTreeSet::from([10])).iter().map(|p| p.pid).collect();
        assert_eq!(found.len(), 2);
        assert!(found.contains(&11) && found.contains(&12));
        assert!(descendants(&procs, &BTreeSet::from([12])).is_empty());
    }

    #[test]
    fn cgroup2_mount_is_found_in_mountinfo() {
        let info = "25 30 0:22 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n\
                    33 30 0:29 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(info), Some(("/".into(), "/sys/fs/cgroup/unified".into())));
        assert_eq!(cgroup2_mount("25 30 0:22 / /x rw - ext4 /dev/sda rw\n"), None);
    }

    fn wait_gone(pid: i32) -> bool {
        let watch = Stopwatch::start();
        while watch.elapsed() < Duration::from_secs(5) {
            if stat(pid).is_none_or(|p| p.exited()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_descendant_in_its_own_session_is_remembered_and_ended() {
        let tmp = tempfile::tempdir().unwrap();
        let pidfile = tmp.path().join("pid");
        let script = format!("setsid sh -c 'echo $$ > {}; exec sleep 30' & wait", pidfile.display());
        let mut agent = Command::new("sh").args(["-c", &script]).process_group(0).spawn().unwrap();
        let mut tracker = Tracker::new(agent.id(), false, None);
        let watch = Stopwatch::start();
        while !pidfile.exists() || fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
            assert!(watch.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(10));
        }
        let bg: i32 = fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert_ne!(stat(bg).unwrap().pgrp, i32::try_from(agent.id()).unwrap(), "it left the agent's group");
        tracker.tick();
        // The agent exits; its descendant, re-parented, is no longer below it.
        nix::sys::signal::kill(Pid::from_raw(i32::try_from(agent.id()).unwrap()), Signal::SIGKILL).unwrap();
        agent.wait().unwrap();
        assert!(tracker.end_all(Duration::from_secs(2)) >= 1);
        assert!(wait_gone(bg), "the setsid descendant {bg} survived");
    }

    #[test]
    fn cgroup_members_are_ended_when_the_machine_allows_cgroups() {
        let Some(cgroup) = Cgroup::create(&format!("baton-test-{}", std::process::id())) else {
            eprintln!("no cgroup v2 here: skipped");
            return;
        };
        // Another process is moved in (never the test process itself).
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        fs::write(cgroup.dir().join("cgroup.procs"), child.id().to_string()).unwrap();
        assert_eq!(members(cgroup.dir()), vec![i32::try_from(child.id()).unwrap()]);
        let mut tracker = Tracker::new(4_000_000, false, Some(cgroup.dir().to_path_buf()));
        assert_eq!(tracker.end_all(Duration::from_secs(2)), 1);
        child.wait().unwrap();
        assert!(members(cgroup.dir()).is_empty());
        cgroup.remove();
        assert!(!cgroup.dir().exists());
    }
}
