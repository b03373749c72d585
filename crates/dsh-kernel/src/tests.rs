//! Unit tests of the kernel: disposal order, services, dispatch modes, scope filtering, plugin
//! ordering.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::*;

type Log = Arc<Mutex<Vec<String>>>;

fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn push(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

fn take(l: &Log) -> Vec<String> {
    std::mem::take(&mut *l.lock().unwrap())
}

fn sync_step(l: &Log, name: &'static str) -> Disposer {
    let l = l.clone();
    Disposer::infallible(move || push(&l, name))
}

fn async_step(l: &Log, name: &'static str, delay_ms: u64) -> Disposer {
    let l = l.clone();
    Disposer::future(move || async move {
        push(&l, format!("{name}:start"));
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        push(&l, format!("{name}:end"));
        Ok(())
    })
}

#[tokio::test]
async fn disposers_within_one_effect_run_in_reverse_order_sequentially() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    ctx.effect(
        "e",
        vec![
            async_step(&l, "a", 5),
            sync_step(&l, "b"),
            async_step(&l, "c", 5),
        ],
    )
    .unwrap()
    .detach();
    ctx.dispose().await;
    assert_eq!(take(&l), vec!["c:start", "c:end", "b", "a:start", "a:end"]);
}

#[tokio::test(start_paused = true)]
async fn effects_across_a_scope_start_in_reverse_order_and_run_concurrently() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    ctx.effect("first", vec![async_step(&l, "first", 30)])
        .unwrap()
        .detach();
    ctx.effect("second", vec![async_step(&l, "second", 10)])
        .unwrap()
        .detach();
    ctx.dispose().await;
    // Both start before either ends (concurrent), in reverse registration order; the shorter
    // (second) ends first.
    assert_eq!(
        take(&l),
        vec!["second:start", "first:start", "second:end", "first:end"]
    );
}

#[tokio::test]
async fn failing_disposer_is_logged_and_others_still_run() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    ctx.effect(
        "e",
        vec![
            sync_step(&l, "a"),
            Disposer::sync(|| Err("boom".into())),
            sync_step(&l, "c"),
        ],
    )
    .unwrap()
    .detach();
    ctx.dispose().await;
    assert_eq!(take(&l), vec!["c", "a"]);
}

#[tokio::test]
async fn dispose_is_idempotent_and_registering_after_is_an_error() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    ctx.effect(
        "e",
        vec![Disposer::infallible(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })],
    )
    .unwrap()
    .detach();
    let (a, b) = tokio::join!(ctx.dispose(), ctx.dispose());
    let _ = (a, b);
    ctx.dispose().await;
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert!(!ctx.is_active());
    let err = ctx.effect("late", vec![]).unwrap_err();
    assert_eq!(err.code(), "INACTIVE_SCOPE");
    assert_eq!(
        err.to_string(),
        "scope `p` is disposed and accepts no registrations"
    );
    assert_eq!(ctx.child("c").unwrap_err().code(), "INACTIVE_SCOPE");
    assert_eq!(
        ctx.provide(Arc::new(1u8)).unwrap_err().code(),
        "INACTIVE_SCOPE"
    );
}

#[tokio::test]
async fn disposing_a_parent_disposes_children_and_a_disposed_child_leaves_the_parent() {
    let k = Kernel::new();
    let parent = k.root().child("parent").unwrap();
    let child = parent.child("child").unwrap();
    let l = log();
    child
        .effect("e", vec![sync_step(&l, "child-effect")])
        .unwrap()
        .detach();
    let token = child.cancellation();
    parent.dispose().await;
    assert!(token.is_cancelled());
    assert!(!child.is_active());
    assert_eq!(take(&l), vec!["child-effect"]);

    let parent2 = k.root().child("parent2").unwrap();
    let child2 = parent2.child("child2").unwrap();
    child2.dispose().await;
    // The parent's record of the child was dropped; disposing the parent runs nothing twice.
    parent2.dispose().await;
}

