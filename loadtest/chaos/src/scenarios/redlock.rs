//! `redlock`: lockkit's Redlock on 5 `redis-server` processes of the suite's own, under node
//! failures within Redlock's model (a minority at a time; a node that loses its data stays out for
//! longer than a lease before it rejoins):
//!
//! 1. two nodes killed, restarted empty later;
//! 2. one more node killed, restarted empty later;
//! 3. two nodes frozen (`SIGSTOP`), so that they answer nothing and then, on `SIGCONT`, answer
//!    everything queued at once.
//!
//! Workers on three clients take two locks in turn. Each critical section is recorded with its
//! fence and its real-time span, and the history is checked Jepsen-style: no two sections of a
//! lock overlap, and a section that ended before another began has the smaller fence.
//!
//! The control runs the same workers on two clients whose majorities need not intersect (nodes
//! {0,1,2} and {2,3,4}, 2 of 3 each) with node 2 down: the same checker must find overlaps.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, Result};
use lockkit::{Fence, LockClient};
use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::{
    environment::Environment,
    processes::{free_port, redis::RedisServer, signal},
    progress,
    report::{Check, FaultEvent, ScenarioReport},
    settings::{Budget, Mode},
};

const DESCRIPTION: &str = "lockkit Redlock on 5 nodes: a minority killed and restarted empty (after a lease), another node lost, a minority frozen and thawed; workers on 3 clients take 2 locks; the history must show no overlapping holders and fences in real-time order. Control: disjoint majorities must be caught overlapping.";

const NODES: usize = 5;
const LOCKS: usize = 2;
const CLIENTS: usize = 3;
const WORKERS_PER_CLIENT: usize = 3;
/// The lease the clients' watchdogs renew.
const LEASE: Duration = Duration::from_millis(600);
/// How long a holder works inside its critical section.
const HOLD: Duration = Duration::from_millis(5);

/// One critical section, as a worker saw it.
#[derive(Debug, Clone)]
struct Section {
    lock: usize,
    fence: Fence,
    start: Instant,
    end: Instant,
    /// The holder learned, by the end of its section, that its lease was lost.
    lost: bool,
}

/// What the workers recorded.
#[derive(Debug, Default)]
struct History {
    sections: Vec<Section>,
    /// Acquire attempts that failed (no quorum, or still held when the wait ran out).
    refused: u64,
}

/// Runs the scenario.
pub(crate) async fn run(env: &mut Environment, budget: &Budget) -> ScenarioReport {
    let mut report = ScenarioReport::new("redlock", None, DESCRIPTION);
    progress!("scenario redlock (lockkit, 5 nodes)");
    match faults_and_control(env, budget, &mut report).await {
        Ok(checks) => report.checks = checks,
        Err(e) => report.error = Some(format!("{e:#}")),
    }
    report
}

/// The five nodes, started empty on free ports.
struct Nodes(Vec<RedisServer>);

impl Nodes {
    async fn start(env: &Environment) -> Result<Self> {
        let mut nodes = Vec::with_capacity(NODES);
        for i in 0..NODES {
            let dir = env.work_dir().join("redlock").join(format!("node{i}"));
            nodes.push(
                RedisServer::start_named(&format!("redlock-{i}"), free_port()?, &dir, &env.pids)
                    .await?,
            );
        }
        Ok(Self(nodes))
    }

    fn url(&self, indexes: &[usize]) -> String {
        let hosts: Vec<String> = indexes
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.0[i].port()))
            .collect();
        format!("redlock://{}", hosts.join(","))
    }

    fn freeze(&self, i: usize, frozen: bool) -> Result<()> {
        let pid = self.0[i].pid().context("node not running")?;
        signal(
            pid,
            if frozen {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            },
        )
    }

    async fn stop(&mut self) {
        for node in &mut self.0 {
            let _ = node.stop().await;
        }
    }
}

async fn faults_and_control(
    env: &mut Environment,
    budget: &Budget,
    report: &mut ScenarioReport,
) -> Result<Vec<Check>> {
    let mut nodes = Nodes::start(env).await?;
    let outcome = faults_then_control(&mut nodes, budget, report).await;
    nodes.stop().await;
    outcome
}

