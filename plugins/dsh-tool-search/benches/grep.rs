//! Benchmark: the grep engine over a generated 50 000-file tree versus the `rg` binary on the
//! same tree (when `rg` is on PATH). The tree is deterministic (fixed-seed LCG): 50 top-level
//! directories × 10 subdirectories × 100 files of 20 lines each (~60 bytes per line), about
//! 1 % of lines containing `needle`, plus a `.git` directory and a `.gitignore` that excludes
//! one subdirectory per top-level directory. It is written once to
//! `<temp dir>/dsh-grep-bench-tree-v1` (or `$DSH_BENCH_TREE` when set) and reused.
//!
//! Run: `cargo bench -p dsh-tool-search --bench grep`. Compare `grep_50k/dsh_engine` with
//! `grep_50k/ripgrep`; both write their matches (the engine collects and sorts them, rg prints
//! them to a null sink).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_tool_search::grep::{GrepOptions, grep};
use dsh_tool_search::{GrepRequest, paths};

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma",
    "omega", "fn", "let", "struct", "impl", "match", "return", "self", "value", "index",
];

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn tree_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("DSH_BENCH_TREE") {
        return PathBuf::from(p);
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    target.join("dsh-grep-bench-tree")
}

fn generate(root: &Path) -> std::io::Result<()> {
    let done = root.join(".complete");
    if done.exists() {
        return Ok(());
    }
    let mut rng = Lcg(42);
    std::fs::create_dir_all(root.join(".git"))?;
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n")?;
    std::fs::write(root.join(".gitignore"), "sub9/\n")?;
    for top in 0..50 {
        for sub in 0..10 {
            let dir = root.join(format!("top{top:02}/sub{sub}"));
            std::fs::create_dir_all(&dir)?;
            for f in 0..100 {
                let mut text = String::with_capacity(1400);
                for _ in 0..20 {
                    for w in 0..8 {
                        if w > 0 {
                            text.push(' ');
                        }
                        text.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
                    }
                    if rng.next().is_multiple_of(100) {
                        text.push_str(" needle");
                    }
                    text.push('\n');
                }
                std::fs::write(dir.join(format!("file{f:03}.rs")), text)?;
            }
        }
    }
    std::fs::write(done, "")
}

fn bench(c: &mut Criterion) {
    let dir = tree_dir();
    if let Err(e) = generate(&dir) {
        eprintln!("cannot generate the bench tree at {}: {e}", dir.display());
        return;
    }
    let Ok(root) = paths::canonical_root(&dir) else {
        return;
    };
    let req = GrepRequest {
        pattern: "needle".into(),
        path: None,
        include: None,
    };
    let opts = GrepOptions::default();
    let mut g = c.benchmark_group("grep_50k");
    g.sample_size(10);
    g.bench_function("dsh_engine", |b| {
        b.iter(|| {
            black_box(
                grep(&root, &req, &opts, None)
                    .map(|o| o.total_matches)
                    .unwrap_or(0),
            )
        })
    });
    let rg_ok = Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if rg_ok {
        // Sanity: both sides must find the same matching lines.
        let engine_total = grep(&root, &req, &opts, None)
            .map(|o| o.total_matches)
            .unwrap_or(0);
        let rg_lines = Command::new("rg")
            .args(["--no-require-git", "--line-number", "needle"])
            .arg(&root)
            .output()
            .map(|o| o.stdout.iter().filter(|&&b| b == b'\n').count())
            .unwrap_or(0);
        eprintln!("matching lines: dsh engine {engine_total}, ripgrep {rg_lines}");
        g.bench_function("ripgrep", |b| {
            b.iter(|| {
                black_box(
                    Command::new("rg")
                        .args(["--no-require-git", "--line-number", "needle"])
                        .arg(&root)
                        .stdout(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success()),
                )
            })
        });
    } else {
        eprintln!("rg not found on PATH: skipping the ripgrep comparison");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
