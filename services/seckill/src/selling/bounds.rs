//! [`RequestBounds`]: how long one order may take, and the answer it gets when that passes.

use std::time::Duration;

use futures_util::FutureExt;

use super::InventoryError;
use crate::store::StoreError;

/// How long a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    /// How long one order may take deciding: waiting for admission, locks and stock included.
    pub deadline: Duration,
    /// How much longer its answer may take: an order decided just before the deadline is
    /// committed (or refused) within this. Past deadline and grace a request is answered `503
    /// unavailable` whatever it waits for, so a dependency that stops answering (a blackholed
    /// connection) holds no request, and no admission permit, for longer.
    pub answer_grace: Duration,
}

impl RequestBounds {
    /// The longest a request may take in all.
    pub fn answer(&self) -> Duration {
        self.deadline + self.answer_grace
    }

    /// `work`, or `503 unavailable` if it has not ended within [`answer`](Self::answer) (it is
    /// dropped: what it waited for may still happen).
    ///
    /// A combinator, not an `async fn` or block: those would keep `work` (an order's future,
    /// large) twice in their state, once as taken and once as awaited.
    pub fn answered_in_time<T>(
        &self,
        work: impl Future<Output = Result<T, InventoryError>>,
    ) -> impl Future<Output = Result<T, InventoryError>> {
        let bound = self.answer();
        tokio::time::timeout(bound, work).map(move |answered| {
            answered.unwrap_or_else(|_| {
                tracing::warn!(?bound, "a request found no answer within its bound; answering unavailable");
                Err(InventoryError::Store(StoreError::Unavailable(format!("no answer within {bound:?}"))))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bound_holds_its_work_once() {
        let bounds = RequestBounds { deadline: Duration::from_secs(1), answer_grace: Duration::from_secs(1) };
        let work = async {
            let held = [7u8; 4096];
            tokio::task::yield_now().await;
            Ok::<_, InventoryError>(held.iter().map(|&b| usize::from(b)).sum::<usize>())
        };
        let work_size = size_of_val(&work);

        let bounded = bounds.answered_in_time(work);

        assert!(size_of_val(&bounded) < work_size + 512, "{} bytes around {work_size} bytes of work", size_of_val(&bounded));
        assert_eq!(bounded.await.unwrap(), 7 * 4096);
    }
}