#[tokio::test]
async fn registration_drop_unregisters_and_detach_keeps() {
    event! {
        /// test
        pub struct Ev: emit("t/ev") => u32;
    }
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let reg = ctx
        .on_emit::<Ev>(move |_| {
            h.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    k.root().emit::<Ev>(&1);
    drop(reg);
    k.root().emit::<Ev>(&1);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    let h = hits.clone();
    ctx.on_emit::<Ev>(move |_| {
        h.fetch_add(10, Ordering::SeqCst);
    })
    .unwrap()
    .detach();
    k.root().emit::<Ev>(&1);
    assert_eq!(hits.load(Ordering::SeqCst), 11);
    ctx.dispose().await;
    k.root().emit::<Ev>(&1);
    assert_eq!(hits.load(Ordering::SeqCst), 11);
}

#[tokio::test]
async fn dropping_a_guard_with_async_teardown_schedules_it_without_blocking() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let reg = ctx
        .effect(
            "e",
            vec![Disposer::future(move || async move {
                tokio::task::yield_now().await;
                let _ = tx.send(());
                Ok(())
            })],
        )
        .unwrap();
    drop(reg);
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("teardown ran")
        .unwrap();
}

#[derive(Debug, PartialEq)]
struct Svc(&'static str);

#[tokio::test]
async fn services_shadowing_duplicates_and_removal() {
    let k = Kernel::new();
    let plugin_a = k.root().child("a").unwrap();
    let plugin_b = k.root().child("b").unwrap();
    plugin_a.provide(Arc::new(Svc("global"))).unwrap().detach();
    // Sibling plugin scopes share the root layer.
    assert_eq!(*plugin_b.get::<Svc>().unwrap(), Svc("global"));
    let dup = plugin_b.provide(Arc::new(Svc("again"))).unwrap_err();
    assert_eq!(dup.code(), "DUPLICATE_SERVICE");

    // An isolated (agent-like) scope shadows.
    let agent = plugin_b.isolated("agent").unwrap();
    assert_eq!(*agent.get::<Svc>().unwrap(), Svc("global"));
    agent.provide(Arc::new(Svc("scoped"))).unwrap().detach();
    assert_eq!(*agent.get::<Svc>().unwrap(), Svc("scoped"));
    assert_eq!(*plugin_b.get::<Svc>().unwrap(), Svc("global"));

    // Named services are separate keys.
    plugin_b
        .provide_named("x", Arc::new(Svc("named")))
        .unwrap()
        .detach();
    assert_eq!(*k.root().get_named::<Svc>("x").unwrap(), Svc("named"));
    assert!(k.root().get_named::<Svc>("y").is_none());

    // Removal on dispose is announced.
    let removed = log();
    let r = removed.clone();
    k.root()
        .on_emit::<ServiceRemoved>(move |c| push(&r, format!("{}:{:?}", c.scope, c.name)))
        .unwrap()
        .detach();
    agent.dispose().await;
    plugin_a.dispose().await;
    assert!(k.root().get::<Svc>().is_none());
    assert_eq!(
        k.root().require::<Svc>().unwrap_err().code(),
        "MISSING_SERVICE"
    );
    assert_eq!(take(&removed), vec!["agent:None", "a:None"]);
}

event! {
    /// test emit
    pub struct E: emit("t/e") => u32;
}
event! {
    /// test serial
    pub struct S: serial("t/s") => u32, String;
}
event! {
    /// test parallel
    pub struct P: parallel("t/p") => u32;
}
event! {
    /// test waterfall
    pub struct W: waterfall("t/w") => String, String;
}

#[tokio::test]
async fn emit_runs_in_order_with_prepend_and_contains_panics() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    for name in ["one", "two"] {
        let l = l.clone();
        ctx.on_emit::<E>(move |n| push(&l, format!("{name}:{n}")))
            .unwrap()
            .detach();
    }
    ctx.on_emit::<E>(|_| panic!("listener bug"))
        .unwrap()
        .detach();
    let l2 = l.clone();
    ctx.on_emit_with::<E>(ListenOptions::prepend(), move |n| {
        push(&l2, format!("first:{n}"))
    })
    .unwrap()
    .detach();
    let l3 = l.clone();
    ctx.on_emit::<E>(move |n| push(&l3, format!("after-panic:{n}")))
        .unwrap()
        .detach();
    k.root().emit::<E>(&5);
    assert_eq!(take(&l), vec!["first:5", "one:5", "two:5", "after-panic:5"]);
}

#[tokio::test]
async fn listener_list_is_snapshotted_at_dispatch() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    let ctx2 = ctx.clone();
    let l2 = l.clone();
    ctx.on_emit::<E>(move |_| {
        push(&l2, "adder");
        let l3 = l2.clone();
        ctx2.on_emit::<E>(move |_| push(&l3, "added"))
            .unwrap()
            .detach();
    })
    .unwrap()
    .detach();
    k.root().emit::<E>(&0);
    assert_eq!(take(&l), vec!["adder"]);
    k.root().emit::<E>(&0);
    assert_eq!(take(&l), vec!["adder", "added"]);
}

