//! PostgreSQL: the lease table (`postgres://`) and session advisory locks
//! (`postgres+advisory://`) on a real server: the shared one at `DATABASE_URL`
//! (`scripts/services.sh` starts it), for the tests that crash it a server of their own
//! (`postgres_server`), and for waiters behind a transaction-pooling PgBouncer one of their own
//! in front of the shared server (`pgbouncer`).

#![cfg(feature = "postgres")]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use lockkit::{BackendKind, ErrorKind, Fence, LeaseLoss, LockClient, LockClientBuilder, LockGuard, Unprotected};

use crate::{
    pgbouncer::PgBouncer,
    postgres_server::{PgServer, database_url},
    support::{cancelled_at_varied_points, eventually, unique},
    waiters::attempts_in_a_line_of_waiters,
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Lease,
    Advisory,
}

const MODES: [Mode; 2] = [Mode::Lease, Mode::Advisory];

/// The lockkit URL of `mode` on the server of `base` (a `postgres://` URL).
fn url(mode: Mode, base: &str) -> String {
    match mode {
        Mode::Lease => base.to_owned(),
        Mode::Advisory => base.replacen("postgres://", "postgres+advisory://", 1),
    }
}

/// A client whose waiters would sleep 30 s without a wake-up.
async fn client(url: &str) -> LockClient {
    LockClient::builder(url).wake_safety_interval(Duration::from_secs(30)).connect().await.unwrap()
}

