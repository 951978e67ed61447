//! A seckill instance: the real `seckill` binary on a loopback port, configured by environment
//! variables, logging to a file the suite can quote as evidence. It can be paused (`SIGSTOP`),
//! resumed (`SIGCONT`) and stopped, always by its own PID.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use launch::{Launched, Server};
use tokio::time::Instant;

use super::{PidFiles, Signal, alive, signal, terminate, wait_until};
use crate::settings::ServiceSettings;

/// The admin token the suite's instances accept.
pub const ADMIN_TOKEN: &str = "chaos-admin-token";

/// How one instance is started.
#[derive(Debug, Clone)]
pub struct InstanceSpec {
    /// Short name (`a`, `b`, ...), used in logs and reports.
    pub name: String,
    /// `REDIS_URL`: the suite's Redis, or a fault proxy in front of it.
    pub redis_url: String,
    /// `SECKILL_LOCKS__URL`: where the shard locks live (`None`: the Redis URL).
    pub lock_url: Option<String>,
    /// `DATABASE_URL`.
    pub database_url: String,
    /// Lease, deadline, pool, workers.
    pub service: ServiceSettings,
    /// Further environment variables (e.g. a test-only `SECKILL_FAILPOINT`).
    pub env: Vec<(String, String)>,
    /// The port to listen on (`None`: a free one), so that a restarted instance keeps its
    /// clients.
    pub port: Option<u16>,
}

/// A running seckill process.
#[derive(Debug)]
pub struct Instance {
    name: String,
    pid_name: String,
    port: u16,
    process: Option<Launched>,
    log: PathBuf,
    paused: bool,
    pids: PidFiles,
}

impl Instance {
    /// Starts `binary` per `spec` the project's one way (`scripts/server.sh seckill run`), logging
    /// to `log_dir/LABEL-NAME.log`, and waits until `/readyz` answers 200. A new instance listens
    /// on a free port, which it reports in `log_dir/LABEL-NAME.addr`; a restarted one (its port
    /// given) keeps its predecessor's port and appends to its log.
    pub async fn start(
        binary: &Path,
        spec: &InstanceSpec,
        label: &str,
        log_dir: &Path,
        pids: &PidFiles,
    ) -> Result<Self> {
        std::fs::create_dir_all(log_dir)?;
        let file_name = format!("{label}-{}", spec.name);
        let log = log_dir.join(format!("{file_name}.log"));
        let address_file = log_dir.join(format!("{file_name}.addr"));
        if spec.port.is_none() {
            std::fs::write(&log, b"").with_context(|| format!("create {}", log.display()))?;
        }
        // A predecessor's file would name its port until the script got to remove it.
        let _ = std::fs::remove_file(&address_file);
        let s = &spec.service;
        let process = Server::new("seckill", log_dir)
            .arg(&file_name)
            .env("SECKILL_BIN", binary)
            .env(
                "SECKILL_LISTEN",
                format!("127.0.0.1:{}", spec.port.unwrap_or(0)),
            )
            .env("REDIS_URL", &spec.redis_url)
            .env(
                "SECKILL_LOCKS__URL",
                spec.lock_url.as_deref().unwrap_or_default(),
            )
            .env("DATABASE_URL", &spec.database_url)
            .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("SECKILL_LOCKS__LEASE_MS", s.lock_lease_ms.to_string())
            .env(
                "SECKILL_REQUEST_DEADLINE_MS",
                s.request_deadline_ms.to_string(),
            )
            .env("SECKILL_POOLS__GENERAL", s.db_pool.to_string())
            .env("SECKILL_WORKERS", s.workers.to_string())
            .env(
                "SECKILL_ORDERS__SWEEP_INTERVAL_MS",
                s.sweep_interval_ms.to_string(),
            )
            .env("RUST_LOG", "info");
        let process = spec
            .env
            .iter()
            .fold(process, |p, (k, v)| p.env(k, v))
            .env_remove("SECKILL_CONFIG")
            .env_remove("SECKILL_INSTANCE")
            .output_to(&log)
            .run()
            .context("start seckill through scripts/server.sh")?;
        let pid = process.pid().context("seckill exited at once")?;
        let pid_name = format!("seckill-{label}-{}", spec.name);
        pids.record(&pid_name, pid, "seckill");
        // The instance reports the port it bound; one that dies first (an armed failpoint) has none.
        let port = match spec.port {
            Some(port) => port,
            None => {
                wait_until(
                    Duration::from_secs(30),
                    "seckill writes its address",
                    || {
                        let exists = address_file.exists();
                        async move { exists || !alive(pid) }
                    },
                )
                .await?;
                read_port(&address_file).unwrap_or(0)
            }
        };
        let mut instance = Self {
            name: spec.name.clone(),
            pid_name,
            port,
            process: Some(process),
            log,
            paused: false,
            pids: pids.clone(),
        };
        let url = format!("{}/readyz", instance.base_url());
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()?;
        // An instance with a failpoint armed may hit it before it answers the probe.
        let armed = spec.env.iter().any(|(k, _)| k == "SECKILL_FAILPOINT");
        let ready = wait_until(
            Duration::from_secs(30),
            "seckill /readyz answers 200",
            || async {
                (armed && !alive(pid))
                    || matches!(http.get(&url).send().await, Ok(r) if r.status().as_u16() == 200)
            },
        )
        .await;
        if armed && !alive(pid) {
            return Ok(instance);
        }
        if let Err(e) = ready {
            let tail = instance.log_tail(20);
            instance.stop().await.ok();
            bail!("instance {} did not become ready: {e}\n{tail}", spec.name);
        }
        Ok(instance)
    }

