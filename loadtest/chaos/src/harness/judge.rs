//! Judging a run: [`RunOutcome`] (what a plan's expectations see), the checks every fault
//! scenario shares ([`shared_checks`]), the shared checks a plan only reports
//! ([`mark_reported_only`]), and recovery after each fault. The findings themselves come from
//! [`crate::checker`].

use super::{FENCED, Probe};
use crate::{
    checker::Findings,
    history::{Op, Outcome},
    report::{Check, FaultEvent, ScenarioReport},
    scenarios::gate::GateOutcome,
};

/// What a plan's expectations are judged on.
pub struct RunOutcome<'a> {
    /// The checker's findings.
    pub findings: &'a Findings,
    /// The final probe.
    pub probe: &'a Probe,
    /// The history.
    pub ops: &'a [Op],
    /// Faults as injected.
    pub faults: &'a [FaultEvent],
    /// Fault rounds run.
    pub rounds: u32,
    /// `redis-gate` sales: the queue, Redis against PostgreSQL, and the reconciliations.
    pub gate: Option<&'a GateOutcome>,
}

impl RunOutcome<'_> {
    /// Operations that completed while a fault was active, by outcome label.
    pub fn completed_during_faults(&self, keep: impl Fn(&Outcome) -> bool) -> usize {
        self.ops
            .iter()
            .filter(|op| {
                let (Some(done), Some(outcome)) = (op.completed_ms, &op.outcome) else {
                    return false;
                };
                keep(outcome)
                    && self
                        .faults
                        .iter()
                        .any(|f| f.at_ms <= done && f.healed_ms.is_none_or(|h| done <= h))
            })
            .count()
    }
}

