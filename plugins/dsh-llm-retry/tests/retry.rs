//! dsh-llm-retry behaviour with exact values: the delay formula, policy keys, settings
//! validation, the recovery decision table (retryable / not, max retries, Retry-After within and
//! over the cap in both modes, always-mode delegation), retry numbering, cancellation during
//! backoff (tokio paused time), and the exact logged payloads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_agent::{
    AgentRequestError, RequestErrorCtx, ResolvedRetryPolicy, RetryDecision, RetryMode,
};
use dsh_kernel::{CancellationToken, Context, ErrorCode, Kernel, Settings};
use dsh_llm::LlmFailure;
use dsh_llm_retry::*;
use dsh_session::{EventData, EventTypeRegistry, Session, StepData, TurnStartData};
use serde_json::{Value, json};

// ---------- pure functions ----------

fn normal(max_retries: u64, initial: f64, max: f64, jitter: f64) -> ResolvedRetryPolicy {
    ResolvedRetryPolicy {
        mode: RetryMode::Normal {
            max_retries,
            retryable_codes: [
                "EMPTY_RESPONSE",
                "RATE_LIMIT",
                "SERVER",
                "TIMEOUT",
                "TRANSPORT",
            ]
            .map(str::to_owned)
            .to_vec(),
        },
        initial_delay_ms: initial,
        max_delay_ms: max,
        jitter_ratio: jitter,
    }
}

#[test]
fn delay_formula_exact_values() {
    let p = ResolvedRetryPolicy::default();
    assert_eq!(local_delay_ms(&p, 1, 0.5), 500.0);
    assert_eq!(local_delay_ms(&p, 1, 0.0), 450.0);
    assert_eq!(local_delay_ms(&p, 1, 1.0), 550.0);
    assert_eq!(local_delay_ms(&p, 2, 0.5), 1000.0);
    // 1 − 0.1 + 0.2·0.25 evaluates to 0.9500000000000001 in IEEE doubles (as in JavaScript).
    assert_eq!(local_delay_ms(&p, 3, 0.25), 1900.0000000000002);
    assert_eq!(local_delay_ms(&p, 5, 0.5), 8000.0);
    assert_eq!(local_delay_ms(&p, 5, 1.0), 8800.0);
    // 16000 is capped to 10000 before jitter; jitter above 1 is capped again.
    assert_eq!(local_delay_ms(&p, 6, 0.0), 9000.0);
    assert_eq!(local_delay_ms(&p, 6, 1.0), 10000.0);
    // Huge retry numbers saturate instead of overflowing.
    assert_eq!(local_delay_ms(&p, 5000, 0.0), 9000.0);
    // No jitter.
    assert_eq!(local_delay_ms(&normal(5, 1.0, 1.0, 0.0), 1, 0.7), 1.0);
}

