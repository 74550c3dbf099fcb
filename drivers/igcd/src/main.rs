//! igcd: the i225/i226 driver daemon. All logic is in the library; see `igcd --help`.

fn main() -> std::process::ExitCode {
    igcd::main_with_args(std::env::args_os().skip(1))
}