#[tokio::test]
async fn serial_stops_at_first_value_and_on_error() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    let l1 = l.clone();
    ctx.on_serial::<S, _, _>(move |n| {
        let l1 = l1.clone();
        async move {
            push(&l1, format!("a{n}"));
            Ok(None)
        }
    })
    .unwrap()
    .detach();
    let l2 = l.clone();
    ctx.on_serial::<S, _, _>(move |n| {
        let l2 = l2.clone();
        async move {
            push(&l2, format!("b{n}"));
            Ok((n > 1).then(|| format!("bail{n}")))
        }
    })
    .unwrap()
    .detach();
    let l3 = l.clone();
    ctx.on_serial::<S, _, _>(move |n| {
        let l3 = l3.clone();
        async move {
            push(&l3, format!("c{n}"));
            if n == 0 {
                Err("c failed".into())
            } else {
                Ok(None)
            }
        }
    })
    .unwrap()
    .detach();
    assert_eq!(
        k.root().serial::<S>(2).await.unwrap(),
        Some("bail2".to_owned())
    );
    assert_eq!(take(&l), vec!["a2", "b2"]);
    assert_eq!(k.root().serial::<S>(1).await.unwrap(), None);
    assert_eq!(take(&l), vec!["a1", "b1", "c1"]);
    let err = k.root().serial::<S>(0).await.unwrap_err();
    assert_eq!(err.code(), "LISTENER_FAILED");
    assert_eq!(err.to_string(), "listener of `t/s` failed: c failed");
}

#[tokio::test(start_paused = true)]
async fn parallel_runs_concurrently_and_aggregates_failures() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let l = log();
    for (name, delay, fail) in [("slow", 20u64, true), ("fast", 5, false), ("mid", 10, true)] {
        let l = l.clone();
        ctx.on_parallel::<P, _, _>(move |_| {
            let l = l.clone();
            async move {
                push(&l, format!("{name}:start"));
                tokio::time::sleep(Duration::from_millis(delay)).await;
                push(&l, format!("{name}:end"));
                if fail {
                    Err(format!("{name} failed").into())
                } else {
                    Ok(())
                }
            }
        })
        .unwrap()
        .detach();
    }
    let err = k.root().parallel::<P>(1).await.unwrap_err();
    assert_eq!(
        take(&l),
        vec![
            "slow:start",
            "fast:start",
            "mid:start",
            "fast:end",
            "mid:end",
            "slow:end"
        ]
    );
    assert_eq!(err.code(), "PARALLEL_FAILED");
    assert_eq!(
        err.to_string(),
        "2 listener(s) of `t/p` failed: slow failed; mid failed"
    );
}

