//! `arl-filter`: see `arl::cmd::filter`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::filter::TOOL, arl::cmd::filter::run)
}