async fn faults_then_control(
    nodes: &mut Nodes,
    budget: &Budget,
    report: &mut ScenarioReport,
) -> Result<Vec<Check>> {
    // Down long enough that every lease a lost node carried has run out before it rejoins.
    let down = match budget.mode {
        Mode::Bounded => LEASE * 2,
        _ => LEASE * 4,
    };
    let all: Vec<usize> = (0..NODES).collect();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&nodes.url(&all)).await?);
    }
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let epoch = Instant::now();
    let workers = spawn_workers(&clients, &history, &stop);

    tokio::time::sleep(down).await;
    let injected = begin(
        report,
        epoch,
        "kill -9 nodes 0 and 1; restart them empty after {down}",
        down,
    );
    nodes.0[0].kill9().await?;
    nodes.0[1].kill9().await?;
    tokio::time::sleep(down).await;
    nodes.0[0].restart().await?;
    nodes.0[1].restart().await?;
    healed(report, epoch, injected);

    tokio::time::sleep(down).await;
    let injected = begin(
        report,
        epoch,
        "kill -9 node 2; restart it empty after {down}",
        down,
    );
    nodes.0[2].kill9().await?;
    tokio::time::sleep(down).await;
    nodes.0[2].restart().await?;
    healed(report, epoch, injected);

    tokio::time::sleep(down).await;
    let injected = begin(
        report,
        epoch,
        "SIGSTOP nodes 3 and 4 for {down}, then SIGCONT",
        down,
    );
    nodes.freeze(3, true)?;
    nodes.freeze(4, true)?;
    tokio::time::sleep(down).await;
    nodes.freeze(3, false)?;
    nodes.freeze(4, false)?;
    healed(report, epoch, injected);
    tokio::time::sleep(down).await;

    stop.notify_waiters();
    for worker in workers {
        worker.await.context("a worker panicked")?;
    }
    let history = std::mem::take(&mut *history.lock().unwrap());
    let verdict = Verdict::of(&history.sections);
    report.requests = history.sections.len() as u64 + history.refused;
    report.acknowledged = history.sections.len() as u64;
    report.figure("sections", history.sections.len());
    report.figure("refused_acquires", history.refused);
    report.figure(
        "lost_in_section",
        history.sections.iter().filter(|s| s.lost).count(),
    );
    report
        .evidence
        .extend(verdict.evidence.iter().take(5).cloned());

    // The control: two sides whose majorities share only node 2, which is down.
    nodes.0[2].kill9().await?;
    let control_clients = [
        client(&nodes.url(&[0, 1, 2])).await?,
        client(&nodes.url(&[2, 3, 4])).await?,
    ];
    let control_history = Arc::new(Mutex::new(History::default()));
    let control_stop = Arc::new(tokio::sync::Notify::new());
    let control_workers = spawn_workers(&control_clients, &control_history, &control_stop);
    tokio::time::sleep(down).await;
    control_stop.notify_waiters();
    for worker in control_workers {
        worker.await.context("a control worker panicked")?;
    }
    let control = Verdict::of(&control_history.lock().unwrap().sections);
    report.figure("control_overlaps", control.overlaps);

    Ok(vec![
        Check::new(
            "locks_kept_working",
            history.sections.len() >= 20,
            format!(
                "{} critical sections, {} refused acquires",
                history.sections.len(),
                history.refused
            ),
        ),
        Check::new(
            "no_two_holders",
            verdict.overlaps == 0,
            format!(
                "{} overlapping pairs of critical sections on one lock",
                verdict.overlaps
            ),
        ),
        Check::new(
            "fences_in_real_time_order",
            verdict.fence_inversions == 0,
            format!(
                "{} sections that ended before another began but carry a fence not below it",
                verdict.fence_inversions
            ),
        ),
        Check::new(
            "control_detected",
            control.overlaps > 0,
            format!(
                "disjoint majorities: {} overlapping pairs found by the same check",
                control.overlaps
            ),
        ),
    ])
}

async fn client(url: &str) -> Result<LockClient> {
    LockClient::builder(url)
        .default_lease(LEASE)
        .connect()
        .await
        .context("connect to the redlock nodes")
}