#[tokio::test]
async fn waterfall_orders_replaces_and_short_circuits() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    ctx.on_waterfall::<W, _, _>(|p, next| async move {
        let out = next.run(format!("{p}>outer")).await;
        format!("{out}<outer")
    })
    .unwrap()
    .detach();
    ctx.on_waterfall::<W, _, _>(|p, next| async move {
        if p.starts_with("stop") {
            return "short".to_owned();
        }
        let out = next.run(format!("{p}>inner")).await;
        format!("{out}<inner")
    })
    .unwrap()
    .detach();
    let out = k
        .root()
        .waterfall::<W, _, _>("go".to_owned(), |p| async move { format!("[{p}]") })
        .await;
    assert_eq!(out, "[go>outer>inner]<inner<outer");
    let out = k
        .root()
        .waterfall::<W, _, _>("stop".to_owned(), |_| async move {
            unreachable!("terminal must not run")
        })
        .await;
    assert_eq!(out, "short<outer");
    // No listeners: the terminal runs alone.
    let k2 = Kernel::new();
    assert_eq!(
        k2.root()
            .waterfall::<W, _, _>("x".to_owned(), |p| async move { p + "!" })
            .await,
        "x!"
    );
}

#[tokio::test]
async fn scope_filtering_admits_descendants_not_siblings_or_ancestors() {
    let k = Kernel::new();
    let parent_key = ScopeKey::new("parent");
    let child_key = ScopeKey::new("child");
    let sibling_key = ScopeKey::new("sibling");
    child_key.bind_parent(&parent_key).unwrap();
    assert_eq!(
        child_key.bind_parent(&sibling_key).unwrap_err().code(),
        "SCOPE_PARENT"
    );
    assert_eq!(
        parent_key.bind_parent(&child_key).unwrap_err().code(),
        "SCOPE_PARENT"
    );

    let l = log();
    let add = |ctx: &Context, name: &'static str, opts: ListenOptions| {
        let l = l.clone();
        ctx.on_emit_with::<E>(opts, move |_| push(&l, name))
            .unwrap()
            .detach();
    };
    let root = k.root().child("plugin").unwrap();
    add(&root, "untagged", ListenOptions::default());
    let parent_scope = root.tagged(parent_key.clone(), "parent").unwrap();
    add(&parent_scope, "parent", ListenOptions::default());
    let child_scope = root.tagged(child_key.clone(), "child").unwrap();
    add(&child_scope, "child", ListenOptions::default());
    // Registrations through a plain child of a tagged scope inherit the tag.
    let nested = child_scope.child("nested").unwrap();
    add(&nested, "child-nested", ListenOptions::default());
    let sibling_scope = root.tagged(sibling_key.clone(), "sibling").unwrap();
    add(&sibling_scope, "sibling", ListenOptions::default());
    add(&sibling_scope, "sibling-global", ListenOptions::global());

    k.root().dispatch_to(Some(&child_key)).emit::<E>(&0);
    assert_eq!(
        take(&l),
        vec![
            "untagged",
            "parent",
            "child",
            "child-nested",
            "sibling-global"
        ]
    );
    k.root().dispatch_to(Some(&parent_key)).emit::<E>(&0);
    assert_eq!(take(&l), vec!["untagged", "parent", "sibling-global"]);
    k.root().emit::<E>(&0);
    assert_eq!(take(&l), vec!["untagged", "sibling-global"]);
    assert_eq!(
        k.root()
            .dispatch_to(Some(&sibling_key))
            .emit_listeners::<E>(),
        3
    );
}

#[tokio::test]
async fn scoped_waterfall_skips_unadmitted_listeners() {
    let k = Kernel::new();
    let a = ScopeKey::new("a");
    let b = ScopeKey::new("b");
    let sa = k.root().tagged(a.clone(), "a").unwrap();
    let sb = k.root().tagged(b.clone(), "b").unwrap();
    sa.on_waterfall::<W, _, _>(|p, n| async move { n.run(p + "+a").await })
        .unwrap()
        .detach();
    sb.on_waterfall::<W, _, _>(|p, n| async move { n.run(p + "+b").await })
        .unwrap()
        .detach();
    let out = k
        .root()
        .dispatch_to(Some(&b))
        .waterfall::<W, _, _>(String::new(), |p| async move { p })
        .await;
    assert_eq!(out, "+b");
}

fn ok_apply(_: &Context) -> std::result::Result<(), BoxError> {
    Ok(())
}

fn failing_apply(ctx: &Context) -> std::result::Result<(), BoxError> {
    ctx.provide(Arc::new(Svc("from-failing"))).unwrap().detach();
    Err("no config".into())
}

