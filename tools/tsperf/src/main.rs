//! tsperf: see `tsperf --help`. All logic is in the library.

fn main() -> std::process::ExitCode {
    // The standalone binary starts the `igcd` built next to it.
    let igcd = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("igcd")))
        .map(|p| vec![p.into_os_string()])
        .unwrap_or_default();
    tsperf::main_with_args(std::env::args_os().skip(1), igcd)
}
