//! [`Observer`]: a follower's view of an election, one answer per change of leader.

use crate::{Leader, election::Election, error::Result, keys::LockKeys, wake::WakeSubscription};

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
            let leader = backend.leader(&keys).await?;
            if self.seen.as_ref() != Some(&leader) {
                self.seen = Some(leader.clone());
                return Ok(leader);
            }
            tokio::select! {
                () = released => {}
                () = tokio::time::sleep(self.election.poll()) => {}
            }
        }
    }
}
