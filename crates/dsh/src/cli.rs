//! The command line: argument parsing, the subcommands, and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::{Harness, app, exec, hooks_cmd, interactive, render, sessions, settings, workspace};

/// dsh — a fast, reliable, extensible coding-agent harness.
#[derive(Parser, Debug)]
#[command(name = "dsh", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: Global,
    /// Start the interactive shell with this prompt as its first input (`dsh "fix the test"`).
    #[arg(value_name = "PROMPT")]
    prompt: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Args, Debug, Clone, Default)]
struct Global {
    /// Workspace root and launch directory (default: the nearest ancestor of the current
    /// directory holding `.git`, else the current directory).
    #[arg(short = 'C', long = "cwd", global = true, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Model id (default from settings, else deepseek-v4-flash).
    #[arg(short = 'm', long, global = true)]
    model: Option<String>,
    /// Provider route id (default from settings, else deepseek).
    #[arg(long, global = true)]
    provider: Option<String>,
    /// read-only | workspace-write | danger-full-access (default workspace-write).
    #[arg(long = "permission-mode", global = true, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Override a setting: `-c key=value` (TOML value; repeatable).
    #[arg(short = 'c', long = "config", global = true, value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// The most model steps one turn may take (`[agent] max_steps_per_turn`, default 200; 0 =
    /// no limit). A turn stopped by it ends `max-steps`; `exec` exits 5.
    #[arg(long = "max-steps", global = true, value_name = "N")]
    max_steps: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one task headlessly on a fresh persisted session and print the answer.
    Exec(ExecArgs),
    /// Continue a stored session interactively.
    Resume {
        /// Session id.
        id: Option<String>,
        /// The newest session of this workspace.
        #[arg(long)]
        last: bool,
    },
    /// Manage stored sessions.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// The command hooks in force (Claude Code and Codex), their source file and matcher.
    #[command(subcommand)]
    Hooks(hooks_cmd::HooksCommand),
    /// Print the version and the plugins this binary boots, with their settings.
    Plugins {
        /// One JSON array of `{id, enabled, after, aliases, topLevel, settingsSchema}`.
        #[arg(long)]
        json: bool,
    },
    /// MCP servers: `dsh mcp list` starts them and shows their state and tools.
    #[command(subcommand)]
    Mcp(crate::mcp_cmd::McpCommand),
    /// Print the resolved settings and the layer each value came from (needs no API key).
    Config {
        /// One JSON object: `{layers, plugins: {<id>: {<key>: {value, origin}}}, disabled}`.
        #[arg(long)]
        json: bool,
    },
    /// The OS sandbox for bash (`check`: the runner in use; exit 0 usable, 1 none).
    #[command(subcommand)]
    Sandbox(crate::sandbox_cmd::SandboxCommand),
}

#[derive(Args, Debug)]
struct ExecArgs {
    /// The task. `-` reads it from stdin.
    prompt: String,
    /// JSON Lines on stdout: every session event, then a terminal `result` line.
    #[arg(long)]
    json: bool,
    /// Run the prompt as a new turn of a stored session.
    #[arg(long, value_name = "ID", conflicts_with = "continue_last")]
    resume: Option<String>,
    /// Run the prompt as a new turn of this workspace's newest session.
    #[arg(long = "continue")]
    continue_last: bool,
    /// Do not persist the session.
    #[arg(long)]
    ephemeral: bool,
    /// Also write the final answer (the last assistant message's text) to FILE.
    #[arg(long, value_name = "FILE")]
    output_last_message: Option<PathBuf>,
}

fn workspace(global: &Global) -> Result<workspace::Dirs> {
    let current = std::env::current_dir().context("reading the current directory")?;
    Ok(workspace::resolve(global.cwd.as_deref(), &current)?)
}

fn load_config(h: &Harness, global: &Global, ephemeral: bool) -> Result<settings::Config> {
    let dirs = workspace(global).map_err(|e| app::UsageError(format!("{e:#}")))?;
    settings::load(
        h.plugins,
        h.defaults,
        &dirs.root,
        &settings::Overrides {
            launch_dir: Some(dirs.launch),
            // `--max-steps N` is `-c agent.max_steps_per_turn=N`, applied after every `-c`.
            pairs: global
                .config
                .iter()
                .cloned()
                .chain(
                    global
                        .max_steps
                        .map(|n| format!("agent.max_steps_per_turn={n}")),
                )
                .collect(),
            provider: global.provider.clone(),
            model: global.model.clone(),
            permission_mode: global.permission_mode.clone(),
            ephemeral,
        },
    )
    .map_err(|e| app::UsageError(format!("{e:#}")).into())
}

/// Writes `lines` joined by newlines, and a newline, to stdout (see [`out`]).
pub(crate) fn print_lines(lines: &[String]) -> Result<()> {
    out(&lines.join("\n"))
}

