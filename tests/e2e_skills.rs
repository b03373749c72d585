//! Skills end to end through the built `dsh` binary against the replay provider: the upstream
//! `skill-load` session reproduced (the catalog message, the `skill` call and its result, byte
//! for byte), the rank rule between `.dsh/skills` and `.claude/skills`, a malformed
//! `SKILL.md` skipped with one warning, and `/name` user invocation.
//!
//! Behaviour: docs/upstream/skills.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::e2e::{Replay, Sandbox, code, run, text};
use serde_json::{Value, json};

const HANG_LIMIT: Duration = Duration::from_secs(60);
const KEY: &str = "sk-e2e-skills";

fn write(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// A SKILL.md with a JSON-quoted (hence YAML-quoted) description.
fn skill_md(name: &str, description: &str, extra: &str, body: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: {}\n{extra}---\n\n{body}\n",
        serde_json::to_string(description).unwrap()
    )
}

/// Every event of the one session log under `$DSH_HOME/sessions`.
fn session_events(home: &Path) -> Vec<Value> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
                out.push(p);
            }
        }
    }
    let mut logs = Vec::new();
    walk(&home.join("sessions"), &mut logs);
    assert_eq!(logs.len(), 1, "{logs:?}");
    std::fs::read_to_string(&logs[0])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn user_messages(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "user/message")
        .collect()
}

#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/conformance beside the repository"
)]
#[test]
fn the_upstream_skill_load_session_is_reproduced() {
    let path =
        dsh_shared_corpus::require(env!("CARGO_MANIFEST_DIR"), "conformance/upstream-sessions")
            .join("examples__acp-agent__snapshots__skill-load__session.jsonl");
    let upstream: Vec<Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let catalog = upstream
        .iter()
        .find(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "skill-catalog")
        .unwrap();
    let catalog_text = catalog["data"]["content"][0]["text"].as_str().unwrap();
    let catalog_source = &catalog["data"]["source"];
    let result = upstream
        .iter()
        .find(|e| e["type"] == "tool/result")
        .unwrap();
    let result_text = result["data"]["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    let prompt = upstream[1]["data"]["inserted"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    let body = result_text
        .split_once("<skill_instructions>\n")
        .unwrap()
        .1
        .rsplit_once("\n</skill_instructions>")
        .unwrap()
        .0;

    let sb = Sandbox::new();
    let entries = catalog_source["entries"].as_array().unwrap();
    let desc = |i: usize| entries[i]["description"].as_str().unwrap();
    let skills = sb.repo.join(".dsh/skills");
    write(
        &skills.join("editing-cordis-compositions/SKILL.md"),
        &skill_md("editing-cordis-compositions", desc(0), "", body),
    );
    write(
        &skills.join("model-only-skill/SKILL.md"),
        &skill_md(
            "model-only-skill",
            desc(1),
            "user-invocable: false\n",
            "Model only.",
        ),
    );
    write(
        &skills.join("snapshot-skill/SKILL.md"),
        &skill_md("snapshot-skill", desc(2), "", "Snapshot."),
    );
    // A user-only skill is never in the catalog.
    write(
        &skills.join("user-only/SKILL.md"),
        &skill_md(
            "user-only",
            "Hidden.",
            "disable-model-invocation: true\n",
            "User only.",
        ),
    );

    let replay = Replay::start(json!([
        {"tool_calls": [["skill", {"name": "editing-cordis-compositions"}]]},
        {"text": "DONE"},
    ]));
    let out = run(sb.dsh(&replay.url(), KEY, &["exec", prompt]), HANG_LIMIT);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "DONE");

    let events = session_events(&sb.home);
    let users = user_messages(&events);
    let catalogs: Vec<&&Value> = users
        .iter()
        .filter(|e| e["data"]["source"]["kind"] == "skill-catalog")
        .collect();
    assert_eq!(catalogs.len(), 1, "sent once: the digest did not change");
    assert_eq!(catalogs[0]["data"]["content"][0]["text"], catalog_text);
    assert_eq!(&catalogs[0]["data"]["source"], catalog_source);
    // The catalog is the last message of step 1, after the prompt.
    let step1: Vec<&Value> = events
        .iter()
        .skip_while(|e| e["type"] != "step/start")
        .take_while(|e| e["type"] != "request/header")
        .filter(|e| e["type"] == "user/message")
        .collect();
    assert_eq!(step1[0]["data"]["content"][0]["text"], prompt);
    assert_eq!(
        step1.last().unwrap()["data"]["source"]["kind"],
        "skill-catalog"
    );

    let got = events.iter().find(|e| e["type"] == "tool/result").unwrap();
    let cwd = sb.repo.display().to_string();
    assert_eq!(
        got["data"]["message"]["content"][0]["content"][0]["text"],
        result_text.replace("{{cwd}}", &cwd)
    );
    assert_eq!(got["data"]["message"]["content"][0]["isError"], false);
    // The model saw both.
    let first = replay.chat_requests()[0].body.to_string();
    assert!(first.contains(&serde_json::to_string(catalog_text).unwrap()));
    assert_eq!(replay.last_message(1), result_text.replace("{{cwd}}", &cwd));
}

