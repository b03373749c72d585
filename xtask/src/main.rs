//! Workspace automation for dsh: `cargo xtask ci`, `cargo xtask tidy`, `cargo xtask unused-deps`,
//! `cargo xtask bench`.
//!
//! `ci` runs, in order and reporting every failure (it keeps going): `fmt --check`,
//! `clippy --workspace --all-targets -- -D warnings`, the tests (nextest when installed, else
//! `cargo test`; the tests that need the reference corpus beside the repository are reported
//! as skipped without it, and fail without it when `CI` is set — see `dsh-shared-corpus`), the
//! doc tests, `tidy`, and the unused-dependency check (`cargo machete`, installed by
//! `.ci/run`).
//!
//! `tidy` checks the structural rules, the dependency graph's forbidden arrows ([`arch`]) and
//! that no comment points outside the repository ([`pointers`]). Findings in files or arrows
//! another change is removing right now are listed as *pending*: reported and counted, failing
//! only with `--strict` (`cargo xtask tidy --strict`, `cargo xtask ci --strict`) or when
//! [`STRICT_DEFAULT`] is flipped to `true`. The same goes for unused dependencies listed in
//! [`PENDING_UNUSED`].

mod arch;
mod pointers;
mod scaffold;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Whether pending findings fail `tidy` and `ci` without `--strict`. Flip to `true` once the
/// pending lists ([`arch::PENDING`], [`pointers::PENDING_PATHS`], [`PENDING_UNUSED`]) are empty.
const STRICT_DEFAULT: bool = true;

/// The cargo-machete version `.ci/run` installs (keep the two in step).
const MACHETE_VERSION: &str = "0.9.2";

/// Unused dependencies (`package`, `dependency`) in crates other engineers are changing right
/// now; reported as pending until they drop them.
const PENDING_UNUSED: &[(&str, &str)] = &[];

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
    let strict = STRICT_DEFAULT || args.iter().skip(1).any(|a| a == "--strict");
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root, strict),
        Some("tidy") => {
            let problems = tidy(&root, strict)?;
            report_tidy(&problems)
        }
        Some("unused-deps") => {
            if unused_dependencies(strict) {
                Ok(())
            } else {
                bail!("unused dependencies")
            }
        }
        Some("bench") => bench(&root, &args[1..]),
        Some("new-plugin") => {
            let Some((name, kind)) = scaffold::parse_args(&args[1..])? else {
                use std::io::Write as _;
                let _ = writeln!(std::io::stdout(), "{}", scaffold::HELP);
                return Ok(());
            };
            let dir = scaffold::new_plugin(&root, &name, kind)?;
            eprintln!(
                "created {} (a {} plugin). Next: `cargo test -p {name}`; to link it into the \
                 default binary see docs/plugin-authoring.md, step 4",
                dir.display(),
                if kind == scaffold::Kind::Tool {
                    "tool"
                } else {
                    "plain"
                }
            );
            Ok(())
        }
        Some("scaffold-check") => {
            if scaffold_check(&root) {
                Ok(())
            } else {
                bail!("scaffold check failed")
            }
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <ci [--strict]|tidy [--strict]|unused-deps [--strict]|bench [cargo bench args]|new-plugin NAME [--tool]|scaffold-check>"
            );
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

