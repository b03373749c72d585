//! `LlmService` tests: registration, replace, disposal, topology events, stream normalisation,
//! the `llm/stream` waterfall and call-config resolution.
//! See docs/upstream/llm.md (Runtime and adapter seam; Adapter contract).

// Test helpers outside #[test] fns may unwrap too (clippy.toml only covers #[test] bodies).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dsh_kernel::{Context, Kernel};
use dsh_llm::{
    AdaptersUpdated, ChunkStream, ContentBlock, FinishReason, GenerateOptions, LlmAdapter,
    LlmCallConfig, LlmFailure, LlmService, LlmStream, Message, ModelInfo, ProviderInfo,
    StreamChunk, TokenUsage,
};
use futures::StreamExt;
use serde_json::json;

#[derive(Clone, Copy, PartialEq)]
enum Tail {
    End,
    Pending,
    PanicInPoll,
}

struct Script {
    items: Vec<Result<StreamChunk, LlmFailure>>,
    tail: Tail,
    panic_on_start: bool,
    calls: AtomicUsize,
    seen: Mutex<Vec<GenerateOptions>>,
    models: Vec<ModelInfo>,
    info: Option<ProviderInfo>,
}

impl Script {
    fn new(items: Vec<Result<StreamChunk, LlmFailure>>) -> Self {
        Self {
            items,
            tail: Tail::End,
            panic_on_start: false,
            calls: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            models: Vec::new(),
            info: None,
        }
    }
}

impl LlmAdapter for Script {
    fn stream(&self, opts: GenerateOptions) -> ChunkStream {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(opts);
        if self.panic_on_start {
            panic!("boom at start");
        }
        let head = futures::stream::iter(self.items.clone());
        match self.tail {
            Tail::End => head.boxed(),
            Tail::Pending => head.chain(futures::stream::pending()).boxed(),
            Tail::PanicInPoll => head
                .chain(futures::stream::poll_fn(
                    |_| -> std::task::Poll<Option<Result<StreamChunk, LlmFailure>>> {
                        panic!("boom in poll")
                    },
                ))
                .boxed(),
        }
    }
    fn provider_info(&self, provider: &str) -> Option<ProviderInfo> {
        self.info.clone().map(|mut i| {
            i.id = provider.to_owned();
            i
        })
    }
    fn models(&self, _provider: &str) -> Vec<ModelInfo> {
        self.models.clone()
    }
}

