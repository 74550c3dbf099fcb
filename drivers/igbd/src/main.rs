//! igbd: the i210/i211, i350 and 82576 driver daemon. All logic is in the library; see
//! `igbd --help`.

fn main() -> std::process::ExitCode {
    igbd::main_with_args(std::env::args_os().skip(1))
}