const fn plugin(
    id: &'static str,
    after: &'static [&'static Plugin],
    before: &'static [&'static Plugin],
    start: PluginHook,
) -> Plugin {
    Plugin {
        id,
        after,
        before,
        settings: None,
        register: None,
        start: Some(start),
    }
}

static A: Plugin = plugin("a", &[&C], &[], ok_apply);
static B: Plugin = plugin("b", &[], &[&A, &NOT_BOOTED], failing_apply);
static C: Plugin = plugin("c", &[], &[], ok_apply);
static NOT_BOOTED: Plugin = plugin("missing", &[], &[], ok_apply);
static CYC1: Plugin = plugin("x", &[&CYC2], &[], ok_apply);
static CYC2: Plugin = plugin("y", &[&CYC1], &[], ok_apply);
static OTHER_A: Plugin = plugin("a", &[], &[], ok_apply);

fn phase_log(ctx: &Context, entry: &str) -> std::result::Result<(), BoxError> {
    let log = ctx.require::<Mutex<Vec<String>>>()?;
    log.lock().map_err(|_| "poisoned")?.push(entry.to_owned());
    Ok(())
}

static P1: Plugin = Plugin {
    id: "p1",
    after: &[],
    before: &[],
    settings: None,
    register: Some(|ctx| phase_log(ctx, "register p1")),
    start: Some(|ctx| phase_log(ctx, "start p1")),
};
static P2: Plugin = Plugin {
    id: "p2",
    after: &[&P1],
    before: &[],
    settings: None,
    register: Some(|ctx| phase_log(ctx, "register p2")),
    start: Some(|ctx| phase_log(ctx, "start p2")),
};
static P3: Plugin = Plugin {
    id: "p3",
    after: &[&P2],
    before: &[],
    settings: None,
    register: Some(|_| Err("register refused".into())),
    start: Some(|ctx| phase_log(ctx, "start p3")),
};

crate::preset! {
    /// A test preset.
    static PHASES = [P1, P2, P3]
}

#[tokio::test]
async fn boot_runs_every_register_before_any_start_and_skips_failed_plugins() {
    let k = Kernel::new();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    k.root().provide(log.clone()).unwrap().detach();
    let err = k.boot_preset(PHASES, &[]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 plugin(s) failed to apply: p3: register refused"
    );
    assert_eq!(
        *log.lock().unwrap(),
        vec!["register p1", "register p2", "start p1", "start p2"]
    );
    assert_eq!(k.applied(), vec!["p1", "p2"]);
}

