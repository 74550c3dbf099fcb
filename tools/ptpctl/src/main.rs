//! ptpctl: see `ptpctl --help`. All logic is in the library.

fn main() -> std::process::ExitCode {
    ptpctl::main_with_args(std::env::args_os().skip(1))
}
