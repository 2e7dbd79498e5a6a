//! The floor for command throughput: a raw loop that spawns N processes with at most J in
//! flight, captures each one's stdout, and prints them in call order. No lanes, no plan, no
//! classification — whatever flux-tools adds on top is measured against this.
//!
//! Three variants: the default is a tokio loop (a task a process, a semaphore of J); `--threads`
//! is J plain threads taking the next index from a counter and waiting for their child with
//! `std::process::Command::output` (no runtime, no reactor: on Linux faster than the tokio
//! loop); `--blocking` is the tokio loop with each process run by `output` on the blocking
//! pool. The benchmark compares flux-tools against the best of them.
//!
//! Usage: spawn_floor [--threads | --blocking] N J PROGRAM [ARGS...]

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let threads = args.first().is_some_and(|a| a == "--threads");
    let blocking = args.first().is_some_and(|a| a == "--blocking");
    if threads || blocking {
        args.remove(0);
    }
    if args.len() < 3 {
        eprintln!("usage: spawn_floor [--threads | --blocking] N J PROGRAM [ARGS...]");
        std::process::exit(2);
    }
    let n: usize = args[0].parse().unwrap_or(0);
    let j: usize = args[1].parse().unwrap_or(1).max(1);
    let program = args[2].clone();
    let rest: Vec<String> = args[3..].to_vec();
    let out = if threads {
        with_threads(n, j, &program, &rest)
    } else {
        with_tokio(n, j, program, rest, blocking)
    };
    use std::io::Write;
    let _ = std::io::stdout().write_all(&out);
}

/// J threads, each running the next call until none is left; outputs joined in call order.
fn with_threads(n: usize, j: usize, program: &str, rest: &[String]) -> Vec<u8> {
    let next = AtomicUsize::new(0);
    let outputs: Vec<Mutex<Vec<u8>>> = (0..n).map(|_| Mutex::new(Vec::new())).collect();
    std::thread::scope(|s| {
        for _ in 0..j.min(n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let got = std::process::Command::new(program)
                    .args(rest)
                    .stdin(Stdio::null())
                    .output()
                    .map(|o| o.stdout)
                    .unwrap_or_default();
                *outputs[i].lock().unwrap_or_else(|e| e.into_inner()) = got;
            });
        }
    });
    outputs
        .into_iter()
        .flat_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// A tokio task a call, at most J holding the semaphore (its process run on the blocking pool
/// when `blocking`); outputs joined in call order.
fn with_tokio(n: usize, j: usize, program: String, rest: Vec<String>, blocking: bool) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let sem = Arc::new(tokio::sync::Semaphore::new(j));
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let sem = sem.clone();
            let program = program.clone();
            let rest = rest.clone();
            handles.push(tokio::spawn(async move {
                let _permit = sem.acquire_owned().await.ok();
                if blocking {
                    let run = move || {
                        std::process::Command::new(&program)
                            .args(&rest)
                            .stdin(Stdio::null())
                            .output()
                            .map(|o| o.stdout)
                            .unwrap_or_default()
                    };
                    return tokio::task::spawn_blocking(run).await.unwrap_or_default();
                }
                tokio::process::Command::new(&program)
                    .args(&rest)
                    .stdin(Stdio::null())
                    .output()
                    .await
                    .map(|o| o.stdout)
                    .unwrap_or_default()
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.extend(h.await.unwrap_or_default());
        }
        out
    })
}