/// Scaffolds a tool plugin and a plain plugin into `plugins/` (the way `new-plugin` does),
/// lints them and runs their tests — which build each one's example harness (the default binary
/// plus the new plugin) and, for the tool, drive `exec` through the replay provider into the new
/// tool — then removes them again.
fn scaffold_check(root: &Path) -> bool {
    /// Removes the scaffolded crates and restores `Cargo.lock` however the check ends.
    struct Cleanup {
        dirs: Vec<PathBuf>,
        lock: PathBuf,
        lock_text: Option<String>,
    }
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for d in &self.dirs {
                let _ = std::fs::remove_dir_all(d);
            }
            if let Some(text) = &self.lock_text {
                let _ = std::fs::write(&self.lock, text);
            }
        }
    }
    let names = [
        ("dsh-scaffold-check-tool", scaffold::Kind::Tool),
        ("dsh-scaffold-check-plain", scaffold::Kind::Plain),
    ];
    let lock = root.join("Cargo.lock");
    let mut cleanup = Cleanup {
        lock_text: std::fs::read_to_string(&lock).ok(),
        lock,
        dirs: Vec::new(),
    };
    for (name, kind) in names {
        let dir = root.join("plugins").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        match scaffold::new_plugin(root, name, kind) {
            Ok(d) => cleanup.dirs.push(d),
            Err(e) => {
                eprintln!("==> scaffold check: {e:#}");
                return false;
            }
        }
    }
    let mut ok = true;
    for (name, _) in names {
        ok &= run(
            &format!("scaffold check: clippy {name}"),
            cargo().args([
                "clippy",
                "-p",
                name,
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        );
        ok &= run(
            &format!("scaffold check: tests of {name}"),
            cargo().args(["test", "-p", name]),
        );
    }
    ok
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

fn ci(root: &Path, strict: bool) -> Result<()> {
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
    // Every test, corpus tests included: without the corpus they are reported as skipped
    // (ignored at build time), and with `CI` set they run and fail (dsh-shared-corpus).
    let tests_ok = if nextest {
        run(
            "tests (nextest)",
            cargo().env("DSH_E2E_BIN", &dsh_bin).args([
                "nextest",
                "run",
                "--workspace",
                "--no-fail-fast",
            ]),
        )
    } else {
        run(
            "tests (cargo test)",
            cargo()
                .env("DSH_E2E_BIN", &dsh_bin)
                .args(["test", "--workspace", "--no-fail-fast"]),
        )
    };
    if !tests_ok {
        failed.push("tests");
    }
    if !scaffold_check(root) {
        failed.push("scaffold check");
    }
    if !run(
        "doc tests",
        cargo().args(["test", "--workspace", "--doc", "--no-fail-fast"]),
    ) {
        failed.push("doc tests");
    }
    eprintln!("\n==> tidy");
    match tidy(root, strict) {
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
    if !unused_dependencies(strict) {
        failed.push("unused dependencies");
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

/// Structural rules (`//!` headers, folder names equal package names), the dependency graph's
/// forbidden arrows ([`arch`]), comments pointing outside the repository ([`pointers`]), and no
/// aws-lc in the graph. Pending findings are printed here and returned as problems only when
/// `strict`.
fn tidy(root: &Path, strict: bool) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let members = arch::members(root)?;
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
    }
    let mut pending = Vec::new();
    for v in arch::violations(&members) {
        let line = format!("forbidden dependency {v}");
        if arch::is_pending(&v) {
            pending.push(line);
        } else {
            problems.push(line);
        }
    }
    let findings = pointers::scan(root)?;
    for f in &findings {
        let line = format!(
            "{}:{}: comment points outside the repository: {}",
            f.path, f.line, f.why
        );
        if f.is_pending() {
            pending.push(line);
        } else {
            problems.push(line);
        }
    }
    for entry in pointers::PENDING_PATHS {
        if !findings
            .iter()
            .any(|f| pointers::pending_entry(&f.path) == Some(entry))
        {
            pending.push(format!(
                "pointers::PENDING_PATHS entry `{entry}` has no findings left: remove it"
            ));
        }
    }
    if !pending.is_empty() {
        let n_pointers = findings.iter().filter(|f| f.is_pending()).count();
        eprintln!(
            "tidy: {} pending finding(s) ({n_pointers} outside-pointing comment(s) in files \
             being cleaned elsewhere){}:",
            pending.len(),
            if strict {
                ", failing (--strict)"
            } else {
                ", not failing (use --strict)"
            }
        );
        for p in &pending {
            eprintln!("tidy (pending): {p}");
        }
        if strict {
            problems.extend(pending);
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

/// Runs `cargo machete` (unused dependencies). Findings listed in [`PENDING_UNUSED`] are
/// reported without failing unless `strict`. A missing tool fails under `CI` (where `.ci/run`
/// installs it) and is reported as skipped elsewhere. Returns whether the step passed.
fn unused_dependencies(strict: bool) -> bool {
    eprintln!("\n==> unused dependencies (cargo machete)");
    // The binary itself: as `cargo machete` under `cargo run`, it mistakes its subcommand name for
    // a path to scan.
    let out = match Command::new("cargo-machete").output() {
        Ok(o) if o.status.success() || !o.stdout.is_empty() => o,
        _ => {
            let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
            eprintln!(
                "==> unused dependencies: cargo-machete is not installed \
                 (`cargo install --locked cargo-machete@{MACHETE_VERSION}`; .ci/run does it){}",
                if ci {
                    ": FAILED (CI is set)"
                } else {
                    ": SKIPPED"
                }
            );
            return !ci;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let found = parse_machete(&text);
    let (pending, new): (Vec<_>, Vec<_>) = found
        .iter()
        .partition(|(p, d)| PENDING_UNUSED.iter().any(|(pp, pd)| pp == p && pd == d));
    for (p, d) in &new {
        eprintln!("unused dependency: `{p}` declares `{d}` but never uses it");
    }
    for (p, d) in &pending {
        eprintln!("unused dependency (pending): `{p}` declares `{d}` but never uses it");
    }
    for (p, d) in PENDING_UNUSED {
        if !found.iter().any(|(fp, fd)| fp == p && fd == d) {
            eprintln!(
                "unused dependency (pending): `{p}`/`{d}` is fixed: remove it from PENDING_UNUSED"
            );
        }
    }
    let ok = new.is_empty() && (!strict || pending.is_empty());
    eprintln!(
        "==> unused dependencies: {} new, {} pending{}",
        new.len(),
        pending.len(),
        if ok { "" } else { ": FAILED" }
    );
    ok
}

/// `(package, dependency)` pairs from cargo-machete's report: a `name -- path:` line, then one
/// tab-indented dependency per line.
fn parse_machete(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut package: Option<String> = None;
    for line in text.lines() {
        if let Some(dep) = line.strip_prefix('\t') {
            if let Some(p) = &package {
                out.push((p.clone(), dep.trim().to_owned()));
            }
        } else if let Some((name, _)) = line.split_once(" -- ") {
            package = Some(name.trim().to_owned());
        } else {
            package = None;
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::parse_machete;

    #[test]
    fn machete_reports_are_parsed_into_package_dependency_pairs() {
        let text = "Analyzing dependencies of crates in this directory...\n\
cargo-machete found the following unused dependencies in this directory:\n\
dsh -- ./crates/dsh/Cargo.toml:\n\tfutures\n\
dsh-tool-search -- ./plugins/dsh-tool-search/Cargo.toml:\n\tglobset\n\ttracing\n\n\
If you believe cargo-machete has detected an unused dependency incorrectly,\n\
[package.metadata.cargo-machete]\nignored = [\"prost\"]\n\nDone!\n";
        assert_eq!(
            parse_machete(text),
            vec![
                ("dsh".to_owned(), "futures".to_owned()),
                ("dsh-tool-search".to_owned(), "globset".to_owned()),
                ("dsh-tool-search".to_owned(), "tracing".to_owned()),
            ]
        );
        assert_eq!(parse_machete("Done!\n"), Vec::<(String, String)>::new());
    }
}
