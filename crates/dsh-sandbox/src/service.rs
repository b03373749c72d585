//! The sandbox service ([`SandboxService`], provided as `Arc<SandboxService>` by the seam's
//! plugin): the configured mode and network switch, the registered runners, the cached runner
//! selection, and [`SandboxService::confine`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_session::Session;
use serde::Deserialize;

use crate::{
    CommandRunner, ConfinedArgv, Enforcement, SandboxError, SandboxMode, SandboxPolicy,
    SandboxRunner, confine_options, resolve_mode,
};

/// The `dsh-sandbox` settings section (`[sandbox]`; snake_case keys, unknown keys rejected).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// The top-level `permission_mode` (observed; `dsh-permissions` owns it): the standing
    /// sandbox mode. Default `workspace-write`.
    pub permission_mode: Option<String>,
    /// Whether confined commands keep the network. Default false: a new network namespace
    /// without outside connectivity.
    pub network: bool,
    /// Which runners may be selected, in the order registered (`["bwrap", "landlock"]` on
    /// Linux). `None` (default) = all; `[]` = none (every confined command then fails with
    /// `SANDBOX_UNAVAILABLE`).
    pub runners: Option<Vec<String>>,
    /// A runner executable replacing selection (no probe): it gets bubblewrap-style profile
    /// arguments, `--`, then the command. Default none.
    pub runner_command: Option<PathBuf>,
    /// Stderr substrings that mark `runner_command`'s own failures. Default none.
    pub runner_failure_signatures: Vec<String>,
}

/// The outcome of runner selection: the chosen runner with its enforcement, and why each other
/// candidate was not chosen (`(name, reason)`, in probe order).
#[derive(Debug, Clone)]
pub struct Selection {
    /// The runner in use, if any.
    pub chosen: Option<(Arc<dyn SandboxRunner>, Enforcement)>,
    /// `(runner name, why it was not used)` for each other candidate.
    pub failures: Vec<(String, String)>,
}

