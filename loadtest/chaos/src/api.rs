//! The HTTP client of one seckill instance: the calls the suite makes, with their raw outcome
//! (status and body, or the transport error) left for [`history`](crate::history) to classify.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{processes::seckill::ADMIN_TOKEN, settings::SaleSettings, settlement::SettleAction};

/// The payment window of owned sales outside the lifecycle rows: a day, the most the service
/// takes.
const UNHURRIED_WINDOW_MS: u64 = 86_400_000;

/// What came back from one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An HTTP answer.
    Http {
        /// Status code.
        status: u16,
        /// The body as JSON (`Null` if it was not JSON).
        body: Value,
    },
    /// No HTTP answer.
    Transport(TransportError),
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportError {
    /// The connection could not be made: the request was never sent.
    Connect,
    /// No answer within the client timeout: it may or may not have been processed.
    Timeout,
    /// The connection broke after the request may have been sent.
    Broken,
}

/// A client of one instance.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    /// A client of the instance at `base` (`http://127.0.0.1:PORT`) with a per-request `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(1))
            .pool_max_idle_per_host(64)
            .build()
            .context("build the HTTP client")?;
        Ok(Self {
            base: base.to_owned(),
            http,
        })
    }

    /// The instance's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/sales/{sku}/orders` with an `Idempotency-Key`.
    pub async fn order(&self, sku: &str, user: &str, quantity: u32, key: &str) -> Reply {
        let request = self
            .http
            .post(format!("{}/v1/sales/{sku}/orders", self.base))
            .header("Idempotency-Key", key)
            .json(&json!({"user_id": user, "quantity": quantity}));
        send(request).await
    }

    /// `POST /v1/orders/{id}/pay` or `.../cancel`, with the buyer's proof of the order.
    pub async fn settle(
        &self,
        order_id: i64,
        user: &str,
        secret: &str,
        action: SettleAction,
    ) -> Reply {
        let request = self
            .http
            .post(format!(
                "{}/v1/orders/{order_id}/{}",
                self.base,
                action.path()
            ))
            .header("X-User-Id", user)
            .header("X-Order-Secret", secret);
        send(request).await
    }

    /// `PUT /v1/sales/{sku}` (admin): creates or resets the sale.
    pub async fn put_sale(&self, sku: &str, sale: &SaleSettings, strategy: &str) -> Result<()> {
        let mut body = json!({
            "total": sale.total, "shards": sale.shards, "per_user_limit": sale.per_user_limit,
            "max_per_order": sale.max_per_order, "strategy": strategy,
        });
        // An owned sale without a window of its own gets a day's, so that none of its orders
        // expires during the suite: the orders of earlier rows would otherwise come due ten
        // minutes (the service's default) into a full run, and their expiry load the later rows.
        // The lab's strategies sell final orders and take no window.
        let window = sale.payment_window_ms.or(strategy
            .starts_with("owned-")
            .then_some(UNHURRIED_WINDOW_MS));
        if let Some(window) = window {
            body["payment_window_ms"] = window.into();
        }
        let request = self
            .http
            .put(format!("{}/v1/sales/{sku}", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body);
        match send(request).await {
            Reply::Http { status: 200, .. } => Ok(()),
            other => bail!("PUT /v1/sales/{sku} failed: {other:?}"),
        }
    }

    /// `GET /v1/sales/{sku}/audit`.
    pub async fn audit(&self, sku: &str) -> Result<Value> {
        match send(self.http.get(format!("{}/v1/sales/{sku}/audit", self.base))).await {
            Reply::Http { status: 200, body } => Ok(body),
            other => bail!("GET audit failed: {other:?}"),
        }
    }

    /// `POST /v1/sales/{sku}/reconcile[?drain=1]` (admin, `redis-gate` sales): the status and the
    /// body (the reconciliation's report, or the error). Patient: a drain waits up to 10 s.
    pub async fn reconcile(&self, sku: &str, drain: bool) -> Reply {
        let http = match reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(20))
            .build()
        {
            Ok(http) => http,
            Err(_) => return Reply::Transport(TransportError::Broken),
        };
        let query = if drain { "?drain=1" } else { "" };
        send(
            http.post(format!("{}/v1/sales/{sku}/reconcile{query}", self.base))
                .bearer_auth(ADMIN_TOKEN),
        )
        .await
    }

    /// `GET /v1/sales/{sku}/owners`: the shards of `sku` the instance owns now, with the fence
    /// it claimed each with (owned strategies).
    pub async fn owned_shards(&self, sku: &str) -> Result<Vec<(i32, i64)>> {
        match send(
            self.http
                .get(format!("{}/v1/sales/{sku}/owners", self.base)),
        )
        .await
        {
            Reply::Http { status: 200, body } => Ok(body["shards"]
                .as_array()
                .map(|shards| {
                    shards
                        .iter()
                        .filter_map(|s| Some((s["shard"].as_i64()? as i32, s["fence"].as_i64()?)))
                        .collect()
                })
                .unwrap_or_default()),
            other => bail!("GET owners failed: {other:?}"),
        }
    }

    /// `GET /metrics` as text.
    pub async fn metrics_text(&self) -> Result<String> {
        let response = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await?
            .error_for_status()?;
        Ok(response.text().await?)
    }
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            match response.bytes().await {
                Ok(bytes) => Reply::Http {
                    status,
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                },
                Err(e) if e.is_timeout() => Reply::Transport(TransportError::Timeout),
                Err(_) => Reply::Transport(TransportError::Broken),
            }
        }
        Err(e) if e.is_connect() => Reply::Transport(TransportError::Connect),
        Err(e) if e.is_timeout() => Reply::Transport(TransportError::Timeout),
        Err(_) => Reply::Transport(TransportError::Broken),
    }
}
