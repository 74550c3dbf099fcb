//! tsperf: see `tsperf --help`. All logic is in the library.

fn main() -> std::process::ExitCode {
    // The standalone binary starts the `igcd` and `igbd` built next to it.
    let beside = |name: &str| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join(name)))
            .map(|p| vec![p.into_os_string()])
            .unwrap_or_default()
    };
    let daemons = tsperf::Daemons {
        igcd: beside("igcd"),
        igbd: beside("igbd"),
    };
    tsperf::main_with_args(std::env::args_os().skip(1), daemons)
}
