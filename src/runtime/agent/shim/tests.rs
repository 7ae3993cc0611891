//! Tests of the attempt shim against real subprocesses, run directories and locks.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use super::*;
use crate::clock::Stopwatch;
use crate::runtime::agent::final_event::{FinalEvent, FinalWatch};
use std::os::unix::fs::PermissionsExt;

fn spec(dir: &Path, argv: &[&str], timeout_secs: u64) -> AttemptSpec {
    AttemptSpec {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        cwd: dir.to_path_buf(),
        env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()))],
        env_from: Vec::new(),
        prompt_file: None,
        timeout_secs,
        final_event: None,
        cgroup: false,
    }
}

fn prepared(argv: &[&str], timeout_secs: u64) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "t1", "s1", 1);
    let work = tmp.path().join("work");
    fs::create_dir_all(&work).unwrap();
    prepare_run_dir(&run, &spec(&work, argv, timeout_secs)).unwrap();
    (tmp, run)
}

/// True if the process is gone or a zombie.
fn is_dead(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn run_dir_layout() {
    assert_eq!(run_dir(Path::new("/data"), "T-1", "1.2", 3), PathBuf::from("/data/runs/T-1/1.2/3"));
}

#[test]
fn records_exit_code_and_output() {
    let (_tmp, run) = prepared(&["sh", "-c", "echo out; echo err >&2; exit 7"], 0);
    let record = supervise(&run).unwrap();
    assert_eq!(record.exit_code, Some(7));
    assert_eq!(record.signal, None);
    assert!(!record.timed_out);
    assert!(!record.exited_cleanly());
    assert_eq!(read_output(&run).unwrap(), ("out\n".into(), "err\n".into()));
    assert_eq!(read_exit(&run).unwrap(), Some(record.clone()));
    let started = read_started(&run).unwrap().unwrap();
    assert_eq!(started.agent_pid, started.agent_pgid);
    assert_eq!(started.shim_pid, std::process::id());
    assert_eq!(inspect(&run).unwrap(), AttemptState::Finished(record));
}

#[test]
fn zero_exit_is_clean() {
    let (_tmp, run) = prepared(&["true"], 0);
    let record = supervise(&run).unwrap();
    assert!(record.exited_cleanly());
    assert_eq!(record.describe(), "exit code 0");
}

#[test]
fn environment_is_exactly_the_spec() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut s = spec(tmp.path(), &["/usr/bin/env"], 0);
    s.env = vec![("ONLY".into(), "this".into())];
    prepare_run_dir(&run, &s).unwrap();
    supervise(&run).unwrap();
    assert_eq!(read_output(&run).unwrap().0, "ONLY=this\n");
}

#[test]
fn env_from_copies_the_shims_variable_by_name_and_a_missing_one_is_a_spawn_error() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut s = spec(tmp.path(), &["/usr/bin/env"], 0);
    s.env = vec![("ONLY".into(), "this".into())];
    s.env_from = vec![("COPY_OF_PATH".into(), "PATH".into())];
    prepare_run_dir(&run, &s).unwrap();
    let path = std::env::var("PATH").unwrap();
    let spec_text = fs::read_to_string(run.join(ATTEMPT_FILE)).unwrap();
    assert!(spec_text.contains("COPY_OF_PATH") && !spec_text.contains(&path), "names only: {spec_text}");
    supervise(&run).unwrap();
    let mut lines: Vec<String> = read_output(&run).unwrap().0.lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, [format!("COPY_OF_PATH={path}"), "ONLY=this".to_owned()]);

    let run = tmp.path().join("run2");
    s.env_from = vec![("TOKEN".into(), "BATON_TEST_SURELY_UNSET_VARIABLE".into())];
    prepare_run_dir(&run, &s).unwrap();
    let record = supervise(&run).unwrap();
    let err = record.spawn_error.unwrap();
    assert!(err.contains("`BATON_TEST_SURELY_UNSET_VARIABLE`") && err.contains("not set"), "{err}");
}

#[test]
fn missing_binary_is_a_spawn_error() {
    let (_tmp, run) = prepared(&["baton-no-such-agent-binary", "x"], 0);
    let record = supervise(&run).unwrap();
    assert_eq!(record.spawn_error.as_deref(), Some("agent binary `baton-no-such-agent-binary` not found"));
    assert_eq!((record.exit_code, record.signal), (None, None));
    assert!(read_started(&run).unwrap().is_none());
    assert!(matches!(inspect(&run).unwrap(), AttemptState::Finished(_)));
}

