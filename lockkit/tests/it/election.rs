//! Leader election on every backend: one leader at a time, followers read its value, a
//! resignation hands over, and a leader whose lease is cut (a stalled proxy between it and the
//! servers) is told by `lost()` while the next leader's larger term makes a store refuse the
//! deposed leader's late write (the control, the same store without the term check, lets it land).
//! On etcd, interop with `etcdctl elect` both ways.

use std::time::Duration;

use lockkit::{Election, Fence, Leader, LockClient};

use crate::support::{Proxy, redis_url, unique};

/// Every test is bounded in time, however its servers misbehave.
const TEST_BOUND: Duration = Duration::from_secs(120);

/// How long a second candidate is watched not to win while the first leads (a lower bound only).
const STILL_WAITING: Duration = Duration::from_millis(300);

async fn connect(url: &str, lease: Duration) -> LockClient {
    LockClient::builder(url).default_lease(lease).connect().await.unwrap()
}

fn election(client: &LockClient, name: &str) -> Election {
    client.election(name).poll_interval(Duration::from_millis(50))
}

fn value_of(leader: &Option<Leader>) -> Option<&str> {
    leader.as_ref().map(Leader::value)
}

/// Two candidates on `a` and `b`: `a` leads and `b` waits, `b`'s observer sees `a`'s value and
/// term, `a` resigns and `b` leads under a larger term, `b` resigns and nobody leads.
async fn one_leader_at_a_time_and_resign_hands_over(a: &LockClient, b: &LockClient) {
    let name = unique("elect");
    let (ea, eb) = (election(a, &name), election(b, &name));
    let mut observer = eb.observe();
    assert_eq!(observer.changed().await.unwrap(), None, "nobody leads yet");

    let leader_a = ea.campaign("candidate-a").await.unwrap();
    let seen = observer.changed().await.unwrap();
    let mut campaign_b = tokio::spawn({
        let eb = eb.clone();
        async move { eb.campaign("candidate-b").await }
    });
    let b_waited = tokio::time::timeout(STILL_WAITING, &mut campaign_b).await.is_err();
    let read = eb.leader().await.unwrap();

    assert_eq!(value_of(&seen), Some("candidate-a"), "the follower sees the leader's value");
    assert_eq!(seen.as_ref().map(Leader::term), Some(leader_a.term()), "and its term");
    assert_eq!(read, seen, "a read agrees with the observer");
    assert!(b_waited, "one leader at a time: b waits while a leads");

    let term_a = leader_a.term();
    assert!(leader_a.resign().await.unwrap(), "a still led when it resigned");
    let leader_b = campaign_b.await.unwrap().unwrap();
    let mut seen = observer.changed().await.unwrap();
    while value_of(&seen) != Some("candidate-b") {
        seen = observer.changed().await.unwrap();
    }

    assert!(leader_b.term() > term_a, "terms grow: {} after {term_a}", leader_b.term());
    assert_eq!(eb.leader().await.unwrap().map(|l| l.term()), Some(leader_b.term()));
    assert!(leader_b.resign().await.unwrap());
    while observer.changed().await.unwrap().is_some() {}
}

/// With a poll interval far beyond the test's bound, only a watch of the candidates can tell a
/// parked observer (on a client that takes no part) that a leader came, and went.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
async fn an_observer_is_told_by_its_watch(url: &str) {
    let lease = Duration::from_secs(5);
    let (candidate, follower) = (connect(url, lease).await, connect(url, lease).await);
    let name = unique("elect-watch");
    let mut observer = follower.election(&name).poll_interval(Duration::from_secs(3600)).observe();
    assert_eq!(observer.changed().await.unwrap(), None);

    let mut parked = tokio::spawn(async move { (observer.changed().await.unwrap(), observer) });
    let parked_before_the_campaign = tokio::time::timeout(STILL_WAITING, &mut parked).await.is_err();
    let leadership = candidate.election(&name).campaign("watched").await.unwrap();
    let (seen, mut observer) = parked.await.unwrap();
    let mut parked = tokio::spawn(async move { observer.changed().await.unwrap() });
    let parked_before_the_resignation = tokio::time::timeout(STILL_WAITING, &mut parked).await.is_err();
    assert!(leadership.resign().await.unwrap());
    let gone = parked.await.unwrap();

    assert!(parked_before_the_campaign && parked_before_the_resignation, "the observer waited for each change");
    assert_eq!(value_of(&seen), Some("watched"), "the watch reported the new leader");
    assert_eq!(gone, None, "and its resignation");
}

/// A store that remembers the highest term it accepted and, when `checks_term`, refuses a write
/// under a smaller one: what a leader's side effects go through.
struct Store {
    checks_term: bool,
    highest: Fence,
    value: String,
}

