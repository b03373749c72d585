//! Process-group plumbing on Linux/Unix without `unsafe`: liveness of a process group (zombies
//! count as gone, because the container's PID 1 may never reap orphans), SIGTERM→SIGKILL
//! escalation over a whole group (via `rustix`, a safe wrapper over `kill(2)`), the pids that
//! still hold a given pipe open (a `/proc/*/fd` scan), and signal names.
//!
//! Behaviour notes: `docs/tools.md` ("Process executor"; "Shell and job tools": bug cases
//! BC-18, BC-19, BC-22 — kill the whole group, report escaped pids).

use std::path::Path;
use std::time::Duration;

use rustix::process::{Pid, Signal};

/// Poll interval while waiting for a group to disappear (ms).
const POLL: Duration = Duration::from_millis(20);

/// The fields of `/proc/<pid>/stat` this module reads.
struct Stat {
    /// State letter (`R`, `S`, `Z`, …).
    state: char,
    /// Parent pid.
    ppid: u32,
    /// Process group id.
    pgrp: u32,
}

impl Stat {
    /// Parses the file at `path` (the command name, in parentheses, may hold spaces and `)`).
    fn read(path: &Path) -> Option<Self> {
        let stat = std::fs::read_to_string(path).ok()?;
        let mut f = stat.rsplit_once(')')?.1.split_whitespace();
        let state = f.next()?.chars().next()?;
        let ppid = f.next()?.parse().ok()?;
        let pgrp = f.next()?.parse().ok()?;
        Some(Self { state, ppid, pgrp })
    }

    fn of(pid: u32) -> Option<Self> {
        Self::read(Path::new(&format!("/proc/{pid}/stat")))
    }

    fn live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// State letter of `pid` from `/proc/<pid>/stat` (`R`, `S`, `Z`, …), `None` if it does not exist.
pub fn process_state(pid: u32) -> Option<char> {
    Stat::of(pid).map(|s| s.state)
}

/// True if `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    matches!(process_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// `(pid, pgrp, state)` of every process visible in `/proc`.
fn proc_table() -> Option<Vec<(u32, u32, char)>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(stat) = Stat::read(&entry.path().join("stat")) else {
            continue;
        };
        out.push((pid, stat.pgrp, stat.state));
    }
    Some(out)
}

/// Non-zombie members of process group `pgid`, sorted. Without `/proc`, falls back to
/// `kill(-pgid, 0)` and returns `[pgid]` when the group exists.
pub fn group_members(pgid: u32) -> Vec<u32> {
    match proc_table() {
        Some(t) => {
            let mut v: Vec<u32> = t
                .into_iter()
                .filter(|&(_, g, s)| g == pgid && s != 'Z' && s != 'X')
                .map(|(p, _, _)| p)
                .collect();
            v.sort_unstable();
            v
        }
        None => match to_pid(pgid) {
            Some(p) if rustix::process::test_kill_process_group(p).is_ok() => vec![pgid],
            _ => Vec::new(),
        },
    }
}

fn to_pid(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

/// Sends `sig` to every member of group `pgid`, and to process `pgid` itself; delivery races
/// (group already gone) are ignored.
///
/// The child is spawned through the `setsid` program, so for a moment after the spawn returns
/// its group does not exist yet (the child is still in dsh's group, about to call `setsid(2)`);
/// signalling the leader's pid as well (only in that window, only if it is our child) covers it.
pub fn signal_group(pgid: u32, sig: Signal) {
    if let Some(p) = to_pid(pgid) {
        let _ = rustix::process::kill_process_group(p, sig);
        if spawned_before_its_group(pgid) {
            let _ = rustix::process::kill_process(p, sig);
        }
    }
}

/// True if `pid` is a live child of this process that has not yet made its own group (its
/// process group is not its pid): the window between spawn and `setsid(2)`. Checking the parent
/// keeps a reused pid of an unrelated process from ever being signalled.
fn spawned_before_its_group(pid: u32) -> bool {
    Stat::of(pid).is_some_and(|s| s.live() && s.ppid == std::process::id() && s.pgrp != pid)
}

/// True while group `pgid` has a live member or its would-be leader has not created it yet
/// (see [`signal_group`]).
fn group_or_leader_alive(pgid: u32) -> bool {
    !group_members(pgid).is_empty() || spawned_before_its_group(pgid)
}

/// Sends `sig` to one process; races are ignored.
pub fn signal_pid(pid: u32, sig: Signal) {
    if let Some(p) = to_pid(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Terminates every live member of group `pgid`: SIGTERM, wait up to `grace` for the group to
/// empty, then SIGKILL and wait up to one more second. Returns true if any member was alive.
pub async fn terminate_group(pgid: u32, grace: Duration) -> bool {
    if !group_or_leader_alive(pgid) {
        return false;
    }
    // A child that had not made its group yet when SIGTERM went out gets it again once the
    // group exists (once only: a second SIGTERM can mean "force" to a program that handles it).
    let mut group_missing = group_members(pgid).is_empty();
    signal_group(pgid, Signal::TERM);
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let members = group_members(pgid);
        if members.is_empty() && !spawned_before_its_group(pgid) {
            return true;
        }
        if group_missing && !members.is_empty() {
            group_missing = false;
            signal_group(pgid, Signal::TERM);
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    signal_group(pgid, Signal::KILL);
    wait_group_gone(pgid, Duration::from_secs(1)).await;
    true
}

/// Polls until group `pgid` has no live member (and its leader is gone) or `limit` passes; true
/// if it emptied.
pub async fn wait_group_gone(pgid: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if !group_or_leader_alive(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The pipe inode behind an open fd of this process (`/proc/self/fd/<fd>` → `pipe:[N]`).
pub fn pipe_inode(fd: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    parse_pipe_link(&link)
}

fn parse_pipe_link(link: &Path) -> Option<u64> {
    let s = link.to_str()?;
    s.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()
}

/// Live processes other than this one that hold any of the pipes `inodes` open, sorted.
/// Processes whose fd table is unreadable (other users) are skipped.
pub fn pipe_holders(inodes: &[u64]) -> Vec<u32> {
    if inodes.is_empty() {
        return Vec::new();
    }
    let me = std::process::id();
    let Some(table) = proc_table() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (pid, _, state) in table {
        if pid == me || state == 'Z' || state == 'X' {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|l| parse_pipe_link(&l))
                .is_some_and(|ino| inodes.contains(&ino))
        });
        if holds {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// The conventional name of a Linux signal number (`9` → `SIGKILL`); unknown numbers become
/// `SIG<n>`.
pub fn signal_name(n: i32) -> String {
    let name = match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        17 => "SIGCHLD",
        18 => "SIGCONT",
        19 => "SIGSTOP",
        20 => "SIGTSTP",
        21 => "SIGTTIN",
        22 => "SIGTTOU",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("SIG{n}"),
    };
    name.to_string()
}