#[test]
fn missing_cwd_and_bad_spec_are_spawn_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    prepare_run_dir(&run, &spec(&tmp.path().join("nope"), &["true"], 0)).unwrap();
    let record = supervise(&run).unwrap();
    assert!(record.spawn_error.unwrap().contains("does not exist"));

    let run2 = tmp.path().join("run2");
    fs::create_dir_all(&run2).unwrap();
    fs::write(run2.join(ATTEMPT_FILE), "{not json").unwrap();
    let record = supervise(&run2).unwrap();
    assert!(record.spawn_error.unwrap().contains("parsing"));
}

#[test]
fn prompt_file_reaches_stdin() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut s = spec(tmp.path(), &["cat"], 0);
    s.prompt_file = Some(PathBuf::from("prompt.md"));
    prepare_run_dir(&run, &s).unwrap();
    fs::write(run.join("prompt.md"), "do the `thing`; $(rm -rf /)\n").unwrap();
    let record = supervise(&run).unwrap();
    assert!(record.exited_cleanly());
    assert_eq!(read_output(&run).unwrap().0, "do the `thing`; $(rm -rf /)\n");
}

#[test]
fn stdin_is_dev_null_without_prompt() {
    let (_tmp, run) = prepared(&["cat"], 5);
    let record = supervise(&run).unwrap();
    assert!(record.exited_cleanly());
    assert_eq!(read_output(&run).unwrap().0, "");
}

#[test]
fn timeout_kills_the_whole_group() {
    let (tmp, run) = prepared(&["sh", "-c", "sleep 30 & echo $! > bg.pid; echo hi; sleep 30; echo never"], 1);
    let watch = Stopwatch::start();
    let record = supervise(&run).unwrap();
    assert!(watch.elapsed() < Duration::from_secs(5));
    assert!(record.timed_out);
    assert_eq!(record.exit_code, None);
    assert_eq!(record.signal, Some(15));
    assert_eq!(record.describe(), "killed by signal 15 after the timeout");
    assert_eq!(read_output(&run).unwrap().0, "hi\n");
    let bg: i32 = fs::read_to_string(tmp.path().join("work/bg.pid")).unwrap().trim().parse().unwrap();
    let deadline = Stopwatch::start();
    while !is_dead(bg) && deadline.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(is_dead(bg), "background member {bg} of the group survived");
}

#[test]
fn timeout_escalates_to_sigkill_after_grace() {
    // SIG_IGN survives exec, so the whole group ignores SIGTERM.
    let (_tmp, run) = prepared(&["sh", "-c", "trap '' TERM; sleep 30"], 1);
    let watch = Stopwatch::start();
    let record = supervise(&run).unwrap();
    let took = watch.elapsed();
    assert!(record.timed_out);
    assert_eq!(record.signal, Some(9));
    assert!(took >= KILL_GRACE && took < KILL_GRACE + Duration::from_secs(4));
}

fn prepared_with(argv: &[&str], timeout_secs: u64, final_event: Option<FinalWatch>) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_dir(tmp.path(), "t1", "s1", 1);
    let work = tmp.path().join("work");
    fs::create_dir_all(&work).unwrap();
    let mut s = spec(&work, argv, timeout_secs);
    s.final_event = final_event;
    prepare_run_dir(&run, &s).unwrap();
    (tmp, run)
}

const CLAUDE_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.25,"usage":{"input_tokens":7,"output_tokens":5}}"#;

#[test]
fn an_agent_still_running_after_its_result_is_stopped_and_the_result_stands() {
    let script = format!("echo '{{\"type\":\"system\",\"subtype\":\"init\"}}'; echo '{CLAUDE_RESULT}'; sleep 30");
    let watch = FinalWatch { event: FinalEvent::ClaudeResult, grace_secs: 1 };
    let (_tmp, run) = prepared_with(&["sh", "-c", &script], 60, Some(watch));
    let clock = Stopwatch::start();
    let record = supervise(&run).unwrap();
    assert!(clock.elapsed() < Duration::from_secs(4), "stopped {:?} after start", clock.elapsed());
    assert!(record.stopped_after_result && !record.timed_out, "{record:?}");
    assert_eq!(record.signal, Some(15));
    assert_eq!(record.describe(), "killed by signal 15: it kept running after its final result");
    // What it printed is kept whole for the harvest (output::tests parses such a run).
    assert_eq!(read_output(&run).unwrap().0.lines().last(), Some(CLAUDE_RESULT));
}

