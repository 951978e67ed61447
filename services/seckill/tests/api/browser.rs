//! The sale page (`GET /`) in headless Chromium while a sale sells: its script polls the live view
//! and the shard bars follow the stock. Needs Chromium: `bash scripts/browser.sh install` (or set
//! `CHROMIUM` to the executable).

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{TestApp, sale_body, spawn_app};

/// Longest one Chromium run may take before it is killed: a guard against a hung browser, not a
/// speed limit (a start on a loaded two-core box took over 12 s in CI runs).
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// Units on sale: at about 25 orders a second, enough to last through slow browser starts.
const UNITS: u32 = 10_000;

/// Virtual time given to the page's script in each run: a few of its once-a-second polls.
const VIRTUAL_TIME_MS: u32 = 3500;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root exists")
}

/// `CHROMIUM` if set, else what `scripts/browser.sh path` prints; fails the test otherwise.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "CHROMIUM={} is not a file (unset it and run `bash scripts/browser.sh install`)", path.display());
        return path;
    }
    let script = workspace_root().join("scripts/browser.sh");
    let output = Command::new("bash").arg(&script).arg("path").stderr(Stdio::null()).output();
    match output {
        Ok(out) if out.status.success() && !String::from_utf8_lossy(&out.stdout).trim().is_empty() => {
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
        _ => panic!(
            "Chromium not found: this test needs headless Chromium. Install it with `bash scripts/browser.sh install` \
             (as root; Debian's `chromium`), or set CHROMIUM=/path/to/chromium"
        ),
    }
}

/// Runs Chromium headless on `url` with `extra` arguments; its stdout. Bounded by
/// [`CHROMIUM_TIMEOUT`]: a hung browser is killed through its handle and the test fails.
async fn run_chromium(browser: PathBuf, url: String, extra: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let dir = std::env::temp_dir().join(format!("seckill-browser-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
        let mut child = Command::new(&browser)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
            .args(["--disable-extensions", "--disable-background-networking", "--hide-scrollbars", "--mute-audio"])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .arg(format!("--virtual-time-budget={VIRTUAL_TIME_MS}"))
            .args(&extra)
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", browser.display()));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > CHROMIUM_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let tail: String = stderr.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        match status {
            None => panic!("Chromium did not finish within {CHROMIUM_TIMEOUT:?} ({url} {extra:?}); stderr:\n{tail}"),
            Some(status) if !status.success() => panic!("Chromium failed with {status} ({url} {extra:?}); stderr:\n{tail}"),
            Some(_) => stdout,
        }
    })
    .await
    .expect("the Chromium runner does not panic")
}

/// The page's DOM after its script ran for a while.
async fn dump_dom(browser: &Path, url: &str) -> String {
    run_chromium(browser.to_path_buf(), url.to_owned(), vec!["--dump-dom".into()]).await
}

/// The value of attribute `name` inside the tag text `tag` (`<div a="1" ...>`).
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    tag[start..].find('"').map(|end| &tag[start..start + end])
}

/// Every start tag of `html` carrying attribute `name`.
fn tags_with<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!(" {name}=\"");
    let mut tags = Vec::new();
    let mut from = 0;
    while let Some(at) = html[from..].find(&needle) {
        let at = from + at;
        let open = html[..at].rfind('<').expect("an attribute sits in a tag");
        let close = at + html[at..].find('>').expect("tags close");
        tags.push(&html[open..=close]);
        from = close;
    }
    tags
}

/// What the test reads from one dump: ready flag, and `(shard, remaining)` per bar.
struct PageState {
    ready: bool,
    bars: Vec<(u32, i64)>,
}

impl PageState {
    fn parse(html: &str) -> Self {
        let body = html.find("<body").map(|at| &html[at..at + html[at..].find('>').unwrap_or(0)]).unwrap_or("");
        let ready = attribute(&format!("{body} "), "data-ready") == Some("1");
        let bars = tags_with(html, "data-shard")
            .into_iter()
            .map(|tag| {
                let shard = attribute(tag, "data-shard").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad data-shard in {tag}"));
                let remaining =
                    attribute(tag, "data-remaining").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad data-remaining in {tag}"));
                (shard, remaining)
            })
            .collect();
        Self { ready, bars }
    }

    fn remaining(&self) -> i64 {
        self.bars.iter().map(|(_, r)| r).sum()
    }
}

/// Places one-unit orders for distinct users, about 25 a second, until told to stop or sold out.
fn place_orders_steadily(app: &TestApp, sku: &str, stop: Arc<AtomicBool>, accepted: Arc<AtomicU32>) -> tokio::task::JoinHandle<()> {
    let (http, url) = (app.http.clone(), format!("{}/v1/sales/{sku}/orders", app.address));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(40));
        for n in 0u32.. {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tick.tick().await;
            let Ok(response) = http.post(&url).json(&json!({"user_id": format!("browser-u{n}"), "quantity": 1})).send().await else {
                continue;
            };
            match response.status() {
                StatusCode::CREATED => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
                StatusCode::CONFLICT => {
                    let body: serde_json::Value = response.json().await.unwrap_or_default();
                    if body["error"] == "sold_out" {
                        return;
                    }
                }
                _ => {} // 503 busy/unavailable: the next user tries again.
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sale_page_shows_the_shards_selling_live() {
    let browser = chromium();
    let app = spawn_app().await;
    let mut body = sale_body(UNITS, 4, "owned-shards");
    body["per_user_limit"] = json!(2);
    let sku = app.create_sale(body).await;
    let url = format!("{}/#/sale/{sku}", app.address);

    let (stop, accepted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU32::new(0)));
    let orders = place_orders_steadily(&app, &sku, stop.clone(), accepted.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;

    let first = PageState::parse(&dump_dom(&browser, &url).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = PageState::parse(&dump_dom(&browser, &url).await);

    for (name, state) in [("first", &first), ("second", &second)] {
        assert!(state.ready, "{name} dump: <body> has no data-ready=\"1\" (the first live poll did not render)");
        assert_eq!(state.bars.len(), 4, "{name} dump: one data-shard bar per shard: {:?}", state.bars);
        let mut shards: Vec<u32> = state.bars.iter().map(|(s, _)| *s).collect();
        shards.sort_unstable();
        assert_eq!(shards, [0, 1, 2, 3], "{name} dump");
    }
    assert!(accepted.load(Ordering::Relaxed) > 0, "orders were accepted meanwhile");
    assert!(
        second.remaining() < first.remaining(),
        "the bars follow the sale: remaining {} then {} ({:?} then {:?})",
        first.remaining(),
        second.remaining(),
        first.bars,
        second.bars
    );
    assert!(first.remaining() <= i64::from(UNITS) && second.remaining() >= 0, "{:?} {:?}", first.bars, second.bars);

    // A picture of the page for people, while the sale still sells (CI keeps target/browser/).
    let dir = workspace_root().join("target/browser");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("sale-page.png");
    let _ = std::fs::remove_file(&png);
    run_chromium(browser.clone(), url.clone(), vec![format!("--screenshot={}", png.display()), "--window-size=1280,800".into()]).await;
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    println!("sale page screenshot: {}", png.display());
    assert!(size > 10_000, "the screenshot {} is missing or nearly empty ({size} bytes)", png.display());
    let header = std::fs::read(&png).unwrap();
    assert!(header.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is a PNG", png.display());

    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(5), orders).await.expect("the order task stops").unwrap();
    app.stop().await;
}
