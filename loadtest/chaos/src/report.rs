//! Results: one [`ScenarioReport`] per scenario, gathered into a [`SuiteReport`] written as
//! `chaos-*.json` (everything) and `chaos-*.md` (a table, then the checks of each scenario).

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::{checker::Findings, settings::Budget};

/// `path` as a report shows it: relative to the working directory (the repository, as
/// `scripts/chaos.sh` runs the suite) when it lies below it, so published results name no
/// machine's directories.
pub fn shown_path(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|dir| path.strip_prefix(dir).ok())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Whether a scenario passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every check held.
    Passed,
    /// A check failed, or the scenario could not run.
    Failed,
    /// Not applicable yet (listed so that the gap is visible).
    NotApplicable,
}

/// One fault as injected.
#[derive(Debug, Clone, Serialize)]
pub struct FaultEvent {
    /// What was done (`SIGSTOP b`, `kill -9 redis`, ...).
    pub action: String,
    /// When it started, ms since the scenario started.
    pub at_ms: u64,
    /// When it was healed (`None`: instantaneous).
    pub healed_ms: Option<u64>,
    /// The instance it hit (`None`: all of them).
    pub instance: Option<usize>,
}

/// One verdict line.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short name (`no_lost_acknowledged`, `fence_rejections_seen`, ...).
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// The figures behind it.
    pub detail: String,
}

impl Check {
    /// A check named `name` that holds iff `passed`.
    pub fn new(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Self {
            name: name.to_owned(),
            passed,
            detail: detail.into(),
        }
    }
}

/// The result of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Its name.
    pub scenario: String,
    /// The sale strategy under test (`None` when no sale is involved).
    pub strategy: Option<String>,
    /// Passed, failed or not applicable.
    pub status: Status,
    /// `true`/`false`, or `null` when not applicable.
    pub passed: Option<bool>,
    /// What it does, in one sentence.
    pub description: String,
    /// Faults injected, in order.
    pub faults: Vec<FaultEvent>,
    /// Requests sent (load operations, or fuzz requests).
    pub requests: u64,
    /// Orders acknowledged to clients.
    pub acknowledged: u64,
    /// Acknowledged orders missing from PostgreSQL.
    pub lost: u64,
    /// Units sold beyond the total.
    pub oversold: i64,
    /// Duplicate orders.
    pub duplicates: u64,
    /// Writes and claims refused by fences (`seckill_fence_rejections(sku)`).
    pub stale_rejected: i64,
    /// Worst time from a fault's start to the first 201 after it healed.
    pub recovery_ms: Option<u64>,
    /// Wall time of the scenario.
    pub duration_ms: u64,
    /// Every check and whether it held.
    pub checks: Vec<Check>,
    /// Scenario-specific figures (leases lost, 5xx counts, ...).
    pub figures: BTreeMap<String, Value>,
    /// The checker's full findings (load-driven scenarios).
    pub findings: Option<Findings>,
    /// Log lines and examples backing a failure or a notable event.
    pub evidence: Vec<String>,
    /// Set when the scenario could not run to the end.
    pub error: Option<String>,
}