    /// Its short name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Launched::pid)
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `SIGSTOP`: the process freezes mid-whatever, its leases run out in Redis.
    pub fn pause(&mut self) -> Result<()> {
        let pid = self.pid().context("instance is not running")?;
        signal(pid, Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// `SIGCONT` after [`pause`](Self::pause).
    pub fn resume(&mut self) -> Result<()> {
        if self.paused {
            let pid = self.pid().context("instance is not running")?;
            signal(pid, Signal::SIGCONT)?;
            self.paused = false;
        }
        Ok(())
    }

    /// Whether it is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether the process is still alive (not crashed).
    pub fn is_alive(&self) -> bool {
        self.pid().is_some_and(alive)
    }

    /// `kill -9`, then reaps it.
    pub async fn kill9(&mut self) -> Result<()> {
        self.resume()?;
        if let Some(mut process) = self.process.take() {
            process.kill();
            self.pids.forget(&self.pid_name);
        }
        Ok(())
    }

    /// Waits up to `within` for the process to exit by itself (e.g. at a failpoint); reaps it
    /// and returns whether it did.
    pub async fn wait_exit(&mut self, within: Duration) -> Result<bool> {
        let Some(process) = self.process.as_mut() else {
            return Ok(true);
        };
        let deadline = Instant::now() + within;
        while process.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.process = None;
        self.pids.forget(&self.pid_name);
        Ok(true)
    }

    /// Stops it: resume if paused, SIGTERM (graceful, drains requests), SIGKILL after 12 s.
    pub async fn stop(&mut self) -> Result<()> {
        self.resume()?;
        let Some(mut process) = self.process.take() else {
            return Ok(());
        };
        terminate(&mut process, Duration::from_secs(12)).await?;
        self.pids.forget(&self.pid_name);
        Ok(())
    }

    /// Counters scraped from `/metrics`: the sum over all label sets of each metric name
    /// (`lockkit_leases_lost_total`, ...).
    pub async fn metrics(&self) -> Result<BTreeMap<String, f64>> {
        let text = self.get("/metrics").await?.text().await?;
        Ok(parse_prometheus(&text))
    }

    /// How many shards of `sku` it owns now (`GET /v1/sales/{sku}/owners`; owned strategies).
    pub async fn owned_shards(&self, sku: &str) -> Result<usize> {
        let body: serde_json::Value = self
            .get(&format!("/v1/sales/{sku}/owners"))
            .await?
            .json()
            .await?;
        Ok(body["shards"].as_array().map_or(0, Vec::len))
    }

    /// `GET path` on the instance, within 3 s; an error status is an error.
    async fn get(&self, path: &str) -> Result<reqwest::Response> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()?;
        Ok(http
            .get(format!("{}{path}", self.base_url()))
            .send()
            .await?
            .error_for_status()?)
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Log lines containing any of `needles` (at most `limit`, first ones first), prefixed with
    /// the instance name: evidence for a report.
    pub fn log_lines(&self, needles: &[&str], limit: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter(|l| needles.iter().any(|n| l.contains(n)))
            .take(limit)
            .map(|l| format!("{}: {}", self.name, strip_ansi(l)))
            .collect()
    }
}

/// The port in an address file (`127.0.0.1:PORT`), if it has one.
fn read_port(file: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(file).ok()?;
    text.trim().rsplit_once(':')?.1.parse().ok()
}

/// Sums Prometheus text exposition by metric name (labels dropped), skipping comments and
/// histogram buckets.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (series, value) = match line.rsplit_once(' ') {
            Some(parts) => parts,
            None => continue,
        };
        let name = series.split('{').next().unwrap_or(series);
        if name.ends_with("_bucket") {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            *sums.entry(name.to_owned()).or_insert(0.0) += v;
        }
    }
    sums
}

/// Sums Prometheus series of `name` whose labels include `label="value"`.
pub fn sum_labelled(text: &str, name: &str, label: &str, keep: impl Fn(&str) -> bool) -> f64 {
    let prefix = format!("{name}{{");
    let key = format!("{label}=\"");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let start = l.find(&key)? + key.len();
            let end = start + l[start..].find('"')?;
            let value: f64 = l.rsplit_once(' ')?.1.parse().ok()?;
            keep(&l[start..end]).then_some(value)
        })
        .sum()
}

/// Removes ANSI colour escapes from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.process.is_some() {
            let _ = self.resume();
            self.pids.forget(&self.pid_name);
        }
        // Dropping the Launched process kills it.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE lockkit_leases_lost_total counter\n\
        lockkit_leases_lost_total{cause=\"gone\"} 3\n\
        lockkit_leases_lost_total{cause=\"expired\"} 2\n\
        seckill_http_requests_total{route=\"/x\",method=\"GET\",status=\"200\"} 7\n\
        seckill_http_requests_total{route=\"/x\",method=\"GET\",status=\"503\"} 1\n\
        seckill_http_requests_total{route=\"/x\",method=\"POST\",status=\"500\"} 2\n\
        lockkit_hold_seconds_bucket{le=\"0.5\"} 9\n";

    #[test]
    fn prometheus_counters_are_summed_over_labels() {
        let m = parse_prometheus(TEXT);
        assert_eq!(m["lockkit_leases_lost_total"], 5.0);
        assert_eq!(m["seckill_http_requests_total"], 10.0);
        assert!(!m.contains_key("lockkit_hold_seconds_bucket"));
        let server_errors = sum_labelled(TEXT, "seckill_http_requests_total", "status", |s| {
            s.starts_with('5') && s != "503"
        });
        assert_eq!(server_errors, 2.0);
    }

    #[test]
    fn ansi_colours_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[33m WARN\u{1b}[0m lease lost"),
            " WARN lease lost"
        );
    }
}
