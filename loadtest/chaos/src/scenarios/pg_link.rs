//! Faults on instance `b`'s link to PostgreSQL, through the suite's [`FaultProxy`]: `b` reaches
//! the database only through it, `a` directly. Each round holds the link for longer than `b`'s
//! lease (nothing is reset: bytes wait as behind a slow or cut cable), then heals it, which
//! delivers what was held, late.
//!
//! - `pg-delay`: Kleppmann's delayed packet against `owned-shards`. What `b` sends is held back
//!   for the fault's length while answers still pass: a batch already on its way is answered,
//!   the next one is held. `b` gives its shards up when that batch does not answer, `a` takes them
//!   over and sells, and then the held batch reaches PostgreSQL. Its stock write carries `b`'s old
//!   fence and must be refused (a fence rejection is counted). (A blackhole would hold the answer
//!   of a batch that PostgreSQL had already committed in time as often as a request: a round that
//!   catches an answer shows nothing.)
//! - `pg-delay-control`: the same against `owned-unfenced`, whose batch write lacks the fence
//!   predicate: the late absolute stock value lands over `a`'s sales, and the checker must see the
//!   oversell, or the suite fails.
//! - `pg-blackhole`: the link blackholed both ways, judged on availability: `a` keeps selling
//!   while `b` is cut off (it takes `b`'s shards within about a lease), no 5xx but 503, nothing
//!   lost.
//!
//! The sales have one shard, which both instances want: it changes hands in turns, so `a` is
//! there to take it over whenever `b` lets it go. With twenty shards each instance would sell
//! from shards of its own and nobody would claim `b`'s.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::{
    environment::Environment,
    faultproxy::{FaultProxy, Mode},
    harness::{FENCED, FaultPlan, FaultRun, Probe, RunOutcome, TARGET, placed},
    processes::seckill::InstanceSpec,
    report::Check,
    settings::{Budget, SaleSettings},
};

/// How long a round waits for `b` to own the shard before cutting anyway.
const OWNER_WAIT: Duration = Duration::from_secs(3);

/// `owned-shards` without the fence predicate on its batch write.
const UNFENCED: &str = "owned-unfenced";

/// What a run of the fault is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// The late batch is refused by the fence.
    Delay,
    /// The late batch oversells (the control).
    DelayControl,
    /// The other instance sells while `b` is cut off.
    Blackhole,
}

/// Starts a [`FaultProxy`] in front of the suite's PostgreSQL and points `spec` at it, so that
/// the instance reaches the database only through the proxy (in [`Mode::Pass`] until told
/// otherwise). The proxy forwards for as long as it lives.
pub(crate) async fn postgres_through_proxy(
    env: &Environment,
    spec: &mut InstanceSpec,
) -> Result<FaultProxy> {
    let upstream = SocketAddr::from(([127, 0, 0, 1], env.postgres.port()));
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await?;
    spec.database_url = env
        .database_url()
        .replace(&upstream.to_string(), &proxy.addr().to_string());
    Ok(proxy)
}

/// A fault plan on `b`'s PostgreSQL link.
pub(crate) struct PgLink {
    judged: Judged,
    proxy: Option<FaultProxy>,
}

impl PgLink {
    /// `pg-delay`.
    pub(crate) fn delay() -> Self {
        Self {
            judged: Judged::Delay,
            proxy: None,
        }
    }

    /// `pg-delay-control`.
    pub(crate) fn delay_control() -> Self {
        Self {
            judged: Judged::DelayControl,
            proxy: None,
        }
    }

    /// `pg-blackhole`.
    pub(crate) fn blackhole() -> Self {
        Self {
            judged: Judged::Blackhole,
            proxy: None,
        }
    }

    fn effect_seen(&self, probe: &Probe) -> bool {
        match self.judged {
            Judged::Delay => probe.fence_rejections > 0,
            Judged::DelayControl => probe.violated(),
            Judged::Blackhole => true,
        }
    }
}

