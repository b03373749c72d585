//! Request shapes: the thinking-mode tool loop of fixture 15 (exact request 1 body, exact tails
//! of requests 2 and 3, replay after a resume), plain turns, quirk flags, tools and tool results,
//! thinking on/off mapping, headers.

use dsh_kernel::ErrorCode;
use dsh_llm::{ContentBlock, Message, ToolSchema};
use dsh_llm_deepseek::{Quirks, RouteConfig, build_body, thinking_for};
use dsh_test_support::{ReplayServer, ScriptResponse};
use serde_json::{Value, json};

use crate::common::*;

fn loop_fixture() -> Value {
    wire_json("ds_v4_request_thinking_tool_loop.json")
}

fn tools_from(req: &Value) -> Vec<ToolSchema> {
    req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| ToolSchema {
            name: t["function"]["name"].as_str().unwrap().to_owned(),
            description: t["function"]["description"].as_str().unwrap().to_owned(),
            parameters: t["function"]["parameters"].clone(),
        })
        .collect()
}

fn initial_history() -> Vec<Message> {
    vec![
        Message::user_text("Hi"),
        Message::assistant(
            vec![ContentBlock::text("Hello! How can I help?")],
            "deepseek",
            "deepseek-v4-pro",
            None,
        ),
        Message::user_text("What's the weather in Hangzhou tomorrow?"),
    ]
}

fn loop_opts(fx: &Value, history: &[Message]) -> dsh_llm::GenerateOptions {
    let mut o = opts("deepseek-v4-pro", Some("high"), history.to_vec());
    o.system = Some("You are a helpful assistant.".to_owned());
    o.tools = tools_from(&fx["request_1"]);
    o
}

fn tail(body: &Value, n: usize) -> Vec<Value> {
    let m = body["messages"].as_array().unwrap();
    m[m.len() - n..].to_vec()
}

#[tokio::test]
#[cfg_attr(
    not(shared_corpus),
    ignore = "needs ../shared/fixtures/wire beside the repository"
)]
async fn thinking_tool_loop_matches_fixture_across_steps_and_resume() {
    let fx = loop_fixture();
    let server = ReplayServer::with_responses(vec![
        ScriptResponse::sse(sse_from_assembled(
            &fx["response_1_assembled"],
            "tool_calls",
        )),
        ScriptResponse::sse(sse_from_assembled(
            &fx["response_2_assembled"],
            "tool_calls",
        )),
        ScriptResponse::sse(sse_from_assembled(&fx["response_3_assembled"], "stop")),
        ScriptResponse::sse(sse_from_assembled(&fx["response_3_assembled"], "stop")),
    ])
    .await
    .unwrap();
    let a = adapter(&server.base_url());
    let mut history = initial_history();

    // step 1
    let r1 = assemble(&collect(&a, loop_opts(&fx, &history)).await);
    assert_eq!(
        server.chat_bodies()[0],
        fx["request_1"],
        "request 1 exactly"
    );
    assert_eq!(r1.calls[0].0, "call_00_fDMUEgdMBLOCokfM7bekat3t");
    history.push(assistant_message(&r1, "deepseek-v4-pro"));
    history.push(Message::tool_result(
        r1.calls[0].0.as_str().into(),
        vec![ContentBlock::text("2026-07-31")],
        false,
    ));

    // step 2
    let r2 = assemble(&collect(&a, loop_opts(&fx, &history)).await);
    let body2 = &server.chat_bodies()[1];
    assert_eq!(
        tail(body2, 2),
        fx["request_2_messages_tail"].as_array().unwrap().clone()
    );
    // the prefix is byte-stable (cache friendly): request 1's messages, unchanged
    let m1 = fx["request_1"]["messages"].as_array().unwrap();
    assert_eq!(body2["messages"].as_array().unwrap()[..m1.len()], m1[..]);
    history.push(assistant_message(&r2, "deepseek-v4-pro"));
    history.push(Message::tool_result(
        r2.calls[0].0.as_str().into(),
        vec![ContentBlock::text("Cloudy 7~13°C")],
        false,
    ));

    // step 3
    let r3 = assemble(&collect(&a, loop_opts(&fx, &history)).await);
    let body3 = server.chat_bodies()[2].clone();
    assert_eq!(
        tail(&body3, 4),
        fx["request_3_messages_tail"].as_array().unwrap().clone()
    );
    assert_eq!(
        r3.text.as_deref(),
        fx["response_3_assembled"]["content"].as_str()
    );

    // "resume": history rebuilt from its serialized form, a fresh adapter instance
    let saved = serde_json::to_string(&history).unwrap();
    let resumed: Vec<Message> = serde_json::from_str(&saved).unwrap();
    let a2 = adapter(&server.base_url());
    let _ = collect(&a2, loop_opts(&fx, &resumed)).await;
    assert_eq!(server.chat_bodies()[3], body3, "same request after resume");
}