#[test]
fn policy_keys_match_upstream_json() {
    assert_eq!(
        policy_key(&ResolvedRetryPolicy::default()),
        r#"["normal",5,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],500,10000,0.1]"#
    );
    // The key recorded in the upstream corpus (empty-response-retry scenario).
    assert_eq!(
        policy_key(&normal(2, 1.0, 1.0, 0.0)),
        r#"["normal",2,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],1,1,0]"#
    );
    let unsorted = ResolvedRetryPolicy {
        mode: RetryMode::Normal {
            max_retries: 1,
            retryable_codes: vec!["TIMEOUT".to_owned(), "AUTH".to_owned()],
        },
        initial_delay_ms: 250.5,
        max_delay_ms: 1000.0,
        jitter_ratio: 0.25,
    };
    assert_eq!(
        policy_key(&unsorted),
        r#"["normal",1,["AUTH","TIMEOUT"],250.5,1000,0.25]"#
    );
    let always = ResolvedRetryPolicy {
        mode: RetryMode::Always,
        ..ResolvedRetryPolicy::default()
    };
    assert_eq!(policy_key(&always), r#"["always",500,10000,0.1]"#);
}

#[test]
fn settings_resolution_and_validation() {
    let s: RetrySettings = serde_json::from_value(json!({
        "max_retries": 2,
        "backoff": {"initial_delay_ms": 1, "max_delay_ms": 1, "jitter_ratio": 0},
        "providers": {"flaky": {"mode": "always", "max_retries": 9}}
    }))
    .unwrap();
    let r = s.resolve().unwrap();
    assert_eq!(r.default, normal(2, 1.0, 1.0, 0.0));
    assert_eq!(
        r.policy_for("flaky"),
        &ResolvedRetryPolicy {
            mode: RetryMode::Always,
            ..ResolvedRetryPolicy::default()
        }
    );
    assert_eq!(r.policy_for("other"), &normal(2, 1.0, 1.0, 0.0));
    assert_eq!(
        RetrySettings::default().resolve().unwrap().default,
        ResolvedRetryPolicy::default()
    );

    let err = |v: Value| {
        serde_json::from_value::<RetrySettings>(v)
            .unwrap()
            .resolve()
            .unwrap_err()
    };
    let e = err(json!({"retryable_codes": []}));
    assert_eq!(e.code(), "INVALID_RETRY_POLICY");
    assert_eq!(
        e.to_string(),
        "dsh-llm-retry.retryable_codes: must not be empty"
    );
    assert_eq!(
        err(json!({"retryable_codes": ["A", "A"]})).to_string(),
        "dsh-llm-retry.retryable_codes: must not contain duplicates"
    );
    assert_eq!(
        err(json!({"retryable_codes": [""]})).to_string(),
        "dsh-llm-retry.retryable_codes: must contain only non-empty strings"
    );
    assert_eq!(
        err(json!({"backoff": {"initial_delay_ms": 0}})).to_string(),
        "dsh-llm-retry.backoff.initial_delay_ms: must be a positive finite number no greater than 2147483647"
    );
    assert_eq!(
        err(json!({"backoff": {"max_delay_ms": 3e9}})).to_string(),
        "dsh-llm-retry.backoff.max_delay_ms: must be a positive finite number no greater than 2147483647"
    );
    assert_eq!(
        err(json!({"backoff": {"initial_delay_ms": 20000}})).to_string(),
        "dsh-llm-retry.backoff.initial_delay_ms: must be less than or equal to max_delay_ms"
    );
    assert_eq!(
        err(json!({"providers": {"p": {"backoff": {"jitter_ratio": 1.5}}}})).to_string(),
        "dsh-llm-retry.providers.p.backoff.jitter_ratio: must be between 0 and 1"
    );
    assert!(serde_json::from_value::<RetrySettings>(json!({"retryPolicy": {}})).is_err());
    assert!(serde_json::from_value::<RetrySettings>(json!({"mode": "sometimes"})).is_err());
}

#[test]
fn js_numbers() {
    assert_eq!(js_number(500.0).to_string(), "500");
    assert_eq!(js_number(0.1).to_string(), "0.1");
    assert_eq!(js_number(472.5).to_string(), "472.5");
    assert_eq!(js_number(f64::NAN), Value::Null);
}

// ---------- recovery through the waterfall ----------

struct Harness {
    _kernel: Kernel,
    ctx: Context,
    session: Arc<Session>,
    terminal_calls: Arc<AtomicUsize>,
}

fn harness(settings: Value, random: f64) -> Harness {
    let kernel = Kernel::new();
    let ctx = kernel.root().child("dsh-llm-retry").unwrap();
    let resolved = serde_json::from_value::<RetrySettings>(settings)
        .unwrap()
        .resolve()
        .unwrap();
    install(&ctx, resolved, Arc::new(move || random))
        .unwrap()
        .detach();
    let registry = Arc::new(EventTypeRegistry::with_upstream_catalog());
    register_event_types(&registry).unwrap();
    let session = Arc::new(Session::create_with("retry-session", None, None, registry).unwrap());
    session
        .append(
            "turn/start",
            EventData::TurnStart(TurnStartData {
                turn: 1,
                trigger: None,
            }),
            None,
        )
        .unwrap();
    session
        .append(
            "step/start",
            EventData::StepStart(StepData { turn: 1, step: 1 }),
            None,
        )
        .unwrap();
    Harness {
        _kernel: kernel,
        ctx,
        session,
        terminal_calls: Arc::new(AtomicUsize::new(0)),
    }
}

fn failure(code: &str) -> LlmFailure {
    LlmFailure::new(code, format!("{code} happened"))
}

impl Harness {
    fn payload(
        &self,
        provider: &str,
        failure: LlmFailure,
        token: &CancellationToken,
    ) -> RequestErrorCtx {
        RequestErrorCtx {
            session: self.session.clone(),
            scope: None,
            turn: 1,
            step: 1,
            provider: provider.to_owned(),
            failure,
            retry_policy: None,
            cancellation: token.clone(),
        }
    }

    /// Dispatches with a terminal that counts its calls and returns `terminal`.
    async fn dispatch_with(
        &self,
        p: RequestErrorCtx,
        terminal: Option<RetryDecision>,
    ) -> Option<RetryDecision> {
        let calls = self.terminal_calls.clone();
        self.ctx
            .dispatch_to(None)
            .waterfall::<AgentRequestError, _, _>(p, move |_| async move {
                calls.fetch_add(1, Ordering::SeqCst);
                terminal
            })
            .await
    }

    async fn dispatch(&self, p: RequestErrorCtx) -> Option<RetryDecision> {
        self.dispatch_with(p, None).await
    }

    fn retry_events(&self) -> Vec<(String, Value)> {
        self.session
            .events()
            .iter()
            .filter(|e| e.kind.as_str().starts_with("llm/retry"))
            .map(|e| match &e.data {
                EventData::Opaque(v) => (e.kind.as_str().to_owned(), v.clone()),
                other => panic!("unexpected payload {other:?}"),
            })
            .collect()
    }

    fn calls(&self) -> usize {
        self.terminal_calls.load(Ordering::SeqCst)
    }
}

#[tokio::test(start_paused = true)]
async fn normal_retry_logs_exact_events_and_numbers_retries() {
    let h = harness(json!({}), 0.5);
    let token = CancellationToken::new();
    let start = tokio::time::Instant::now();
    let d = h
        .dispatch(h.payload("deepseek", failure("SERVER"), &token))
        .await;
    assert_eq!(d, Some(RetryDecision::Retry));
    assert_eq!(
        start.elapsed().as_millis(),
        500,
        "waited the virtual backoff"
    );
    assert_eq!(h.calls(), 0, "the plugin owns recovery: next is not called");
    let events = h.retry_events();
    assert_eq!(events.len(), 2);
    let retry_id = events[0].1["retryId"].as_str().unwrap().to_owned();
    assert_eq!(retry_id.len(), 36);
    assert_eq!(events[0].0, "llm/retry");
    assert_eq!(
        events[0].1.to_string(),
        json!({
            "retryId": retry_id,
            "turn": 1,
            "step": 1,
            "provider": "deepseek",
            "mode": "normal",
            "policyKey": "[\"normal\",5,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],500,10000,0.1]",
            "retry": 1,
            "maxRetries": 5,
            "delayMs": 500,
            "failure": {"message": "SERVER happened", "code": "SERVER"}
        })
        .to_string()
    );
    assert_eq!(events[1].0, "llm/retry-started");
    assert_eq!(
        events[1].1.to_string(),
        json!({"retryId": retry_id, "turn": 1, "step": 1, "retry": 1}).to_string()
    );

    // The next failure in the same step continues the numbering with the same retry id.
    let d = h
        .dispatch(h.payload("deepseek", failure("TIMEOUT"), &token))
        .await;
    assert_eq!(d, Some(RetryDecision::Retry));
    let events = h.retry_events();
    assert_eq!(events.len(), 4);
    assert_eq!(events[2].1["retry"], 2);
    assert_eq!(events[2].1["delayMs"], 1000);
    assert_eq!(events[2].1["retryId"], retry_id.as_str());
    assert_eq!(events[3].1["retry"], 2);

    // Another provider starts its own numbering with a fresh id.
    let d = h
        .dispatch(h.payload("other", failure("SERVER"), &token))
        .await;
    assert_eq!(d, Some(RetryDecision::Retry));
    let events = h.retry_events();
    assert_eq!(events[4].1["retry"], 1);
    assert_ne!(events[4].1["retryId"], retry_id.as_str());
}

#[tokio::test(start_paused = true)]
async fn jittered_delay_is_logged_fractional() {
    let h = harness(json!({}), 0.3);
    let token = CancellationToken::new();
    let d = h
        .dispatch(h.payload("p", failure("RATE_LIMIT"), &token))
        .await;
    assert_eq!(d, Some(RetryDecision::Retry));
    // 500 · (1 − 0.1 + 0.2·0.3) = 480
    let ev = &h.retry_events()[0].1;
    assert_eq!(ev["delayMs"].as_f64(), Some(500.0 * (0.9 + 0.2 * 0.3)));
}

#[tokio::test(start_paused = true)]
async fn non_retryable_codes_pass_through_untouched() {
    let h = harness(json!({}), 0.5);
    let token = CancellationToken::new();
    for code in ["AUTH", "CONTEXT_WINDOW_EXCEEDED", "ABORTED", "QUOTA"] {
        let d = h
            .dispatch_with(
                h.payload("p", failure(code), &token),
                Some(RetryDecision::Retry),
            )
            .await;
        assert_eq!(
            d,
            Some(RetryDecision::Retry),
            "downstream decides for {code}"
        );
    }
    assert_eq!(h.calls(), 4);
    assert!(h.retry_events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn max_retries_exhausted_delegates() {
    let h = harness(json!({"max_retries": 2}), 0.5);
    let token = CancellationToken::new();
    assert_eq!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)).await,
        Some(RetryDecision::Retry)
    );
    assert_eq!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)).await,
        Some(RetryDecision::Retry)
    );
    assert_eq!(h.calls(), 0);
    assert_eq!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)).await,
        None
    );
    assert_eq!(h.calls(), 1, "exhausted ⇒ delegated to next");
    assert_eq!(h.retry_events().len(), 4, "no event for the refused retry");

    // max_retries 0 never retries.
    let h0 = harness(json!({"max_retries": 0}), 0.5);
    assert_eq!(
        h0.dispatch(h0.payload("p", failure("SERVER"), &token))
            .await,
        None
    );
    assert!(h0.retry_events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn retry_after_within_cap_replaces_backoff_without_jitter() {
    let h = harness(json!({}), 1.0);
    let token = CancellationToken::new();
    let mut f = failure("RATE_LIMIT");
    f.provider_retry_after_ms = Some(2000);
    let start = tokio::time::Instant::now();
    assert_eq!(
        h.dispatch(h.payload("p", f.clone(), &token)).await,
        Some(RetryDecision::Retry)
    );
    assert_eq!(start.elapsed().as_millis(), 2000);
    let ev = &h.retry_events()[0].1;
    assert_eq!(ev["delayMs"], 2000);
    assert_eq!(
        ev["failure"],
        json!({"message": "RATE_LIMIT happened", "code": "RATE_LIMIT", "providerRetryAfterMs": 2000})
    );
    // Exactly at the cap is accepted.
    f.provider_retry_after_ms = Some(10000);
    assert_eq!(
        h.dispatch(h.payload("p", f, &token)).await,
        Some(RetryDecision::Retry)
    );
    assert_eq!(h.retry_events()[2].1["delayMs"], 10000);
}

#[tokio::test(start_paused = true)]
async fn retry_after_over_cap_normal_declines_always_uses_local_backoff() {
    let token = CancellationToken::new();
    let mut f = failure("RATE_LIMIT");
    // the ceiling is max_retry_wait_ms (default 120 000), not max_delay_ms
    f.provider_retry_after_ms = Some(120_001);

    let h = harness(json!({}), 0.5);
    assert_eq!(h.dispatch(h.payload("p", f.clone(), &token)).await, None);
    assert_eq!(h.calls(), 1);
    assert!(h.retry_events().is_empty());

    let h = harness(json!({"mode": "always"}), 0.5);
    assert_eq!(
        h.dispatch(h.payload("p", f, &token)).await,
        Some(RetryDecision::Retry)
    );
    assert_eq!(h.calls(), 1, "always mode consults downstream first");
    let ev = &h.retry_events()[0].1;
    assert_eq!(
        ev.to_string(),
        json!({
            "retryId": ev["retryId"],
            "turn": 1,
            "step": 1,
            "provider": "p",
            "mode": "always",
            "policyKey": "[\"always\",500,10000,0.1]",
            "retry": 1,
            "delayMs": 500,
            "failure": {"message": "RATE_LIMIT happened", "code": "RATE_LIMIT", "providerRetryAfterMs": 120001}
        })
        .to_string()
    );
}

#[tokio::test(start_paused = true)]
async fn always_mode_retries_everything_without_limit_and_downstream_wins() {
    let h = harness(
        json!({"mode": "always", "backoff": {"jitter_ratio": 0}}),
        0.5,
    );
    let token = CancellationToken::new();
    // A downstream retry decision wins and nothing is logged.
    assert_eq!(
        h.dispatch_with(
            h.payload("p", failure("AUTH"), &token),
            Some(RetryDecision::Retry)
        )
        .await,
        Some(RetryDecision::Retry)
    );
    assert!(h.retry_events().is_empty());
    for _ in 0..7 {
        assert_eq!(
            h.dispatch(h.payload("p", failure("AUTH"), &token)).await,
            Some(RetryDecision::Retry)
        );
    }
    let events = h.retry_events();
    assert_eq!(events.len(), 14);
    let delays: Vec<Value> = events
        .iter()
        .filter(|(k, _)| k == "llm/retry")
        .map(|(_, v)| v["delayMs"].clone())
        .collect();
    assert_eq!(
        delays,
        vec![
            json!(500),
            json!(1000),
            json!(2000),
            json!(4000),
            json!(8000),
            json!(10000),
            json!(10000)
        ]
    );
    assert_eq!(events[12].1["retry"], 7);
    assert!(events[12].1.get("maxRetries").is_none());
}

#[tokio::test(start_paused = true)]
async fn payload_policy_takes_precedence_over_settings() {
    let h = harness(json!({"providers": {"p": {"max_retries": 9}}}), 0.5);
    let token = CancellationToken::new();
    let mut p = h.payload("p", failure("SERVER"), &token);
    p.retry_policy = Some(normal(2, 1.0, 1.0, 0.0));
    assert_eq!(h.dispatch(p).await, Some(RetryDecision::Retry));
    let ev = &h.retry_events()[0].1;
    assert_eq!(ev["maxRetries"], 2);
    assert_eq!(ev["delayMs"], 1);
    // Without a payload policy the provider's configured one applies (a new policy key, so
    // numbering restarts).
    assert_eq!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)).await,
        Some(RetryDecision::Retry)
    );
    let ev = &h.retry_events()[2].1;
    assert_eq!(ev["maxRetries"], 9);
    assert_eq!(ev["retry"], 1);
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_backoff_writes_no_started_event() {
    let h = harness(json!({}), 0.5);
    let token = CancellationToken::new();
    let mut f = failure("RATE_LIMIT");
    f.provider_retry_after_ms = Some(10000);
    let start = tokio::time::Instant::now();
    let session = h.session.clone();
    let canceller = token.clone();
    let (d, ()) = tokio::join!(h.dispatch(h.payload("p", f, &token)), async move {
        // Busy-yield (so paused time cannot auto-advance) until the retry is logged.
        while !session
            .events()
            .iter()
            .any(|e| e.kind.as_str() == "llm/retry")
        {
            tokio::task::yield_now().await;
        }
        canceller.cancel();
    });
    assert_eq!(d, None);
    assert!(
        start.elapsed().as_millis() < 10000,
        "returned before the wait ended"
    );
    let kinds: Vec<String> = h.retry_events().into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, vec!["llm/retry"]);
    assert_eq!(h.calls(), 0);

    // A request whose turn is already cancelled logs nothing.
    assert_eq!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)).await,
        None
    );
    assert_eq!(h.retry_events().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn plugin_disposal_during_backoff_ends_the_wait() {
    let h = harness(json!({}), 0.5);
    let token = CancellationToken::new();
    let session = h.session.clone();
    let plugin = h.ctx.clone();
    let (d, ()) = tokio::join!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)),
        async move {
            while !session
                .events()
                .iter()
                .any(|e| e.kind.as_str() == "llm/retry")
            {
                tokio::task::yield_now().await;
            }
            plugin.dispose().await;
        }
    );
    assert_eq!(d, None);
    assert_eq!(h.retry_events().len(), 1);
}

