//! How long and how hard each scenario runs: one [`Budget`] for the full suite (`make chaos`) and
//! one for the bounded suite (`scripts/chaos.sh --bounded`, run by `make test`). Every number a
//! scenario uses comes from here, so the two modes differ in one place only.

use std::time::Duration;

use serde::Serialize;

/// Full or bounded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every scenario at its full length (10-20 s each).
    Full,
    /// Every scenario shortened to a few seconds.
    Bounded,
}

impl Mode {
    /// `full` or `bounded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Bounded => "bounded",
        }
    }
}

/// The settings of the seckill instances under test.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceSettings {
    /// `SECKILL_LOCKS__LEASE_MS`: short, so that faults outlast it.
    pub lock_lease_ms: u64,
    /// `SECKILL_REQUEST_DEADLINE_MS`.
    pub request_deadline_ms: u64,
    /// `SECKILL_POOLS__GENERAL`.
    pub db_pool: u32,
    /// `SECKILL_WORKERS`.
    pub workers: u32,
    /// `SECKILL_ORDERS__SWEEP_INTERVAL_MS`: how often each instance expires overdue orders.
    pub sweep_interval_ms: u64,
}

/// The sale every load-driven scenario sells from.
#[derive(Debug, Clone, Serialize)]
pub struct SaleSettings {
    /// Units for sale.
    pub total: u32,
    /// Shards (each with its own lock).
    pub shards: u32,
    /// Most units one user may buy.
    pub per_user_limit: u32,
    /// Most units in one order.
    pub max_per_order: u32,
    /// Distinct users the load draws from.
    pub users: u32,
    /// The payment window of its orders, for the lifecycle rows (`None`: owned sales get a day,
    /// so nothing expires during the suite; see [`Api::put_sale`](crate::api::Api::put_sale)).
    pub payment_window_ms: Option<u64>,
}

/// The lifecycle rows' sales and what their buyers do with a reserved order: the window is
/// shorter than a run, so expiries and returns happen under the faults; each acknowledged new
/// order is paid with probability `pay`, cancelled with probability `cancel`, and otherwise left
/// to expire. The call goes to either instance after a think time, beside the load (it does not
/// hold up the worker's next order).
#[derive(Debug, Clone, Serialize)]
pub struct Settling {
    /// The sale's payment window.
    pub payment_window_ms: u64,
    /// Share of orders paid.
    pub pay: f64,
    /// Share of orders cancelled.
    pub cancel: f64,
    /// Most think time before the call.
    #[serde(with = "ms")]
    pub think: Duration,
    /// Most payments and cancellations in flight at once; an order beyond them is left to expire.
    pub in_flight: usize,
}

/// The load and fault budget of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    /// Which mode this is.
    pub mode: Mode,
    /// The service instances.
    pub service: ServiceSettings,
    /// The sale.
    pub sale: SaleSettings,
    /// The control scenario's sale: small enough to sell out within the drain, large enough not
    /// to sell out before the first pause (the service sells a few thousand units a second).
    pub control_sale: SaleSettings,
    /// What the buyers of the lifecycle rows' sales do with their orders.
    pub settling: Settling,
    /// The sale of the `redis-gate` rows: large enough not to sell out before the faults, a few
    /// seconds in, while the gate sells over 10 000 units a second in a release build; small
    /// enough to sell out within the drain afterwards.
    pub gate_sale: SaleSettings,
    /// Client tasks issuing orders, split evenly over the instances.
    pub workers: usize,
    /// Most load requests one scenario may send.
    pub max_requests: u64,
    /// Share of operations that replay an earlier acknowledged idempotency key.
    pub replay_fraction: f64,
    /// Client timeout of one request (longer than the service's deadline).
    #[serde(with = "ms")]
    pub request_timeout: Duration,
    /// Load before the first fault.
    #[serde(with = "ms")]
    pub warmup: Duration,
    /// Load after the last fault has healed.
    #[serde(with = "ms")]
    pub settle: Duration,
    /// Faults of each kind injected at least (more only when an expected effect is not seen yet).
    pub fault_rounds: u32,
    /// Most rounds when an expected effect (e.g. a fence rejection) has not been seen yet.
    pub max_fault_rounds: u32,
    /// Most rounds of the container control: a pause damages the stock only when it catches a
    /// holder between its lease check and its write, and four rounds of it missed once (the
    /// compose check of b07670f; it needed all four in one of the next two runs).
    pub max_container_control_rounds: u32,
    /// How long a fault lasts (SIGSTOP, partition, Redis or PostgreSQL down, early expiries).
    #[serde(with = "ms")]
    pub fault_length: Duration,
    /// Time between two fault rounds.
    #[serde(with = "ms")]
    pub fault_gap: Duration,
    /// Hard cap on one scenario's fault phase.
    #[serde(with = "ms")]
    pub fault_phase_cap: Duration,
    /// Hard cap on draining a sale to sold out (control scenario).
    #[serde(with = "ms")]
    pub drain_cap: Duration,
    /// Schemathesis examples per API operation.
    pub fuzz_examples: u32,
    /// Hard cap on the schemathesis run.
    #[serde(with = "ms")]
    pub fuzz_time_cap: Duration,
}

