//! The approval service: outcomes, fail-closed mapping, audit events, policy, open-turn
//! precondition, cancellation.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use dsh_approval::*;
use dsh_kernel::{Context, ErrorCode, Kernel, ScopeKey};
use dsh_llm::{CallId, SessionId};
use dsh_session::{EventData, Session, TurnStartData};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Fx {
    _kernel: Kernel,
    root: Context,
    svc: ApprovalService,
    caller: ApprovalCaller,
}

fn setup(policy: ApprovalPolicy, open_turn: bool) -> Fx {
    let kernel = Kernel::new();
    let root = kernel.root().clone();
    let key = ScopeKey::new("agent");
    let ctx = root.tagged(key.clone(), "agent").unwrap();
    let session = Arc::new(Session::create("s1", None, None).unwrap());
    if open_turn {
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
    }
    let svc = ApprovalService::new(root.clone(), ApprovalConfig { policy });
    Fx {
        _kernel: kernel,
        root,
        svc,
        caller: ApprovalCaller {
            key,
            ctx,
            session,
            session_id: SessionId::new("s1"),
        },
    }
}

fn req(fx: &Fx) -> ApprovalRequest {
    ApprovalRequest {
        caller: fx.caller.clone(),
        tool_name: "shell".into(),
        call_id: Some(CallId::new("call_1")),
        reason: Some("runs a command".into()),
        signal: CancellationToken::new(),
    }
}

fn answer_with<F, Fut>(ctx: &Context, f: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut:
        std::future::Future<Output = Result<ApprovalAnswer, dsh_kernel::BoxError>> + Send + 'static,
{
    ctx.on_waterfall::<ApprovalRequestEvent, _, _>(move |_q, _next| f())
        .unwrap()
        .detach();
}

fn log(fx: &Fx) -> Vec<serde_json::Value> {
    fx.caller
        .session
        .events()
        .iter()
        .map(|e| {
            let v = e.to_value();
            json!({"type": v["type"], "data": v["data"]})
        })
        .collect()
}

#[tokio::test]
async fn default_without_answerer_is_unavailable_and_audited() {
    let fx = setup(ApprovalPolicy::Ask, true);
    let out = fx.svc.request(req(&fx)).await.unwrap();
    assert_eq!(out, ApprovalOutcome::Unavailable);
    let l = log(&fx);
    assert_eq!(l.len(), 3);
    let id = l[1]["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 36, "a v4 UUID: {id}");
    assert_eq!(
        l[1],
        json!({"type": "approval/asked", "data": {"id": id, "toolName": "shell", "callId": "call_1", "reason": "runs a command"}})
    );
    assert_eq!(
        l[2],
        json!({"type": "approval/decided", "data": {"id": id, "outcome": "unavailable"}})
    );
}

#[tokio::test]
async fn each_vocabulary_answer_is_returned() {
    for o in [
        ApprovalOutcome::AllowedOnce,
        ApprovalOutcome::Rejected,
        ApprovalOutcome::Cancelled,
        ApprovalOutcome::Unavailable,
    ] {
        let fx = setup(ApprovalPolicy::Ask, true);
        answer_with(
            &fx.root,
            move || async move { Ok(ApprovalAnswer::Outcome(o)) },
        );
        assert_eq!(fx.svc.request(req(&fx)).await.unwrap(), o);
        assert_eq!(log(&fx)[2]["data"]["outcome"], json!(o.as_str()));
    }
}

#[tokio::test]
async fn raw_answers_map_through_the_vocabulary() {
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::Other("allowed-once".into()))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::AllowedOnce
    );
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::Other("allowed-always".into()))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Unavailable
    );
}

#[tokio::test]
async fn a_rejection_with_a_reason_logs_rejected_and_keeps_the_reason_once() {
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::RejectedBecause(
            "use the tests instead".into(),
        ))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Rejected
    );
    assert_eq!(log(&fx)[2]["data"]["outcome"], json!("rejected"));
    let call = CallId::new("call_1");
    assert_eq!(
        fx.svc.take_rejection_reason(&fx.caller.session_id, &call),
        Some("use the tests instead".to_owned())
    );
    assert_eq!(
        fx.svc.take_rejection_reason(&fx.caller.session_id, &call),
        None
    );
    assert!(!fx.svc.take_grant(&fx.caller.session_id, &call));
}

#[tokio::test]
async fn throwing_or_panicking_answerer_is_unavailable() {
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async { Err("ui crashed".into()) });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Unavailable
    );
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        if true {
            panic!("ui panicked");
        }
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Unavailable
    );
    assert_eq!(log(&fx)[2]["data"]["outcome"], json!("unavailable"));
}