#[test]
fn an_event_after_the_result_starts_the_grace_over_and_a_result_without_newline_counts() {
    // A result, then more work: not stopped at the first result's grace.
    let script = format!("echo '{CLAUDE_RESULT}'; sleep 0.5; echo '{{\"type\":\"assistant\"}}'; sleep 1; exit 0");
    let watch = FinalWatch { event: FinalEvent::ClaudeResult, grace_secs: 1 };
    let (_tmp, run) = prepared_with(&["sh", "-c", &script], 60, Some(watch));
    let record = supervise(&run).unwrap();
    assert!(!record.stopped_after_result && record.exited_cleanly(), "{record:?}");

    let script = format!("printf '%s' '{CLAUDE_RESULT}'; sleep 30");
    let (_tmp, run) = prepared_with(&["sh", "-c", &script], 60, Some(watch));
    let record = supervise(&run).unwrap();
    assert!(record.stopped_after_result, "{record:?}");

    // Without a watch, the same agent runs to its timeout.
    let (_tmp, run) = prepared_with(&["sh", "-c", &script], 1, None);
    let record = supervise(&run).unwrap();
    assert!(record.timed_out && !record.stopped_after_result, "{record:?}");
}

#[test]
fn a_descendant_in_its_own_session_ends_with_the_attempt() {
    let (tmp, run) = prepared(&["sh", "-c", "setsid sh -c 'echo $$ > bg.pid; exec sleep 30' & sleep 0.5; exit 0"], 0);
    let record = supervise(&run).unwrap();
    assert!(record.exited_cleanly(), "{record:?}");
    let bg: i32 = fs::read_to_string(tmp.path().join("work/bg.pid")).unwrap().trim().parse().unwrap();
    let deadline = Stopwatch::start();
    while !is_dead(bg) && deadline.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(is_dead(bg), "the setsid descendant {bg} outlived its attempt");
}

#[test]
fn run_dir_is_single_use() {
    let (_tmp, run) = prepared(&["true"], 0);
    supervise(&run).unwrap();
    assert!(matches!(supervise(&run), Err(SuperviseError::AlreadyUsed(_))));
    assert!(prepare_run_dir(&run, &spec(&run, &["true"], 0)).is_err());
}

#[test]
fn concurrent_inspects_do_not_look_like_a_shim() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join(LOCK_FILE);
    fs::write(&lock, "").unwrap();
    let _probe = Flock::lock(File::open(&lock).unwrap(), FlockArg::LockSharedNonblock).unwrap();
    assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::NotStarted);
    let shim = Flock::lock(File::open(&lock).unwrap(), FlockArg::LockExclusiveNonblock);
    assert!(shim.is_err(), "a shim cannot lock while a probe holds the lock");
}

#[test]
fn inspect_not_started_and_died() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::NotStarted);
    fs::write(tmp.path().join(LOCK_FILE), "").unwrap();
    assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::NotStarted);
    let started = StartedRecord {
        shim_pid: 1,
        agent_pid: 999_999,
        agent_pgid: 999_999,
        started_at: "2026-01-01T00:00:00+00:00".into(),
        cgroup: None,
    };
    fs::write(tmp.path().join(STARTED_FILE), serde_json::to_vec(&started).unwrap()).unwrap();
    assert_eq!(inspect(tmp.path()).unwrap(), AttemptState::Died);
}

#[test]
fn kill_attempt_refuses_dangerous_groups_and_tolerates_gone_ones() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(!kill_attempt(tmp.path()).unwrap());
    let mut started = StartedRecord {
        shim_pid: 1,
        agent_pid: 1,
        agent_pgid: 1,
        started_at: "2026-01-01T00:00:00+00:00".into(),
        cgroup: None,
    };
    let write = |s: &StartedRecord| {
        fs::write(tmp.path().join(STARTED_FILE), serde_json::to_vec(s).unwrap()).unwrap();
    };
    write(&started);
    assert!(kill_attempt(tmp.path()).is_err());
    started.agent_pgid = u32::try_from(nix::unistd::getpgrp().as_raw()).unwrap();
    write(&started);
    assert!(kill_attempt(tmp.path()).is_err());
    started.agent_pgid = 4_000_000; // above pid_max: no such group
    write(&started);
    assert!(!kill_attempt(tmp.path()).unwrap());
}

