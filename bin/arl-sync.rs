//! `arl-sync`: see `arl::cmd::sync`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::sync::TOOL, arl::cmd::sync::run)
}
