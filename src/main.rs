//! The `flux-tools` binary: everything lives in the library; see `app::main`.

fn main() -> std::process::ExitCode {
    flux_tools::app::main()
}
