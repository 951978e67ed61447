//! Operator-facing behaviour: owner-checked release, inspection, bad names, unreachable Redis.

use std::time::Duration;

use lockkit::{ErrorKind, LockClient};

use crate::support::{client, unique};

#[tokio::test]
async fn a_stale_holder_cannot_release_its_successors_lock() {
    let (stale, successor_client) = (client().await, client().await);
    let name = unique("stale");
    let old = stale.acquire(&name).lease(Duration::from_millis(100)).await.unwrap();
    let successor = successor_client.lock(&name, Duration::from_secs(5)).await.unwrap();

    let released_by_stale = old.release().await.unwrap();

    assert!(!released_by_stale);
    assert!(stale.try_lock(&name).await.unwrap().is_none(), "the successor still holds it");
    assert!(successor.release().await.unwrap());
}

#[tokio::test]
async fn inspect_reports_holder_ttl_and_fence() {
    let client = client().await;
    let name = unique("inspect");
    let guard = client.acquire(&name).lease(Duration::from_secs(30)).await.unwrap();

    let infos = client.inspect(&name).await.unwrap();

    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].name, name);
    assert!(infos[0].held);
    assert!(infos[0].ttl.unwrap() > Duration::from_secs(20));
    assert_eq!(infos[0].fence, Some(guard.fence()));
    guard.release().await.unwrap();
    let after = client.inspect(&name).await.unwrap();
    assert!(!after[0].held && after[0].ttl.is_none());
}

#[tokio::test]
async fn names_that_would_break_the_hash_tag_are_refused() {
    let client = client().await;
    for bad in ["", "a}b", "{x}"] {
        let err = client.try_lock(bad).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
    }
}

#[tokio::test]
async fn an_unreachable_redis_is_a_retryable_error() {
    let err = LockClient::builder("redis://127.0.0.1:1")
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();

    assert!(err.is_unavailable() && err.is_retryable(), "{err}");
}

#[tokio::test]
async fn a_malformed_url_is_a_configuration_error() {
    let err = LockClient::connect("http://nope").await.unwrap_err();

    assert_eq!(err.kind(), ErrorKind::Config);
}

#[tokio::test]
async fn scripts_are_reloaded_after_the_script_cache_is_flushed() {
    let client = client().await;
    let mut conn = crate::support::raw().await;
    let name = unique("noscript");
    client.try_lock(&name).await.unwrap().unwrap().release().await.unwrap();

    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
    // With a lock-delay, even a first attempt runs the acquire script.
    let guard = client.acquire(&name).lock_delay(Duration::from_millis(1)).await.expect("acquire reloads its script");

    assert_eq!(guard.fence().get(), 2);
    assert!(guard.release().await.unwrap(), "release reloads its script too");
}

#[tokio::test]
async fn acl_users_authenticate_through_the_url() {
    let mut conn = crate::support::raw().await;
    let user = unique("acl").replace(':', "-");
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", &user, "on", ">s3cret-pw", "~*", "&*", "+@all"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = crate::support::redis_url().replacen("redis://", &format!("redis://{user}:s3cret-pw@"), 1);
    let wrong = crate::support::redis_url().replacen("redis://", &format!("redis://{user}:nope@"), 1);

    let authenticated = LockClient::connect(&url).await;
    let refused = LockClient::connect(&wrong).await;

    let client = authenticated.expect("right password");
    let guard = client.try_lock(&unique("acl-lock")).await.unwrap().unwrap();
    assert!(guard.release().await.unwrap());
    let err = refused.unwrap_err();
    assert!(!err.to_string().contains("nope"), "the password is not echoed: {err}");
    let _: () = redis::cmd("ACL").arg(&["DELUSER", &user]).query_async(&mut conn).await.unwrap();
}
