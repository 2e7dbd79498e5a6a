//! The `flux-tools` binary: everything lives in the library; see `app::main`.

/// mimalloc: a run allocates and frees per call on several threads at once, where glibc's
/// arenas contend and consolidate (before/after figures in benches/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    flux_tools::main()
}