/// The checks every fault scenario must pass, and the stock checks (which a control, one that
/// `expects_violation`, must fail). `alive` names each instance and whether it is still up.
pub fn shared_checks(
    strategy: &str,
    expects_violation: bool,
    outcome: &RunOutcome<'_>,
    alive: &[(String, bool)],
) -> Vec<Check> {
    let f = outcome.findings;
    let mut checks = vec![
        Check::new(
            "load_made_progress",
            f.acknowledged > 0,
            format!(
                "{} orders acknowledged of {} requests",
                f.acknowledged, f.requests
            ),
        ),
        Check::new(
            "no_lost_acknowledged",
            f.lost == 0 && f.mismatched == 0,
            format!(
                "{} acknowledged orders missing, {} stored differently",
                f.lost, f.mismatched
            ),
        ),
        Check::new(
            "no_duplicates",
            f.duplicates == 0,
            format!("{} duplicate orders", f.duplicates),
        ),
        Check::new(
            "no_phantoms",
            f.phantoms == 0 && f.unknown_orders == 0,
            format!(
                "{} failed operations happened anyway, {} orders under unknown keys",
                f.phantoms, f.unknown_orders
            ),
        ),
        Check::new(
            "no_partial_orders",
            f.partial_orders == 0,
            format!("{} orders whose parts do not add up", f.partial_orders),
        ),
        Check::new(
            "per_user_limit",
            f.users_over_limit == 0 && f.purchase_mismatches == 0,
            format!(
                "{} users over the limit, {} user_purchases rows off",
                f.users_over_limit, f.purchase_mismatches
            ),
        ),
        Check::new(
            "indeterminate_resolved",
            f.unresolved == 0,
            format!(
                "{} unknown outcomes: {} had happened, {} had not, {} placed on re-send, {} unresolved",
                f.indeterminate,
                f.resolved_happened,
                f.resolved_not_happened,
                f.resolved_placed_now,
                f.unresolved
            ),
        ),
        Check::new(
            "no_server_errors",
            f.server_errors == 0,
            format!("{} answers 5xx other than 503", f.server_errors),
        ),
        Check::new(
            "replays_answer_the_original",
            f.replay_mismatches == 0,
            format!("{} replays answered otherwise", f.replay_mismatches),
        ),
        Check::new(
            "instances_survived",
            alive.iter().all(|(_, up)| *up),
            alive
                .iter()
                .map(|(name, up)| format!("{name}: {}", if *up { "alive" } else { "DEAD" }))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ];
    let lifecycle = &f.lifecycle;
    if lifecycle.sent > 0 {
        checks.push(Check::new(
            "settlements_kept",
            lifecycle.not_kept == 0 && lifecycle.refused_but_done == 0 && lifecycle.rejected == 0,
            format!(
                "{} payments and cancellations: {} answered done but ended otherwise, {} refused but done, {} refused with another status",
                lifecycle.sent, lifecycle.not_kept, lifecycle.refused_but_done, lifecycle.rejected
            ),
        ));
        checks.push(Check::new(
            "returns_exactly_once",
            lifecycle.returns_mismatched == 0 && lifecycle.expired_early == 0,
            format!(
                "{} orders whose returns do not match how they ended, {} expired before their window closed (whether the returns reached the stock once: shards_consistent)",
                lifecycle.returns_mismatched, lifecycle.expired_early
            ),
        ));
    }
    let unrecovered: Vec<&str> = outcome
        .faults
        .iter()
        .filter(|fault| {
            fault.healed_ms.is_some() && first_after(fault, outcome.ops, answers_normally).is_none()
        })
        .map(|fault| fault.action.as_str())
        .collect();
    checks.push(Check::new(
        "recovered_after_each_fault",
        unrecovered.is_empty(),
        if unrecovered.is_empty() {
            "a 201 (or, once sold out, a 409 sold_out) followed every healed fault".to_owned()
        } else {
            format!("no 201 or sold_out after: {}", unrecovered.join("; "))
        },
    ));
    let stock = format!(
        "sold {} of {}, oversold {}, {} shards negative, {} shards inconsistent ({} units of phantom stock)",
        f.sold, f.total, f.oversold, f.negative_shards, f.inconsistent_shards, f.phantom_stock
    );
    if expects_violation {
        let detected = f.oversold > 0
            || f.negative_shards > 0
            || f.inconsistent_shards > 0
            || f.writes_after_takeover > 0
            || f.late_writes_over_a_newer_owner > 0;
        let seen = format!(
            "{stock}; {} writes landed after a newer owner had claimed their shard, {} of them after their own lease had run out",
            f.writes_after_takeover, f.late_writes_over_a_newer_owner
        );
        checks.push(Check::new("violation_detected", detected, seen));
    } else {
        checks.push(Check::new(
            "not_oversold",
            f.oversold == 0 && f.negative_shards == 0,
            stock.clone(),
        ));
        checks.push(Check::new(
            "shards_consistent",
            f.inconsistent_shards == 0,
            stock,
        ));
        // No check that commits on a shard follow their fences: the claim and the write's
        // `fence = t` predicate make an older fence after a newer one impossible by construction,
        // so such a check could not fail. The counts stay figures (see `fence_order_violations`).
        // In real time the claim log can see more: a write landing after a newer owner claimed
        // (owned strategies log their claims); the unfenced control shows it can fail.
        if strategy == FENCED {
            checks.push(Check::new(
                "no_write_after_takeover",
                f.writes_after_takeover == 0,
                format!(
                    "{} order parts written under a fence after a newer fence had claimed their shard (PostgreSQL's clock)",
                    f.writes_after_takeover
                ),
            ));
            checks.push(Check::new(
                "late_writes_refused",
                f.late_writes_over_a_newer_owner == 0,
                format!(
                    "{} writes landed after their owner's own lease had run out: {} refused by the fence, {} before any newer owner claimed (no rival), {} over a newer owner; {} refused within their lease (the lock gave the shard to two holders)",
                    f.late_writes,
                    f.late_writes_refused,
                    f.late_writes_unopposed,
                    f.late_writes_over_a_newer_owner,
                    f.refused_within_lease
                ),
            ));
        }
    }
    checks
}

/// Marks the shared checks named in `reported` (a plan's [`FaultPlan::reported_only`]) passed,
/// keeping what they found in their detail: the damage the scenario exists to show is reported,
/// not judged.
pub(super) fn mark_reported_only(checks: &mut [Check], reported: &[&str]) {
    for check in checks.iter_mut() {
        if reported.contains(&check.name.as_str()) {
            check.detail = format!(
                "reported, not judged (the damage this scenario shows): {}{}",
                if check.passed { "" } else { "VIOLATED: " },
                check.detail
            );
            check.passed = true;
        }
    }
}

/// A new order placed.
pub(crate) fn placed(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Ok { status: 201, .. })
}

/// A new order placed, or refused because the sale is sold out: the service works normally.
fn answers_normally(outcome: &Outcome) -> bool {
    placed(outcome) || matches!(outcome, Outcome::Fail { status: 409, code } if code == "sold_out")
}

/// Time from the start of `fault` to the first operation that completed after it healed (on its
/// instance, if it hit one) with an outcome that `counts`.
fn first_after(fault: &FaultEvent, ops: &[Op], counts: fn(&Outcome) -> bool) -> Option<u64> {
    let healed = fault.healed_ms?;
    ops.iter()
        .filter(|op| fault.instance.is_none_or(|i| op.invocation.instance == i))
        .filter(|op| op.outcome.as_ref().is_some_and(counts))
        .filter_map(|op| op.completed_ms.filter(|&done| done >= healed))
        .min()
        .map(|done| done - fault.at_ms)
}

/// The worst recovery over the faults; each one's also goes into the report's figures.
pub fn recovery(faults: &[FaultEvent], ops: &[Op], report: &mut ScenarioReport) -> Option<u64> {
    let each: Vec<Option<u64>> = faults
        .iter()
        .filter(|f| f.healed_ms.is_some())
        .map(|f| first_after(f, ops, placed))
        .collect();
    report.figure("recovery_ms_each", each.clone());
    each.into_iter().flatten().max()
}