impl ScenarioReport {
    /// An empty report for `scenario`; fill it, then [`finish`](Self::finish).
    pub fn new(scenario: &str, strategy: Option<&str>, description: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            strategy: strategy.map(str::to_owned),
            status: Status::Failed,
            passed: Some(false),
            description: description.to_owned(),
            faults: Vec::new(),
            requests: 0,
            acknowledged: 0,
            lost: 0,
            oversold: 0,
            duplicates: 0,
            stale_rejected: 0,
            recovery_ms: None,
            duration_ms: 0,
            checks: Vec::new(),
            figures: BTreeMap::new(),
            findings: None,
            evidence: Vec::new(),
            error: None,
        }
    }

    /// A scenario listed but not run yet.
    pub fn not_applicable(scenario: &str, description: &str, why: &str) -> Self {
        let mut report = Self::new(scenario, None, description);
        report.status = Status::NotApplicable;
        report.passed = None;
        report.evidence.push(why.to_owned());
        report
    }

    /// Copies the headline figures from the checker's findings.
    pub fn take_findings(&mut self, f: Findings) {
        self.requests = f.requests as u64;
        self.acknowledged = f.acknowledged as u64;
        self.lost = f.lost as u64;
        self.oversold = f.oversold;
        self.duplicates = f.duplicates as u64;
        self.stale_rejected = f.stale_rejected;
        self.evidence.extend(f.examples.iter().cloned());
        self.findings = Some(f);
    }

    /// Records a figure.
    pub fn figure(&mut self, name: &str, value: impl Into<Value>) {
        self.figures.insert(name.to_owned(), value.into());
    }

    /// Sets the verdict from the checks (and the error, if any).
    pub fn finish(&mut self, duration_ms: u64) {
        self.duration_ms = duration_ms;
        if self.status == Status::NotApplicable {
            return;
        }
        let ok =
            self.error.is_none() && !self.checks.is_empty() && self.checks.iter().all(|c| c.passed);
        self.status = if ok { Status::Passed } else { Status::Failed };
        self.passed = Some(ok);
    }

    /// Names of the failed checks (or the error).
    pub fn failures(&self) -> Vec<String> {
        let mut failures: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect();
        if let Some(e) = &self.error {
            failures.push(format!("error: {e}"));
        }
        failures
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// Always `chaos`.
    pub suite: &'static str,
    /// `full` or `bounded` (`containers-full`, `containers-bounded`: the rows across containers).
    pub mode: &'static str,
    /// seckill instances under load.
    pub instances: usize,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// Wall time of the suite (without the build).
    pub duration_ms: u64,
    /// `git rev-parse HEAD` of the tree that was tested, if known.
    pub commit: Option<String>,
    /// Whether every applicable scenario passed.
    pub passed: bool,
    /// The budget the scenarios ran with.
    pub budget: Budget,
    /// Where things ran (ports, binary).
    pub environment: BTreeMap<String, Value>,
    /// One entry per scenario, in run order.
    pub scenarios: Vec<ScenarioReport>,
}

