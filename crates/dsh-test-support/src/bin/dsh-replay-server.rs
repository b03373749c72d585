//! `dsh-replay-server SCRIPT.json [--port N] [--stateless] [--log FILE]`: serves a replay script
//! (format: `dsh_test_support` crate docs) on 127.0.0.1, prints `http://127.0.0.1:<port>` as the
//! first stdout line, and runs until killed (Ctrl-C / SIGINT stops it cleanly). Exit 2 on bad usage or a
//! bad script, 1 on I/O errors. Used by end-to-end tests of the dsh binary.

use std::io::Write;
use std::path::PathBuf;

use dsh_test_support::{ReplayOptions, ReplayServer, Script};

const USAGE: &str = "usage: dsh-replay-server SCRIPT.json [--port N] [--stateless] [--log FILE]";

const HELP: &str =
    "Serves a scripted OpenAI/DeepSeek-compatible chat-completions endpoint on 127.0.0.1 \
and prints its base URL (http://127.0.0.1:PORT) as the first stdout line; point dsh at it with \
DEEPSEEK_BASE_URL=<that URL> and any DEEPSEEK_API_KEY. Each request gets the next scripted response.

It also speaks the Anthropic Messages format: a POST to <URL>/v1/messages gets the same script \
as Anthropic SSE (thinking blocks with signatures, tool_use blocks, usage); point the anthropic \
route at it with ANTHROPIC_BASE_URL=<that URL> and any ANTHROPIC_API_KEY, or a \
format = \"anthropic\" route with base_url = <that URL>. Raw \"sse\" responses are served as \
they are on both paths.

SCRIPT.json is an array of responses (or {\"responses\": [...]}), each one of:
  {\"text\": \"the answer\"}                               a streamed text answer
  {\"tool_calls\": [[\"read\", {\"file_path\": \"a.txt\"}]]}   tool calls (name, arguments)
  {\"reasoning\": \"...\", \"text\": \"...\"}                    with reasoning first
  {\"text\": \"cut\", \"finish\": \"length\"}                    a finish reason
  {\"status\": 429, \"body\": {...}, \"headers\": {...}}         a plain HTTP error
  {\"sse\": \"data: ...\\n\\n\"}                               raw SSE frames
and may add \"delay_ms\" (per frame) or \"disconnect_after\" (frames).

  --port N      listen on port N (default: any free port)
  --stateless   pick the response by the number of assistant messages in the request, so every
                fresh session replays the same script
  --log FILE    append every recorded request to FILE, one JSON line each";

fn parse_args() -> Result<(PathBuf, ReplayOptions), String> {
    let mut args = std::env::args().skip(1);
    let mut script = None;
    let mut opts = ReplayOptions::default();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => {
                let v = args.next().ok_or("--port needs a value")?;
                opts.port = v.parse().map_err(|_| format!("bad port {v:?}"))?;
            }
            "--stateless" => opts.stateless = true,
            "--log" => opts.log = Some(PathBuf::from(args.next().ok_or("--log needs a value")?)),
            "-h" | "--help" => {
                let _ = writeln!(std::io::stdout(), "{USAGE}\n\n{HELP}");
                std::process::exit(0);
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}")),
            s => {
                if script.replace(PathBuf::from(s)).is_some() {
                    return Err(format!("more than one script given\n{USAGE}"));
                }
            }
        }
    }
    Ok((script.ok_or(USAGE)?, opts))
}

fn main() -> std::process::ExitCode {
    let (path, opts) = match parse_args() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let script = match std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|t| Script::from_json(&t).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        let server = match ReplayServer::start(script, opts).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                return std::process::ExitCode::from(1);
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", server.base_url());
        let _ = out.flush();
        drop(out);
        let _ = tokio::signal::ctrl_c().await;
        drop(server);
        std::process::ExitCode::SUCCESS
    })
}
