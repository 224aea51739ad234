fn main() -> std::process::ExitCode {
    limiter_user::main()
}