#[test]
fn plain_turn_has_no_reasoning_content_even_when_reasoning_was_recorded() {
    let route = dsh_llm_deepseek::DeepSeekSettings::default()
        .official
        .to_route();
    let history = vec![
        Message::user_text("Q"),
        Message::assistant(
            vec![ContentBlock::reasoning("think"), ContentBlock::text("A")],
            "deepseek",
            "deepseek-v4-flash",
            None,
        ),
        Message::user_text("Q2"),
    ];
    let body = build_body(&route, &opts("deepseek-v4-flash", Some("high"), history)).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role":"user","content":"Q"},
            {"role":"assistant","content":"A"},
            {"role":"user","content":"Q2"},
        ])
    );
}

fn tool_history(reasoning: Option<&str>) -> Vec<Message> {
    let mut blocks = Vec::new();
    if let Some(r) = reasoning {
        blocks.push(ContentBlock::reasoning(r));
    }
    blocks.push(ContentBlock::text("Running."));
    blocks.push(ContentBlock::tool_call(
        "call_1",
        "bash",
        "{\"command\":\"ls\"}",
    ));
    vec![
        Message::user_text("list"),
        Message::assistant(blocks, "deepseek", "deepseek-v4-flash", None),
        Message::tool_result(
            "call_1".into(),
            vec![ContentBlock::text("a\n"), ContentBlock::text("b")],
            true,
        ),
    ]
}

#[test]
fn tool_schemas_and_results_serialize_as_deepseek_expects() {
    let route = dsh_llm_deepseek::DeepSeekSettings::default()
        .official
        .to_route();
    let mut o = opts(
        "deepseek-v4-flash",
        Some("max"),
        tool_history(Some("Need ls.")),
    );
    o.tools = vec![ToolSchema {
        name: "bash".into(),
        description: "Run a command".into(),
        parameters: json!({"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}),
    }];
    o.max_tokens = Some(1000);
    o.temperature = Some(0.3);
    o.stop = Some(vec!["END".into()]);
    let body = build_body(&route, &o).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "deepseek-v4-flash",
            "thinking": {"type": "enabled"},
            "reasoning_effort": "max",
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type":"function","function":{"name":"bash","description":"Run a command",
                "parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}],
            "messages": [
                {"role":"user","content":"list"},
                {"role":"assistant","content":"Running.","reasoning_content":"Need ls.",
                 "tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},
                {"role":"tool","tool_call_id":"call_1","content":"a\n\nb"},
            ],
            "max_tokens": 1000,
            "stop": ["END"],
        }),
        "temperature omitted while thinking"
    );
}

