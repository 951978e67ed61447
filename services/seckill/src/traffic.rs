//! [`Traffic`]: what this instance answered to orders over the last seconds, per sale: the answer
//! mix, accepted orders per second and a latency percentile. Kept in memory, per instance, for
//! the live view (`GET /v1/sales/{sku}/live`) and the sale page; Prometheus has the long view.
//!
//! Bounded: a fixed window of one-second buckets per sale, and at most [`MAX_SALES`] sales (the
//! least recently answered one is forgotten first).

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::domain::Sku;

/// Seconds of history kept per sale.
pub const WINDOW_SECS: u64 = 10;

/// Sales tracked at once.
pub const MAX_SALES: usize = 64;

/// Upper bounds of the latency buckets, in milliseconds (the last bucket is open).
const LATENCY_BOUNDS_MS: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/// One second of answers.
#[derive(Debug, Clone, Default)]
struct Second {
    at: u64,
    answers: BTreeMap<&'static str, u64>,
    latency: [u64; LATENCY_BOUNDS_MS.len() + 1],
}

#[derive(Debug, Default)]
struct SaleTraffic {
    seconds: VecDeque<Second>,
    last_answer: u64,
}

/// Recent answers per sale on this instance.
#[derive(Debug)]
pub struct Traffic {
    epoch: Instant,
    sales: Mutex<HashMap<Sku, SaleTraffic>>,
}

/// The last [`WINDOW_SECS`] seconds of one sale, as this instance answered them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrafficView {
    /// Seconds covered (the current, partial second excluded).
    pub window_secs: u64,
    /// Answers by outcome (`accepted`, `replayed`, `sold_out`, `user_limit_reached`, `busy`,
    /// `unavailable`, ...).
    pub answers: BTreeMap<&'static str, u64>,
    /// Accepted orders per second over the window.
    pub accepted_per_sec: f64,
    /// The 99th percentile of answer times, as the upper bound of its bucket (ms); `None`
    /// without answers.
    pub p99_ms_at_most: Option<u64>,
}

impl Default for Traffic {
    fn default() -> Self {
        Self { epoch: Instant::now(), sales: Mutex::default() }
    }
}

impl Traffic {
    /// Counts one answer to an order of `sku`: its outcome code and how long it took.
    pub fn record(&self, sku: &Sku, outcome: &'static str, took: Duration) {
        self.record_at(self.epoch.elapsed().as_secs(), sku, outcome, took);
    }

    /// The completed seconds of the window for `sku` (empty if it had no answers lately).
    pub fn view(&self, sku: &Sku) -> TrafficView {
        self.view_at(self.epoch.elapsed().as_secs(), sku)
    }

    fn record_at(&self, now: u64, sku: &Sku, outcome: &'static str, took: Duration) {
        let mut sales = self.sales.lock().unwrap();
        if !sales.contains_key(sku) && sales.len() >= MAX_SALES {
            let oldest = sales.iter().min_by_key(|(_, t)| t.last_answer).map(|(sku, _)| sku.clone());
            if let Some(oldest) = oldest {
                sales.remove(&oldest);
            }
        }
        let sale = sales.entry(sku.clone()).or_default();
        sale.last_answer = now;
        if sale.seconds.back().is_none_or(|s| s.at != now) {
            sale.seconds.push_back(Second { at: now, ..Second::default() });
        }
        while sale.seconds.front().is_some_and(|s| s.at + WINDOW_SECS < now) {
            sale.seconds.pop_front();
        }
        let second = sale.seconds.back_mut().expect("pushed above");
        *second.answers.entry(outcome).or_default() += 1;
        let ms = took.as_millis() as u64;
        let bucket = LATENCY_BOUNDS_MS.iter().position(|&bound| ms <= bound).unwrap_or(LATENCY_BOUNDS_MS.len());
        second.latency[bucket] += 1;
    }

    fn view_at(&self, now: u64, sku: &Sku) -> TrafficView {
        let sales = self.sales.lock().unwrap();
        let seconds: Vec<&Second> = sales
            .get(sku)
            .map(|sale| sale.seconds.iter().filter(|s| s.at < now && s.at + WINDOW_SECS >= now).collect())
            .unwrap_or_default();
        let mut answers = BTreeMap::new();
        let mut latency = [0u64; LATENCY_BOUNDS_MS.len() + 1];
        for second in &seconds {
            for (outcome, n) in &second.answers {
                *answers.entry(*outcome).or_default() += n;
            }
            for (total, n) in latency.iter_mut().zip(second.latency) {
                *total += n;
            }
        }
        let accepted = answers.get("accepted").copied().unwrap_or(0);
        TrafficView {
            window_secs: WINDOW_SECS,
            accepted_per_sec: accepted as f64 / WINDOW_SECS as f64,
            p99_ms_at_most: percentile_bound(&latency, 0.99),
            answers,
        }
    }
}

/// The upper bound of the bucket holding quantile `q` (`None` for an empty histogram; the open
/// bucket reports twice the last bound).
fn percentile_bound(buckets: &[u64], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (total as f64 * q).ceil() as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATENCY_BOUNDS_MS.get(i).copied().unwrap_or(LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.len() - 1] * 2));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_is_the_bound_of_its_bucket() {
        let mut buckets = [0u64; LATENCY_BOUNDS_MS.len() + 1];
        assert_eq!(percentile_bound(&buckets, 0.99), None);
        buckets[2] = 98; // <= 5 ms
        buckets[6] = 2; // <= 100 ms
        assert_eq!(percentile_bound(&buckets, 0.99), Some(100));
        assert_eq!(percentile_bound(&buckets, 0.5), Some(5));
    }

    #[test]
    fn the_window_holds_completed_seconds_only() {
        let traffic = Traffic::default();
        let sku = Sku::parse("sku-1").unwrap();
        traffic.record_at(100, &sku, "accepted", Duration::from_millis(3));
        traffic.record_at(101, &sku, "accepted", Duration::from_millis(3));
        traffic.record_at(101, &sku, "sold_out", Duration::from_millis(1));

        assert_eq!(traffic.view_at(101, &sku).answers.get("accepted"), Some(&1), "second 101 is still running");
        let view = traffic.view_at(102, &sku);
        assert_eq!((view.answers["accepted"], view.answers["sold_out"]), (2, 1));
        assert!(traffic.view_at(100 + WINDOW_SECS + 2, &sku).answers.is_empty(), "old seconds fall out");
    }

    #[test]
    fn sales_are_bounded() {
        let traffic = Traffic::default();
        for i in 0..(MAX_SALES + 5) {
            traffic.record_at(i as u64, &Sku::parse(&format!("sale-{i}")).unwrap(), "sold_out", Duration::ZERO);
        }
        let sales = traffic.sales.lock().unwrap();
        assert_eq!(sales.len(), MAX_SALES);
        assert!(!sales.contains_key(&Sku::parse("sale-0").unwrap()), "the least recent sale went first");
    }
}
