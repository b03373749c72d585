//! Shared fixtures for the dsh-tools integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};

use dsh_kernel::{Context, Kernel, ScopeKey};
use dsh_llm::SessionId;
use dsh_session::{EventData, Session, TurnStartData};
use dsh_tools::{ToolCaller, ToolDefinition, ToolFailure, ToolRegistry, define_tool};
use serde::Deserialize;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    pub text: String,
}

pub fn echo(name: &str) -> Arc<dyn ToolDefinition> {
    define_tool::<EchoArgs, String>(name, "Echo the text.")
        .always_concurrency_safe()
        .execute(|a, _cx| async move { Ok(a.text) })
        .unwrap()
}

pub fn failing(name: &str, failure: ToolFailure) -> Arc<dyn ToolDefinition> {
    define_tool::<EchoArgs, String>(name, "Always fails.")
        .execute(move |_a, _cx| {
            let f = failure.clone();
            async move { Err(f) }
        })
        .unwrap()
}

pub struct Fixture {
    pub kernel: Kernel,
    pub root: Context,
    pub reg: ToolRegistry,
}

pub fn setup() -> Fixture {
    let kernel = Kernel::new();
    let root = kernel.root().clone();
    let reg = ToolRegistry::new(root.clone());
    Fixture { kernel, root, reg }
}

pub struct Agent {
    pub key: ScopeKey,
    pub ctx: Context,
    pub session: Arc<Session>,
    pub caller: ToolCaller,
}

pub fn agent(root: &Context, id: &str, open_turn: bool) -> Agent {
    let key = ScopeKey::new(id);
    let ctx = root.tagged(key.clone(), id).unwrap();
    let session = Arc::new(Session::create(id, None, None).unwrap());
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
    let caller = ToolCaller::new(
        key.clone(),
        ctx.clone(),
        session.clone(),
        SessionId::new(id),
    );
    Agent {
        key,
        ctx,
        session,
        caller,
    }
}

/// A shared, ordered trace of what ran.
#[derive(Clone, Default)]
pub struct Trace(pub Arc<Mutex<Vec<String>>>);

impl Trace {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

pub fn text(s: &str) -> dsh_llm::ContentBlock {
    dsh_llm::ContentBlock::text(s)
}