impl Budget {
    /// The budget of `mode`.
    pub fn for_mode(mode: Mode) -> Self {
        let service = ServiceSettings {
            lock_lease_ms: 1000,
            request_deadline_ms: 1500,
            db_pool: 16,
            workers: 2,
            sweep_interval_ms: 100,
        };
        let settling = Settling {
            pay: 0.4,
            cancel: 0.25,
            payment_window_ms: 1500,
            think: Duration::from_millis(1000),
            in_flight: 256,
        };
        let main_sale = sale(100_000);
        match mode {
            Mode::Full => Self {
                mode,
                service,
                sale: main_sale.clone(),
                control_sale: sale(40_000),
                settling: settling.clone(),
                gate_sale: sale(120_000),
                workers: 32,
                max_requests: 200_000,
                replay_fraction: 0.05,
                request_timeout: Duration::from_secs(3),
                warmup: Duration::from_secs(2),
                settle: Duration::from_secs(3),
                fault_rounds: 3,
                max_fault_rounds: 6,
                max_container_control_rounds: 10,
                fault_length: Duration::from_millis(3000),
                fault_gap: Duration::from_millis(2000),
                fault_phase_cap: Duration::from_secs(45),
                // Long enough for the slowest lock backends' controls (ZooKeeper, etcd: a few hundred
                // grants a second) to sell their phantom stock, so it shows as an oversell.
                drain_cap: Duration::from_secs(90),
                fuzz_examples: 150,
                fuzz_time_cap: Duration::from_secs(240),
            },
            Mode::Bounded => Self {
                mode,
                service,
                sale: main_sale,
                // The rows that sell out (the controls, instance-kill, sweeper-kill, the container
                // control) spend most of their time draining it. Their faults are over within
                // about 30 s (the container control's first four rounds), when the slowest of
                // them (redis-lock in dev-profile containers, about 380 units/s) has sold some
                // 11 000 units: 15 000 still outlasts them. The container control's rounds past
                // the fourth run only when the first four did no damage.
                control_sale: sale(15_000),
                settling,
                gate_sale: sale(10_000),
                workers: 24,
                max_requests: 40_000,
                replay_fraction: 0.05,
                request_timeout: Duration::from_secs(3),
                warmup: Duration::from_millis(1000),
                settle: Duration::from_millis(1500),
                fault_rounds: 1,
                max_fault_rounds: 4,
                max_container_control_rounds: 8,
                fault_length: Duration::from_millis(2500),
                fault_gap: Duration::from_millis(1000),
                fault_phase_cap: Duration::from_secs(25),
                // A bound on a run that would never end, not a speed test: a drain stops as soon
                // as the sale is sold out (or stops selling). At 15 s, gate-failpoint's sell-out
                // of 32 425 units on a box half as fast (about 1300 orders/s) hit the cap with
                // 13 172 units still offered, and the check read them as stranded.
                drain_cap: Duration::from_secs(45),
                fuzz_examples: 25,
                fuzz_time_cap: Duration::from_secs(90),
            },
        }
    }

    /// The lock lease of the instances.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.service.lock_lease_ms)
    }
}

/// A sale of `total` units over 20 shards, as in the reference deployment, with enough users that
/// the per-user limit is exercised but never stops the sale from selling out.
fn sale(total: u32) -> SaleSettings {
    SaleSettings {
        total,
        shards: 20,
        per_user_limit: 4,
        max_per_order: 2,
        users: 50_000,
        payment_window_ms: None,
    }
}

/// Serialises a duration as whole milliseconds.
mod ms {
    use std::time::Duration;

    use serde::Serializer;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_outlast_the_lease_and_bounded_is_shorter() {
        for mode in [Mode::Full, Mode::Bounded] {
            let b = Budget::for_mode(mode);
            assert!(
                b.fault_length > b.lease(),
                "{mode:?}: a fault must outlast the lease"
            );
            assert!(b.request_timeout > Duration::from_millis(b.service.request_deadline_ms));
            assert!(b.fault_rounds <= b.max_fault_rounds);
            assert!(b.max_fault_rounds <= b.max_container_control_rounds);
        }
        let (full, bounded) = (
            Budget::for_mode(Mode::Full),
            Budget::for_mode(Mode::Bounded),
        );
        assert!(bounded.fault_phase_cap < full.fault_phase_cap);
        assert!(bounded.max_requests < full.max_requests);
    }
}