/// Writes `text` and a newline to stdout. A closed pipe (`dsh config | head -1`) ends the output
/// quietly; any other write failure is an error.
pub(crate) fn out(text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing to stdout"))
        }
        _ => Ok(()),
    }
}

fn print_plugins(config: &settings::Config, h: &Harness, as_json: bool) -> Result<()> {
    let mut all: Vec<&'static dsh_kernel::Plugin> = h.plugins.to_vec();
    all.sort_by_key(|p| p.id);
    all.dedup_by_key(|p| p.id);
    let enabled = |p: &dsh_kernel::Plugin| config.plugins.iter().any(|q| q.id == p.id);
    if as_json {
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(|p| {
                let spec = p.settings.as_ref();
                json!({
                    "id": p.id,
                    "enabled": enabled(p),
                    "after": p.after.iter().map(|a| a.id).collect::<Vec<_>>(),
                    "aliases": spec.map(|s| s.aliases.to_vec()).unwrap_or_default(),
                    "topLevel": spec.map(|s| s.top_level.to_vec()).unwrap_or_default(),
                    "observes": spec.map(|s| s.observes.to_vec()).unwrap_or_default(),
                    "restricted": spec.map(|s| s.restricted.to_vec()).unwrap_or_default(),
                    // `null`: the plugin takes no settings (any key for it is an error).
                    "settingsSchema": spec.map(|s| (s.schema)()),
                })
            })
            .collect();
        out(&serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    let mut text = vec![format!("dsh {}", env!("CARGO_PKG_VERSION"))];
    for p in all {
        let mut line = format!("  {}", p.id);
        if let Some(s) = &p.settings {
            let mut names = vec![format!("[plugins.{}]", p.id)];
            names.extend(s.aliases.iter().map(|a| format!("[{a}]")));
            names.extend(s.top_level.iter().map(|k| (*k).to_owned()));
            if !names.is_empty() {
                line.push_str(&format!("  settings: {}", names.join(" ")));
            }
        }
        if !enabled(p) {
            line.push_str("  (disabled)");
        }
        text.push(line);
    }
    out(&text.join("\n"))
}

/// How the workspace root was found, for `dsh config`.
fn workspace_source(config: &settings::Config, explicit: bool) -> &'static str {
    if explicit {
        "-C"
    } else if config.cwd.join(".git").symlink_metadata().is_ok() {
        "the nearest ancestor holding .git"
    } else {
        "the current directory (no .git above it)"
    }
}

/// The origin of the `dsh-agent` key `key` (`provider`, `model`), `built-in defaults` when no
/// layer set it.
fn agent_origin(config: &settings::Config, key: &str) -> String {
    config
        .resolved
        .origins
        .get(&format!("dsh-agent {key}"))
        .cloned()
        .unwrap_or_else(|| "built-in defaults".to_owned())
}

fn print_config(
    config: &settings::Config,
    h: &Harness,
    as_json: bool,
    explicit_cwd: bool,
) -> Result<()> {
    let resolved = &config.resolved;
    let mut plugins = serde_json::Map::new();
    let mut text = Vec::new();
    let ws_source = workspace_source(config, explicit_cwd);
    let (provider_origin, model_origin) = (
        agent_origin(config, "provider"),
        agent_origin(config, "model"),
    );
    // Without a model from any layer, a route that lists models uses its first one (`App::boot`,
    // `Config::model_for`). `dsh config` boots nothing: a `[providers.<id>]` table's `models`
    // in the settings give the model the run will use; other routes (built in) get a note.
    let listed = settings_route_models(config);
    let model = config.model_for(&listed);
    let model_note = if !config.model_is_default {
        ""
    } else if model != config.model {
        " (the route's first listed model)"
    } else if listed.is_empty() {
        " (or the route's first listed model, when it lists models without this one)"
    } else {
        ""
    };
    text.push(format!(
        "workspace: {}    # {ws_source}; project settings, AGENTS.md, the file fence and --continue use it",
        config.cwd.display()
    ));
    text.push(format!(
        "launch directory: {}    # recorded as a new session's cwd",
        config.launch_dir.display()
    ));
    text.push(format!(
        "provider: {}    # {provider_origin}",
        config.provider
    ));
    text.push(format!("model: {model}    # {model_origin}{model_note}"));
    text.push(
        "a resumed session keeps its own provider and model unless the command line sets them"
            .to_owned(),
    );
    text.push(format!("dsh_home: {}", config.dsh_home.display()));
    text.push(format!(
        "layers: {}",
        config
            .layers
            .iter()
            .map(|l| l.origin.as_str())
            .collect::<Vec<_>>()
            .join(" < ")
    ));
    if !resolved.disabled.is_empty() {
        text.push(format!(
            "plugins.disable = {:?}    # {}",
            resolved.disabled,
            resolved.disabled_origin.as_deref().unwrap_or_default()
        ));
    }
    let mut all: Vec<&'static dsh_kernel::Plugin> = h.plugins.to_vec();
    all.sort_by_key(|p| p.id);
    all.dedup_by_key(|p| p.id);
    for p in all {
        let Some(spec) = &p.settings else { continue };
        let mut entries = serde_json::Map::new();
        let prefix = format!("{} ", p.id);
        for (key, origin) in resolved.origins.range(prefix.clone()..) {
            let Some(path) = key.strip_prefix(&prefix) else {
                break;
            };
            let mut value = resolved.sections.get(p.id);
            for seg in path.split('.') {
                value = value.and_then(|v| v.get(seg));
            }
            entries.insert(
                path.to_owned(),
                json!({"value": redact_urls(value.cloned().unwrap_or(serde_json::Value::Null)), "origin": origin}),
            );
        }
        let set: Vec<String> = entries.keys().cloned().collect();
        let defaults: Vec<String> = spec
            .keys()
            .into_iter()
            .filter(|k| {
                !set.iter()
                    .any(|s| s == k || s.starts_with(&format!("{k}.")))
            })
            .collect();
        text.push(String::new());
        let mut head = format!("[plugins.{}]", p.id);
        if !spec.aliases.is_empty() {
            head.push_str(&format!("  (also [{}])", spec.aliases.join("], [")));
        }
        if !config.plugins.iter().any(|q| q.id == p.id) {
            head.push_str("  disabled");
        }
        text.push(head);
        for (k, e) in &entries {
            text.push(format!(
                "  {k} = {}    # {}",
                e["value"],
                e["origin"].as_str().unwrap_or_default()
            ));
        }
        // Keys left at their defaults, with the value the settings type's schema documents
        // (`null` where the plugin decides at start, e.g. an unset optional).
        let schema = (spec.schema)();
        let mut default_values = serde_json::Map::new();
        for k in &defaults {
            let value = schema
                .get("properties")
                .and_then(|props| props.get(k))
                .and_then(|prop| prop.get("default"))
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            if value.is_null() {
                text.push(format!("  {k}    # unset: the plugin's built-in behaviour"));
            } else {
                text.push(format!("  {k} = {value}    # default"));
            }
            default_values.insert(k.clone(), value);
        }
        plugins.insert(
            p.id.to_owned(),
            json!({"set": entries, "defaults": default_values}),
        );
    }
    if as_json {
        let out = json!({
            "workspace": config.cwd,
            "workspaceSource": ws_source,
            "launchDir": config.launch_dir,
            "provider": {"value": config.provider, "origin": provider_origin},
            "model": {"value": model, "origin": model_origin, "builtInDefault": config.model_is_default},
            "dshHome": config.dsh_home,
            "layers": config.layers.iter().map(|l| l.origin.clone()).collect::<Vec<_>>(),
            "disabled": resolved.disabled,
            "disabledOrigin": resolved.disabled_origin,
            "plugins": plugins,
        });
        self::out(&serde_json::to_string_pretty(&out)?)?;
    } else {
        self::out(&text.join("\n"))?;
    }
    Ok(())
}

async fn run(h: &Harness, cli: Cli) -> Result<i32> {
    match cli.command {
        Some(Command::Plugins { json }) => {
            let config = load_config(h, &cli.global, false)?;
            print_plugins(&config, h, json)?;
            Ok(0)
        }
        Some(Command::Config { json }) => {
            let config = load_config(h, &cli.global, false)?;
            print_config(&config, h, json, cli.global.cwd.is_some())?;
            Ok(0)
        }
        Some(Command::Sandbox(cmd)) => {
            let config = load_config(h, &cli.global, false)?;
            crate::sandbox_cmd::run(config, cmd).await
        }
        Some(Command::Exec(args)) => {
            let prompt = if args.prompt == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .context("reading the prompt from stdin")?;
                s
            } else {
                args.prompt
            };
            if prompt.trim().is_empty() {
                return Err(app::UsageError("the prompt is empty".into()).into());
            }
            let config = load_config(h, &cli.global, args.ephemeral)?;
            let app = app::App::boot(config).await?;
            // `/name args`: a custom command's prompt, a skill, or a usage error (exit 2).
            let prompt = match crate::commands::exec_prompt(&app, prompt) {
                Ok(p) => p,
                Err(e) => {
                    app.shutdown().await;
                    return Err(e.into());
                }
            };
            exec::run(
                app,
                exec::ExecRequest {
                    prompt,
                    format: if args.json {
                        render::Format::Json
                    } else {
                        render::Format::Text
                    },
                    resume: args.resume,
                    continue_last: args.continue_last,
                    output_last_message: args.output_last_message,
                },
            )
            .await
        }
        Some(Command::Mcp(cmd)) => {
            let config = load_config(h, &cli.global, true)?;
            let app = app::App::boot(config).await?;
            crate::mcp_cmd::run(app, cmd).await
        }
        Some(Command::Sessions(sessions::SessionsCommand::Compact { id })) => {
            let config = load_config(h, &cli.global, false)?;
            let app = app::App::boot(config).await?;
            crate::compact::run_sessions_compact(app, &id).await
        }
        Some(Command::Hooks(cmd)) => {
            let config = load_config(h, &cli.global, false)?;
            hooks_cmd::run(&config, cmd).await
        }
        Some(Command::Sessions(cmd)) => {
            let config = load_config(h, &cli.global, false)?;
            sessions::run(config, cmd).await
        }
        Some(Command::Resume { id, last }) => {
            let config = load_config(h, &cli.global, false)?;
            let app = app::App::boot(config).await?;
            let id = match (id, last) {
                (Some(id), _) => Some(id),
                (None, true) => Some(app.last_session_id()?),
                (None, false) => {
                    return Err(app::UsageError("dsh resume needs an ID or --last".into()).into());
                }
            };
            interactive::run(app, id, None).await
        }
        None => {
            if cli.prompt.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return Err(app::UsageError("the prompt is empty".into()).into());
            }
            let config = load_config(h, &cli.global, false)?;
            let app = app::App::boot(config).await?;
            interactive::run(app, None, cli.prompt).await
        }
    }
}

