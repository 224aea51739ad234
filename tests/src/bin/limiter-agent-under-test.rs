//! The agent, built into this package so its tests can start it as a process.
fn main() -> std::process::ExitCode {
    limiter_user::main()
}
