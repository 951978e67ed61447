//! Interoperability: the lock key is a plain string at `{lockkit:NAME}`, so other clients that
//! lock with `SET key token NX PX` (redis-py, redsync, node-redlock) exclude each other with us.

use std::time::Duration;

use crate::support::{client, foreign_set_nx, lock_key, raw, unique};

#[tokio::test]
async fn a_plain_set_nx_px_from_another_client_blocks_lockkit() {
    let client = client().await;
    let mut conn = raw().await;
    let name = unique("foreign-holder");
    assert!(foreign_set_nx(&mut conn, &name, "their-token", 5000).await);

    assert!(client.try_lock(&name).await.unwrap().is_none());
    assert!(client.lock(&name, Duration::from_millis(200)).await.unwrap_err().is_timeout());
}

#[tokio::test]
async fn lockkit_blocks_a_plain_set_nx_px_and_keeps_its_token_private() {
    let client = client().await;
    let mut conn = raw().await;
    let name = unique("lockkit-holder");
    let guard = client.try_lock(&name).await.unwrap().unwrap();

    let set = foreign_set_nx(&mut conn, &name, "their-token", 5000).await;
    let token: String = redis::cmd("GET").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();

    assert!(!set, "refused while lockkit holds the lock");
    assert_eq!(token.len(), 32, "a 128-bit random token");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(guard.release().await.unwrap());
}
