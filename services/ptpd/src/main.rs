//! ptpd: the PTP service. All logic is in the library; see `ptpd --help`.

fn main() -> std::process::ExitCode {
    ptpd::main_with_args(std::env::args_os().skip(1))
}