#[tokio::test]
async fn aborted_signal_is_cancelled_and_late_answers_are_dropped() {
    let fx = setup(ApprovalPolicy::Ask, true);
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    answer_with(&fx.root, move || {
        let g = g.clone();
        async move {
            g.notified().await;
            Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce))
        }
    });
    let r = req(&fx);
    let signal = r.signal.clone();
    let svc = fx.svc.clone();
    let task = tokio::spawn(async move { svc.request(r).await });
    tokio::task::yield_now().await;
    signal.cancel();
    assert_eq!(task.await.unwrap().unwrap(), ApprovalOutcome::Cancelled);
    gate.notify_one();
    assert_eq!(log(&fx)[2]["data"]["outcome"], json!("cancelled"));
    assert_eq!(log(&fx).len(), 3);

    // Already aborted: answerers are not consulted.
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce))
    });
    let r = req(&fx);
    r.signal.cancel();
    assert_eq!(fx.svc.request(r).await.unwrap(), ApprovalOutcome::Cancelled);
}

#[tokio::test]
async fn never_policy_rejects_without_asking() {
    let fx = setup(ApprovalPolicy::Never, true);
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a = asked.clone();
    answer_with(&fx.root, move || {
        a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce)) }
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Rejected
    );
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(log(&fx)[2]["data"]["outcome"], json!("rejected"));
}

#[tokio::test]
async fn policy_event_in_the_log_overrides_config() {
    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce))
    });
    assert_eq!(
        fx.svc.effective_policy(&fx.caller.session),
        ApprovalPolicy::Ask
    );
    fx.svc
        .set_policy(&fx.caller, ApprovalPolicy::Never)
        .unwrap();
    assert_eq!(
        fx.svc.effective_policy(&fx.caller.session),
        ApprovalPolicy::Never
    );
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Rejected
    );
    fx.svc.set_policy(&fx.caller, ApprovalPolicy::Ask).unwrap();
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::AllowedOnce
    );
    assert_eq!(
        log(&fx)[1],
        json!({"type": "approval/policy", "data": {"policy": "never"}})
    );
}

#[tokio::test]
async fn request_without_open_turn_fails_before_appending() {
    let fx = setup(ApprovalPolicy::Ask, false);
    let e = fx.svc.request(req(&fx)).await.unwrap_err();
    assert_eq!(e.code(), "NO_OPEN_TURN");
    assert_eq!(
        e.to_string(),
        "approval requires an open turn in session s1"
    );
    assert_eq!(fx.caller.session.len(), 0);
}

#[tokio::test]
async fn answerers_are_scope_filtered_by_the_callers_key() {
    let fx = setup(ApprovalPolicy::Ask, true);
    // An answerer for another agent never sees this request.
    let other = fx.root.tagged(ScopeKey::new("other"), "other").unwrap();
    answer_with(&other, || async {
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Unavailable
    );
    answer_with(&fx.caller.ctx, || async {
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Rejected))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Rejected
    );
}

#[tokio::test]
async fn plugin_provides_the_service_and_declares_typed_events() {
    use dsh_approval as _;
    let kernel = Kernel::new();
    let settings =
        dsh_kernel::Settings::new().with_section("dsh-approval", json!({"policy": "never"}));
    kernel.root().provide(Arc::new(settings)).unwrap().detach();
    kernel.boot().await.unwrap();
    let svc = kernel.root().get::<ApprovalService>().unwrap();
    assert_eq!(svc.configured_policy(), ApprovalPolicy::Never);
    let reg = dsh_session::EventTypeRegistry::shared_default();
    let decl = reg.get("approval/asked").unwrap();
    assert_eq!(decl.owner, "dsh-approval");
    assert!(!decl.between_turns);
    // The typed validator refuses a payload with an unmodelled field.
    let v = decl.validate.unwrap();
    assert!(v(&json!({"id": "x", "toolName": "t"})).is_ok());
    assert!(v(&json!({"id": "x", "toolName": "t", "args": {}})).is_err());
}

#[tokio::test]
async fn an_allowed_once_answer_grants_its_call_exactly_once() {
    let fx = setup(ApprovalPolicy::Ask, true);
    let s1 = SessionId::new("s1");
    let call = CallId::new("call_1");
    // nothing granted before an answer, and a refusal grants nothing
    assert!(!fx.svc.take_grant(&s1, &call));
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::Rejected))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::Rejected
    );
    assert!(!fx.svc.take_grant(&s1, &call));

    let fx = setup(ApprovalPolicy::Ask, true);
    answer_with(&fx.root, || async {
        Ok(ApprovalAnswer::Outcome(ApprovalOutcome::AllowedOnce))
    });
    assert_eq!(
        fx.svc.request(req(&fx)).await.unwrap(),
        ApprovalOutcome::AllowedOnce
    );
    // another call or session gets nothing; the call itself exactly once
    assert!(!fx.svc.take_grant(&s1, &CallId::new("call_2")));
    assert!(!fx.svc.take_grant(&SessionId::new("s2"), &call));
    assert!(fx.svc.take_grant(&s1, &call));
    assert!(!fx.svc.take_grant(&s1, &call));
}