fn begin(report: &mut ScenarioReport, epoch: Instant, what: &str, down: Duration) -> usize {
    let what = what.replace("{down}", &format!("{} ms", down.as_millis()));
    progress!("  fault: {what}");
    let at_ms = epoch.elapsed().as_millis() as u64;
    report.faults.push(FaultEvent {
        action: what,
        at_ms,
        healed_ms: None,
        instance: None,
    });
    report.faults.len() - 1
}

fn healed(report: &mut ScenarioReport, epoch: Instant, fault: usize) {
    report.faults[fault].healed_ms = Some(epoch.elapsed().as_millis() as u64);
}

/// Workers that take the locks in turn until `stop` is notified.
fn spawn_workers(
    clients: &[LockClient],
    history: &Arc<Mutex<History>>,
    stop: &Arc<tokio::sync::Notify>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let names: Vec<String> = (0..LOCKS)
        .map(|i| format!("chaos:redlock:{i}:{:08x}", rand::random::<u32>()))
        .collect();
    let mut workers = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for w in 0..WORKERS_PER_CLIENT {
            let (client, history, stop) = (client.clone(), history.clone(), stop.clone());
            let lock = (c + w) % LOCKS;
            let name = names[lock].clone();
            workers.push(tokio::spawn(async move {
                let stopped = stop.notified();
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        () = &mut stopped => return,
                        section = critical_section(&client, &name, lock) => match section {
                            Some(section) => history.lock().unwrap().sections.push(section),
                            None => {
                                history.lock().unwrap().refused += 1;
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        },
                    }
                }
            }));
        }
    }
    workers
}

async fn critical_section(client: &LockClient, name: &str, lock: usize) -> Option<Section> {
    let guard = client.lock(name, Duration::from_millis(500)).await.ok()?;
    let start = Instant::now();
    tokio::time::sleep(HOLD).await;
    let end = Instant::now();
    let section = Section {
        lock,
        fence: guard.fence(),
        start,
        end,
        lost: guard.is_lost(),
    };
    let _ = guard.release().await;
    Some(section)
}

/// What the checker found in a history.
#[derive(Debug, Default)]
struct Verdict {
    overlaps: u64,
    fence_inversions: u64,
    evidence: Vec<String>,
}

impl Verdict {
    /// Checks every pair of sections of the same lock.
    fn of(sections: &[Section]) -> Self {
        let mut verdict = Self::default();
        let mut sorted: Vec<&Section> = sections.iter().collect();
        sorted.sort_by_key(|s| (s.lock, s.start));
        for (i, a) in sorted.iter().enumerate() {
            for b in sorted[i + 1..].iter().take_while(|b| b.lock == a.lock) {
                if b.start < a.end {
                    verdict.overlaps += 1;
                    verdict.note(format!(
                        "lock {}: fence {} and fence {} held at the same time",
                        a.lock, a.fence, b.fence
                    ));
                } else if a.fence >= b.fence {
                    verdict.fence_inversions += 1;
                    verdict.note(format!(
                        "lock {}: fence {} ended before fence {} began",
                        a.lock, a.fence, b.fence
                    ));
                }
            }
        }
        verdict
    }

    fn note(&mut self, line: String) {
        if self.evidence.len() < 5 {
            self.evidence.push(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(lock: usize, fence: u64, start_ms: u64, end_ms: u64, epoch: Instant) -> Section {
        let at = |ms| epoch + Duration::from_millis(ms);
        Section {
            lock,
            fence: Fence::new(fence),
            start: at(start_ms),
            end: at(end_ms),
            lost: false,
        }
    }

    #[test]
    fn the_checker_finds_overlaps_and_inversions_per_lock() {
        let t = Instant::now();
        let clean = [
            section(0, 1, 0, 10, t),
            section(0, 2, 10, 20, t),
            section(1, 1, 5, 15, t),
        ];
        let v = Verdict::of(&clean);
        assert_eq!((v.overlaps, v.fence_inversions), (0, 0));

        let bad = [
            section(0, 1, 0, 10, t),
            section(0, 2, 5, 15, t),
            section(0, 1, 20, 30, t),
        ];
        let v = Verdict::of(&bad);
        assert_eq!((v.overlaps, v.fence_inversions), (1, 2));
    }
}
