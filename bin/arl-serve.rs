//! `arl-serve`: see `arl::cmd::serve`.
fn main() -> std::process::ExitCode {
    arl::cli::omp_passive_by_default();
    arl::cli::main(arl::cmd::serve::TOOL, arl::cmd::serve::run)
}
