//! Provider defects a hostile trial of the built `dsh` binary found (issue 13), end to end: a
//! password in `DEEPSEEK_BASE_URL` appears on no output and in no stored file, a base URL with a
//! query or fragment and a zero timeout are configuration errors (exit 2) before any request.
//! Plugin-level cases: `plugins/dsh-llm-deepseek/tests/it/trial.rs`.
//!
//! The model is a loopback socket nobody listens on; nothing touches the network. Locating the
//! binary: see `common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::e2e::{Sandbox, code, run, text};

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

const API_KEY: &str = "sk-faults-trial";
/// "Did not hang" bound for one dsh run.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// A loopback port nobody listens on.
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if String::from_utf8_lossy(&std::fs::read(&p).unwrap()).contains(needle) {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

/// Every file under `dir` named `name`.
fn files_named(dir: &Path, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().is_some_and(|n| n == name) {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

#[test]
fn a_password_in_the_base_url_is_never_printed_or_stored() {
    let sb = Sandbox::new();
    let port = dead_port();
    let url = format!("http://user:s3cret@127.0.0.1:{port}");
    let out = run(
        sb.dsh(
            &url,
            API_KEY,
            &[
                "-c",
                "plugins.dsh-llm-retry.max_retries=1",
                "-c",
                "plugins.dsh-llm-retry.backoff.initial_delay_ms=20",
                "exec",
                "--json",
                "hi",
            ],
        ),
        HANG_LIMIT,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(out.status), 1, "{stderr}");
    let shown = format!("deepseek: POST http://user:***@127.0.0.1:{port}/chat/completions failed");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("  ↻ ") && l.contains(&shown)),
        "{stderr}"
    );
    assert!(stdout.contains(&shown), "{stdout}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(!stdout.contains("s3cret"), "{stdout}");
    assert_eq!(files_named(&sb.home, "session.jsonl").len(), 1);
    assert_eq!(files_containing(&sb.home, "s3cret"), Vec::<String>::new());
}

#[test]
fn a_base_url_with_a_query_or_fragment_is_exit_2_before_any_request() {
    let sb = Sandbox::new();
    let port = dead_port();
    let url = format!("http://127.0.0.1:{port}/v1?x=1#frag");
    let out = run(
        sb.dsh(&url, API_KEY, &["exec", "--ephemeral", "hi"]),
        HANG_LIMIT,
    );
    let stderr = text(&out.stderr);
    assert_eq!(code(out.status), 2, "{stderr}");
    assert_eq!(text(&out.stdout), "");
    assert!(
        stderr.contains(&format!(
            "provider route \"deepseek\" has an invalid base_url {url:?}: it has a query or a \
             fragment (dsh appends /chat/completions to the base URL, so it must end with its \
             path)"
        )),
        "{stderr}"
    );
}

#[test]
fn a_zero_timeout_is_exit_2_naming_the_key() {
    let sb = Sandbox::new();
    let url = format!("http://127.0.0.1:{}", dead_port());
    for key in [
        "connect_timeout_ms",
        "first_byte_timeout_ms",
        "stream_idle_timeout_ms",
    ] {
        let setting = format!("providers.deepseek.{key}=0");
        let out = run(
            sb.dsh(
                &url,
                API_KEY,
                &["-c", &setting, "exec", "--ephemeral", "hi"],
            ),
            HANG_LIMIT,
        );
        let stderr = text(&out.stderr);
        assert_eq!(code(out.status), 2, "{key}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "[providers.deepseek] {key} must be at least 1 (milliseconds); 0 would time out \
                 every request at once"
            )),
            "{stderr}"
        );
    }
}

/// A loopback server answering every request `429` with `Retry-After: <value>`.
fn rate_limited_server(value: &'static str) -> String {
    use std::io::{Read, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
            let body = r#"{"error":{"message":"slow down"}}"#;
            let _ = write!(
                s,
                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
                 retry-after: {value}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn a_retry_after_too_large_for_the_log_fails_at_once_as_a_rate_limit() {
    // Before: "session append failed: event data is not lossless JSON …" (the saturated wait
    // did not fit the log's integers).
    for value in ["99999999999999999999999", "9007199254741"] {
        let env = Sandbox::new();
        let url = rate_limited_server(value);
        let out = run(
            env.dsh(&url, API_KEY, &["exec", "--ephemeral", "hi"]),
            HANG_LIMIT,
        );
        let stderr = text(&out.stderr);
        assert_eq!(code(out.status), 1, "{stderr}");
        assert!(
            stderr.contains(
                "  ✗ not retrying: the provider asks to wait longer than dsh can represent, \
                 more than [agent] max_retry_wait_ms = 120000 ms"
            ),
            "{value}: {stderr}"
        );
        assert!(stderr.contains("(RATE_LIMIT)"), "{value}: {stderr}");
        assert!(!stderr.contains("SESSION_APPEND_FAILED"), "{stderr}");
    }
}
