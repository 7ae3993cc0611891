//! `baton daemon start | stop | status` on the real binary: the detached server answers and
//! holds the data dir (a second start and a foreground serve refuse), stops on SIGTERM and
//! releases the lock, rotates its log at start, and a server that fails at once is reported
//! with the end of its log. Every test stops its daemon on drop, passing or failing.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use baton::clock::Stopwatch;

use crate::common::{code, stderr, stdout};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `baton --data-dir <data> <args>`.
fn baton(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("BATON_CRASH_AT")
        .env_remove("BATON_LOG_ROTATE_BYTES")
        .output()
        .unwrap()
}

/// A data dir whose daemon, if any, is stopped on drop (SIGKILL if `daemon stop` fails).
struct DaemonGuard {
    data: PathBuf,
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        let out = baton(&self.data, &["daemon", "stop"]);
        if out.status.success() {
            return;
        }
        if let Some(pid) =
            std::fs::read_to_string(self.data.join("serve.lock")).ok().and_then(|p| p.trim().parse().ok())
        {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// `GET path` on 127.0.0.1:port; the status code.
fn get(port: u16, path: &str) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// True when nobody holds `<data>/serve.lock` (takes and releases it).
fn lock_is_free(data: &Path) -> bool {
    let file = std::fs::File::open(data.join("serve.lock")).unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
}

fn pid_of(status_json: &serde_json::Value) -> i32 {
    i32::try_from(status_json["pid"].as_i64().unwrap()).unwrap()
}

#[test]
fn start_status_stop_round_trip_and_one_server_per_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let guard = DaemonGuard { data: data.clone() };
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");

    let out = baton(&data, &["daemon", "start", "--bind", &bind]);
    assert_eq!(code(&out), 0, "start: {}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("http://{bind}/")) && text.contains("serve.log"), "{text}");

    let out = baton(&data, &["--json", "daemon", "status"]);
    assert_eq!(code(&out), 0, "status while running: {}{}", stdout(&out), stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["running"], true, "{status}");
    assert_eq!(status["url"], format!("http://{bind}/"), "{status}");
    let pid = pid_of(&status);
    assert!(text.contains(&format!("pid {pid}")), "start printed the pid: {text}");
    let out = baton(&data, &["daemon", "status"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(&format!("running: pid {pid}, http://{bind}/")), "{}", stdout(&out));
    // Detached: its own session, not a child of the starter.
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
    assert_eq!(sid.as_raw(), pid, "the server leads its own session");
    assert_eq!(get(port, "/healthz"), 200);

    let out = baton(&data, &["daemon", "start", "--bind", &format!("127.0.0.1:{}", free_port())]);
    assert_eq!(code(&out), 2, "a second daemon start: {}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains(&format!("a baton server (pid {pid}) already runs")), "{}", stderr(&out));
    let out = baton(&data, &["serve", "--bind", &format!("127.0.0.1:{}", free_port())]);
    assert_eq!(code(&out), 2, "a foreground serve: {}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains(&format!("another baton serve (pid {pid})")), "{}", stderr(&out));
    assert_eq!(get(port, "/healthz"), 200, "the refusals left the daemon alone");

    let out = baton(&data, &["daemon", "stop"]);
    assert_eq!(code(&out), 0, "stop: {}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains(&format!("stopped baton serve (pid {pid}) in")), "{}", stdout(&out));
    let out = baton(&data, &["daemon", "status"]);
    assert_eq!(code(&out), 3, "status after stop: {}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("not running"), "{}", stdout(&out));
    assert!(lock_is_free(&data), "the lock is released");
    assert!(!data.join("serve.json").exists(), "a clean stop removes serve.json");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "nothing listens any more");
    let log = std::fs::read_to_string(data.join("logs").join("serve.log")).unwrap();
    assert!(log.contains("baton daemon start") && log.contains(&format!("baton serving http://{bind}/")), "{log}");
    assert!(log.contains("baton serve stopped"), "the drain is logged: {log}");
    assert!(!log.contains('\u{1b}'), "no colour codes in the log: {log:?}");

    let out = baton(&data, &["daemon", "stop"]);
    assert_eq!(code(&out), 0, "stopping a stopped server succeeds: {}", stderr(&out));
    assert!(stdout(&out).contains("nothing to stop"), "{}", stdout(&out));
    drop(guard);
}

#[test]
fn status_and_stop_on_a_missing_data_dir_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("never");
    assert_eq!(code(&baton(&data, &["daemon", "status"])), 3);
    assert_eq!(code(&baton(&data, &["daemon", "stop"])), 0);
    assert!(!data.exists());
}

#[test]
fn start_rotates_a_log_over_the_limit_keeping_five() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let logs = data.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let big = "a line of an earlier run\n".repeat(100);
    std::fs::write(logs.join("serve.log"), &big).unwrap();
    for i in 1..=5 {
        std::fs::write(logs.join(format!("serve.log.{i}")), format!("rotated {i}\n")).unwrap();
    }
    let _guard = DaemonGuard { data: data.clone() };
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--data-dir")
        .arg(&data)
        .args(["daemon", "start", "--bind", &format!("127.0.0.1:{}", free_port())])
        .env("BATON_LOG_ROTATE_BYTES", "1000")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "start: {}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("rotated"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(logs.join("serve.log.1")).unwrap(), big);
    for i in 2..=5 {
        assert_eq!(
            std::fs::read_to_string(logs.join(format!("serve.log.{i}"))).unwrap(),
            format!("rotated {}\n", i - 1)
        );
    }
    assert!(!logs.join("serve.log.6").exists(), "five are kept");
    let log = std::fs::read_to_string(logs.join("serve.log")).unwrap();
    assert!(log.contains("baton daemon start") && !log.contains("earlier run"), "{log}");

    // Under the limit: the next start appends.
    assert_eq!(code(&baton(&data, &["daemon", "stop"])), 0);
    let out = baton(&data, &["daemon", "start", "--bind", &format!("127.0.0.1:{}", free_port())]);
    assert_eq!(code(&out), 0, "second start: {}", stderr(&out));
    assert!(!stderr(&out).contains("rotated"), "{}", stderr(&out));
    let log = std::fs::read_to_string(logs.join("serve.log")).unwrap();
    assert_eq!(log.matches("baton daemon start").count(), 2, "{log}");
    assert_eq!(std::fs::read_to_string(logs.join("serve.log.1")).unwrap(), big);
}

#[test]
fn a_server_that_fails_at_once_is_reported_with_its_log_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let _guard = DaemonGuard { data: data.clone() };
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let watch = Stopwatch::start();
    let out = baton(&data, &["daemon", "start", "--bind", &format!("127.0.0.1:{port}")]);
    assert_eq!(code(&out), 2, "the server's own exit code (bad input): {}{}", stdout(&out), stderr(&out));
    assert!(watch.elapsed() < Duration::from_secs(10), "reported as soon as the server exited");
    let err = stderr(&out);
    assert!(err.contains("exited while starting") && err.contains("serve.log"), "{err}");
    assert!(
        err.contains(&format!("--bind 127.0.0.1:{port}")) && err.contains("pick another port"),
        "the log tail: {err}"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert_eq!(code(&baton(&data, &["daemon", "status"])), 3);
    assert!(lock_is_free(&data));
}

#[test]
fn a_server_that_ignores_sigterm_is_left_alone_with_exit_1_and_a_kill_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // A stand-in server: it ignores SIGTERM, and this test holds the lock with its pid.
    let mut stubborn = Command::new("sh").args(["-c", "trap '' TERM; exec sleep 30"]).spawn().unwrap();
    let file =
        std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(data.join("serve.lock")).unwrap();
    let mut lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
    write!(lock, "{}", stubborn.id()).unwrap();
    std::thread::sleep(Duration::from_millis(200)); // let sh install its trap and exec

    let out = baton(&data, &["daemon", "stop", "--timeout", "1"]);
    let _ = stubborn.kill();
    let _ = stubborn.wait();
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("has not stopped after 1 s") && err.contains(&format!("kill -9 {}", stubborn.id())), "{err}");
    drop(lock);
}
