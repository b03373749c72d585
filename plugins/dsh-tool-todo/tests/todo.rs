//! `todo_write` through the tools pipeline: validation, the appended `todo/write` event, the
//! UI read-out, and the parallel setting.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_kernel::{Kernel, ScopeKey, Settings};
use dsh_llm::SessionId;
use dsh_session::{EventData, EventType, Session, TodoItem, TodoStatus, TurnStartData};
use dsh_tool_todo::{TodoLists, description};
use dsh_tools::{ToolCaller, ToolExecutionInput, ToolExecutionResult, ToolRegistry};
use serde_json::{Value, json};

async fn setup(settings: Option<Value>) -> (Kernel, ToolCaller, Arc<Session>) {
    let kernel = Kernel::new();
    if let Some(s) = settings {
        kernel
            .root()
            .provide(Arc::new(Settings::new().with_section("dsh-tool-todo", s)))
            .unwrap()
            .detach();
    }
    kernel.boot().await.unwrap();
    let session = Arc::new(Session::create("s-1", None, None).unwrap());
    let key = ScopeKey::new("agent");
    let actx = kernel.root().tagged(key.clone(), "agent").unwrap();
    let caller = ToolCaller::new(key, actx, session.clone(), SessionId::new("s-1"));
    (kernel, caller, session)
}

async fn call(
    kernel: &Kernel,
    caller: Option<&ToolCaller>,
    args: Value,
) -> Arc<ToolExecutionResult> {
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    let mut input = ToolExecutionInput::new("c1", "todo_write", args);
    if let Some(c) = caller {
        input = input.with_caller(c.clone());
    }
    reg.execute(input).await
}

fn text(r: &ToolExecutionResult) -> String {
    r.content().iter().filter_map(|b| b.as_text()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_event_and_exposes_latest_list() {
    let (kernel, caller, session) = setup(None).await;
    let r = call(
        &kernel,
        Some(&caller),
        json!({"todos": [
            {"content": "  write tests ", "status": "completed"},
            {"content": "implement", "status": "in_progress"},
            {"content": "document", "status": "pending"},
        ]}),
    )
    .await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(
        text(&r),
        "Updated todo list: 1 pending, 1 in progress, 1 completed."
    );
    assert_eq!(
        r.value().cloned(),
        Some(json!({
            "todos": [
                {"content": "write tests", "status": "completed"},
                {"content": "implement", "status": "in_progress"},
                {"content": "document", "status": "pending"},
            ],
            "counts": {"pending": 1, "inProgress": 1, "completed": 1},
        }))
    );
    let events = session.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventType::TODO_WRITE);
    let expected = vec![
        TodoItem {
            content: "write tests".into(),
            status: TodoStatus::Completed,
        },
        TodoItem {
            content: "implement".into(),
            status: TodoStatus::InProgress,
        },
        TodoItem {
            content: "document".into(),
            status: TodoStatus::Pending,
        },
    ];
    match &events[0].data {
        EventData::TodoWrite(d) => assert_eq!(d.todos, expected),
        other => panic!("unexpected {other:?}"),
    }
    let lists = kernel.root().require::<TodoLists>().unwrap();
    assert_eq!(lists.latest("s-1"), Some(expected.clone()));
    assert_eq!(lists.latest_in(&session), Some(expected));
    // a later turn/start clears the folded view
    session
        .append(
            EventType::TURN_START,
            EventData::TurnStart(TurnStartData {
                turn: 1,
                trigger: None,
            }),
            None,
        )
        .unwrap();
    assert_eq!(lists.latest_in(&session), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_in_progress_rejected_and_nothing_appended() {
    let (kernel, caller, session) = setup(None).await;
    let r = call(
        &kernel,
        Some(&caller),
        json!({"todos": [
            {"content": "a", "status": "in_progress"},
            {"content": "b", "status": "in_progress"},
        ]}),
    )
    .await;
    assert!(r.is_error());
    assert_eq!(
        text(&r),
        "Error: invalid todos: at most one task may be in_progress (got 2)"
    );
    assert_eq!(r.error_info().unwrap().code, "INVALID_TODOS");
    assert!(session.events().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_setting_allows_several_in_progress() {
    let (kernel, caller, session) = setup(Some(json!({"allow_parallel_in_progress": true}))).await;
    let r = call(
        &kernel,
        Some(&caller),
        json!({"todos": [
            {"content": "a", "status": "in_progress"},
            {"content": "b", "status": "in_progress"},
        ]}),
    )
    .await;
    assert!(!r.is_error(), "{}", text(&r));
    assert_eq!(session.events().len(), 1);
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    assert_eq!(
        reg.get("todo_write", None).unwrap().schema().description,
        description(true)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_status_empty_and_duplicate_content_and_no_session() {
    let (kernel, caller, session) = setup(None).await;
    let r = call(
        &kernel,
        Some(&caller),
        json!({"todos": [{"content": "a", "status": "done"}]}),
    )
    .await;
    assert_eq!(r.error_info().unwrap().code, "INVALID_ARGS");
    let r = call(
        &kernel,
        Some(&caller),
        json!({"todos": [{"content": "  ", "status": "pending"}]}),
    )
    .await;
    assert_eq!(
        text(&r),
        "Error: invalid todo: `content` must be a non-empty string"
    );
    let r = call(
        &kernel,
        Some(&caller),
        json!({"todos": [{"content": "a", "status": "pending"}, {"content": "a ", "status": "completed"}]}),
    )
    .await;
    assert_eq!(text(&r), "Error: invalid todos: duplicate content \"a\"");
    let r = call(&kernel, None, json!({"todos": []})).await;
    assert_eq!(
        text(&r),
        "Error: todo_write requires an owning agent session"
    );
    assert_eq!(r.error_info().unwrap().code, "NO_SESSION");
    assert!(session.events().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_sent_to_model() {
    let (kernel, _caller, _s) = setup(None).await;
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    let def = reg.get("todo_write", None).unwrap();
    assert_eq!(def.schema().description, description(false));
    let params = &def.schema().parameters;
    let consts: Vec<Value> =
        params["properties"]["todos"]["items"]["properties"]["status"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["const"].clone())
            .collect();
    assert_eq!(
        consts,
        vec![json!("pending"), json!("in_progress"), json!("completed")]
    );
    assert_eq!(
        params["properties"]["todos"]["items"]["required"],
        json!(["content", "status"])
    );
    assert_eq!(params["required"], json!(["todos"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_effects_and_snake_case_settings() {
    let (kernel, _caller, _session) = setup(None).await;
    let reg = kernel.root().require::<ToolRegistry>().unwrap();
    assert_eq!(
        reg.effects("todo_write", None),
        Some(dsh_tools::ToolEffects::READ_ONLY)
    );
    let c: dsh_tool_todo::TodoConfig =
        serde_json::from_value(json!({"allow_parallel_in_progress": true})).unwrap();
    assert!(c.allow_parallel_in_progress);
    assert!(
        serde_json::from_value::<dsh_tool_todo::TodoConfig>(
            json!({"allowParallelInProgress": true})
        )
        .is_err()
    );
}