// ---------- event types ----------

#[test]
fn declared_types_validate_payloads_and_accept_upstream_records() {
    let registry = Arc::new(EventTypeRegistry::with_upstream_catalog());
    register_event_types(&registry).unwrap();
    assert_eq!(registry.get("llm/retry").unwrap().owner, "dsh-llm-retry");
    assert_eq!(
        registry.get("llm/retry-started").unwrap().owner,
        "dsh-llm-retry"
    );
    let s = Session::create_with("types", None, None, registry).unwrap();
    s.append(
        "turn/start",
        EventData::TurnStart(TurnStartData {
            turn: 1,
            trigger: None,
        }),
        None,
    )
    .unwrap();
    // The upstream corpus record, verbatim.
    let upstream: Value = serde_json::from_str(r#"{"retryId":"dbe1e1b0-a914-48a4-ad9f-407b213a37ae","turn":1,"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"[\"normal\",2,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],1,1,0]","retry":1,"maxRetries":2,"delayMs":1,"failure":{"message":"model returned a completed response with no content","code":"EMPTY_RESPONSE"}}"#).unwrap();
    s.append_value("llm/retry", upstream.clone(), None, false)
        .unwrap();
    let typed: LlmRetryData = serde_json::from_value(upstream.clone()).unwrap();
    assert_eq!(typed.max_retries, Some(2));
    assert!(dsh_session::json_equiv(
        &serde_json::to_value(&typed).unwrap(),
        &upstream
    ));
    s.append_value(
        "llm/retry-started",
        json!({"retryId": "dbe1e1b0-a914-48a4-ad9f-407b213a37ae", "turn": 1, "step": 1, "retry": 1}),
        None,
        false,
    )
    .unwrap();
    let e = s
        .append_value("llm/retry", json!({"retry": "one"}), None, false)
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_PLUGIN_PAYLOAD");
}

#[tokio::test]
async fn plugin_boots_from_settings_and_owns_the_types() {
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(
            Settings::new().with_section("dsh-llm-retry", json!({"max_retries": 1})),
        ))
        .unwrap()
        .detach();
    let descs: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| d.id == "dsh-session" || d.id == "dsh-llm-retry")
        .collect();
    assert_eq!(descs.len(), 2);
    kernel.boot_with(&descs).await.unwrap();
    let registry = kernel.root().require::<EventTypeRegistry>().unwrap();
    assert_eq!(registry.get("llm/retry").unwrap().owner, "dsh-llm-retry");

    // Invalid settings fail the plugin's apply with the policy error.
    let bad = Kernel::new();
    bad.root()
        .provide(Arc::new(
            Settings::new().with_section("dsh-llm-retry", json!({"retryable_codes": []})),
        ))
        .unwrap()
        .detach();
    let only: Vec<_> = dsh_kernel::linked_plugins()
        .into_iter()
        .filter(|d| d.id == "dsh-llm-retry")
        .collect();
    let e = bad.boot_with(&only).await.unwrap_err();
    assert_eq!(e.code(), "PLUGIN_FAILED");
    assert!(
        e.to_string()
            .contains("dsh-llm-retry: dsh-llm-retry.retryable_codes: must not be empty"),
        "{e}"
    );
}