#[tokio::test]
async fn a_preset_boots_without_its_disabled_plugins_and_refuses_unknown_ids() {
    assert_eq!(crate::preset_ids(PHASES), vec!["p1", "p2", "p3"]);
    let k = Kernel::new();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    k.root().provide(log.clone()).unwrap().detach();
    let report = k.boot_preset(PHASES, &["p3".to_owned()]).await.unwrap();
    assert_eq!(report.applied, vec!["p1", "p2"]);
    let err = Kernel::new()
        .boot_preset(PHASES, &["p4".to_owned()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "UNKNOWN_PLUGIN");
    assert_eq!(
        err.to_string(),
        "unknown plugin `p4` in plugins.disable (known: p1, p2, p3)"
    );
}

mod declared {
    /// Settings of the declared test plugin.
    #[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
    #[serde(default, deny_unknown_fields)]
    pub struct Cfg {
        /// A window.
        pub window_ms: u64,
        /// A name.
        pub name: Option<String>,
    }

    crate::plugin! {
        id = "declared",
        after = [super::C],
        settings = Cfg,
        aliases = ["declared_alias"],
        top_level = ["name"],
        start = super::ok_apply
    }
}

#[test]
fn the_plugin_macro_declares_a_typed_static_with_checked_settings() {
    let p = &declared::PLUGIN;
    assert_eq!(p.id, "declared");
    assert_eq!(p.after[0].id, "c");
    let spec = p.settings.unwrap();
    assert_eq!(spec.aliases, ["declared_alias"]);
    assert_eq!(spec.top_level, ["name"]);
    assert_eq!(spec.keys(), vec!["name", "window_ms"]);
    assert!((spec.check)(&serde_json::json!({"window_ms": 5})).is_ok());
    let err = (spec.check)(&serde_json::json!({"window_ms": "x"})).unwrap_err();
    assert_eq!(err.path, "window_ms");
    assert_eq!(err.message, "invalid type: string \"x\", expected u64");
    let err = (spec.check)(&serde_json::json!({"windw_ms": 1})).unwrap_err();
    assert_eq!(
        err.message,
        "unknown field `windw_ms`, expected `window_ms` or `name`"
    );
    assert!(crate::linked_plugins().iter().any(|l| l.id == "declared"));
}

#[test]
fn plugin_order_follows_keys_then_id() {
    let order: Vec<_> = plugin_order(&[&A, &C, &B])
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(order, vec!["b", "c", "a"]);
    let err = plugin_order(&[&CYC1, &CYC2, &C]).unwrap_err();
    assert_eq!(err.code(), "PLUGIN_CYCLE");
    assert_eq!(
        err.to_string(),
        "plugin ordering keys form a cycle through: x, y"
    );
    assert_eq!(
        plugin_order(&[&A, &A]).unwrap().len(),
        1,
        "one static twice"
    );
    assert_eq!(
        plugin_order(&[&A, &OTHER_A]).unwrap_err().code(),
        "DUPLICATE_PLUGIN"
    );
}

#[tokio::test]
async fn boot_reports_failures_by_id_and_disposes_the_failed_scope() {
    let k = Kernel::new();
    let err = k.boot_with(&[&A, &B, &C]).await.unwrap_err();
    assert_eq!(err.code(), "PLUGIN_FAILED");
    assert_eq!(err.to_string(), "1 plugin(s) failed to apply: b: no config");
    assert_eq!(k.applied(), vec!["c", "a"]);
    assert!(
        k.root().get::<Svc>().is_none(),
        "failed plugin's service removed"
    );
    assert!(k.plugin_scope("a").is_some());
    k.dispose().await;
    assert!(!k.plugin_scope("a").unwrap().is_active());
}

#[test]
fn settings_sections_deserialize_with_defaults_and_typed_errors() {
    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Cfg {
        window_ms: u64,
    }
    let k = Kernel::new();
    assert_eq!(
        k.root().settings_section::<Cfg>("p").unwrap(),
        Cfg::default()
    );
    k.root()
        .provide(Arc::new(
            Settings::new()
                .with_section("p", serde_json::json!({"window_ms": 7}))
                .with_section("q", serde_json::json!({"window": 7})),
        ))
        .unwrap()
        .detach();
    assert_eq!(
        k.root().settings_section::<Cfg>("p").unwrap(),
        Cfg { window_ms: 7 }
    );
    let err = k.root().settings_section::<Cfg>("q").unwrap_err();
    assert_eq!(err.code(), "INVALID_SETTINGS");
    assert!(
        err.to_string()
            .starts_with("invalid settings for `q`: unknown field `window`")
    );
}

#[tokio::test]
async fn spawned_tasks_are_drained_on_dispose() {
    let k = Kernel::new();
    let ctx = k.root().child("p").unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let token = ctx.cancellation();
    ctx.spawn("worker", async move {
        token.cancelled().await;
        tokio::task::yield_now().await;
        d.store(1, Ordering::SeqCst);
    })
    .unwrap()
    .detach();
    ctx.dispose().await;
    assert_eq!(done.load(Ordering::SeqCst), 1);
}

static NEEDS_C: Plugin = plugin("needs-c", &[&C], &[], failing_apply);

#[tokio::test]
async fn a_failure_of_a_plugin_whose_after_plugins_are_not_booted_names_them() {
    let k = Kernel::new();
    let err = k.boot_with(&[&NEEDS_C]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 plugin(s) failed to apply: needs-c: no config (it runs after c, not booted)"
    );
    let k = Kernel::new();
    let err = k.boot_with(&[&NEEDS_C, &C]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 plugin(s) failed to apply: needs-c: no config"
    );
}
