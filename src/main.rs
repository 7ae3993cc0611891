//! The `baton` binary: parses the command line and hands over to `baton::cli`.

fn main() -> std::process::ExitCode {
    baton::cli::main()
}