/// Records every [`LlmRetryNotice`] the harness's kernel emits.
fn notices(h: &Harness) -> Arc<std::sync::Mutex<Vec<RetryNotice>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    h.ctx
        .on_emit_with::<LlmRetryNotice>(dsh_kernel::ListenOptions::global(), move |n| {
            s.lock().unwrap().push(n.clone());
        })
        .unwrap()
        .detach();
    seen
}

#[tokio::test(start_paused = true)]
async fn provider_waits_up_to_max_retry_wait_ms_are_honoured_and_longer_ones_refused() {
    let token = CancellationToken::new();
    // a 30 s Retry-After (above the 10 s backoff maximum) is honoured by default
    let h = harness(json!({}), 0.5);
    let seen = notices(&h);
    let mut f = failure("RATE_LIMIT");
    f.provider_retry_after_ms = Some(30_000);
    let start = tokio::time::Instant::now();
    assert_eq!(
        h.dispatch(h.payload("p", f.clone(), &token)).await,
        Some(RetryDecision::Retry)
    );
    assert_eq!(start.elapsed().as_millis(), 30_000);
    assert_eq!(h.retry_events()[0].1["delayMs"], 30_000);
    assert_eq!(
        seen.lock().unwrap().clone(),
        [RetryNotice {
            session_id: "retry-session".into(),
            provider: "p".into(),
            failure: f.clone(),
            kind: RetryNoticeKind::Retrying {
                retry: 1,
                of: Some(5),
                delay_ms: 30_000.0,
                from_provider: true
            },
        }]
    );

    // a lower ceiling: the same wait fails at once, with a notice saying why
    let h = harness(json!({"max_retry_wait_ms": 20_000}), 0.5);
    let seen = notices(&h);
    let start = tokio::time::Instant::now();
    assert_eq!(h.dispatch(h.payload("p", f.clone(), &token)).await, None);
    assert_eq!(start.elapsed().as_millis(), 0);
    assert_eq!(h.calls(), 1);
    assert!(h.retry_events().is_empty());
    assert_eq!(
        seen.lock().unwrap().clone(),
        [RetryNotice {
            session_id: "retry-session".into(),
            provider: "p".into(),
            failure: f,
            kind: RetryNoticeKind::WaitTooLong {
                asked_ms: 30_000,
                ceiling_ms: 20_000
            },
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_retried_twice_by_default() {
    let token = CancellationToken::new();
    let h = harness(json!({"backoff": {"jitter_ratio": 0}}), 0.5);
    let seen = notices(&h);
    for _ in 0..2 {
        assert_eq!(
            h.dispatch(h.payload("p", failure("TIMEOUT"), &token)).await,
            Some(RetryDecision::Retry)
        );
    }
    assert_eq!(
        h.dispatch(h.payload("p", failure("TIMEOUT"), &token)).await,
        None
    );
    assert_eq!(h.calls(), 1);
    let kinds: Vec<RetryNoticeKind> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|n| n.kind.clone())
        .collect();
    assert_eq!(
        kinds,
        [
            RetryNoticeKind::Retrying {
                retry: 1,
                of: Some(2),
                delay_ms: 500.0,
                from_provider: false
            },
            RetryNoticeKind::Retrying {
                retry: 2,
                of: Some(2),
                delay_ms: 1000.0,
                from_provider: false
            },
        ]
    );
    // other codes keep max_retries: a server error after the two timeouts is retry 3 of 5
    assert_eq!(
        h.dispatch(h.payload("p", failure("SERVER"), &token)).await,
        Some(RetryDecision::Retry)
    );
    // and the cap is a setting
    let h = harness(json!({"max_timeout_retries": 0}), 0.5);
    assert_eq!(
        h.dispatch(h.payload("p", failure("TIMEOUT"), &token)).await,
        None
    );
}
