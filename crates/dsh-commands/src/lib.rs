//! dsh-commands: the slash-command seam.
//!
//! - [`parse`]: upstream's syntax, `^/([a-z][a-z0-9_-]*)` followed by the end or a blank; the
//!   rest of the line (after one separator) is the command's raw input.
//! - [`CommandDef`] and the [`Commands`] registry (a kernel service the seam's plugin provides):
//!   front ends register their built-ins (`/new`, `/model`, …) and list them for `/help`;
//!   [`Commands::run`] runs a handler between the `command/run` and `command/done` events.
//!   A command's result never starts a model turn by itself: a [`CommandOutcome::Prompt`] is
//!   a prompt the front end may send.
//! - [`markdown`]: custom commands from Markdown files (`.dsh/commands/*.md`,
//!   `.claude/commands/*.md`, `$DSH_HOME/commands/*.md`, `~/.claude/commands/*.md`): the file
//!   stem is the name, frontmatter `description` and `argument-hint`, the body expands
//!   `$ARGUMENTS` and `$1`…`$9` into a prompt.
//!
//! Behaviour and its upstream source: docs/upstream/commands.md.

pub mod markdown;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use dsh_kernel::Context;

/// A parsed `/name rest` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The command name (without `/`).
    pub name: String,
    /// Everything after the name and one separator (may be empty).
    pub raw_input: String,
}

/// Parses `input` as a command: `^/([a-z][a-z0-9_-]*)` then the end or one of space, tab, CR,
/// LF. `None` when it does not match (the text is then an ordinary prompt).
pub fn parse(input: &str) -> Option<Invocation> {
    let rest = input.strip_prefix('/')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return None;
    }
    let after = &rest[end..];
    let raw_input = match after.chars().next() {
        None => "",
        Some(c) if matches!(c, ' ' | '\t' | '\r' | '\n') => &after[c.len_utf8()..],
        Some(_) => return None,
    };
    Some(Invocation {
        name: name.to_owned(),
        raw_input: raw_input.to_owned(),
    })
}

/// Where a command comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandSource {
    /// A front end's own command (the interactive shell's `/new`, …).
    Builtin,
    /// A Markdown file.
    File(std::path::PathBuf),
}

/// What a command is, for listings and `/help`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDef {
    /// The name (lowercase, `[a-z][a-z0-9_-]*`).
    pub name: String,
    /// One line for listings.
    pub description: String,
    /// The argument hint (`<id>`, `[model]`), if any.
    pub argument_hint: Option<String>,
    /// Where it comes from.
    pub source: CommandSource,
}

/// What running a command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Done; an optional text to show.
    Success(Option<String>),
    /// A prompt for the model (custom commands); the front end sends it as a user message.
    Prompt(String),
    /// Failed, with the text to show.
    Error(String),
}

impl CommandOutcome {
    /// `success` / `prompt` / `error` (the `kind` of `command/done`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Success(_) => "success",
            Self::Prompt(_) => "prompt",
            Self::Error(_) => "error",
        }
    }
}

/// Payload of `command/run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    /// A fresh id per run (UUID v4).
    pub command_id: String,
    /// The command name.
    pub name: String,
    /// The raw input, when not empty.
    pub args: Option<String>,
}

/// Payload of `command/done`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDone {
    /// The id of the matching `command/run`.
    pub command_id: String,
    /// The outcome.
    pub outcome: CommandOutcome,
}

dsh_kernel::event! {
    /// `command/run` (emit): a command is about to run.
    pub struct CommandRunEvent: emit("command/run") => CommandRun;
}

dsh_kernel::event! {
    /// `command/done` (emit): a command finished (also on error).
    pub struct CommandDoneEvent: emit("command/done") => CommandDone;
}

/// A command's body: the raw input in, the outcome out.
pub type Handler = Arc<dyn Fn(&str) -> CommandOutcome + Send + Sync>;

/// The command registry (kernel service `ctx.get::<Commands>()`).
pub struct Commands {
    ctx: Context,
    entries: RwLock<BTreeMap<String, (CommandDef, Handler)>>,
}

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands").finish_non_exhaustive()
    }
}

