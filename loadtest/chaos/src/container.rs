//! A seckill instance as a container of the compose stack (`deploy/faults/compose.yml`), for the
//! fault rows across hosts: what `processes::seckill::Instance` does with signals to a local
//! process, done to a container through the Docker engine's own commands, which act on its cgroup
//! and its network interfaces rather than on a process the suite started.
//!
//! | fault | command | what the instance sees |
//! |---|---|---|
//! | freeze | `docker pause` / `unpause` | every process frozen by the cgroup freezer, leases run out |
//! | crash | `docker kill` / `start` | SIGKILL mid-whatever, then a fresh process |
//! | cut a link | `docker network disconnect` / `connect` | its interface on that network removed |

use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use crate::processes::{seckill::parse_prometheus, wait_until};

/// How many times `pause` asks the engine before it reports a freeze that did not take.
const PAUSE_ATTEMPTS: u32 = 3;

/// The wait before asking again.
const PAUSE_RETRY_AFTER: Duration = Duration::from_millis(200);

/// One seckill container of a compose project.
#[derive(Debug, Clone)]
pub struct Container {
    docker: String,
    service: String,
    id: String,
    base_url: String,
}

impl Container {
    /// The running container of compose `service` in `project`, reached by the suite at
    /// `base_url` (its published port on loopback). `docker` is the client to run.
    pub async fn find(docker: &str, project: &str, service: &str, base_url: &str) -> Result<Self> {
        let ids = run(
            docker,
            &[
                "ps",
                "-q",
                "--filter",
                &format!("label=com.docker.compose.project={project}"),
                "--filter",
                &format!("label=com.docker.compose.service={service}"),
            ],
        )
        .await?;
        let mut ids = ids.split_whitespace();
        let (Some(id), None) = (ids.next(), ids.next()) else {
            bail!("expected one running container of service {service} in project {project}");
        };
        Ok(Self {
            docker: docker.to_owned(),
            service: service.to_owned(),
            id: id.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
        })
    }

    /// The compose service's name (`seckill-2`).
    pub fn name(&self) -> &str {
        &self.service
    }

    /// Where the suite reaches it: `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `docker pause`: the cgroup freezer stops every process of the container. On a loaded host
    /// the engine can give up before the freezer settles ("unable to freeze", seen in CI); it
    /// leaves the container running, so the pause is tried again, `PAUSE_ATTEMPTS` times in all.
    pub async fn pause(&self) -> Result<()> {
        let mut attempt = 1;
        loop {
            match self.docker(&["pause"]).await {
                Err(e)
                    if attempt < PAUSE_ATTEMPTS
                        && format!("{e:#}").contains("unable to freeze") =>
                {
                    attempt += 1;
                    tokio::time::sleep(PAUSE_RETRY_AFTER).await;
                }
                outcome => return outcome,
            }
        }
    }

    /// `docker unpause`.
    pub async fn unpause(&self) -> Result<()> {
        self.docker(&["unpause"]).await
    }

    /// `docker kill` (SIGKILL).
    pub async fn kill(&self) -> Result<()> {
        self.docker(&["kill"]).await
    }

    /// `docker start`, then waits until `/readyz` answers 200.
    pub async fn start(&self) -> Result<()> {
        self.docker(&["start"]).await?;
        self.wait_ready(Duration::from_secs(60)).await
    }

    /// `docker network disconnect NETWORK`: its interface on `network` is removed, and with it
    /// every connection it had through that network.
    pub async fn disconnect(&self, network: &str) -> Result<()> {
        run(&self.docker, &["network", "disconnect", network, &self.id])
            .await
            .map(drop)
    }

    /// `docker network connect NETWORK`, with its service name as the alias other containers
    /// resolve.
    pub async fn connect(&self, network: &str) -> Result<()> {
        run(
            &self.docker,
            &[
                "network",
                "connect",
                "--alias",
                &self.service,
                network,
                &self.id,
            ],
        )
        .await
        .map(drop)
    }

    /// Whether the container is running and not paused.
    pub async fn is_up(&self) -> bool {
        let state = run(
            &self.docker,
            &[
                "inspect",
                "-f",
                "{{.State.Running}} {{.State.Paused}}",
                &self.id,
            ],
        )
        .await;
        matches!(state.as_deref().map(str::trim), Ok("true false"))
    }

    /// Waits up to `within` until `/readyz` answers 200.
    pub async fn wait_ready(&self, within: Duration) -> Result<()> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()?;
        let url = format!("{}/readyz", self.base_url);
        wait_until(
            within,
            &format!("{} /readyz answers 200", self.service),
            || async { matches!(http.get(&url).send().await, Ok(r) if r.status().as_u16() == 200) },
        )
        .await
    }

    /// A counter of its `/metrics`, summed over label sets (0 when it cannot answer).
    pub async fn counter(&self, name: &str) -> f64 {
        let text = async {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(3))
                .build()?;
            let response = http
                .get(format!("{}/metrics", self.base_url))
                .send()
                .await?;
            anyhow::Ok(response.error_for_status()?.text().await?)
        };
        match text.await {
            Ok(text) => parse_prometheus(&text).get(name).copied().unwrap_or(0.0),
            Err(_) => 0.0,
        }
    }

    /// Lines of its log (`docker logs`, this run of the container and the ones before) that
    /// contain any of `needles`, at most `limit`, prefixed with its name: evidence for a report.
    pub async fn log_lines(&self, needles: &[&str], limit: usize) -> Vec<String> {
        let output = Command::new(&self.docker)
            .args(["logs", &self.id])
            .output()
            .await;
        let Ok(output) = output else {
            return Vec::new();
        };
        let (out, err) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        out.lines()
            .chain(err.lines())
            .filter(|line| needles.iter().any(|n| line.contains(n)))
            .take(limit)
            .map(|line| format!("{}: {line}", self.service))
            .collect()
    }

    async fn docker(&self, command: &[&str]) -> Result<()> {
        let mut args = command.to_vec();
        args.push(&self.id);
        run(&self.docker, &args).await.map(drop)
    }
}

/// Runs `docker ARGS` within 60 s; its stdout, or an error with its stderr.
async fn run(docker: &str, args: &[&str]) -> Result<String> {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(docker).args(args).kill_on_drop(true).output(),
    )
    .await
    .with_context(|| format!("{docker} {} did not finish within 60 s", args.join(" ")))?
    .with_context(|| format!("run {docker}"))?;
    if !output.status.success() {
        bail!(
            "{docker} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