impl Store {
    fn new(checks_term: bool) -> Self {
        Self { checks_term, highest: Fence::new(0), value: String::new() }
    }

    /// Whether the write landed.
    fn write(&mut self, term: Fence, value: &str) -> bool {
        if self.checks_term && term < self.highest {
            return false;
        }
        self.highest = self.highest.max(term);
        value.clone_into(&mut self.value);
        true
    }
}

/// The leader on `cut_off` (whose every connection goes through `proxies`) loses its lease when
/// the proxies stall: `lost()` fires, the candidate on `other` leads under a larger term, and the
/// deposed leader's late write is refused by the store that checks terms and lands in the one
/// that does not (the control).
async fn a_deposed_leader_is_told_and_its_late_write_refused(
    cut_off: &LockClient,
    other: &LockClient,
    proxies: &[Proxy],
) {
    let name = unique("elect-cut");
    let old = election(cut_off, &name).campaign("old").await.unwrap();
    let mut campaign = tokio::spawn({
        let election = election(other, &name);
        async move { election.campaign("new").await }
    });
    assert!(tokio::time::timeout(STILL_WAITING, &mut campaign).await.is_err(), "the old leader still leads");

    for proxy in proxies {
        proxy.stall();
    }
    let cause = old.lost().await;
    // Let the stalled connections go on (an advisory lock's session ends only once its client's
    // close gets through).
    for proxy in proxies {
        proxy.resume();
    }
    let new = campaign.await.unwrap().unwrap();
    let (mut checked, mut control) = (Store::new(true), Store::new(false));
    for store in [&mut checked, &mut control] {
        assert!(store.write(new.term(), "written by the new leader"));
    }
    let refused = !checked.write(old.term(), "late write of the deposed leader");
    let landed = control.write(old.term(), "late write of the deposed leader");

    assert!(old.is_lost(), "lost ({cause:?}) and it stays lost");
    assert!(old.ensure_held().unwrap_err().is_lost());
    assert!(new.term() > old.term(), "the next term is larger: {} after {}", new.term(), old.term());
    assert_eq!(election(other, &name).leader().await.unwrap().map(|l| l.value().to_owned()), Some("new".into()));
    assert!(refused, "the store's term check refuses the deposed leader");
    assert_eq!(checked.value, "written by the new leader");
    assert!(landed, "control: without the term check the stale write lands");
    assert_eq!(control.value, "late write of the deposed leader");
    assert!(!old.resign().await.unwrap(), "the deposed leader no longer led");
    assert!(new.resign().await.unwrap());
}

/// [`one_leader_at_a_time_and_resign_hands_over`] with two clients of `url`, bounded.
async fn hands_over_on(url: &str) {
    let lease = Duration::from_secs(5);
    let (a, b) = (connect(url, lease).await, connect(url, lease).await);
    bounded(one_leader_at_a_time_and_resign_hands_over(&a, &b)).await;
}

async fn bounded(test: impl Future<Output = ()>) {
    tokio::time::timeout(TEST_BOUND, test).await.expect("bounded");
}

/// `scheme://[user@]host:port/rest` with `host:port` replaced by `address`.
#[cfg(any(feature = "zookeeper", feature = "postgres"))]
fn with_address(url: &str, address: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let user = authority.rsplit_once('@').map_or(String::new(), |(user, _)| format!("{user}@"));
    let path = if path.is_empty() { String::new() } else { format!("/{path}") };
    format!("{scheme}://{user}{address}{path}")
}

/// The `host:port` of a URL.
#[cfg(any(feature = "zookeeper", feature = "postgres"))]
fn address_of(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split('/').next().unwrap();
    authority.rsplit('@').next().unwrap().to_owned()
}

