//! What a backend keeps besides the plain lock is known before any request
//! ([`LockClient::supports`]), and the acquire path holds to it: every capability a backend
//! reports is usable there, and every one it does not is refused as unsupported, with nothing
//! left on the servers. Run on one Redis, Redlock, and each non-Redis backend built in.

use std::time::Duration;

use lockkit::{Capability, LockClient};

use crate::{
    servers::Masters,
    support::{client, unique},
};

/// Tries `capability` on `client`: Ok(()) when the operation worked, Err(unsupported?) otherwise.
async fn exercise(client: &LockClient, capability: Capability) -> Result<(), lockkit::Error> {
    let name = unique("capability");
    match capability {
        Capability::Reentrant => client.reentrant(&name, "owner").await?.release().await.map(drop),
        Capability::Fair => client.fair(&name).await?.release().await.map(drop),
        Capability::ReadWrite => client.read_write(&name).write().await?.downgrade().await?.release().await.map(drop),
        Capability::Semaphore => client.semaphore(&name, 2).await?.release().await.map(drop),
        Capability::LockDelay => {
            client.acquire(&name).lock_delay(Duration::from_millis(10)).await?.release().await.map(drop)
        }
        Capability::RetireFence => {
            client.lock(&name, Duration::from_secs(1)).await?.release().await?;
            client.retire_fence(&name).await.map(drop)
        }
        _ => unreachable!("a capability this test does not know: add it"),
    }
}

/// Every capability the client reports works; every other one is refused as unsupported.
async fn holds_to_its_capabilities(client: &LockClient) {
    for capability in Capability::ALL {
        let outcome = exercise(client, capability).await;
        if client.supports(capability) {
            outcome.unwrap_or_else(|e| panic!("{} reports {capability:?} but: {e}", client.backend()));
        } else {
            let refused = outcome.expect_err(&format!("{} does not report {capability:?}", client.backend()));
            assert!(refused.is_unsupported(), "{capability:?} on {}: {refused}", client.backend());
        }
    }
    assert_eq!(client.held_leases(), 0, "no lease is left behind by a refusal");
}

#[tokio::test]
async fn one_redis_keeps_every_capability() {
    let client = client().await;
    assert!(Capability::ALL.iter().all(|c| client.supports(*c)));
    holds_to_its_capabilities(&client).await;
}

#[tokio::test]
async fn redlock_keeps_the_plain_lock_and_its_lock_delay_only() {
    let masters = Masters::start(3).await;
    let client = LockClient::connect(&masters.url()).await.unwrap();
    assert_eq!(Capability::ALL.iter().filter(|c| client.supports(**c)).collect::<Vec<_>>(), [&Capability::LockDelay]);
    holds_to_its_capabilities(&client).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test]
async fn zookeeper_keeps_the_plain_lock_only() {
    let client = LockClient::connect(&crate::zookeeper_server::zookeeper_url()).await.unwrap();
    assert!(!Capability::ALL.iter().any(|c| client.supports(*c)));
    holds_to_its_capabilities(&client).await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_keeps_the_plain_lock_only() {
    let client = LockClient::connect(&crate::etcd_server::etcd_url()).await.unwrap();
    assert!(!Capability::ALL.iter().any(|c| client.supports(*c)));
    holds_to_its_capabilities(&client).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_keeps_the_plain_lock_only() {
    for url in [
        crate::postgres_server::database_url(),
        crate::postgres_server::database_url().replacen("postgres://", "postgres+advisory://", 1),
    ] {
        let client = LockClient::connect(&url).await.unwrap();
        assert!(!Capability::ALL.iter().any(|c| client.supports(*c)));
        holds_to_its_capabilities(&client).await;
    }
}
