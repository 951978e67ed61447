//! Hearing of a failover as it happens: a subscription to `+switch-master` on one Sentinel at a
//! time (the next one when it drops), so that the client moves to the new master when the
//! Sentinels announce it rather than at its next refused write. Refused writes (`READONLY`) and
//! broken connections still make it move: a message can be missed while no Sentinel answers.

use std::{future::Future, time::Duration};

use futures_util::StreamExt;

/// Pause before trying the next Sentinel after one failed or dropped the subscription.
const NEXT_SENTINEL_AFTER: Duration = Duration::from_millis(200);

/// Listens for `+switch-master` of `service` on the `sentinels` (`redis://` URLs) in turn, for
/// ever, and awaits `on_switch()` for each one. Connecting and subscribing are bounded by
/// `timeout`.
pub(crate) async fn watch<F>(sentinels: Vec<String>, service: String, timeout: Duration, on_switch: impl Fn() -> F)
where
    F: Future<Output = ()>,
{
    for sentinel in sentinels.iter().cycle() {
        if let Ok(client) = redis::Client::open(sentinel.as_str())
            && let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout, client.get_async_pubsub()).await
            && let Ok(Ok(())) = tokio::time::timeout(timeout, pubsub.subscribe("+switch-master")).await
        {
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                // "<name> <old-ip> <old-port> <new-ip> <new-port>"
                let payload: String = message.get_payload().unwrap_or_default();
                if payload.split(' ').next() == Some(service.as_str()) {
                    on_switch().await;
                }
            }
        }
        tokio::time::sleep(NEXT_SENTINEL_AFTER).await;
    }
}