impl SuiteReport {
    /// Writes `DIR/PREFIX.json` and `DIR/PREFIX.md`.
    pub fn write(&self, dir: &Path, prefix: &str) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let json = dir.join(format!("{prefix}.json"));
        std::fs::write(&json, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("write {}", json.display()))?;
        let md = dir.join(format!("{prefix}.md"));
        std::fs::write(&md, self.markdown()).with_context(|| format!("write {}", md.display()))?;
        Ok(())
    }

    /// The Markdown rendering: a summary table, then each scenario's checks and evidence.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let verdict = if self.passed { "PASSED" } else { "FAILED" };
        let _ = writeln!(md, "# Chaos suite ({} run): {verdict}\n", self.mode);
        let _ = writeln!(
            md,
            "Started {} UTC, {:.1} s, commit `{}`. Lock lease {} ms, request deadline {} ms, {} client tasks over {} instances.\n",
            self.started_at,
            self.duration_ms as f64 / 1000.0,
            self.commit.as_deref().unwrap_or("unknown"),
            self.budget.service.lock_lease_ms,
            self.budget.service.request_deadline_ms,
            self.budget.workers,
            self.instances,
        );
        md.push_str("| scenario | strategy | result | faults | requests | acknowledged | lost | oversold | duplicates | stale rejected | recovery ms |\n");
        md.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for s in &self.scenarios {
            let result = match s.status {
                Status::Passed => "passed",
                Status::Failed => "**FAILED**",
                Status::NotApplicable => "n/a",
            };
            let _ = writeln!(
                md,
                "| {} | {} | {result} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.scenario,
                s.strategy.as_deref().unwrap_or("-"),
                s.faults.len(),
                s.requests,
                s.acknowledged,
                s.lost,
                s.oversold,
                s.duplicates,
                s.stale_rejected,
                s.recovery_ms.map_or("-".to_owned(), |ms| ms.to_string()),
            );
        }
        let damage: Vec<&ScenarioReport> = self
            .scenarios
            .iter()
            .filter(|s| s.figures.contains_key("damage"))
            .collect();
        if !damage.is_empty() {
            md.push_str("\n### Damage: redis-gate against owned-shards\n\n");
            md.push_str("The `gate-*` rows are expected to show damage and pass when it is detected (`gate-redis-loss-durable` must lose no acknowledged order); the `owned-shards` rows must show none. Acknowledged lost: acknowledged orders missing from PostgreSQL or stored as another order. Acknowledged oversold: units acknowledged beyond the stock. Undersold: units neither in an order nor for sale, before the repair. Stranded: units left unsold after the repair and the sell-out (`-` where the run ended before the service said sold out).\n\n");
            md.push_str("| scenario | strategy | result | acknowledged lost | acknowledged oversold | oversold (PostgreSQL) | undersold | replays answered otherwise | reconciliation | stranded |\n");
            md.push_str("|---|---|---|---:|---:|---:|---:|---:|---|---:|\n");
            for s in damage {
                let d = &s.figures["damage"];
                let cell = |k: &str| match &d[k] {
                    Value::Null => "-".to_owned(),
                    v => v.to_string(),
                };
                let repaired = match &d["repaired"] {
                    Value::Null => "-".to_owned(),
                    r if r["status"] == 200 => format!(
                        "repaired {} undersold, {} redis excess; {} oversold",
                        r["undersold"], r["redis_excess"], r["oversold"]
                    ),
                    r => format!("refused ({})", r["status"]),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {repaired} | {} |",
                    s.scenario,
                    s.strategy.as_deref().unwrap_or("-"),
                    if s.status == Status::Passed {
                        "passed"
                    } else {
                        "**FAILED**"
                    },
                    cell("acknowledged_lost"),
                    cell("acknowledged_oversold"),
                    cell("oversold"),
                    cell("undersold"),
                    cell("replays_answered_otherwise"),
                    cell("stranded"),
                );
            }
        }
        md.push_str("\n`control` runs the `pause` scenario against the unfenced `redis-lock` strategy: it passes when the checker *detects* the oversell / inconsistency that fencing prevents.\n");
        for s in &self.scenarios {
            let _ = writeln!(md, "\n## {}\n\n{}\n", s.scenario, s.description);
            if !s.faults.is_empty() {
                let faults: Vec<String> = s
                    .faults
                    .iter()
                    .map(|f| match f.healed_ms {
                        Some(h) => format!("{} at {} ms, healed at {h} ms", f.action, f.at_ms),
                        None => format!("{} at {} ms", f.action, f.at_ms),
                    })
                    .collect();
                let _ = writeln!(md, "Faults: {}.\n", faults.join("; "));
            }
            for c in &s.checks {
                let _ = writeln!(
                    md,
                    "- {} `{}`: {}",
                    if c.passed { "ok" } else { "**FAILED**" },
                    c.name,
                    c.detail
                );
            }
            if !s.figures.is_empty() {
                let figures: Vec<String> = s
                    .figures
                    .iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect();
                let _ = writeln!(md, "\nFigures: {}.", figures.join(", "));
            }
            if let Some(e) = &s.error {
                let _ = writeln!(md, "\nError: {e}");
            }
            if !s.evidence.is_empty() {
                md.push_str("\nEvidence:\n\n```\n");
                for line in s.evidence.iter().take(20) {
                    let _ = writeln!(md, "{line}");
                }
                md.push_str("```\n");
            }
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Budget, Mode};

    #[test]
    fn paths_below_the_working_directory_are_shown_relative_to_it() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            shown_path(&here.join(".run/chaos/history/pause.jsonl")),
            ".run/chaos/history/pause.jsonl"
        );
        assert_eq!(shown_path(Path::new("/elsewhere/x")), "/elsewhere/x");
    }

    #[test]
    fn a_report_passes_only_if_every_check_does_and_renders_a_row_per_scenario() {
        let mut good = ScenarioReport::new("pause", Some("sharded-fenced"), "d");
        good.checks
            .push(Check::new("no_lost_acknowledged", true, "0 lost"));
        good.finish(10);
        let mut bad = ScenarioReport::new("pg-restart", Some("sharded-fenced"), "d");
        bad.checks
            .push(Check::new("no_server_errors", false, "3 x 500"));
        bad.finish(10);
        let na = ScenarioReport::not_applicable("redlock", "d", "later");
        assert_eq!(
            (good.passed, bad.passed, na.passed),
            (Some(true), Some(false), None)
        );
        assert_eq!(bad.failures(), vec!["no_server_errors: 3 x 500".to_owned()]);

        let suite = SuiteReport {
            suite: "chaos",
            mode: "bounded",
            instances: 2,
            started_at: "now".into(),
            duration_ms: 1,
            commit: None,
            passed: false,
            budget: Budget::for_mode(Mode::Bounded),
            environment: BTreeMap::new(),
            scenarios: vec![good, bad, na],
        };
        let md = suite.markdown();
        assert!(md.contains("| pause | sharded-fenced | passed |"));
        assert!(md.contains("| pg-restart | sharded-fenced | **FAILED** |"));
        assert!(md.contains("| redlock | - | n/a |"));
        let json: Value = serde_json::to_value(&suite).unwrap();
        for field in [
            "scenario",
            "strategy",
            "faults",
            "requests",
            "acknowledged",
            "lost",
            "oversold",
            "duplicates",
            "stale_rejected",
            "recovery_ms",
            "passed",
        ] {
            assert!(json["scenarios"][0].get(field).is_some(), "missing {field}");
        }
    }
}