/// Runs the dsh command line for harness `h`: parses the arguments, boots `h`'s plugins with the
/// resolved settings, runs the subcommand and returns its exit code (0 completed, 1 turn error,
/// 2 usage or settings error, 3 output-token limit, 4 blocked by a pre-step policy, 5 step
/// limit, 130 cancelled).
pub fn main_with(h: &Harness) -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let args: Vec<String> = std::env::args().skip(1).collect();
            if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                && args.iter().any(|a| a == "exec")
                && args.iter().any(|a| a == "--json")
            {
                // clap's whole message (what is missing, a tip), without the usage line and
                // the pointer to --help that follow it.
                let message = e.render().to_string();
                let body = message.split("\n\nUsage:").next().unwrap_or_default();
                let body = body.trim_end();
                print_usage_result(body.strip_prefix("error: ").unwrap_or(body), "USAGE");
            }
            e.exit()
        }
    };
    let json_exec = matches!(&cli.command, Some(Command::Exec(a)) if a.json);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DSH_LOG")
                // Failures reach the user as one `error:` line; `DSH_LOG=warn` shows more.
                // Skipped skill files and MCP servers that fail are the user's own
                // configuration, so their warnings are shown by default.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(
                        "error,dsh_skill_filesystem=warn,dsh_mcp=warn",
                    )
                }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(h, cli));
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", crate::exit::error_line(&e));
            if json_exec {
                let code = crate::exit::code_of(&e).unwrap_or("ERROR");
                print_usage_result(&format!("{e:#}"), code);
            }
            crate::exit::for_error(&e)
        }
    };
    // Do not wait for background tasks (a hung provider connection) on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The model ids the settings list for the selected route (`[providers.<provider>] models`, each
