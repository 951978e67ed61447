//! Logs (`tracing`, filtered by `RUST_LOG`) and the process-wide Prometheus recorder that also
//! collects lockkit's metrics.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Structured logs to stdout; `RUST_LOG` filters (default `info`). Safe to call more than once.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).try_init();
}

/// Latency buckets (seconds) for every histogram: sub-millisecond lock operations up to the
/// request deadline.
const BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// The recorder's handle, installing the recorder on first use (one per process, shared by every
/// application instance in it).
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("static, non-empty buckets")
            .install_recorder()
            .expect("no other metrics recorder is installed");
        // Histograms keep samples until upkeep folds them into buckets; bound that memory.
        let upkeep = handle.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                upkeep.run_upkeep();
            }
        });
        handle
    })
}
