//! Slash commands in `dsh exec`: a prompt starting with `/name` runs the custom command of
//! that name (Markdown files; its expansion becomes the prompt), else passes through when a
//! user-invocable skill has that name (the skill plugin then loads it), else is a usage error
//! (exit 2) listing the known commands and skills. See docs/upstream/commands.md.

use dsh_commands::markdown::{self, MarkdownCommand};
use dsh_commands::{CommandOutcome, Commands, parse, run_logged};
use dsh_skills::{SkillScope, Skills};

use crate::app::{App, UsageError};

/// The interactive shell's own commands (handled in `crate::interactive`), with their
/// descriptions.
pub(crate) const SHELL_BUILTINS: &[(&str, &str)] = &[
    ("compact", "summarise older history"),
    ("exit", "leave the shell"),
    ("help", "list the commands"),
    ("model", "show or set [PROVIDER/]MODEL"),
    ("new", "start a fresh session"),
    ("quit", "leave the shell"),
    ("resume", "continue a stored session: /resume ID"),
    ("sessions", "list the stored sessions"),
];

/// What the interactive shell does with one input line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShellInput {
    /// One of [`SHELL_BUILTINS`] (or any other `/…` that is not command syntax): the shell's
    /// own handling.
    Builtin(String),
    /// A prompt for the model: ordinary text, a custom command's expansion, or `/name` of a
    /// user-invocable skill (unchanged).
    Prompt(String),
    /// An unknown `/name`: the message to show.
    Error(String),
}

/// The user-invocable skills of `app`'s workspace, by name.
fn user_skills(app: &App) -> Vec<String> {
    app.kernel
        .root()
        .get::<Skills>()
        .map(|s| {
            s.snapshot(&SkillScope::project(&app.config.cwd))
                .skills
                .into_iter()
                .filter(|s| s.invocation.user_invocable)
                .map(|s| s.name)
                .collect()
        })
        .unwrap_or_default()
}

fn slash_list(names: Vec<String>) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names
            .iter()
            .map(|n| format!("/{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Classifies one line of the interactive shell (see [`ShellInput`]).
pub(crate) fn shell_input(app: &App, line: String) -> ShellInput {
    let Some(inv) = parse(&line) else {
        return if line.starts_with('/') {
            ShellInput::Builtin(line)
        } else {
            ShellInput::Prompt(line)
        };
    };
    if SHELL_BUILTINS.iter().any(|(n, _)| *n == inv.name) {
        return ShellInput::Builtin(line);
    }
    let custom = custom_commands(app);
    if let Some(c) = custom.get(&inv.name) {
        return match run_logged(app.kernel.root(), &inv, || {
            CommandOutcome::Prompt(markdown::expand(&c.template, &inv.raw_input))
        }) {
            CommandOutcome::Prompt(p) => ShellInput::Prompt(p),
            CommandOutcome::Success(t) => ShellInput::Error(t.unwrap_or_default()),
            CommandOutcome::Error(t) => ShellInput::Error(t),
        };
    }
    let skills = user_skills(app);
    if skills.contains(&inv.name) {
        return ShellInput::Prompt(line);
    }
    ShellInput::Error(format!(
        "unknown command /{}: not a command or skill (built-in: {}; custom: {}; skills: {})",
        inv.name,
        slash_list(
            SHELL_BUILTINS
                .iter()
                .map(|(n, _)| (*n).to_owned())
                .collect()
        ),
        slash_list(custom.into_keys().collect()),
        slash_list(skills)
    ))
}

/// The custom commands of `app`'s workspace (by precedence: `.dsh/commands`,
/// `.claude/commands`, `$DSH_HOME/commands`, `~/.claude/commands`); unreadable or invalid
/// files are reported on stderr and skipped.
pub(crate) fn custom_commands(app: &App) -> std::collections::BTreeMap<String, MarkdownCommand> {
    let home = dirs::home_dir();
    let dirs = markdown::command_dirs(
        Some(&app.config.cwd),
        Some(&app.config.dsh_home),
        home.as_deref(),
    );
    let (commands, errors) = markdown::load(&dirs);
    for e in errors {
        eprintln!("warning: skipping a custom command file: {e}");
    }
    commands
}

/// The prompt `dsh exec` sends for `prompt` (see the module docs).
///
/// # Errors
/// [`UsageError`] for a `/name` that is neither a command nor a user-invocable skill, or a
/// command of the interactive shell.
pub(crate) fn exec_prompt(app: &App, prompt: String) -> Result<String, UsageError> {
    let Some(inv) = parse(&prompt) else {
        return Ok(prompt);
    };
    let custom = custom_commands(app);
    if let Some(c) = custom.get(&inv.name) {
        let outcome = run_logged(app.kernel.root(), &inv, || {
            CommandOutcome::Prompt(markdown::expand(&c.template, &inv.raw_input))
        });
        return match outcome {
            CommandOutcome::Prompt(p) => Ok(p),
            CommandOutcome::Success(t) => Err(UsageError(t.unwrap_or_default())),
            CommandOutcome::Error(t) => Err(UsageError(t)),
        };
    }
    let registered = app
        .kernel
        .root()
        .get::<Commands>()
        .map(|c| c.list())
        .unwrap_or_default();
    if registered.iter().any(|d| d.name == inv.name)
        || SHELL_BUILTINS.iter().any(|(n, _)| *n == inv.name)
    {
        return Err(UsageError(format!(
            "/{} is a command of the interactive shell; run `dsh` to use it",
            inv.name
        )));
    }
    let skills: Vec<String> = app
        .kernel
        .root()
        .get::<Skills>()
        .map(|s| {
            s.snapshot(&SkillScope::project(&app.config.cwd))
                .skills
                .into_iter()
                .filter(|s| s.invocation.user_invocable)
                .map(|s| s.name)
                .collect()
        })
        .unwrap_or_default();
    if skills.contains(&inv.name) {
        return Ok(prompt);
    }
    let list = |names: Vec<String>| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names
                .iter()
                .map(|n| format!("/{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    Err(UsageError(format!(
        "unknown command /{}: no custom command or skill has that name (commands: {}; skills: {})",
        inv.name,
        list(custom.into_keys().collect()),
        list(skills)
    )))
}
