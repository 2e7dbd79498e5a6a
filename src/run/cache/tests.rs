//! The cache on the memory store, on tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{key, Cache, CacheStore, Lookup, MemoryCache};

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn store() -> Arc<dyn CacheStore> {
    Arc::new(MemoryCache::new())
}

async fn lead(cache: &Arc<Cache>, k: &str) -> super::Lead {
    match cache.lookup(k.to_string(), None).await {
        Lookup::Lead(l) => l,
        Lookup::Hit(v) => panic!("hit {v}"),
        Lookup::Bypass(e) => panic!("{e}"),
    }
}

#[test]
fn keys_differ_by_tenant_and_ignore_key_order() {
    let a = key("acme", "search", "t", &args(json!({"q": "x", "n": 1})));
    let b = key("acme", "search", "t", &args(json!({"n": 1, "q": "x"})));
    let c = key("globex", "search", "t", &args(json!({"q": "x", "n": 1})));
    let d = key("acme", "search", "t", &args(json!({"q": "y", "n": 1})));
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, d);
    assert_eq!(a.len(), 64);
    assert!(!a.contains('x'));
}

#[test]
fn a_read_of_a_server_that_answers_each_caller_as_itself_is_kept_per_caller() {
    let text = "[mcp_servers.up]\nurl = \"https://up.example/mcp\"\nauth = \"client_credentials\"\nidentity = \"caller\"\nclient_id = \"gw\"\nclient_secret = \"${env:S}\"\n\n\
                [mcp_servers.shared]\nurl = \"https://shared.example/mcp\"\n\n\
                [tools.mine]\nkind = \"mcp\"\nserver = \"up\"\ntool = \"read\"\neffect = \"read\"\ncache = \"5m\"\n\n\
                [tools.ours]\nkind = \"mcp\"\nserver = \"shared\"\ntool = \"read\"\neffect = \"read\"\ncache = \"5m\"\n";
    let m = crate::manifest::Manifest::parse(
        crate::error::SourceFile::new("tools.toml", text),
        "/tmp/tools.toml".into(),
        crate::tools::KINDS,
    )
    .expect("the manifest");
    let tool = |name: &str| m.tools.iter().find(|t| t.name == name).expect("tool");
    let who = |tenant: &str, sub: &str| crate::tools::Behalf {
        subject: json!([tenant, sub]).to_string(),
        token: "t".into(),
    };
    let (alice, bob) = (who("acme", "alice"), who("acme", "bob"));
    // A server with the gateway's own identity: one tenant's callers share its reads.
    let ours = crate::tools::mcp::owner(&m, tool("ours"), "acme", Some(&alice));
    assert_eq!(ours.as_deref(), Some("acme"));
    // Each caller's own otherwise, and no entry at all without a caller.
    let mine = |c| crate::tools::mcp::owner(&m, tool("mine"), "acme", c).map(|o| o.into_owned());
    let (a, b) = (mine(Some(&alice)), mine(Some(&bob)));
    assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
    assert_ne!(a.as_deref(), Some("acme"));
    assert_eq!(mine(None), None);
}

#[tokio::test(start_paused = true)]
async fn an_entry_answers_until_its_ttl_passes() {
    let cache = Cache::new(store(), "run-1", false);
    lead(&cache, "k")
        .await
        .publish(&json!({"n": 1}), Duration::from_secs(60))
        .await;
    match cache.lookup("k".into(), None).await {
        Lookup::Hit(v) => assert_eq!(v, json!({"n": 1})),
        _ => panic!("expected a hit"),
    }
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(matches!(
        cache.lookup("k".into(), None).await,
        Lookup::Lead(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn identical_lookups_wait_for_the_leader_and_share_its_entry() {
    let cache = Cache::new(store(), "run-1", false);
    let leader = lead(&cache, "k").await;
    let waiters: Vec<_> = (0..5)
        .map(|_| tokio::spawn(cache.lookup("k".into(), None)))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()));
    leader.publish(&json!("done"), Duration::from_secs(5)).await;
    for w in waiters {
        match w.await.unwrap() {
            Lookup::Hit(v) => assert_eq!(v, json!("done")),
            _ => panic!("a waiter did not share the result"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_fails_hands_the_key_to_the_next_waiter() {
    let cache = Cache::new(store(), "run-1", false);
    let leader = lead(&cache, "k").await;
    let waiter = tokio::spawn(cache.lookup("k".into(), None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(leader);
    assert!(matches!(waiter.await.unwrap(), Lookup::Lead(_)));
}

#[tokio::test(start_paused = true)]
async fn refresh_ignores_other_runs_entries_but_shares_its_own() {
    let shared = store();
    let first = Cache::new(shared.clone(), "run-1", false);
    lead(&first, "k")
        .await
        .publish(&json!(1), Duration::from_secs(60))
        .await;
    let refreshing = Cache::new(shared, "run-2", true);
    let l = lead(&refreshing, "k").await;
    l.publish(&json!(2), Duration::from_secs(60)).await;
    match refreshing.lookup("k".into(), None).await {
        Lookup::Hit(v) => assert_eq!(v, json!(2)),
        _ => panic!("its own entry is fresh"),
    }
}

/// An entry stored before a write on its backend resolved is stale; one stored after it is
/// fresh; a write on another backend changes nothing.
async fn marks_make_entries_stale(store: Arc<dyn CacheStore>) {
    let cache = Cache::new(store, "run-1", false);
    let db: Arc<[String]> = Arc::from(["db".to_string()]);
    let other: Arc<[String]> = Arc::from(["other".to_string()]);
    let lead_on = |b: &Arc<[String]>| cache.lookup_on("k".into(), None, b.clone());
    match lead_on(&db).await {
        Lookup::Lead(l) => l.publish(&json!(0), Duration::from_secs(60)).await,
        _ => panic!("expected a lead"),
    }
    assert!(matches!(lead_on(&db).await, Lookup::Hit(_)));
    cache.wrote(other).await;
    assert!(matches!(lead_on(&db).await, Lookup::Hit(_)));
    cache.wrote(db.clone()).await;
    match lead_on(&db).await {
        Lookup::Lead(l) => l.publish(&json!(1), Duration::from_secs(60)).await,
        _ => panic!("an entry from before the write was served"),
    }
    match lead_on(&db).await {
        Lookup::Hit(v) => assert_eq!(v, json!(1)),
        _ => panic!("the entry stored after the write is fresh"),
    }
    assert_eq!(cache.peek("k".into(), db).await, Some(json!(1)));
}

#[tokio::test(start_paused = true)]
async fn a_write_on_the_backend_makes_memory_entries_stale() {
    marks_make_entries_stale(store()).await;
}

#[tokio::test]
async fn a_write_on_the_backend_makes_file_entries_stale() {
    let dir = tempfile::tempdir().unwrap();
    marks_make_entries_stale(Arc::new(super::FileCache::new(dir.path()))).await;
}