impl Commands {
    /// An empty registry emitting its events through `ctx`.
    pub fn new(ctx: Context) -> Self {
        Self {
            ctx,
            entries: RwLock::new(BTreeMap::new()),
        }
    }

    /// Registers (or replaces) a command.
    pub fn register(&self, def: CommandDef, handler: Handler) {
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(def.name.clone(), (def, handler));
    }

    /// Every command, sorted by name.
    pub fn list(&self) -> Vec<CommandDef> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// The command `name`.
    pub fn get(&self, name: &str) -> Option<CommandDef> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|(d, _)| d.clone())
    }

    /// Runs `inv` between `command/run` and `command/done`; `None` when no such command is
    /// registered.
    pub fn run(&self, inv: &Invocation) -> Option<CommandOutcome> {
        let handler = self
            .entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&inv.name)
            .map(|(_, h)| h.clone())?;
        Some(run_logged(&self.ctx, inv, || handler(&inv.raw_input)))
    }
}

/// Runs `body` for `inv` between a `command/run` and a `command/done` emitted through `ctx`.
pub fn run_logged(
    ctx: &Context,
    inv: &Invocation,
    body: impl FnOnce() -> CommandOutcome,
) -> CommandOutcome {
    let command_id = uuid::Uuid::new_v4().to_string();
    ctx.emit::<CommandRunEvent>(&CommandRun {
        command_id: command_id.clone(),
        name: inv.name.clone(),
        args: (!inv.raw_input.is_empty()).then(|| inv.raw_input.clone()),
    });
    let outcome = body();
    ctx.emit::<CommandDoneEvent>(&CommandDone {
        command_id,
        outcome: outcome.clone(),
    });
    outcome
}

fn register(ctx: &Context) -> Result<(), dsh_kernel::BoxError> {
    ctx.provide(Arc::new(Commands::new(ctx.clone())))?.detach();
    Ok(())
}

dsh_kernel::plugin! {
    register = register,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        let p = |s: &str| parse(s).map(|i| (i.name, i.raw_input));
        assert_eq!(
            p("/review src/a.rs"),
            Some(("review".into(), "src/a.rs".into()))
        );
        assert_eq!(p("/new"), Some(("new".into(), String::new())));
        assert_eq!(p("/x-y_1\tz  w"), Some(("x-y_1".into(), "z  w".into())));
        assert_eq!(p("/Big"), None);
        assert_eq!(p("/a.b"), None);
        assert_eq!(p("/1a"), None);
        assert_eq!(p("not /a"), None);
        assert_eq!(p("/"), None);
    }

    #[test]
    fn runs_are_bracketed_by_events() {
        let kernel = dsh_kernel::Kernel::new();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        kernel
            .root()
            .on_emit::<CommandRunEvent>(move |r| {
                s.lock()
                    .unwrap()
                    .push(format!("run {} {:?}", r.name, r.args));
            })
            .unwrap()
            .detach();
        let s = seen.clone();
        kernel
            .root()
            .on_emit::<CommandDoneEvent>(move |d| {
                s.lock().unwrap().push(format!("done {}", d.outcome.kind()));
            })
            .unwrap()
            .detach();
        let commands = Commands::new(kernel.root().clone());
        commands.register(
            CommandDef {
                name: "hi".into(),
                description: "Says hi.".into(),
                argument_hint: None,
                source: CommandSource::Builtin,
            },
            Arc::new(|raw| CommandOutcome::Success(Some(format!("hi {raw}")))),
        );
        let out = commands.run(&parse("/hi you").unwrap()).unwrap();
        assert_eq!(out, CommandOutcome::Success(Some("hi you".into())));
        assert!(commands.run(&parse("/nope").unwrap()).is_none());
        assert_eq!(
            *seen.lock().unwrap(),
            ["run hi Some(\"you\")", "done success"]
        );
        assert_eq!(commands.list()[0].name, "hi");
    }
}