#[test]
fn thinking_off_sends_temperature_and_no_effort() {
    let route = dsh_llm_deepseek::DeepSeekSettings::default()
        .official
        .to_route();
    let mut o = opts(
        "deepseek-v4-flash",
        Some("off"),
        vec![Message::user_text("x")],
    );
    o.temperature = Some(0.5);
    let body = build_body(&route, &o).unwrap();
    assert_eq!(body["thinking"], json!({"type":"disabled"}));
    assert_eq!(body.get("reasoning_effort"), None);
    assert_eq!(body["temperature"], json!(0.5));
    assert_eq!(thinking_for(Some("xhigh")).effort, Some("max"));
    assert_eq!(thinking_for(Some("low")).effort, Some("high"));
    assert_eq!(thinking_for(None).effort, Some("high"));
}

#[test]
fn missing_reasoning_follows_route_quirks() {
    let official = dsh_llm_deepseek::DeepSeekSettings::default()
        .official
        .to_route();
    let b = build_body(
        &official,
        &opts("deepseek-v4-flash", Some("high"), tool_history(None)),
    )
    .unwrap();
    assert_eq!(b["messages"][1]["reasoning_content"], json!(""));

    // recorded reasoning is never replaced by "" (even an empty-looking one stays verbatim)
    let b = build_body(
        &official,
        &opts("deepseek-v4-flash", Some("high"), tool_history(Some(" "))),
    )
    .unwrap();
    assert_eq!(b["messages"][1]["reasoning_content"], json!(" "));

    // a generic OpenAI-compatible route never receives reasoning_content (issue 13)
    let generic = RouteConfig::openai_compatible("gw", "http://127.0.0.1:1");
    let b = build_body(&generic, &opts("m", None, tool_history(Some("r")))).unwrap();
    assert_eq!(b["messages"][1].get("reasoning_content"), None);
    assert_eq!(b.get("thinking"), None);
    let b = build_body(&generic, &opts("m", None, tool_history(None))).unwrap();
    assert_eq!(b["messages"][1].get("reasoning_content"), None);

    // a route that says it wants it: recorded reasoning replayed, a missing one omitted
    let mut wants = RouteConfig::openai_compatible("local", "http://127.0.0.1:1");
    wants.quirks = Quirks {
        send_reasoning_content: true,
        ..Quirks::default()
    };
    let b = build_body(&wants, &opts("m", None, tool_history(Some("r")))).unwrap();
    assert_eq!(b["messages"][1]["reasoning_content"], json!("r"));
    let b = build_body(&wants, &opts("m", None, tool_history(None))).unwrap();
    assert_eq!(b["messages"][1].get("reasoning_content"), None);

    // the same from the user's `[providers.<id>]` tables
    let table: dsh_llm_deepseek::ProviderTable = serde_json::from_value(json!({
        "gw": {"base_url": "http://127.0.0.1:1"},
        "wants": {"base_url": "http://127.0.0.1:2", "send_reasoning_content": true},
        "both": {"base_url": "http://127.0.0.1:3", "send_reasoning_content": true,
                 "omit_reasoning_content": true},
    }))
    .unwrap();
    let s = table.to_settings(None);
    let routes = s.all_routes();
    let send: Vec<(&str, bool)> = routes
        .iter()
        .map(|r| (r.id.as_str(), r.quirks.send_reasoning_content))
        .collect();
    assert_eq!(
        send,
        [
            ("deepseek", true),
            ("both", false),
            ("gw", false),
            ("wants", true)
        ]
    );

    // developer role when the route allows it
    let mut dev = RouteConfig::openai_compatible("dev", "http://127.0.0.1:1");
    dev.quirks.no_developer_role = false;
    let mut o = opts("m", None, vec![Message::user_text("x")]);
    o.system = Some("sys".into());
    let b = build_body(&dev, &o).unwrap();
    assert_eq!(
        b["messages"][0],
        json!({"role":"developer","content":"sys"})
    );
}