impl FaultPlan for PgLink {
    fn name(&self) -> &'static str {
        match self.judged {
            Judged::Delay => "pg-delay",
            Judged::DelayControl => "pg-delay-control",
            Judged::Blackhole => "pg-blackhole",
        }
    }

    fn description(&self) -> &'static str {
        match self.judged {
            Judged::Delay => {
                "Hold b's PostgreSQL requests back (fault proxy; answers pass) past its lease, so its next batch stays on the wire; a takes the shards over and sells; then deliver the held bytes. The late batch must be refused by the fence."
            }
            Judged::DelayControl => {
                "pg-delay against owned-unfenced (no fence predicate on the batch write): the late batch overwrites a's sales, and the checker must detect the oversell, or the suite fails."
            }
            Judged::Blackhole => {
                "Blackhole b's PostgreSQL traffic past its lease: a takes b's shards over and keeps selling; no 5xx but 503, nothing acknowledged lost."
            }
        }
    }

    fn strategy(&self) -> &'static str {
        if self.judged == Judged::DelayControl {
            UNFENCED
        } else {
            FENCED
        }
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        let sale = if self.judged == Judged::DelayControl {
            &budget.control_sale
        } else {
            &budget.sale
        };
        SaleSettings {
            shards: 1,
            ..sale.clone()
        }
    }

    async fn prepare(&mut self, env: &Environment, specs: &mut [InstanceSpec]) -> Result<()> {
        self.proxy = Some(postgres_through_proxy(env, &mut specs[TARGET]).await?);
        Ok(())
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let proxy = self.proxy.as_ref().context("prepare() starts the proxy")?;
        let length = run.budget.fault_length;
        let name = run.instances[TARGET].name().to_owned();
        let cut = async |run: &mut FaultRun<'_>, _| {
            // Cut while b owns the shard, so that what the link holds is a batch of b's (a round
            // cut while a owns it would only catch b's claims).
            let deadline = Instant::now() + OWNER_WAIT;
            while Instant::now() < deadline
                && run.instances[TARGET]
                    .owned_shards(run.sku)
                    .await
                    .unwrap_or(0)
                    == 0
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if self.judged == Judged::Blackhole {
                let action = format!(
                    "blackhole {name} <-> postgres for {} ms, then deliver",
                    length.as_millis()
                );
                return run.blackhole(proxy, action, TARGET, length).await;
            }
            let action = format!(
                "hold {name} -> postgres requests for {} ms (answers pass), then deliver",
                length.as_millis()
            );
            let held = Mode::DelayRequests(length);
            run.link_fault(proxy, held, action, TARGET, length).await
        };
        // The control stops at the first detection: its sale is small and soon sold out.
        if self.judged == Judged::DelayControl {
            run.rounds_until(|probe| self.effect_seen(probe), cut)
                .await?;
        } else {
            run.rounds(|probe| self.effect_seen(probe), cut).await?;
        }
        Ok(())
    }

    fn heal(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.set_mode(Mode::Pass);
        }
    }

    fn expects_violation(&self) -> bool {
        self.judged == Judged::DelayControl
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        match self.judged {
            Judged::Delay => {
                let refused = outcome.probe.fence_rejections;
                vec![Check::new(
                    "late_batches_refused_by_the_fence",
                    refused > 0,
                    format!(
                        "{refused} batches or claims refused by fences after {} cut(s)",
                        outcome.rounds
                    ),
                )]
            }
            Judged::DelayControl => Vec::new(),
            Judged::Blackhole => {
                let sold = outcome.completed_during_faults(placed);
                vec![Check::new(
                    "others_sold_while_cut_off",
                    sold > 0,
                    format!(
                        "{sold} orders placed while {} was cut off from PostgreSQL",
                        outcome.rounds
                    ),
                )]
            }
        }
    }

    fn notable_log_lines(&self) -> &'static [&'static str] {
        &["batch commit failed", "deposed"]
    }
}
