//! The `baton` binary: parses the command line and hands over to `baton::cli`.
//!
//! Its allocator is mimalloc: a one-shot CLI process (no server) decodes a whole execution,
//! tens of thousands of small allocations at 5,000 steps, and with glibc's malloc each of them
//! took the slow path of a fresh heap and a page fault every few. `baton execute next` at step
//! 4,700 of a 5,000-step plan: 3,900 → 1,500 page faults, 16.5 → 14 ms (issue 14.8). The
//! library and its unit tests keep the system allocator.
//!
//! mimalloc also replaces `malloc` for the whole process (its `override` feature, glibc's
//! documented way of replacing malloc by linking one in). SQLite, compiled into the binary,
//! allocates through it: reading a snapshot copies the whole row twice (SQLite's buffer, then
//! sqlx's copy of the value), a megabyte each at 5,000 steps, which glibc served from fresh
//! `mmap`s, one page fault per 4 KiB page. At step 4,500 of 5,000: 1,450 → 720 page faults.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    baton::cli::main()
}