impl Selection {
    /// One line saying why no runner is usable: `"<name>: <reason>; …"` (or `no sandbox runner
    /// is registered`).
    pub fn failure_detail(&self) -> String {
        if self.failures.is_empty() {
            return "no sandbox runner is registered for this platform".to_owned();
        }
        self.failures
            .iter()
            .map(|(n, r)| format!("{n}: {r}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The sandbox service. Runner selection happens once (the first confine or
/// [`SandboxService::selection`]) and is cached until a runner is added.
#[derive(Debug)]
pub struct SandboxService {
    config: SandboxConfig,
    runners: Mutex<Vec<Arc<dyn SandboxRunner>>>,
    selected: Mutex<Option<Arc<Selection>>>,
}

impl SandboxService {
    /// A service with `config` and no runners.
    pub fn new(config: SandboxConfig) -> Self {
        Self {
            config,
            runners: Mutex::new(Vec::new()),
            selected: Mutex::new(None),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Registers a runner after those already registered (selection order); drops the cached
    /// selection.
    pub fn add_runner(&self, runner: Arc<dyn SandboxRunner>) {
        self.runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(runner);
        *self.selected.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The standing mode: the observed `permission_mode` (an unknown name counts as
    /// `read-only`, the narrowest), default `workspace-write`.
    pub fn configured_mode(&self) -> SandboxMode {
        match self.config.permission_mode.as_deref() {
            None => SandboxMode::WorkspaceWrite,
            Some(m) => SandboxMode::parse(m).unwrap_or(SandboxMode::ReadOnly),
        }
    }

    /// Whether confined commands keep the network (`[sandbox] network`).
    pub fn network(&self) -> bool {
        self.config.network
    }

    /// The policy of one call: mode per [`resolve_mode`] (escalation, then the session's
    /// `sandbox/mode`, then [`SandboxService::configured_mode`]); root = `workspace_root` (the
    /// caller passes the run's workspace root, the fs tools' fence — from a subdirectory of a
    /// repository that is the repository, not the session's `cwd`), canonicalised.
    pub fn policy_for(
        &self,
        session: Option<&Session>,
        escalated: Option<SandboxMode>,
        workspace_root: &Path,
    ) -> SandboxPolicy {
        let mode = resolve_mode(escalated, session, self.configured_mode());
        let root = workspace_root.to_path_buf();
        SandboxPolicy::new(mode, &root)
    }

    /// Selects the runner (cached): `runner_command` when configured; else the first
    /// registered runner allowed by `[sandbox] runners` whose probe passes.
    pub fn selection(&self) -> Arc<Selection> {
        let mut cached = self.selected.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = cached.as_ref() {
            return s.clone();
        }
        let s = Arc::new(self.select());
        *cached = Some(s.clone());
        s
    }

    fn select(&self) -> Selection {
        if let Some(program) = &self.config.runner_command {
            let runner: Arc<dyn SandboxRunner> = Arc::new(CommandRunner {
                program: program.clone(),
                failure_signatures: self.config.runner_failure_signatures.clone(),
            });
            return Selection {
                chosen: Some((runner, Enforcement::Full)),
                failures: Vec::new(),
            };
        }
        let runners = self
            .runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut failures = Vec::new();
        for r in runners {
            let name = r.name().to_owned();
            if let Some(allowed) = &self.config.runners
                && !allowed.contains(&name)
            {
                failures.push((name, "not in [sandbox] runners".to_owned()));
                continue;
            }
            match r.probe() {
                Ok(enforcement) => {
                    return Selection {
                        chosen: Some((r, enforcement)),
                        failures,
                    };
                }
                Err(why) => failures.push((name, why)),
            }
        }
        Selection {
            chosen: None,
            failures,
        }
    }

    /// Confines `argv` under `policy` with the selected runner.
    ///
    /// # Errors
    /// [`SandboxError::NotConfined`] for `danger-full-access`; [`SandboxError::Unavailable`]
    /// (with why every runner failed) when no runner is usable or the runner cannot confine.
    pub fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<ConfinedArgv, SandboxError> {
        if policy.mode == SandboxMode::DangerFullAccess {
            return Err(SandboxError::NotConfined);
        }
        let selection = self.selection();
        let Some((runner, enforcement)) = &selection.chosen else {
            return Err(SandboxError::Unavailable {
                mode: policy.mode,
                detail: Some(selection.failure_detail()),
            });
        };
        runner
            .confine(
                argv,
                policy,
                &confine_options(policy, self.config.network),
                *enforcement,
            )
            .map_err(|d| SandboxError::Unavailable {
                mode: policy.mode,
                detail: Some(d),
            })
    }
}

/// The detail of a spawn failure attributable to the runner, in upstream's shape: `Error:
/// spawn <program> ENOENT` (not found), `… EACCES` (permission denied), else `Error: spawn
/// <program>: <error>`.
pub fn spawn_failure_detail(program: &Path, err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => format!("Error: spawn {} ENOENT", program.display()),
        std::io::ErrorKind::PermissionDenied => {
            format!("Error: spawn {} EACCES", program.display())
        }
        _ => format!("Error: spawn {}: {err}", program.display()),
    }
}

/// Whether a spawn error of the confined argv is the runner's (not found / not executable).
pub fn is_runner_spawn_failure(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
    )
}

/// The argv `bash -c <command>` as confine takes it.
pub fn bash_argv(command: &str) -> Vec<OsString> {
    vec!["bash".into(), "-c".into(), command.into()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug)]
    struct Broken;
    impl SandboxRunner for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn probe(&self) -> Result<Enforcement, String> {
            Err("probe exited 1".into())
        }
        fn confine(
            &self,
            _: &[OsString],
            _: &SandboxPolicy,
            _: &crate::ConfineOptions,
            _: Enforcement,
        ) -> Result<ConfinedArgv, String> {
            Err("unreachable".into())
        }
    }

    #[test]
    fn no_usable_runner_is_unavailable_never_unconfined() {
        let s = SandboxService::new(SandboxConfig::default());
        s.add_runner(Arc::new(Broken));
        let p = SandboxPolicy::new(SandboxMode::ReadOnly, Path::new("/"));
        let e = s.confine(&bash_argv("true"), &p).unwrap_err();
        assert_eq!(dsh_kernel::ErrorCode::code(&e), "SANDBOX_UNAVAILABLE");
        assert_eq!(
            e.to_string(),
            format!(
                "{} Runner failure: broken: probe exited 1",
                crate::unavailable_message(SandboxMode::ReadOnly)
            )
        );
        let full = SandboxPolicy::new(SandboxMode::DangerFullAccess, Path::new("/"));
        assert_eq!(
            s.confine(&bash_argv("true"), &full),
            Err(SandboxError::NotConfined)
        );
    }
}