/// a string or a table with an `id`), in order; empty when the settings list none (a built-in
/// route's own catalog is not in the settings).
fn settings_route_models(config: &settings::Config) -> Vec<String> {
    config
        .resolved
        .sections
        .get("dsh-llm-deepseek")
        .and_then(|t| t.get(&config.provider))
        .and_then(|r| r.get("models"))
        .and_then(serde_json::Value::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m.as_str().or_else(|| m.get("id")?.as_str()))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The terminal `result` line of `dsh exec --json` for a run that failed before any session
/// existed (a usage or configuration error, a provider that cannot be used): `{"type":"result",
/// "sessionId":null,"reason":"error","text":"","usage":null,"durationMs":0,"error":{"message",
/// "code"}}`, so a script reading JSON Lines always gets one result (docs/formats.md).
fn print_usage_result(message: &str, code: &str) {
    let line = json!({
        "type": "result",
        "sessionId": null,
        "reason": "error",
        "text": "",
        "usage": null,
        "durationMs": 0,
        "error": {"message": message, "code": code},
    });
    let _ = out(&line.to_string());
}

/// `value` with the user info of every URL string hidden (`scheme://user:***@host…`, the
/// provider's own display form, `dsh_llm_deepseek::redact_url`): settings may hold a `base_url`
/// with credentials in it, and `dsh config` output gets pasted into bug reports. Other strings
/// are unchanged.
fn redact_urls(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(dsh_llm_deepseek::redact_url(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(redact_urls).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, redact_urls(v))).collect())
        }
        other => other,
    }
}
