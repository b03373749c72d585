//! Workspace automation for dsh: `cargo xtask ci`, `cargo xtask tidy`, `cargo xtask bench`.
//!
//! `ci` runs, in order and reporting every failure (it keeps going): `fmt --check`,
//! `clippy --workspace --all-targets -- -D warnings`, the tests (nextest when installed, else
//! `cargo test`), the doc tests, `tidy`, and — when `../shared/conformance/` exists — the
//! conformance tests (it says plainly when they were skipped).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root()?;
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("tidy") => {
            let problems = tidy(&root)?;
            report_tidy(&problems)
        }
        Some("bench") => bench(&root, &args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <ci|tidy|bench [cargo bench args]>");
            std::process::exit(2);
        }
    }
}

fn workspace_root() -> Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

fn run(step: &str, cmd: &mut Command) -> bool {
    eprintln!("\n==> {step}: {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => true,
        Ok(s) => {
            eprintln!("==> {step} FAILED ({s})");
            false
        }
        Err(e) => {
            eprintln!("==> {step} could not start: {e}");
            false
        }
    }
}

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn shared_dir(root: &Path) -> Option<PathBuf> {
    let p = root.join("..").join("shared");
    p.is_dir().then_some(p)
}

fn ci(root: &Path) -> Result<()> {
    let mut failed: Vec<&str> = Vec::new();
    let nextest = has_nextest();

    if !run("fmt", cargo().args(["fmt", "--all", "--", "--check"])) {
        failed.push("fmt");
    }
    if !run(
        "clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    ) {
        failed.push("clippy");
    }
    // The workspace test build produces the `dsh` binary (its own integration tests need it);
    // the end-to-end tests in `tests/` drive that very binary.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dsh_bin = target_dir.join("debug").join("dsh");
    // Unit and integration tests, conformance excluded (run below only when the corpus exists).
    let tests_ok = if nextest {
        run(
            "tests (nextest)",
            cargo().env("DSH_E2E_BIN", &dsh_bin).args([
                "nextest",
                "run",
                "--workspace",
                "--no-fail-fast",
                "-E",
                "not test(/conformance/)",
            ]),
        )
    } else {
        run(
            "tests (cargo test)",
            cargo().env("DSH_E2E_BIN", &dsh_bin).args([
                "test",
                "--workspace",
                "--no-fail-fast",
                "--",
                "--skip",
                "conformance",
            ]),
        )
    };
    if !tests_ok {
        failed.push("tests");
    }
    if !run(
        "doc tests",
        cargo().args(["test", "--workspace", "--doc", "--no-fail-fast"]),
    ) {
        failed.push("doc tests");
    }
    eprintln!("\n==> tidy");
    match tidy(root) {
        Ok(problems) if problems.is_empty() => eprintln!("==> tidy: ok"),
        Ok(problems) => {
            for p in &problems {
                eprintln!("tidy: {p}");
            }
            failed.push("tidy");
        }
        Err(e) => {
            eprintln!("tidy could not run: {e:#}");
            failed.push("tidy");
        }
    }
    match shared_dir(root).map(|s| s.join("conformance")) {
        Some(c) if c.is_dir() => {
            let ok = if nextest {
                run(
                    "conformance (nextest)",
                    cargo().args([
                        "nextest",
                        "run",
                        "--workspace",
                        "--no-fail-fast",
                        "-E",
                        "test(/conformance/)",
                    ]),
                )
            } else {
                run(
                    "conformance (cargo test)",
                    cargo().args(["test", "--workspace", "--no-fail-fast", "conformance"]),
                )
            };
            if !ok {
                failed.push("conformance");
            }
        }
        _ => eprintln!(
            "\n==> conformance: SKIPPED — ../shared/conformance/ not found beside the repository; \
             the upstream session-log conformance tests were NOT run"
        ),
    }
    if failed.is_empty() {
        eprintln!("\n==> ci: all steps passed");
        Ok(())
    } else {
        bail!("ci failed steps: {}", failed.join(", "))
    }
}

fn report_tidy(problems: &[String]) -> Result<()> {
    for p in problems {
        eprintln!("tidy: {p}");
    }
    if problems.is_empty() {
        eprintln!("tidy: ok");
        Ok(())
    } else {
        bail!("{} tidy problem(s)", problems.len())
    }
}

/// One workspace member as tidy sees it.
struct Member {
    name: String,
    dir: PathBuf,
    deps: Vec<String>,
}

fn members(root: &Path) -> Result<Vec<Member>> {
    let mut out = Vec::new();
    for group in ["crates", "plugins", "tests"] {
        let dir = root.join(group);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("Cargo.toml").is_file())
            .collect();
        if group == "tests" {
            dirs.push(dir.clone());
        }
        dirs.sort();
        for d in dirs {
            let text = std::fs::read_to_string(d.join("Cargo.toml"))
                .with_context(|| format!("reading {}", d.display()))?;
            let doc: toml::Table = text
                .parse()
                .with_context(|| format!("parsing {}/Cargo.toml", d.display()))?;
            let name = doc
                .get("package")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_owned();
            let mut deps = Vec::new();
            for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(t) = doc.get(table).and_then(|t| t.as_table()) {
                    deps.extend(t.keys().cloned());
                }
            }
            out.push(Member { name, dir: d, deps });
        }
    }
    Ok(out)
}