mod on_redis {
    use super::*;
    use crate::servers::{Cluster, Masters};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_one_leader_at_a_time_and_resign_hands_over() {
        hands_over_on(&redis_url()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_a_deposed_leader_is_told_and_its_late_write_refused() {
        bounded(async {
            let proxy = Proxy::start().await;
            let lease = Duration::from_secs(1);
            let (cut_off, other) = (connect(&proxy.url(), lease).await, connect(&redis_url(), lease).await);
            a_deposed_leader_is_told_and_its_late_write_refused(&cut_off, &other, &[proxy]).await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_cluster_one_leader_at_a_time_and_resign_hands_over() {
        let cluster = Cluster::start().await;
        hands_over_on(&cluster.url()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redlock_one_leader_at_a_time_and_resign_hands_over() {
        let masters = Masters::start(3).await;
        hands_over_on(&masters.url()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redlock_a_deposed_leader_is_told_and_its_late_write_refused() {
        bounded(async {
            let masters = Masters::start(3).await;
            let mut proxies = Vec::new();
            for node in &masters.nodes {
                proxies.push(Proxy::start_to(node.address()).await);
            }
            let through: Vec<String> = proxies.iter().map(Proxy::address).collect();
            let lease = Duration::from_secs(1);
            let cut_off = connect(&format!("redlock://{}", through.join(",")), lease).await;
            let other = connect(&masters.url(), lease).await;
            a_deposed_leader_is_told_and_its_late_write_refused(&cut_off, &other, &proxies).await;
        })
        .await;
    }
}

#[cfg(feature = "zookeeper")]
mod on_zookeeper {
    use super::*;
    use crate::zookeeper_server::{ZkServer, zookeeper_url};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_one_leader_at_a_time_and_resign_hands_over() {
        hands_over_on(&zookeeper_url()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_a_deposed_leader_is_told_and_its_late_write_refused() {
        bounded(async {
            // Sessions of 0.4 to 4 s: the cut-off session expires soon after its lease.
            let server = ZkServer::start(Duration::from_millis(200));
            let url = server.url("lockkit-elect");
            let proxy = Proxy::start_to(address_of(&url)).await;
            let lease = Duration::from_secs(2);
            let cut_off = connect(&with_address(&url, &proxy.address()), lease).await;
            let other = connect(&url, lease).await;
            a_deposed_leader_is_told_and_its_late_write_refused(&cut_off, &other, &[proxy]).await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_an_observer_is_told_by_its_watch() {
        bounded(an_observer_is_told_by_its_watch(&zookeeper_url())).await;
    }

    /// Curator's `LeaderLatch` layout: the candidate's node is `_c_<guid>-latch-<sequence>` and
    /// holds its value.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_the_leader_is_a_latch_node_holding_its_value() {
        bounded(async {
            let url = zookeeper_url();
            let client = connect(&url, Duration::from_secs(5)).await;
            let name = unique("elect-latch");
            let leader = client.election(&name).campaign("participant-7").await.unwrap();

            let (hosts, chroot) = crate::zookeeper_server::split_url(&url);
            let raw = zookeeper_client::Client::connect(&hosts).await.unwrap();
            let dir = format!("{chroot}/{name}");
            let children = raw.list_children(&dir).await.unwrap();
            let (data, stat) = raw.get_data(&format!("{dir}/{}", children[0])).await.unwrap();

            assert_eq!(children.len(), 1);
            assert!(children[0].starts_with("_c_") && children[0].contains("-latch-"), "{children:?}");
            assert_eq!(data, b"participant-7");
            assert_eq!(Fence::new(stat.czxid as u64), leader.term());
            leader.resign().await.unwrap();
        })
        .await;
    }
}

#[cfg(feature = "postgres")]
mod on_postgres {
    use super::*;
    use crate::postgres_server::database_url;

    fn advisory(url: &str) -> String {
        url.replacen("postgres://", "postgres+advisory://", 1)
    }

    async fn deposed(url: &str) {
        let proxy = Proxy::start_to(address_of(url)).await;
        let lease = Duration::from_secs(1);
        let cut_off = connect(&with_address(url, &proxy.address()), lease).await;
        let other = connect(url, lease).await;
        a_deposed_leader_is_told_and_its_late_write_refused(&cut_off, &other, &[proxy]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_one_leader_at_a_time_and_resign_hands_over() {
        for url in [database_url(), advisory(&database_url())] {
            hands_over_on(&url).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_lease_a_deposed_leader_is_told_and_its_late_write_refused() {
        bounded(deposed(&database_url())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_advisory_a_deposed_leader_is_told_and_its_late_write_refused() {
        bounded(deposed(&advisory(&database_url()))).await;
    }
}

#[cfg(feature = "etcd")]
mod on_etcd {
    use std::{
        io::{BufRead, BufReader},
        process::{Child, Stdio},
    };

    use super::*;
    use crate::etcd_server::{endpoint, etcd_url, etcdctl, etcdctl_ok};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_one_leader_at_a_time_and_resign_hands_over() {
        hands_over_on(&etcd_url()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_a_deposed_leader_is_told_and_its_late_write_refused() {
        bounded(async {
            let url = etcd_url();
            let proxy = Proxy::start_to(endpoint(&url).trim_start_matches("http://").to_owned()).await;
            let lease = Duration::from_secs(2);
            let cut_off = LockClient::builder(format!("etcd://{}", proxy.address()))
                .default_lease(lease)
                .command_timeout(Duration::from_millis(500))
                .connect()
                .await
                .unwrap();
            let other = connect(&url, lease).await;
            a_deposed_leader_is_told_and_its_late_write_refused(&cut_off, &other, &[proxy]).await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_an_observer_is_told_by_its_watch() {
        bounded(an_observer_is_told_by_its_watch(&etcd_url())).await;
    }

    /// The first `n` lines `child` prints (one reader: a second one would miss what the first
    /// one buffered).
    fn lines_of(child: &mut Child, n: usize) -> Vec<String> {
        let mut out = BufReader::new(child.stdout.as_mut().unwrap());
        (0..n)
            .map(|_| {
                let mut line = String::new();
                out.read_line(&mut line).unwrap();
                line.trim_end().to_owned()
            })
            .collect()
    }

    /// `etcdctl elect NAME VALUE` leads: lockkit reads its value and waits as a follower until
    /// etcdctl is killed and its lease revoked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_etcdctl_elect_leads_and_lockkit_follows() {
        bounded(async {
            let url = etcd_url();
            let name = unique("elect-etcdctl");
            let mut etcdctl_leader =
                etcdctl(&url).args(["elect", &name, "from-etcdctl"]).stdout(Stdio::piped()).spawn().unwrap();
            let (key, mut etcdctl_leader) = tokio::task::spawn_blocking(move || {
                let key = lines_of(&mut etcdctl_leader, 1).remove(0);
                (key, etcdctl_leader)
            })
            .await
            .unwrap();
            let client = connect(&url, Duration::from_secs(5)).await;
            let election = election(&client, &name);

            let seen = election.leader().await.unwrap();
            let mut campaign = tokio::spawn({
                let election = election.clone();
                async move { election.campaign("from-lockkit").await }
            });
            let waited = tokio::time::timeout(STILL_WAITING, &mut campaign).await.is_err();
            etcdctl_leader.kill().unwrap();
            etcdctl_leader.wait().unwrap();
            // Killed without resigning, etcdctl leaves its key until its lease ends.
            let waited_after_kill = tokio::time::timeout(STILL_WAITING, &mut campaign).await.is_err();
            let lease = key.rsplit_once('/').expect("NAME/<lease>").1.to_owned();
            etcdctl_ok(&url, &["lease", "revoke", &lease]);
            let leadership = campaign.await.unwrap().unwrap();

            assert!(key.starts_with(&format!("{name}/")), "etcdctl printed its key: {key}");
            assert_eq!(value_of(&seen), Some("from-etcdctl"), "lockkit reads etcdctl's value");
            assert!(waited, "lockkit waits while etcdctl leads");
            assert!(waited_after_kill, "and while etcdctl's lease lives on");
            assert!(leadership.term() > seen.unwrap().term(), "a larger term after etcdctl's");
            leadership.resign().await.unwrap();
        })
        .await;
    }

    /// lockkit leads, and `etcdctl elect -l NAME` prints lockkit's key and value; a second
    /// campaign through `etcdctl elect` waits behind lockkit and leads once lockkit resigns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_lockkit_leads_and_etcdctl_observes_and_follows() {
        bounded(async {
            let url = etcd_url();
            let name = unique("elect-lockkit");
            let client = connect(&url, Duration::from_secs(5)).await;
            let leadership = client.election(&name).campaign("from-lockkit").await.unwrap();

            let observed = tokio::task::spawn_blocking({
                let (url, name) = (url.clone(), name.clone());
                move || {
                    let mut observer =
                        etcdctl(&url).args(["elect", "-l", &name]).stdout(Stdio::piped()).spawn().unwrap();
                    let lines = lines_of(&mut observer, 2);
                    observer.kill().unwrap();
                    observer.wait().unwrap();
                    lines
                }
            })
            .await
            .unwrap();
            let mut follower =
                etcdctl(&url).args(["elect", &name, "from-etcdctl"]).stdout(Stdio::piped()).spawn().unwrap();
            tokio::time::sleep(STILL_WAITING).await;
            let follower_waited = follower.try_wait().unwrap().is_none();
            let leader_then = client.election(&name).leader().await.unwrap();
            leadership.resign().await.unwrap();
            let follower_key = tokio::task::spawn_blocking(move || {
                let key = lines_of(&mut follower, 1).remove(0);
                let _ = follower.kill();
                let _ = follower.wait();
                key
            })
            .await
            .unwrap();
            if let Some((_, lease)) = follower_key.rsplit_once('/') {
                etcdctl_ok(&url, &["lease", "revoke", lease]);
            }

            assert!(observed[0].starts_with(&format!("{name}/")), "etcdctl shows lockkit's key: {observed:?}");
            assert_eq!(observed[1], "from-lockkit", "etcdctl shows lockkit's value");
            assert!(follower_waited, "etcdctl elect waits while lockkit leads");
            assert_eq!(value_of(&leader_then), Some("from-lockkit"));
            assert!(follower_key.starts_with(&format!("{name}/")), "etcdctl leads after lockkit resigned");
        })
        .await;
    }
}