#[test]
fn images_are_unsupported_content() {
    let route = dsh_llm_deepseek::DeepSeekSettings::default()
        .official
        .to_route();
    let m = Message::user(
        vec![ContentBlock::Image {
            attachment: json!({"id": "x"}),
        }],
        dsh_llm::MessageSource::User,
    );
    let e = build_body(&route, &opts("deepseek-v4-flash", None, vec![m])).unwrap_err();
    assert_eq!(e.code, dsh_llm::codes::UNSUPPORTED_CONTENT);
}

#[tokio::test]
async fn user_routes_with_v1_prefix_and_no_key_and_user_agent() {
    let server = ReplayServer::with_responses(vec![ScriptResponse::text("ok")])
        .await
        .unwrap();
    let mut s = settings(&server.base_url());
    s.official.enabled = false;
    s.routes.push(RouteConfig::openai_compatible(
        "llama",
        format!("{}/v1", server.base_url()),
    ));
    let a = adapter_with(s);
    assert_eq!(a.provider_ids(), ["llama"]);
    let mut o = opts("qwen", None, vec![Message::user_text("x")]);
    o.provider = "llama".into();
    let got = assemble(&collect(&a, o).await);
    assert_eq!(got.text.as_deref(), Some("ok"));
    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.headers.get("authorization"), None);
    assert_eq!(r.headers["user-agent"], dsh_llm_deepseek::USER_AGENT);
    assert_eq!(
        r.body,
        json!({"model":"qwen","stream":true,"stream_options":{"include_usage":true},
               "messages":[{"role":"user","content":"x"}]})
    );
}

#[tokio::test]
async fn missing_credential_fails_with_a_hint_and_sends_nothing() {
    let server = ReplayServer::with_responses(vec![]).await.unwrap();
    let a = dsh_llm_deepseek::DeepSeekAdapter::with_credentials(
        settings(&server.base_url()),
        dsh_llm_deepseek::StaticCredentials::new([]),
    )
    .unwrap();
    let got = assemble(
        &collect(
            &a,
            opts("deepseek-v4-flash", None, vec![Message::user_text("x")]),
        )
        .await,
    );
    let f = got.failure().unwrap();
    assert_eq!(f.code, dsh_llm::codes::MISSING_CREDENTIAL);
    assert!(f.message.contains("DEEPSEEK_API_KEY"));
    assert!(server.requests().is_empty());
    use dsh_llm::LlmAdapter;
    let info = a.provider_info("deepseek-official").unwrap();
    assert_eq!(
        (info.id.as_str(), info.configured),
        ("deepseek-official", false)
    );
    assert!(info.setup_hint.is_some());
}

#[test]
fn settings_section_deserializes_with_defaults() {
    let s: dsh_llm_deepseek::DeepSeekSettings = serde_json::from_value(json!({
        "timeouts": {"idle_ms": 1000},
        "routes": [{"id": "local", "base_url": "http://127.0.0.1:8080/v1",
                    "models": [{"id": "qwen"}], "quirks": {"send_reasoning_content": true}}]
    }))
    .unwrap();
    assert_eq!(s.timeouts.idle_ms, 1000);
    assert_eq!(s.timeouts.connect_ms, 10_000);
    assert_eq!(s.timeouts.first_byte_ms, 180_000);
    assert_eq!(s.official.base_url, "https://api.deepseek.com");
    assert!(s.routes[0].quirks.send_reasoning_content);
    assert!(s.routes[0].quirks.include_usage);
    let all = s.all_routes();
    assert_eq!(all[0].id, "deepseek");
    assert_eq!(all[0].aliases, ["deepseek-official"]);
    let dup = serde_json::from_value::<dsh_llm_deepseek::DeepSeekSettings>(json!({
        "routes": [{"id": "deepseek", "base_url": "http://x"}]
    }))
    .unwrap();
    let e = dsh_llm_deepseek::DeepSeekAdapter::new(dup).unwrap_err();
    assert_eq!(e.code(), "INVALID_SETTINGS");
    assert!(
        serde_json::from_value::<dsh_llm_deepseek::DeepSeekSettings>(json!({"bogus": 1})).is_err()
    );
}
