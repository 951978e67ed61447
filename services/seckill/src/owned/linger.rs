//! How long a batch waits for more orders: only while orders arrive faster than the longest
//! linger, and never once a full batch is pending. One commit then serves more orders below
//! capacity (a commit's cost is PostgreSQL's, nearly the same for 3 orders as for 30), while a
//! lone order at low load is committed at once.
//!
//! The linger happens before the batch is taken, and the lease margin is checked when it is
//! taken, so waiting can never start a write that would land after its owner's lease.

use std::time::{Duration, Instant};

/// Orders that make a batch worth committing without lingering.
pub(crate) const BATCH_FULL: usize = 64;

/// How many average gaps without an order mean the stream stopped. Orders arriving at random
/// (a Poisson stream) leave a gap of two averages after one order in eight, which cut batches at
/// a few orders; four averages come after one order in fifty-five.
const STOPPED_AFTER_GAPS: u32 = 4;

/// The gap between decided orders, as a moving average: whether more are about to come.
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    last: Option<Instant>,
    /// Exponentially weighted (1/8 per arrival), so a burst is seen within a few orders and one
    /// long pause ends it. `None` until two orders were seen: a lone order waits for nothing.
    gap: Option<Duration>,
}

impl Arrivals {
    /// Notes an order decided at `now`.
    pub(crate) fn record(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last).min(Duration::from_secs(10));
            self.gap = Some(self.gap.map_or(gap, |average| (average * 7 + gap) / 8));
        }
        self.last = Some(now);
    }

    /// Whether another order is expected within `linger`, and until when if none comes
    /// meanwhile: orders have been arriving closer together than that, and the last one came less
    /// than [`STOPPED_AFTER_GAPS`] average gaps ago (a stream that stopped is not waited for). `None` when no order
    /// is expected. The moment returned is the one at which a lingering batcher must look again,
    /// without being woken by each order.
    pub(crate) fn dense_until(&self, linger: Duration, now: Instant) -> Option<Instant> {
        let (Some(last), Some(gap)) = (self.last, self.gap) else { return None };
        let stops = last + (gap * STOPPED_AFTER_GAPS).min(linger);
        (gap < linger && now < stops).then_some(stops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINGER: Duration = Duration::from_millis(5);

    #[test]
    fn a_lone_order_is_not_worth_waiting_for() {
        let mut arrivals = Arrivals::default();
        let now = Instant::now();

        arrivals.record(now);

        assert_eq!(arrivals.dense_until(LINGER, now), None);
    }

    #[test]
    fn a_steady_stream_faster_than_the_linger_is_worth_waiting_for() {
        let mut arrivals = Arrivals::default();
        let start = Instant::now();
        let mut now = start;
        for _ in 0..40 {
            now += Duration::from_millis(1);
            arrivals.record(now);
        }

        assert_eq!(arrivals.dense_until(LINGER, now), Some(now + Duration::from_millis(4)), "four gaps after the last order");
        assert_eq!(arrivals.dense_until(LINGER, now + Duration::from_millis(4)), None, "the stream stopped: stop waiting");
    }

    #[test]
    fn one_long_pause_ends_a_burst() {
        let mut arrivals = Arrivals::default();
        let mut now = Instant::now();
        for _ in 0..40 {
            now += Duration::from_micros(200);
            arrivals.record(now);
        }

        now += Duration::from_secs(2);
        arrivals.record(now);

        assert_eq!(arrivals.dense_until(LINGER, now), None);
    }

    #[test]
    fn orders_slower_than_the_linger_are_committed_at_once() {
        let mut arrivals = Arrivals::default();
        let mut now = Instant::now();
        for _ in 0..40 {
            now += Duration::from_millis(20);
            arrivals.record(now);
        }

        assert_eq!(arrivals.dense_until(LINGER, now), None);
    }
}