fn text(index: u32, t: &str) -> StreamChunk {
    StreamChunk::TextDelta {
        index,
        text: t.into(),
    }
}
fn fin(reason: FinishReason) -> StreamChunk {
    StreamChunk::Finish {
        reason,
        replay_state: None,
    }
}
fn routes(r: &[&str]) -> Vec<String> {
    r.iter().map(|s| (*s).to_owned()).collect()
}
fn opts(provider: &str) -> GenerateOptions {
    GenerateOptions::new(
        &LlmCallConfig::new(provider, "m"),
        vec![Arc::new(Message::user_text("hi"))],
    )
}
fn setup() -> (Kernel, Context, LlmService, Arc<AtomicUsize>) {
    let kernel = Kernel::new();
    let ctx = kernel.root().child("llm").unwrap();
    let service = LlmService::new(ctx.clone());
    let updates = Arc::new(AtomicUsize::new(0));
    let u = updates.clone();
    ctx.on_emit::<AdaptersUpdated>(move |()| {
        u.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap()
    .detach();
    (kernel, ctx, service, updates)
}
async fn collect(s: ChunkStream) -> Vec<Result<StreamChunk, LlmFailure>> {
    s.collect().await
}
fn ids(service: &LlmService) -> Vec<String> {
    service.list_providers().into_iter().map(|p| p.id).collect()
}
fn only_finish(items: &[Result<StreamChunk, LlmFailure>]) -> &FinishReason {
    match items.last() {
        Some(Ok(StreamChunk::Finish { reason, .. })) => reason,
        other => panic!("expected a finish, got {other:?}"),
    }
}

#[tokio::test]
async fn registration_is_all_or_nothing() {
    let (_k, _ctx, s, updates) = setup();
    let h = s
        .register_adapter(routes(&["a", "b"]), Arc::new(Script::new(vec![])))
        .unwrap();
    assert_eq!(ids(&s), routes(&["a", "b"]));
    let err = s
        .register_adapter(routes(&["c", "b"]), Arc::new(Script::new(vec![])))
        .unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_ADAPTER");
    assert_eq!(
        err.to_string(),
        "an adapter for provider \"b\" is already registered"
    );
    assert_eq!(ids(&s), routes(&["a", "b"]));
    let err = s
        .register_adapter(routes(&["x", "x"]), Arc::new(Script::new(vec![])))
        .unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_ADAPTER");
    let err = s
        .register_adapter(vec![], Arc::new(Script::new(vec![])))
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ADAPTER");
    let err = s
        .register_adapter(routes(&[""]), Arc::new(Script::new(vec![])))
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ADAPTER");
    assert_eq!(ids(&s), routes(&["a", "b"]));
    assert_eq!(updates.load(Ordering::SeqCst), 1);
    assert_eq!(h.routes(), routes(&["a", "b"]));
    h.dispose();
}

#[tokio::test]
async fn replace_is_atomic_validated_and_fails_after_dispose() {
    let (_k, _ctx, s, updates) = setup();
    let h = s
        .register_adapter(routes(&["a", "b"]), Arc::new(Script::new(vec![])))
        .unwrap();
    let other = s
        .register_adapter(routes(&["z"]), Arc::new(Script::new(vec![])))
        .unwrap();
    assert_eq!(updates.load(Ordering::SeqCst), 2);
    h.replace(routes(&["b", "c"])).unwrap();
    assert_eq!(ids(&s), routes(&["z", "b", "c"]));
    assert_eq!(updates.load(Ordering::SeqCst), 3);
    // a conflict leaves the current routes untouched and emits nothing
    assert_eq!(
        h.replace(routes(&["d", "z"])).unwrap_err().code(),
        "DUPLICATE_ADAPTER"
    );
    assert_eq!(ids(&s), routes(&["z", "b", "c"]));
    assert_eq!(updates.load(Ordering::SeqCst), 3);
    // empty is legal and keeps the registration alive
    h.replace(vec![]).unwrap();
    assert_eq!(ids(&s), routes(&["z"]));
    assert!(!h.is_released());
    h.replace(routes(&["a"])).unwrap();
    assert_eq!(ids(&s), routes(&["z", "a"]));
    let control = h.routes_handle();
    h.dispose();
    assert_eq!(ids(&s), routes(&["z"]));
    assert!(control.is_released());
    let err = control.replace(routes(&["q"])).unwrap_err();
    assert_eq!(err.code(), "REGISTRATION_DISPOSED");
    assert_eq!(ids(&s), routes(&["z"]));
    assert_eq!(updates.load(Ordering::SeqCst), 6);
    drop(other);
    assert_eq!(ids(&s), Vec::<String>::new());
    assert_eq!(updates.load(Ordering::SeqCst), 7);
}

#[tokio::test]
async fn adapter_registered_through_a_plugin_scope_vanishes_with_it() {
    let (k, _ctx, s, updates) = setup();
    let plugin = k.root().child("plugin:adapter").unwrap();
    let control = s
        .register_adapter_in(&plugin, routes(&["p"]), Arc::new(Script::new(vec![])))
        .unwrap()
        .detach();
    assert_eq!(ids(&s), routes(&["p"]));
    plugin.dispose().await;
    assert_eq!(ids(&s), Vec::<String>::new());
    assert!(control.is_released());
    assert_eq!(updates.load(Ordering::SeqCst), 2);
    // registering through a disposed scope fails and leaves nothing behind
    let err = s
        .register_adapter_in(&plugin, routes(&["p"]), Arc::new(Script::new(vec![])))
        .unwrap_err();
    assert_eq!(err.code(), "INACTIVE_SCOPE");
    assert_eq!(ids(&s), Vec::<String>::new());
}

#[tokio::test]
async fn provider_info_and_catalog() {
    let (_k, _ctx, s, _u) = setup();
    let mut described = Script::new(vec![]);
    described.info = Some(ProviderInfo {
        id: String::new(),
        display_name: "DeepSeek".into(),
        configured: false,
        setup_hint: Some("set DEEPSEEK_API_KEY".into()),
    });
    let mut model = ModelInfo::new("m1");
    model.context_window = Some(1000);
    described.models = vec![model.clone()];
    let _h1 = s
        .register_adapter(routes(&["ds"]), Arc::new(described))
        .unwrap();
    let _h2 = s
        .register_adapter(routes(&["plain"]), Arc::new(Script::new(vec![])))
        .unwrap();
    assert_eq!(
        serde_json::to_value(s.list_providers()).unwrap(),
        json!([
            {"id":"ds","displayName":"DeepSeek","configured":false,"setupHint":"set DEEPSEEK_API_KEY"},
            {"id":"plain","displayName":"plain","configured":true}
        ])
    );
    assert_eq!(s.provider_info("nope"), None);
    assert!(s.has_provider("ds"));
    assert_eq!(s.models("ds").unwrap(), vec![model.clone()]);
    assert_eq!(s.models("nope").unwrap_err().code(), "NO_ADAPTER");
    assert_eq!(s.discover_models("ds").await.unwrap(), vec![model.clone()]);
    assert_eq!(s.resolve_model("ds", "m1"), Some(model.clone()));
    assert_eq!(s.resolve_model("ds", "m2"), None);
    assert_eq!(
        s.require_model("ds", "m2").unwrap_err().code(),
        "UNKNOWN_MODEL"
    );
    assert_eq!(s.require_model("x", "m2").unwrap_err().code(), "NO_ADAPTER");
    assert!(!s.same_adapter("ds", "plain"));
    assert!(s.same_adapter("ds", "ds"));
}

#[tokio::test]
async fn no_adapter_becomes_a_finish_error() {
    let (_k, _ctx, s, _u) = setup();
    let items = collect(s.stream(opts("missing"))).await;
    assert_eq!(items.len(), 1);
    assert_eq!(
        serde_json::to_value(items[0].as_ref().unwrap()).unwrap(),
        json!({"type":"finish","reason":{"kind":"error","failure":{
            "message":"no adapter registered for provider \"missing\"","code":"NO_ADAPTER"}}})
    );
}

#[tokio::test]
async fn adapter_err_becomes_finish_error_and_aborted_code_becomes_aborted() {
    let (_k, _ctx, s, _u) = setup();
    let failure = LlmFailure::new("RATE_LIMIT", "slow down").with_status(429);
    let _h = s
        .register_adapter(
            routes(&["a"]),
            Arc::new(Script::new(vec![
                Ok(text(0, "x")),
                Err(failure.clone()),
                Ok(text(0, "after")),
            ])),
        )
        .unwrap();
    let items = collect(s.stream(opts("a"))).await;
    assert_eq!(
        items,
        vec![Ok(text(0, "x")), Ok(fin(FinishReason::Error { failure }))]
    );
    let aborted = LlmFailure::new("ABORTED", "cancelled");
    let _h2 = s
        .register_adapter(
            routes(&["b"]),
            Arc::new(Script::new(vec![Err(aborted.clone())])),
        )
        .unwrap();
    let items = collect(s.stream(opts("b"))).await;
    assert_eq!(
        items,
        vec![Ok(fin(FinishReason::Aborted { failure: aborted }))]
    );
}

#[tokio::test]
async fn cancellation_while_waiting_ends_with_finish_aborted() {
    let (_k, _ctx, s, _u) = setup();
    let mut script = Script::new(vec![Ok(text(0, "partial"))]);
    script.tail = Tail::Pending;
    let _h = s
        .register_adapter(routes(&["a"]), Arc::new(script))
        .unwrap();
    let o = opts("a");
    let signal = o.signal.clone();
    let mut stream = s.stream(o);
    assert_eq!(stream.next().await, Some(Ok(text(0, "partial"))));
    signal.cancel();
    let rest: Vec<_> = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        stream.collect::<Vec<_>>(),
    )
    .await
    .expect("did not hang");
    assert_eq!(
        rest,
        vec![Ok(fin(FinishReason::Aborted {
            failure: LlmFailure::new("ABORTED", "request aborted")
        }))]
    );
    // an adapter Err after cancellation is reported as aborted too
    let (_k2, _c2, s2, _u2) = setup();
    let _h2 = s2
        .register_adapter(
            routes(&["a"]),
            Arc::new(Script::new(vec![Err(LlmFailure::new(
                "TRANSPORT",
                "reset",
            ))])),
        )
        .unwrap();
    let o = opts("a");
    o.signal.cancel();
    let items = collect(s2.stream(o)).await;
    assert_eq!(
        items,
        vec![Ok(fin(FinishReason::Aborted {
            failure: LlmFailure::new("TRANSPORT", "reset")
        }))]
    );
}

#[tokio::test]
async fn panics_in_the_adapter_become_finish_error() {
    let (_k, _ctx, s, _u) = setup();
    let mut at_start = Script::new(vec![]);
    at_start.panic_on_start = true;
    let mut in_poll = Script::new(vec![Ok(text(0, "x"))]);
    in_poll.tail = Tail::PanicInPoll;
    let _h1 = s
        .register_adapter(routes(&["start"]), Arc::new(at_start))
        .unwrap();
    let _h2 = s
        .register_adapter(routes(&["poll"]), Arc::new(in_poll))
        .unwrap();
    let items = collect(s.stream(opts("start"))).await;
    assert_eq!(
        items,
        vec![Ok(fin(FinishReason::Error {
            failure: LlmFailure::new("UNKNOWN", "LLM adapter panicked: boom at start")
        }))]
    );
    let items = collect(s.stream(opts("poll"))).await;
    assert_eq!(
        items,
        vec![
            Ok(text(0, "x")),
            Ok(fin(FinishReason::Error {
                failure: LlmFailure::new("UNKNOWN", "LLM adapter panicked: boom in poll")
            }))
        ]
    );
}

#[tokio::test]
async fn nothing_is_forwarded_after_finish() {
    let (_k, _ctx, s, _u) = setup();
    let _h = s
        .register_adapter(
            routes(&["a"]),
            Arc::new(Script::new(vec![
                Ok(text(0, "x")),
                Ok(fin(FinishReason::ToolCalls)),
                Ok(text(0, "late")),
                Ok(fin(FinishReason::Stop)),
            ])),
        )
        .unwrap();
    let items = collect(s.stream(opts("a"))).await;
    assert_eq!(
        items,
        vec![Ok(text(0, "x")), Ok(fin(FinishReason::ToolCalls))]
    );
}

#[tokio::test]
async fn stop_with_zero_blocks_is_empty_response() {
    let (_k, _ctx, s, _u) = setup();
    let usage = StreamChunk::Usage {
        usage: TokenUsage {
            input_tokens: 3,
            output_tokens: 0,
            ..TokenUsage::default()
        },
    };
    let _h1 = s
        .register_adapter(
            routes(&["empty"]),
            Arc::new(Script::new(vec![
                Ok(usage.clone()),
                Ok(fin(FinishReason::Stop)),
            ])),
        )
        .unwrap();
    let _h2 = s
        .register_adapter(
            routes(&["blank-block"]),
            Arc::new(Script::new(vec![
                Ok(StreamChunk::BlockStart {
                    index: 0,
                    block_type: "text".into(),
                }),
                Ok(fin(FinishReason::Stop)),
            ])),
        )
        .unwrap();
    let _h3 = s
        .register_adapter(
            routes(&["tools"]),
            Arc::new(Script::new(vec![Ok(fin(FinishReason::ToolCalls))])),
        )
        .unwrap();
    let items = collect(s.stream(opts("empty"))).await;
    assert_eq!(
        items,
        vec![
            Ok(usage),
            Ok(fin(FinishReason::Error {
                failure: LlmFailure::new(
                    "EMPTY_RESPONSE",
                    "model returned a completed response with no content"
                )
            }))
        ]
    );
    let items = collect(s.stream(opts("blank-block"))).await;
    assert_eq!(only_finish(&items), &FinishReason::Stop);
    let items = collect(s.stream(opts("tools"))).await;
    assert_eq!(only_finish(&items), &FinishReason::ToolCalls);
}

#[tokio::test]
async fn stream_waterfall_can_short_circuit_or_wrap() {
    let (_k, ctx, s, _u) = setup();
    let script = Arc::new(Script::new(vec![
        Ok(text(0, "adapter")),
        Ok(fin(FinishReason::Stop)),
    ]));
    let _h = s.register_adapter(routes(&["a"]), script.clone()).unwrap();
    let listener = ctx
        .on_waterfall::<LlmStream, _, _>(|o: GenerateOptions, next| async move {
            if o.model == "canned" {
                futures::stream::iter(vec![Ok(text(0, "canned")), Ok(fin(FinishReason::Stop))])
                    .boxed()
            } else {
                next.run(o)
                    .await
                    .map(|item| match item {
                        Ok(StreamChunk::TextDelta { index, text }) => Ok(StreamChunk::TextDelta {
                            index,
                            text: text.to_uppercase(),
                        }),
                        other => other,
                    })
                    .boxed()
            }
        })
        .unwrap();
    let mut canned = opts("a");
    canned.model = "canned".into();
    let items = collect(s.stream(canned)).await;
    assert_eq!(
        items,
        vec![Ok(text(0, "canned")), Ok(fin(FinishReason::Stop))]
    );
    assert_eq!(script.calls.load(Ordering::SeqCst), 0);
    // short-circuit works without any adapter for the provider too
    let mut canned = opts("unregistered");
    canned.model = "canned".into();
    let items = collect(s.stream(canned)).await;
    assert_eq!(
        items,
        vec![Ok(text(0, "canned")), Ok(fin(FinishReason::Stop))]
    );
    let items = collect(s.stream(opts("a"))).await;
    assert_eq!(
        items,
        vec![Ok(text(0, "ADAPTER")), Ok(fin(FinishReason::Stop))]
    );
    assert_eq!(script.calls.load(Ordering::SeqCst), 1);
    drop(listener);
    let items = collect(s.stream(opts("a"))).await;
    assert_eq!(
        items,
        vec![Ok(text(0, "adapter")), Ok(fin(FinishReason::Stop))]
    );
}

fn catalog_script() -> Script {
    let mut m = ModelInfo::new("m");
    m.context_window = Some(128_000);
    m.default_max_tokens = Some(8192);
    m.reasoning_efforts = vec!["high".into(), "max".into()];
    let mut s = Script::new(vec![Ok(text(0, "x")), Ok(fin(FinishReason::Stop))]);
    s.models = vec![m, ModelInfo::new("bare")];
    s
}

#[tokio::test]
async fn resolve_call_config_materialises_and_marks_defaults() {
    let (_k, _ctx, s, _u) = setup();
    let _h = s
        .register_adapter(routes(&["a"]), Arc::new(catalog_script()))
        .unwrap();
    let r = s
        .resolve_call_config(&LlmCallConfig::new("a", "m"))
        .unwrap();
    assert_eq!(r.context_window, Some(128_000));
    assert_eq!(
        serde_json::to_value(r.header(Some(String::new()), &[])).unwrap(),
        json!({"config":{"provider":"a","model":"m","reasoningEffort":"high","maxTokens":8192},
               "adapterDefaults":{"reasoningEffort":true,"maxTokens":true}})
    );
    let mut explicit = LlmCallConfig::new("a", "m");
    explicit.reasoning_effort = Some("max".into());
    explicit.max_tokens = Some(100);
    let r = s.resolve_call_config(&explicit).unwrap();
    assert_eq!(r.config, explicit);
    assert!(r.adapter_defaults.is_empty());
    let mut bad = LlmCallConfig::new("a", "m");
    bad.reasoning_effort = Some("low".into());
    let err = s.resolve_call_config(&bad).unwrap_err();
    assert_eq!(err.code(), "UNSUPPORTED_REASONING_EFFORT");
    // unknown model: advisory catalog, passes through
    let r = s
        .resolve_call_config(&LlmCallConfig::new("a", "other"))
        .unwrap();
    assert_eq!(r.config, LlmCallConfig::new("a", "other"));
    assert_eq!(r.context_window, None);
    assert_eq!(r.model, None);
    assert_eq!(
        s.resolve_call_config(&LlmCallConfig::new("zz", "m"))
            .unwrap_err()
            .code(),
        "NO_ADAPTER"
    );
}

/// Trial 14 defect 2: a defaulted `max_tokens` is fitted to the effective catalog (the
/// `[models]` overrides): at most `max_output_tokens` and a quarter of the window; an
/// explicit one is kept.
#[tokio::test]
async fn a_defaulted_max_tokens_is_fitted_to_the_catalog_overrides() {
    use dsh_llm::models::{ModelCatalog, ModelLimits, ModelsTable};
    let resolve = |table: &[(&str, Option<u64>, Option<u64>)], model: &str| {
        let mut t = ModelsTable::new();
        for (id, w, o) in table {
            t.insert(
                (*id).into(),
                ModelLimits {
                    context_window: *w,
                    max_output_tokens: *o,
                    ..ModelLimits::default()
                },
            );
        }
        let kernel = Kernel::new();
        let ctx = kernel.root().child("llm").unwrap();
        let catalog = ModelCatalog::builtin().with_overrides(&t).unwrap();
        let s = LlmService::with_catalog(ctx, catalog);
        let _h = s
            .register_adapter(routes(&["a"]), Arc::new(catalog_script()))
            .unwrap();
        let r = s
            .resolve_call_config(&LlmCallConfig::new("a", model))
            .unwrap();
        let mut explicit = LlmCallConfig::new("a", model);
        explicit.max_tokens = Some(100_000);
        let e = s.resolve_call_config(&explicit).unwrap();
        (
            r.config.max_tokens,
            r.adapter_defaults.max_tokens,
            r.context_window,
            e.config.max_tokens,
        )
    };
    // No override: 8192 ≤ 128,000 / 4.
    assert_eq!(
        resolve(&[], "m"),
        (Some(8192), true, Some(128_000), Some(100_000))
    );
    // A 16,000-token window leaves 4,000 for the output.
    assert_eq!(
        resolve(&[("m", Some(16_000), None)], "m"),
        (Some(4000), true, Some(16_000), Some(100_000))
    );
    assert_eq!(
        resolve(&[("m", None, Some(2000))], "m"),
        (Some(2000), true, Some(128_000), Some(100_000))
    );
    // No adapter default: the override's max_output_tokens reaches the request.
    assert_eq!(
        resolve(&[("bare", Some(32_000), Some(3000))], "bare"),
        (Some(3000), true, Some(32_000), Some(100_000))
    );
    assert_eq!(resolve(&[], "bare"), (None, false, None, Some(100_000)));
}

#[tokio::test]
async fn stream_materialises_defaults_and_rejects_unsupported_effort() {
    let (_k, _ctx, s, _u) = setup();
    let script = Arc::new(catalog_script());
    let _h = s.register_adapter(routes(&["a"]), script.clone()).unwrap();
    let items = collect(s.stream(opts("a"))).await;
    assert_eq!(only_finish(&items), &FinishReason::Stop);
    {
        let seen = script.seen.lock().unwrap();
        assert_eq!(seen[0].max_tokens, Some(8192));
        assert_eq!(seen[0].reasoning_effort.as_deref(), Some("high"));
    }
    let mut bad = opts("a");
    bad.reasoning_effort = Some("low".into());
    let items = collect(s.stream(bad)).await;
    assert_eq!(items.len(), 1);
    match only_finish(&items) {
        FinishReason::Error { failure } => {
            assert_eq!(failure.code, "UNSUPPORTED_REASONING_EFFORT")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(script.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn replay_state_only_reaches_the_owning_adapter_instance() {
    let (_k, _ctx, s, _u) = setup();
    let shared = Arc::new(Script::new(vec![
        Ok(text(0, "x")),
        Ok(fin(FinishReason::Stop)),
    ]));
    let _h1 = s
        .register_adapter(routes(&["a", "a2"]), shared.clone())
        .unwrap();
    let _h2 = s
        .register_adapter(routes(&["b"]), Arc::new(Script::new(vec![])))
        .unwrap();
    let with_replay = |provider: &str| {
        Arc::new(Message::assistant(
            vec![ContentBlock::text("t")],
            provider,
            "m",
            Some(json!({"response":1})),
        ))
    };
    let mut o = opts("a");
    o.messages = vec![with_replay("a2"), with_replay("b"), with_replay("gone")];
    let original_ids: Vec<_> = o.messages.iter().map(|m| m.id.clone()).collect();
    let _ = collect(s.stream(o)).await;
    let seen = shared.seen.lock().unwrap();
    let replays: Vec<_> = seen[0]
        .messages
        .iter()
        .map(|m| serde_json::to_value(&m.source).unwrap()["replayState"].clone())
        .collect();
    assert_eq!(
        replays,
        vec![
            json!({"response":1}),
            serde_json::Value::Null,
            serde_json::Value::Null
        ]
    );
    let ids: Vec<_> = seen[0].messages.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids, original_ids);
}

#[tokio::test]
async fn error_codes_and_failure_conversion() {
    use dsh_llm::LlmError;
    let e = LlmError::NoAdapter {
        provider: "p".into(),
    };
    let f: LlmFailure = e.into();
    assert_eq!(
        serde_json::to_value(&f).unwrap(),
        json!({"message":"no adapter registered for provider \"p\"","code":"NO_ADAPTER"})
    );
    let carried = LlmFailure::new("AUTH", "denied").with_status(401);
    let e = LlmError::from(carried.clone());
    assert_eq!(e.code(), "AUTH");
    assert_eq!(e.to_failure(), carried);
    assert_eq!(
        LlmError::RegistrationDisposed.code(),
        "REGISTRATION_DISPOSED"
    );
    assert_eq!(
        LlmError::UnknownModel {
            provider: "p".into(),
            model: "m".into()
        }
        .code(),
        "UNKNOWN_MODEL"
    );
}

#[tokio::test]
async fn scoped_stream_reaches_listeners_of_that_agent_scope_only() {
    let (k, _ctx, s, _u) = setup();
    let _h = s
        .register_adapter(
            routes(&["a"]),
            Arc::new(Script::new(vec![
                Ok(text(0, "x")),
                Ok(fin(FinishReason::Stop)),
            ])),
        )
        .unwrap();
    let key = dsh_kernel::ScopeKey::new("agent-1");
    let agent = k.root().tagged(key.clone(), "agent").unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    agent
        .on_waterfall::<LlmStream, _, _>(move |o: GenerateOptions, next| {
            h.fetch_add(1, Ordering::SeqCst);
            next.run(o)
        })
        .unwrap()
        .detach();
    let _ = collect(s.stream(opts("a"))).await;
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let items = collect(s.stream_scoped(Some(&key), opts("a"))).await;
    assert_eq!(items, vec![Ok(text(0, "x")), Ok(fin(FinishReason::Stop))]);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn adapter_metadata_must_preserve_the_route_id() {
    struct Liar;
    impl LlmAdapter for Liar {
        fn stream(&self, _opts: GenerateOptions) -> ChunkStream {
            futures::stream::empty().boxed()
        }
        fn provider_info(&self, provider: &str) -> Option<ProviderInfo> {
            Some(ProviderInfo {
                id: format!("{provider}-renamed"),
                display_name: "L".into(),
                configured: true,
                setup_hint: None,
            })
        }
    }
    let (_k, _ctx, s, updates) = setup();
    let err = s
        .register_adapter(routes(&["a"]), Arc::new(Liar))
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ADAPTER");
    assert_eq!(ids(&s), Vec::<String>::new());
    assert_eq!(updates.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn prepared_call_binds_one_adapter_and_is_one_shot() {
    let (_k, _ctx, s, _u) = setup();
    let first = Arc::new(catalog_script());
    let h = s.register_adapter(routes(&["a"]), first.clone()).unwrap();
    let prepared = s.prepare_call(&LlmCallConfig::new("a", "m")).unwrap();
    assert_eq!(prepared.context_window(), Some(128_000));
    assert!(prepared.adapter_defaults().max_tokens);
    assert!(prepared.adapter_defaults().reasoning_effort);
    // the route moves to another adapter between header logging and dispatch
    h.dispose();
    let second = Arc::new(Script::new(vec![
        Ok(text(0, "second")),
        Ok(fin(FinishReason::Stop)),
    ]));
    let _h2 = s.register_adapter(routes(&["a"]), second.clone()).unwrap();
    // config mismatch is refused before dispatch and does not consume the call
    let Err(err) = prepared.stream(None, opts("a")) else {
        panic!("mismatch accepted")
    };
    assert_eq!(err.code(), "INVALID_PREPARED_CALL");
    let o = GenerateOptions::new(prepared.config(), vec![Arc::new(Message::user_text("hi"))]);
    let items = collect(prepared.stream(None, o.clone()).unwrap()).await;
    assert_eq!(items, vec![Ok(text(0, "x")), Ok(fin(FinishReason::Stop))]);
    assert_eq!(first.calls.load(Ordering::SeqCst), 1);
    assert_eq!(second.calls.load(Ordering::SeqCst), 0);
    let Err(err) = prepared.stream(None, o) else {
        panic!("reuse accepted")
    };
    assert_eq!(err.code(), "INVALID_PREPARED_CALL");
    assert_eq!(
        err.to_string(),
        "invalid prepared call: a prepared LLM call can only be dispatched once"
    );
    assert_eq!(
        s.prepare_call(&LlmCallConfig::new("zz", "m"))
            .unwrap_err()
            .code(),
        "NO_ADAPTER"
    );
}

#[tokio::test]
async fn empty_failure_fields_are_normalised() {
    let (_k, _ctx, s, _u) = setup();
    let blank = LlmFailure {
        message: String::new(),
        code: String::new(),
        status: Some(500),
        provider_retry_after_ms: None,
        request_id: None,
    };
    let _h = s
        .register_adapter(routes(&["a"]), Arc::new(Script::new(vec![Err(blank)])))
        .unwrap();
    let items = collect(s.stream(opts("a"))).await;
    assert_eq!(
        items,
        vec![Ok(fin(FinishReason::Error {
            failure: LlmFailure::new("UNKNOWN", "LLM adapter failed").with_status(500)
        }))]
    );
}