/// Structural rules: `//!` headers, plugin → plugin dependencies, a kernel free of workspace
/// dependencies, folder names equal package names.
fn tidy(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let members = members(root)?;
    let plugin_names: Vec<&str> = members
        .iter()
        .filter(|m| m.dir.parent() == Some(&root.join("plugins")))
        .map(|m| m.name.as_str())
        .collect();
    let workspace_names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    for m in &members {
        let folder = m
            .dir
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if m.dir != root.join("tests") && folder != m.name {
            problems.push(format!(
                "{}: folder name `{folder}` differs from package name `{}`",
                m.dir.display(),
                m.name
            ));
        }
        for lib in [m.dir.join("src/lib.rs"), m.dir.join("lib.rs")] {
            if lib.is_file() {
                let text = std::fs::read_to_string(&lib)?;
                if !text.trim_start().starts_with("//!") {
                    problems.push(format!(
                        "{}: must start with a `//!` paragraph",
                        lib.display()
                    ));
                }
            }
        }
        if plugin_names.contains(&m.name.as_str()) {
            for d in &m.deps {
                if plugin_names.contains(&d.as_str()) {
                    problems.push(format!(
                        "plugin `{}` depends on plugin `{d}` (plugins may depend only on crates/*)",
                        m.name
                    ));
                }
            }
        }
        if m.name == "dsh-kernel" {
            for d in &m.deps {
                // Its own derive macros (the `ErrorCode` derive) are part of the kernel.
                if workspace_names.contains(&d.as_str()) && d != "dsh-kernel-macros" {
                    problems.push(format!("dsh-kernel depends on workspace crate `{d}`"));
                }
            }
        }
    }
    // Feature unification must never bring back aws-lc (a 2-minute C build).
    let tree = cargo()
        .args([
            "tree",
            "--workspace",
            "-e",
            "normal,dev,build",
            "-i",
            "aws-lc-sys",
        ])
        .output();
    if let Ok(out) = tree
        && out.status.success()
        && !out.stdout.is_empty()
    {
        problems.push("aws-lc-sys is in the dependency graph (use rustls with ring)".to_owned());
    }
    Ok(problems)
}

/// The grep benchmark compares against ripgrep: install it when it is missing (Debian's
/// package; needs root, as on the project's machines). Failure only skips that comparison.
fn ensure_ripgrep() {
    let have = Command::new("rg")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("==> installing ripgrep for the grep comparison (apt-get install -y ripgrep)");
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-q", "ripgrep"])
            .status();
    }
}

fn bench(root: &Path, extra: &[String]) -> Result<()> {
    ensure_ripgrep();
    let mut cmd = cargo();
    cmd.args(["bench", "--workspace"]);
    cmd.args(extra);
    if !run("bench", &mut cmd) {
        bail!("cargo bench failed");
    }
    let dir = root.join("target").join("criterion");
    let mut rows = Vec::new();
    collect_estimates(&dir, &dir, &mut rows)?;
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut table = String::from("| benchmark | mean | 95% CI |\n|---|---|---|\n");
    for (name, mean, lo, hi) in &rows {
        table.push_str(&format!(
            "| {name} | {} | {} – {} |\n",
            fmt_ns(*mean),
            fmt_ns(*lo),
            fmt_ns(*hi)
        ));
    }
    eprintln!("\n{table}");
    Ok(())
}

fn collect_estimates(
    base: &Path,
    dir: &Path,
    rows: &mut Vec<(String, f64, f64, f64)>,
) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "new") {
                let est = p.join("estimates.json");
                if let Ok(text) = std::fs::read_to_string(&est)
                    && let Some((m, lo, hi)) = parse_mean(&text)
                {
                    let name = p
                        .parent()
                        .and_then(|q| q.strip_prefix(base).ok())
                        .map(|q| q.display().to_string())
                        .unwrap_or_default();
                    rows.push((name, m, lo, hi));
                }
            } else if p.file_name().is_none_or(|n| n != "base" && n != "report") {
                collect_estimates(base, &p, rows)?;
            }
        }
    }
    Ok(())
}

/// Extracts `mean.point_estimate` and its confidence interval from criterion's estimates.json
/// without a JSON dependency (xtask stays quick to build).
fn parse_mean(text: &str) -> Option<(f64, f64, f64)> {
    let mean = &text[text.find("\"mean\"")?..];
    let num = |key: &str| -> Option<f64> {
        let i = mean.find(key)? + key.len();
        let rest = mean[i..].trim_start_matches([':', ' ', '"']);
        let end = rest.find([',', '}'])?;
        rest[..end].trim().parse().ok()
    };
    Some((
        num("\"point_estimate\"")?,
        num("\"lower_bound\"")?,
        num("\"upper_bound\"")?,
    ))
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}