#[test]
fn the_ranked_skill_wins_and_a_malformed_file_is_skipped_with_one_warning() {
    let sb = Sandbox::new();
    write(
        &sb.repo.join(".claude/skills/x/SKILL.md"),
        &skill_md("x", "From Claude Code.", "", "claude body"),
    );
    write(
        &sb.repo.join(".dsh/skills/x/SKILL.md"),
        &skill_md("x", "From dsh.", "", "dsh body"),
    );
    write(
        &sb.repo.join(".claude/skills/only-claude.md"),
        &skill_md("only-claude", "A flat Claude Code skill.", "", "flat body"),
    );
    write(
        &sb.repo.join(".dsh/skills/broken/SKILL.md"),
        "---\nname: broken\ndescription: [unclosed\n---\nbody\n",
    );
    let replay = Replay::start(json!([
        {"tool_calls": [["skill", {"name": "x"}]]},
        {"tool_calls": [["skill", {"name": "broken"}]]},
        {"text": "ok"},
    ]));
    let out = run(sb.dsh(&replay.url(), KEY, &["exec", "use x"]), HANG_LIMIT);
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("skipping invalid skill file"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    let broken = sb.repo.join(".dsh/skills/broken/SKILL.md");
    assert!(
        warnings[0].contains(&format!(
            "skipping invalid skill file {}: invalid frontmatter:",
            broken.display()
        )),
        "{}",
        warnings[0]
    );

    let events = session_events(&sb.home);
    let catalog = user_messages(&events)
        .into_iter()
        .find(|e| e["data"]["source"]["kind"] == "skill-catalog")
        .unwrap();
    assert_eq!(
        catalog["data"]["source"]["entries"],
        json!([
            {"name": "only-claude", "description": "A flat Claude Code skill."},
            {"name": "x", "description": "From dsh."},
        ])
    );
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .collect();
    let dir = sb.repo.join(".dsh/skills/x");
    assert_eq!(
        results[0]["data"]["message"]["content"][0]["content"][0]["text"],
        format!(
            "<skill_content name=\"x\">\n<skill_resources>\nBase directory for this skill: {}\nResolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.\n</skill_resources>\n\n<skill_instructions>\ndsh body\n</skill_instructions>\n</skill_content>",
            dir.display()
        )
    );
    assert_eq!(
        results[1]["data"]["message"]["content"][0]["content"][0]["text"],
        "Error: skill \"broken\" is unknown or no longer available"
    );
}

#[test]
fn a_slash_name_in_a_prompt_injects_the_skill_content() {
    let sb = Sandbox::new();
    write(
        &sb.home.join(".claude/skills/greet/SKILL.md"),
        &skill_md(
            "greet",
            "Greets.",
            "disable-model-invocation: true\n",
            "Say hello.",
        ),
    );
    let replay = Replay::start(json!([{"text": "hello"}]));
    let out = run(
        sb.dsh(&replay.url(), KEY, &["exec", "please /greet now"]),
        HANG_LIMIT,
    );
    assert_eq!(code(out.status), 0, "{}", text(&out.stderr));
    let events = session_events(&sb.home);
    let invoked: Vec<&Value> = user_messages(&events)
        .into_iter()
        .filter(|e| e["data"]["source"]["kind"] == "skill-invocation")
        .collect();
    assert_eq!(invoked.len(), 1);
    assert_eq!(
        invoked[0]["data"]["source"],
        json!({"kind": "skill-invocation", "name": "greet", "form": "instructions"})
    );
    let dir = sb.home.join(".claude/skills/greet");
    assert_eq!(
        invoked[0]["data"]["content"][0]["text"],
        format!(
            "<skill_content name=\"greet\">\n<skill_resources>\nBase directory for this skill: {}\nResolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.\n</skill_resources>\n\n<skill_instructions>\nSay hello.\n</skill_instructions>\n</skill_content>",
            dir.display()
        )
    );
    // No model-invocable skill: no catalog.
    assert!(
        !user_messages(&events)
            .iter()
            .any(|e| e["data"]["source"]["kind"] == "skill-catalog")
    );
}
