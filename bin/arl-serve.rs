//! `arl-serve`: see `arl::cmd::serve`.
fn main() -> std::process::ExitCode {
    arl::cli::bounded_omp_spin_by_default();
    arl::cli::main(arl::cmd::serve::TOOL, arl::cmd::serve::run)
}