fn wait_for_running(run: &Path) {
    let watch = Stopwatch::start();
    while !(inspect(run).unwrap() == AttemptState::Running && read_started(run).unwrap().is_some()) {
        assert!(watch.elapsed() < Duration::from_secs(5), "never running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn running_attempt_is_held_by_the_lock_and_can_be_killed() {
    let (_tmp, run) = prepared(&["sleep", "30"], 0);
    let shim = {
        let run = run.clone();
        std::thread::spawn(move || supervise(&run))
    };
    wait_for_running(&run);
    assert!(kill_attempt(&run).unwrap());
    let record = shim.join().unwrap().unwrap();
    assert_eq!(record.signal, Some(9));
    assert!(!record.timed_out);
    assert_eq!(inspect(&run).unwrap(), AttemptState::Finished(record));
}

#[tokio::test]
async fn wait_until_finished_returns_the_record() {
    let (_tmp, run) = prepared(&["sh", "-c", "sleep 0.5; exit 3"], 0);
    let shim = {
        let run = run.clone();
        std::thread::spawn(move || supervise(&run))
    };
    wait_for_running(&run);
    let record = wait_until_finished(&run).await.unwrap();
    assert_eq!(record.exit_code, Some(3));
    shim.join().unwrap().unwrap();
}

#[tokio::test]
async fn wait_until_finished_reports_dead_and_unstarted_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(wait_until_finished(tmp.path()).await, Err(WaitError::NotStarted(_))));
    fs::write(tmp.path().join(STARTED_FILE), r#"{"shim_pid":1,"agent_pid":2,"agent_pgid":2,"started_at":"x"}"#)
        .unwrap();
    assert!(matches!(wait_until_finished(tmp.path()).await, Err(WaitError::Died(_))));
}

/// A stand-in for `baton` whose `__attempt` writes a canned exit record (or none).
fn fake_baton(dir: &Path, writes_record: bool) -> PathBuf {
    let exe = dir.join(if writes_record { "baton-ok" } else { "baton-crash" });
    let body = if writes_record {
        r#"[ "$1" = __attempt ] || exit 9
sleep 0.3
printf '%s' '{"exit_code":0,"signal":null,"timed_out":false,"spawn_error":null,"started_at":"a","finished_at":"b","duration_ms":300}' > "$2/exit.json"
"#
    } else {
        "echo '{\"shim_pid\":1,\"agent_pid\":2,\"agent_pgid\":2,\"started_at\":\"x\"}' > \"$2/started.json\"\nexit 1\n"
    };
    fs::write(&exe, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

#[tokio::test]
async fn launch_then_wait_reads_the_exit_record() {
    let (tmp, run) = prepared(&["true"], 0);
    let exe = fake_baton(tmp.path(), true);
    let launched = launch(&exe, &run).unwrap();
    assert!(launched.shim_pid() > 0);
    assert!(launched.run_dir().is_absolute());
    let record = launched.wait().await.unwrap();
    assert_eq!(record.duration_ms, 300);
}

#[tokio::test]
async fn launch_then_wait_reports_a_crashed_shim() {
    let (tmp, run) = prepared(&["true"], 0);
    let exe = fake_baton(tmp.path(), false);
    let launched = launch(&exe, &run).unwrap();
    assert!(matches!(launched.wait().await, Err(WaitError::Died(_))));
}

#[test]
fn launch_requires_a_prepared_run_dir() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(launch(Path::new("/bin/true"), tmp.path()).is_err());
}

/// Issue 15: a shim that reaches its lock after recovery gave up on it (a slow exec on a busy
/// machine) must not run the agent a second time.
#[test]
fn a_shim_that_starts_after_its_run_dir_was_abandoned_runs_nothing() {
    let (tmp, run) = prepared(&["touch", "ran"], 0);
    assert!(abandon(&run).unwrap(), "a never-started run dir is abandoned");
    assert!(abandon(&run).unwrap(), "abandoning twice is harmless (recovery may crash in between)");
    assert!(matches!(supervise(&run), Err(SuperviseError::AlreadyUsed(_))));
    assert!(!tmp.path().join("work/ran").exists(), "the agent never started");
    assert!(read_started(&run).unwrap().is_none());
    assert_eq!(inspect(&run).unwrap(), AttemptState::NotStarted);
}

#[test]
fn a_running_or_finished_attempt_is_never_abandoned() {
    let (_tmp, run) = prepared(&["sleep", "30"], 0);
    let shim = {
        let run = run.clone();
        std::thread::spawn(move || supervise(&run))
    };
    wait_for_running(&run);
    assert!(!abandon(&run).unwrap(), "a shim holds the lock: the attempt is running");
    assert!(kill_attempt(&run).unwrap());
    shim.join().unwrap().unwrap();
    assert!(!abandon(&run).unwrap(), "a finished attempt is harvested, not abandoned");
    assert!(!run.join(ABANDONED_FILE).exists());
}
