//! `dsh`: the default harness binary — the dsh command line over the default plugin set
//! ([`dsh::presets::DEFAULT`]).

fn main() -> std::process::ExitCode {
    dsh::main_with(&dsh::presets::DEFAULT_HARNESS)
}
