//! `arl-advantage`: see `arl::cmd::advantage`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::advantage::TOOL, arl::cmd::advantage::run)
}
