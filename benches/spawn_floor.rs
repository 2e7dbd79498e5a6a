//! The floor for command throughput: a raw tokio loop that spawns N processes with at most J
//! in flight, captures each one's stdout, and prints them in call order. No lanes, no plan,
//! no classification — whatever flux-tools adds on top is measured against this.
//!
//! Usage: spawn_floor N J PROGRAM [ARGS...]

use std::sync::Arc;

use tokio::process::Command;
use tokio::sync::Semaphore;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: spawn_floor N J PROGRAM [ARGS...]");
        std::process::exit(2);
    }
    let n: usize = args[1].parse().unwrap_or(0);
    let j: usize = args[2].parse().unwrap_or(1).max(1);
    let program = args[3].clone();
    let rest: Vec<String> = args[4..].to_vec();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let sem = Arc::new(Semaphore::new(j));
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let sem = sem.clone();
            let program = program.clone();
            let rest = rest.clone();
            handles.push(tokio::spawn(async move {
                let _permit = sem.acquire_owned().await.ok();
                Command::new(&program)
                    .args(&rest)
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
        use std::io::Write;
        let _ = std::io::stdout().write_all(&out);
    });
}
