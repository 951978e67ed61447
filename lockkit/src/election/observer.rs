//! [`Observer`]: a follower's view of an election, one answer per change of leader.

use crate::{
    election::Election,
    model::{error::Result, keys::LockKeys, leader::Leader},
    wake::WakeSubscription,
};

/// How much longer than the poll interval an observer waits between reads while a watch is
/// armed: the watch reports every change; the read at the end of the wait only covers a watch
/// that broke without saying so.
const WATCHED_POLL_FACTOR: u32 = 10;

/// Reports each change of an election's leader (see the module docs for how soon). Made by
/// [`Election::observe`].
#[derive(Debug)]
pub struct Observer {
    election: Election,
    /// The leader last returned; `None` before the first call.
    seen: Option<Option<Leader>>,
    /// Wakes the observer when a release of the election's lock is announced, so that a
    /// resignation is seen at once rather than at the next poll. Made on the first call.
    released: Option<WakeSubscription>,
}

impl Observer {
    pub(crate) fn new(election: Election) -> Self {
        Self { election, seen: None, released: None }
    }

    /// The leader (or `None`: nobody leads), as soon as it differs from the one this observer
    /// returned last; the first call returns the current one at once. A failed read is returned
    /// as the error; the next call reads again.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let client = self.election.client().clone();
        let keys = LockKeys::new(client.prefix(), self.election.name())?;
        let backend = &client.core().backend;
        if self.released.is_none() {
            let timeout = client.core().config.command_timeout;
            self.released = Some(backend.wake().subscribe(&keys.released, true, timeout).await);
        }
        loop {
            let released = self.released.as_ref().expect("subscribed above").notify().notified();
            tokio::pin!(released);
            released.as_mut().enable();
            // Armed before the read, so that a change right after it is not missed. A watch that
            // cannot be set leaves the poll.
            let watch = backend.watch_leader(&keys).await.ok().flatten();
            let leader = backend.leader(&keys).await?;
            if self.seen.as_ref() != Some(&leader) {
                self.seen = Some(leader.clone());
                return Ok(leader);
            }
            // With a watch the poll is only a safety net.
            let poll = if watch.is_some() { self.election.poll() * WATCHED_POLL_FACTOR } else { self.election.poll() };
            let watched = async {
                match watch {
                    Some(changed) => changed.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = released => {}
                () = watched => {}
                () = tokio::time::sleep(poll) => {}
            }
        }
    }
}
