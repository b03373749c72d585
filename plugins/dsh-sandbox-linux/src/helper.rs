//! The Landlock helper (`dsh-landlock-run`, a binary of the `dsh` package calling [`main`]):
//! `dsh-landlock-run [--no-network] [--ro <path>]... [--rw <path>]... -- <argv>...` or
//! `dsh-landlock-run [--no-network] --probe`.
//!
//! `--ro` grants read and execute beneath a path, `--rw` every access the negotiated Landlock
//! ABI governs (a file grant keeps only the file bits); everything else is denied. With
//! `--no-network` the helper first enters a new user and network namespace (mapping its own
//! uid and gid), so the command has only an unconnected loopback. It then sets
//! `no_new_privs`, restricts itself and execs the command (environment unchanged); descendants
//! inherit the restriction. Exit 125 with one stderr line `landlock-run: <detail>` is a
//! helper failure (usage, no Landlock, an unopenable grant root, exec failure); after exec the
//! command's status is the helper's. An older ABI enforces only part of the accesses: the
//! helper then prints [`PARTIAL_NOTICE`] on stderr at every run. The probe prints
//! [`PROBE_FULL`] or [`PROBE_PARTIAL`] and exits 0, else 125. Contract:
//! `docs/upstream/sandbox.md` ("The Landlock helper").

use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use landlock::{
    ABI, Access, AccessFs, AccessNet, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};

/// The probe's answer under full enforcement.
pub const PROBE_FULL: &str = "landlock: fully enforced";
/// The probe's answer under partial enforcement.
pub const PROBE_PARTIAL: &str = "landlock: partially enforced (older ABI)";
/// The stderr notice of every run under partial enforcement.
pub const PARTIAL_NOTICE: &str = "landlock-run: partial enforcement (older Landlock ABI)";
/// The helper-failure exit status.
pub const FAILURE_EXIT: u8 = 125;

/// The highest ABI whose file accesses the helper governs.
const FS_ABI: ABI = ABI::V5;

/// Parsed command line.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    probe: bool,
    no_network: bool,
    ro: Vec<PathBuf>,
    rw: Vec<PathBuf>,
    argv: Vec<OsString>,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut out = Args::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--probe") => out.probe = true,
            Some("--no-network") => out.no_network = true,
            Some("--ro") => out.ro.push(it.next().ok_or("--ro needs a path")?.into()),
            Some("--rw") => out.rw.push(it.next().ok_or("--rw needs a path")?.into()),
            Some("--") => {
                out.argv = it.collect();
                break;
            }
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    if !out.probe && out.argv.is_empty() {
        return Err("usage: dsh-landlock-run [--no-network] [--ro PATH]... [--rw PATH]... -- ARGV... | --probe".into());
    }
    Ok(out)
}

fn fail(detail: impl std::fmt::Display) -> ExitCode {
    eprintln!("landlock-run: {detail}");
    ExitCode::from(FAILURE_EXIT)
}

/// Enters a new user and network namespace and maps the current uid/gid onto themselves.
///
/// # Errors
/// The failing step.
#[allow(unsafe_code)]
fn enter_network_namespace() -> Result<(), String> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // SAFETY: `unshare_unsafe` is unsafe only because `CLONE_FILES` could leave other threads
    // with a different descriptor table. The helper is single-threaded here (nothing has
    // spawned a thread before `main` calls this) and asks only for a new user and network
    // namespace, which share no state with other threads of this process.
    unsafe {
        rustix::thread::unshare_unsafe(
            rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNET,
        )
    }
    .map_err(|e| format!("cannot enter a new network namespace: {e}"))?;
    let write = |path: &str, text: String| {
        std::fs::write(path, text).map_err(|e| format!("cannot write {path}: {e}"))
    };
    write("/proc/self/setgroups", "deny".to_owned())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(())
}

fn restrict(args: &Args) -> Result<RestrictionStatus, String> {
    let all = AccessFs::from_all(FS_ABI);
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| e.to_string())?;
    if args.no_network {
        // Defence in depth: TCP bind/connect denied too where the ABI governs them (v4+).
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(|e| e.to_string())?;
    }
    let mut created = ruleset.create().map_err(|e| e.to_string())?;
    for p in args.ro.iter().chain(&args.rw) {
        if !p.exists() {
            return Err(format!("cannot open grant root {}", p.display()));
        }
    }
    created = created
        .add_rules(path_beneath_rules(&args.ro, AccessFs::from_read(FS_ABI)))
        .map_err(|e| e.to_string())?;
    created = created
        .add_rules(path_beneath_rules(&args.rw, all))
        .map_err(|e| e.to_string())?;
    created.restrict_self().map_err(|e| e.to_string())
}

/// The helper's entry point (see the module doc); `dsh-landlock-run` is `fn main() ->
/// ExitCode { dsh_sandbox_linux::helper::main() }`.
pub fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if args.no_network
        && let Err(e) = enter_network_namespace()
    {
        return fail(e);
    }
    let status = match restrict(&args) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot restrict: {e}")),
    };
    let partial = match status.ruleset {
        RulesetStatus::FullyEnforced => false,
        RulesetStatus::PartiallyEnforced => true,
        RulesetStatus::NotEnforced => return fail("Landlock is not enforced by this kernel"),
    };
    if !status.no_new_privs {
        return fail("no_new_privs could not be set");
    }
    if args.probe {
        let answer = if partial { PROBE_PARTIAL } else { PROBE_FULL };
        return match writeln!(std::io::stdout(), "{answer}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format!("cannot write the probe answer: {e}")),
        };
    }
    if partial {
        eprintln!("{PARTIAL_NOTICE}");
    }
    let (program, rest) = match args.argv.split_first() {
        Some(x) => x,
        None => return fail("no command"),
    };
    let err = Command::new(program).args(rest).exec();
    fail(format!("exec {}: {err}", PathBuf::from(program).display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_the_contract() {
        let a = parse(os(&[
            "--no-network",
            "--ro",
            "/",
            "--rw",
            "/tmp",
            "--",
            "bash",
            "-c",
            "x",
        ]))
        .unwrap();
        assert_eq!(
            a,
            Args {
                probe: false,
                no_network: true,
                ro: vec!["/".into()],
                rw: vec!["/tmp".into()],
                argv: os(&["bash", "-c", "x"]),
            }
        );
        assert!(parse(os(&["--probe"])).unwrap().probe);
        assert_eq!(parse(os(&["--ro"])).unwrap_err(), "--ro needs a path");
        assert!(parse(os(&["--ro", "/"])).unwrap_err().starts_with("usage:"));
    }
}