/// A plain session, standing in for another application or psql.
async fn raw(base: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Tasks spread over `clients` each take `name_of(task)` in turn; returns how often two were inside
/// at once, and the fences in the order the holders entered.
async fn overlaps(clients: &[LockClient], name_of: impl Fn(usize) -> String) -> (u32, Vec<Fence>) {
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let entered = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, name) = (clients[task % clients.len()].clone(), name_of(task));
        let (inside, overlaps, entered) = (inside.clone(), overlaps.clone(), entered.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = client.lock(&name, Duration::from_secs(20)).await.unwrap();
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                entered.lock().unwrap().push(guard.fence());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let fences = entered.lock().unwrap().clone();
    (overlaps.load(Ordering::SeqCst), fences)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_release_wakes_one_waiter_of_the_process() {
    for mode in MODES {
        let url = url(mode, &database_url());
        let (holding, waiting) = (client(&url).await, client(&url).await);

        let attempts = attempts_in_a_line_of_waiters(&holding, &waiting, 6).await;

        // The first try, the one right after listening, the one after its wake-up (and one to
        // spare); woken by every release of the lock, the last would make up to 8.
        assert!(attempts.iter().all(|&a| a <= 4), "{mode:?}: attempts along the line: {attempts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_no_two_holders_and_fences_increase_in_both_modes() {
    for mode in MODES {
        let url = url(mode, &database_url());
        let clients = [client(&url).await, client(&url).await, client(&url).await];
        let name = unique("pg-mutex");

        let (overlapped, fences) = overlaps(&clients, |_| name.clone()).await;

        assert_eq!(overlapped, 0, "{mode:?}");
        assert_eq!(fences.len(), 40);
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{mode:?}: fences rise holder after holder: {fences:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_control_the_overlap_detector_catches_tasks_that_do_not_share_a_lock() {
    let url = database_url();
    let clients = [client(&url).await, client(&url).await];

    // The control: the same tasks, each on its own name, so the lock excludes nobody.
    let (overlapped, _) = overlaps(&clients, |task| unique(&format!("pg-control-{task}"))).await;

    assert!(overlapped > 0, "without a shared lock the detector must see overlaps");
}

#[tokio::test]
async fn postgres_a_waiter_wakes_on_release_without_polling() {
    for mode in MODES {
        let url = url(mode, &database_url());
        let (holder, waiter_client) = (client(&url).await, client(&url).await);
        let name = unique("pg-wake");
        let held = holder.try_lock(&name).await.unwrap().unwrap();
        let waiter = {
            let name = name.clone();
            tokio::spawn(async move { waiter_client.lock(&name, Duration::from_secs(20)).await })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiter.is_finished(), "{mode:?}: the waiter waits while the lock is held");

        held.release().await.unwrap();
        // Neither the holder's 30 s lease nor the 30 s safety interval ends within the 20 s wait.
        let guard = waiter.await.unwrap().expect("woken by the release");

        assert!(guard.fence() > Fence::new(0));
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn postgres_lease_lost_when_its_server_is_down_past_the_lease_and_taken_over_after_restart() {
    let mut server = PgServer::start().await;
    let client = LockClient::builder(server.url())
        .default_lease(Duration::from_millis(1500))
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let name = unique("pg-lost");
    let guard = client.try_lock(&name).await.unwrap().unwrap();
    let fence = guard.fence();

    server.crash();
    let cause = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("lost() fires");

    assert_eq!(cause, LeaseLoss::Expired);
    server.resume().await;
    // The row expired on the server's clock: another client takes it, under a larger fence.
    let other = LockClient::connect(&server.url()).await.unwrap();
    let next = other.lock(&name, Duration::from_secs(5)).await.unwrap();
    assert!(next.fence() > fence, "{} > {fence} across the restart", next.fence());
    // The old client's sessions died with the server: let it reconnect, then release.
    assert!(eventually(Duration::from_secs(5), || async { client.inspect(&name).await.is_ok() }).await);
    assert!(eventually(Duration::from_secs(5), || async { client.inspect(&name).await.is_ok() }).await);
    assert!(!guard.release().await.unwrap(), "the lost lease is not reported held");
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn postgres_advisory_lock_lost_at_once_when_its_session_is_terminated() {
    let base = database_url();
    let client = LockClient::builder(url(Mode::Advisory, &base))
        .default_lease(Duration::from_millis(1500))
        .connect()
        .await
        .unwrap();
    assert_eq!(client.backend(), BackendKind::PostgresAdvisory);
    let name = unique("pg-terminated");
    let guard = client.try_lock(&name).await.unwrap().unwrap();
    let info = client.inspect(&name).await.unwrap();
    let pid: i32 = info[0].holders[0].id.strip_prefix("pid:").unwrap().parse().unwrap();

    raw(&base).await.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await.expect("lost() fires");

    // Gone, not Expired: the next renewal found the session ended, before the lease ran out.
    assert_eq!(cause, LeaseLoss::Gone, "the session's end is a loss, not a silence");
    assert!(!guard.release().await.unwrap(), "the lost lock is not reported held");
    let again = client.try_lock(&name).await.unwrap().expect("the server released it with the session");
    again.release().await.unwrap();
}

#[tokio::test]
async fn postgres_fences_increase_across_a_server_crash_and_are_raised_never_lowered() {
    let mut server = PgServer::start().await;
    let mut last = Fence::new(0);
    for mode in MODES {
        let client = client(&url(mode, &server.url())).await;
        for _ in 0..3 {
            let guard = client.try_lock("orders").await.unwrap().unwrap();
            assert!(guard.fence() > last, "{mode:?}: {} > {last}", guard.fence());
            last = guard.fence();
            guard.release().await.unwrap();
        }
    }

    server.crash();
    server.resume().await;

    for mode in MODES {
        let client = client(&url(mode, &server.url())).await;
        let guard = client.try_lock("orders").await.unwrap().unwrap();
        assert!(guard.fence() > last, "{mode:?} after the crash: {} > {last}", guard.fence());
        last = guard.fence();
        guard.release().await.unwrap();

        let target = Fence::new(last.get() + 1000);
        assert_eq!(client.ensure_fence_at_least("orders", target).await.unwrap(), target);
        assert_eq!(client.ensure_fence_at_least("orders", Fence::new(3)).await.unwrap(), target, "never lowered");
        let guard = client.try_lock("orders").await.unwrap().unwrap();
        assert!(guard.fence() > target);
        last = guard.fence();
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dropped_acquires_leave_no_holder_behind() {
    for mode in MODES {
        let url = url(mode, &database_url());
        let (client, checker) = (client(&url).await, client(&url).await);
        let name = unique("pg-dropped-acquire");
        let mut cancelled = 0;

        // Cancelled at varied points of the round trip: before the statement was sent, and after
        // the server granted the lock but before the answer arrived.
        for i in 0..80u64 {
            match cancelled_at_varied_points(i, (20, 37, 1500), client.try_lock(&name)).await {
                Some(result) => drop(result.unwrap()),
                None => cancelled += 1,
            }
            // Left behind, the lock would hold the checker past its 5 s wait: for its 30 s lease
            // (lease table) or for good (advisory).
            let next = checker.lock(&name, Duration::from_secs(5)).await;
            let next = next.unwrap_or_else(|e| panic!("{mode:?}: iteration {i}: {e}"));
            next.release().await.unwrap();
        }

        assert!(cancelled > 0, "{mode:?}: some acquires must have been cancelled for this test to mean anything");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cancelled_releases_still_release() {
    for mode in MODES {
        let url = url(mode, &database_url());
        let client = client(&url).await;
        let names: Vec<String> = (0..30).map(|_| unique("pg-cancelled-release")).collect();
        let mut guards = Vec::new();
        for name in &names {
            guards.push(client.try_lock(name).await.unwrap().unwrap());
        }

        for (i, guard) in guards.into_iter().enumerate() {
            let _ = tokio::time::timeout(Duration::from_micros(10 + i as u64 * 50), guard.release()).await;
        }

        let free = eventually(Duration::from_secs(5), || async {
            for name in &names {
                if client.inspect(name).await.unwrap().iter().any(|info| info.held) {
                    return false;
                }
            }
            client.held_leases() == 0
        })
        .await;
        assert!(free, "{mode:?}: every release finished in the background");
    }
}

#[tokio::test]
async fn postgres_advisory_interop_with_a_psql_session_on_the_documented_key() {
    let base = database_url();
    let client = client(&url(Mode::Advisory, &base)).await;
    let other = raw(&base).await;
    let name = unique("pg-interop-advisory");
    let key = format!("lockkit:{name}");
    let psql_lock = "SELECT pg_advisory_lock(hashtextextended($1, 0))";

    // Held by the other session: we time out.
    other.execute(psql_lock, &[&key]).await.unwrap();
    let err = client.lock(&name, Duration::from_millis(300)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    other.query_one("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&key]).await.unwrap();

    // Held by us: the other session cannot take it.
    let guard = client.lock(&name, Duration::from_secs(2)).await.unwrap();
    let try_lock = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
    assert!(!other.query_one(try_lock, &[&key]).await.unwrap().get::<_, bool>(0));
    guard.release().await.unwrap();
    assert!(other.query_one(try_lock, &[&key]).await.unwrap().get::<_, bool>(0));
}

#[tokio::test]
async fn postgres_lease_table_interop_with_the_documented_sql() {
    let base = database_url();
    let client = client(&base).await;
    let other = raw(&base).await;
    let name = unique("pg-interop-lease");

    // Another client sees our holder, with our fence.
    let guard = client.try_lock(&name).await.unwrap().unwrap();
    let row = other
        .query_one("SELECT fence FROM lockkit_locks WHERE name = $1 AND expires_at > clock_timestamp()", &[&name])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), guard.fence().as_i64());

    // The fence check inside the service's own transaction: our fence writes, a stale one does not.
    other.batch_execute("CREATE TEMP TABLE stock (sku text PRIMARY KEY, units int)").await.unwrap();
    other.execute("INSERT INTO stock VALUES ('sku-1', 10)", &[]).await.unwrap();
    let fenced = "UPDATE stock SET units = units - 1 WHERE sku = 'sku-1' AND EXISTS (
                    SELECT 1 FROM lockkit_locks
                    WHERE name = $1 AND fence = $2 AND expires_at > clock_timestamp())";
    assert_eq!(other.execute(fenced, &[&name, &guard.fence().as_i64()]).await.unwrap(), 1);
    assert_eq!(other.execute(fenced, &[&name, &(guard.fence().as_i64() - 1)]).await.unwrap(), 0);
    assert!(guard.release().await.unwrap());
    assert_eq!(other.execute(fenced, &[&name, &0i64]).await.unwrap(), 0, "nothing writes once released");

    // A row written by the documented acquire SQL excludes us until the documented release.
    let acquire = "INSERT INTO lockkit_locks AS l (name, token, fence, expires_at)
                   VALUES ($1, $2, nextval('lockkit_fence'), clock_timestamp() + interval '30 seconds')
                   ON CONFLICT (name) DO UPDATE
                     SET token = excluded.token, fence = nextval('lockkit_fence'), expires_at = excluded.expires_at
                     WHERE l.expires_at <= clock_timestamp()
                   RETURNING fence";
    let theirs: i64 = other.query_one(acquire, &[&name, &"their-token"]).await.unwrap().get(0);
    assert!(client.try_lock(&name).await.unwrap().is_none(), "their row excludes us");
    let info = &client.inspect(&name).await.unwrap()[0];
    assert!(info.held && info.fence == Some(Fence::new(theirs as u64)));
    other
        .execute(
            "UPDATE lockkit_locks SET token = '', expires_at = clock_timestamp() WHERE name = $1 AND token = $2",
            &[&name, &"their-token"],
        )
        .await
        .unwrap();
    let ours = client.try_lock(&name).await.unwrap().expect("free after their release");
    assert!(ours.fence().as_i64() > theirs);
    ours.release().await.unwrap();
}

/// A client prefix of its own, so its own table and fence sequence (dropped by [`drop_objects`]).
fn own_prefix(what: &str) -> String {
    format!("lk_{what}_{:08x}", rand::random::<u32>())
}

async fn drop_objects(base: &str, prefix: &str) {
    raw(base)
        .await
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {prefix}_locks; DROP TABLE IF EXISTS {prefix}_leaders; DROP SEQUENCE IF EXISTS {prefix}_fence"
        ))
        .await
        .unwrap();
}

/// A fence sequence made by someone else with `CACHE 20` (`CREATE SEQUENCE IF NOT EXISTS` takes it
/// as it is): each session would draw fences from a block of its own, out of order across
/// sessions. The client refuses it at connect and says how to fix it.
#[tokio::test]
async fn postgres_refuses_a_fence_sequence_with_a_cache() {
    let base = database_url();
    for mode in MODES {
        let prefix = own_prefix("cached");
        raw(&base).await.batch_execute(&format!("CREATE SEQUENCE {prefix}_fence CACHE 20")).await.unwrap();

        let refused = LockClient::builder(url(mode, &base)).prefix(&prefix).connect().await;

        drop_objects(&base, &prefix).await;
        let err = refused.expect_err("a cached fence sequence is refused");
        assert_eq!(err.kind(), ErrorKind::Config, "{mode:?}: {err}");
        assert!(err.to_string().contains(&format!("ALTER SEQUENCE {prefix}_fence CACHE 1")), "{mode:?}: {err}");
    }
}

/// The control: the same sequence made with `CACHE 1` (the default) connects and grants.
#[tokio::test]
async fn postgres_control_a_fence_sequence_without_a_cache_connects() {
    let base = database_url();
    for mode in MODES {
        let prefix = own_prefix("uncached");
        raw(&base).await.batch_execute(&format!("CREATE SEQUENCE {prefix}_fence CACHE 1")).await.unwrap();

        let granted: lockkit::Result<Fence> = async {
            let client = LockClient::builder(url(mode, &base)).prefix(&prefix).connect().await?;
            let guard = client.try_lock("orders").await?.expect("free");
            let fence = guard.fence();
            guard.release().await?;
            Ok(fence)
        }
        .await;

        drop_objects(&base, &prefix).await;
        assert_eq!(granted.unwrap(), Fence::new(1), "{mode:?}");
    }
}

/// A role that may read the fence sequence but not set it (no `UPDATE` on it): a raise above the
/// sequence's value is a setup problem that retrying never fixes, so it is `Config` and says what
/// the sequence's owner can run; a raise the sequence already satisfies answers with its value.
#[tokio::test]
async fn postgres_a_fence_raise_the_role_may_not_make_is_a_config_error() {
    let base = database_url();
    let prefix = own_prefix("readonly");
    let role = format!("{prefix}_role");
    let setup = format!(
        "CREATE SEQUENCE {prefix}_fence; SELECT setval('{prefix}_fence', 5); CREATE ROLE {role} LOGIN; \
         GRANT USAGE, SELECT ON SEQUENCE {prefix}_fence TO {role}; GRANT CREATE ON SCHEMA public TO {role}"
    );
    raw(&base).await.batch_execute(&setup).await.unwrap();
    let (scheme, rest) = base.split_once("://").unwrap();
    let as_role = format!("{scheme}://{role}@{}", rest.rsplit_once('@').map_or(rest, |(_, host)| host));

    let outcome = async {
        let client = LockClient::builder(url(Mode::Advisory, &as_role)).prefix(&prefix).connect().await?;
        let satisfied = client.ensure_fence_at_least("orders", Fence::new(3)).await?;
        Ok::<_, lockkit::Error>((satisfied, client.ensure_fence_at_least("orders", Fence::new(50)).await))
    }
    .await;

    let cleanup = format!(
        "DROP TABLE IF EXISTS {prefix}_leaders; DROP SEQUENCE {prefix}_fence; REVOKE CREATE ON SCHEMA public FROM {role}; DROP ROLE {role}"
    );
    raw(&base).await.batch_execute(&cleanup).await.unwrap();
    let (satisfied, above) = outcome.unwrap();
    assert_eq!(satisfied, Fence::new(5), "a raise already satisfied answers with the value");
    let refused = above.expect_err("the role may not set the sequence");
    assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
    assert!(!refused.is_retryable(), "{refused}");
    assert!(refused.to_string().contains(&format!("setval('{prefix}_fence', 50)")), "{refused}");
}

/// How long a waiter behind a PgBouncer may wait: the holder's 30 s lease and the 30 s wake
/// safety interval both outlast it, so only a wake-up or polling can grant it before it ends.
const BOUNCER_WAIT: Duration = Duration::from_secs(5);

/// A holder on the server itself and a waiter behind a transaction-pooling PgBouncer, on a
/// prefix of their own; the holder releases once the waiter has been refused twice (its first
/// attempt, and the one right after it subscribed), so the waiter is in its wait loop. Returns
/// how long the waiter waited for its grant (the acquire loop tries once more when its wait
/// runs out, so a waiter that was never woken is granted at [`BOUNCER_WAIT`]).
async fn wait_behind_pgbouncer(waiter: LockClientBuilder, prefix: &str) -> Duration {
    let base = database_url();
    let holder = LockClient::builder(&base).prefix(prefix).connect().await.unwrap();
    let waiter = waiter.prefix(prefix).wake_safety_interval(Duration::from_secs(30)).connect().await.unwrap();
    let held = holder.try_lock("orders").await.unwrap().expect("free");
    let waiting = tokio::spawn(async move {
        let guard: LockGuard = waiter.lock("orders", BOUNCER_WAIT).await?;
        let waited = guard.waited();
        guard.release().await?;
        lockkit::Result::Ok(waited)
    });
    // Every attempt draws a value from the prefix's own sequence, granted or not.
    let sequence = raw(&base).await;
    let fences_drawn = format!("SELECT last_value FROM {prefix}_fence");
    let refused_twice = eventually(Duration::from_secs(10), || async {
        sequence.query_one(&fences_drawn, &[]).await.unwrap().get::<_, i64>(0) >= held.fence().as_i64() + 2
    })
    .await;
    assert!(refused_twice, "the waiter tried twice");

    assert!(held.release().await.unwrap());
    let waited: lockkit::Result<Duration> = waiting.await.unwrap();

    drop_objects(&base, prefix).await;
    waited.expect("granted, at the latest by the last attempt when its wait ran out")
}

/// Behind a PgBouncer in transaction pooling mode, `LISTEN` succeeds but hears nothing. The
/// client finds out at connect (a `NOTIFY` from another session never comes back) and its
/// waiters poll, so a release grants the waiter before its wait runs out.
#[tokio::test]
async fn postgres_a_waiter_behind_a_transaction_pooling_pgbouncer_is_granted_after_a_release() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let bouncer = PgBouncer::start(&database_url()).await;

    let waited = wait_behind_pgbouncer(LockClient::builder(bouncer.url()), &own_prefix("bouncer")).await;

    assert!(waited < BOUNCER_WAIT, "granted by polling after the release, not at the end of the wait: {waited:?}");
    let unheard = snapshotter.snapshot().into_vec().into_iter().any(|(key, .., value)| {
        key.key().name() == "lockkit_postgres_listen_unheard_total"
            && matches!(value, metrics_util::debugging::DebugValue::Counter(n) if n > 0)
    });
    assert!(unheard, "the failed LISTEN check is counted");
}

/// The control: the same waiter trusting `LISTEN` (no check) sleeps through the release, waiting
/// for a wake-up that never comes, until its wait runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_control_a_waiter_that_trusts_listen_behind_pgbouncer_waits_until_its_timeout() {
    let bouncer = PgBouncer::start(&database_url()).await;

    let waited = wait_behind_pgbouncer(
        LockClient::builder(bouncer.url()).unprotected(Unprotected::PostgresListenUnchecked),
        &own_prefix("bouncer_control"),
    )
    .await;

    assert!(waited >= BOUNCER_WAIT, "not woken by the release: {waited:?}");
}

#[tokio::test]
async fn postgres_keeps_only_the_plain_lock() {
    for mode in MODES {
        let client = client(&url(mode, &database_url())).await;
        let name = unique("pg-primitives");

        let refused = [
            client.semaphore(&name, 2).await.err(),
            client.reentrant(&name, "owner").await.err(),
            client.fair(&name).await.err(),
            client.acquire(&name).lock_delay(Duration::from_secs(1)).await.err(),
        ];

        for err in refused {
            assert_eq!(err.expect("refused").kind(), ErrorKind::Unsupported, "{mode:?}");
        }
    }
}
