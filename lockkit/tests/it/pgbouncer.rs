//! A PgBouncer in transaction pooling mode that one test owns, in front of the shared PostgreSQL
//! (`DATABASE_URL`): Debian's `pgbouncer` (`scripts/services.sh` installs it) in the foreground
//! on a free loopback port, trust auth, its files in a temporary directory. PgBouncer refuses to
//! run as root, so as root it switches to the `postgres` user (`-u`). Killed, by its PID, on drop.

#![cfg(feature = "postgres")]

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// One `pgbouncer` process, killed on drop.
pub(crate) struct PgBouncer {
    port: u16,
    /// The user and database of the upstream URL, passed through.
    user: String,
    db: String,
    dir: PathBuf,
    child: Child,
}

impl PgBouncer {
    /// Starts a transaction-pooling PgBouncer in front of the server of `upstream` (a
    /// `postgres://user@host:port/db` URL without password) and waits until it answers.
    pub(crate) async fn start(upstream: &str) -> Self {
        let target: tokio_postgres::Config = upstream.parse().expect("a postgres URL");
        let (host, port, user, db) = match (&target.get_hosts()[0], target.get_ports()[0]) {
            (tokio_postgres::config::Host::Tcp(host), port) => {
                (host.clone(), port, target.get_user().unwrap().to_owned(), target.get_dbname().unwrap().to_owned())
            }
            _ => panic!("the test PostgreSQL is reached over TCP"),
        };
        let listen = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("lockkit-pgbouncer-{listen}-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(dir.join("userlist.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 {db} = host={host} port={port} dbname={db} user={user}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {listen}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {userlist}\n\
                 pool_mode = transaction\n\
                 default_pool_size = 5\n\
                 max_client_conn = 100\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {log}\n",
                userlist = dir.join("userlist.txt").display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        let root =
            Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let mut command = Command::new(PGBOUNCER);
        if root {
            assert!(Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().unwrap().success());
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer must be installed (scripts/services.sh installs it)");
        let bouncer = Self { port: listen, user, db, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio_postgres::connect(&bouncer.url(), tokio_postgres::NoTls).await.is_err() {
            assert!(Instant::now() < deadline, "pgbouncer on port {listen} did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bouncer
    }

    /// `postgres://USER@127.0.0.1:PORT/DB`: the upstream's user and database, through the pooler.
    pub(crate) fn url(&self) -> String {
        format!("postgres://{}@127.0.0.1:{}/{}", self.user, self.port, self.db)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
