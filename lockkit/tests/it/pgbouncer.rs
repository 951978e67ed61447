//! A PgBouncer in transaction pooling mode that one test owns, in front of the shared PostgreSQL
//! (`DATABASE_URL`): Debian's `pgbouncer` (`scripts/services.sh` installs it) started through
//! `scripts/server.sh pgbouncer run` (`launched`, its configuration in `scripts/lib/pgbouncer.sh`)
//! on a free loopback port. Killed, by its PID, on drop.

#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use crate::launched::{self, Launched, free_port};

/// One `pgbouncer` process, killed on drop.
pub(crate) struct PgBouncer {
    port: u16,
    /// The user and database of the upstream URL, passed through.
    user: String,
    db: String,
    _process: Launched,
}

impl PgBouncer {
    /// Starts a transaction-pooling PgBouncer in front of the server of `upstream` (a
    /// `postgres://user@host:port/db` URL without password) and waits until it answers.
    pub(crate) async fn start(upstream: &str) -> Self {
        let target: tokio_postgres::Config = upstream.parse().expect("a postgres URL");
        let (user, db) = (target.get_user().unwrap().to_owned(), target.get_dbname().unwrap().to_owned());
        let port = free_port(&[]);
        let mut process = launched::spawn("pgbouncer", port, &[upstream]);
        let deadline = Instant::now() + Duration::from_secs(10);
        let url = format!("postgres://{user}@127.0.0.1:{port}/{db}");
        while tokio_postgres::connect(&url, tokio_postgres::NoTls).await.is_err() {
            launched::assert_running(&mut process);
            assert!(Instant::now() < deadline, "pgbouncer on port {port} did not start:\n{}", process.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { port, user, db, _process: process }
    }

    /// `postgres://USER@127.0.0.1:PORT/DB`: the upstream's user and database, through the pooler.
    pub(crate) fn url(&self) -> String {
        format!("postgres://{}@127.0.0.1:{}/{}", self.user, self.port, self.db)
    }
}
