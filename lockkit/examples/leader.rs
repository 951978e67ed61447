//! Leader election: three candidates campaign for one election, an observer prints each change of
//! leader, and each leader writes to a store under its term before it resigns and the next one
//! takes over. The store refuses a term below the highest it has seen: that is what stops a
//! deposed leader (paused past its lease) from overwriting its successor's work, shown at the end
//! with the first leader's term.
//!
//! Run: `cargo run -p lockkit --example leader` (uses `LOCKKIT_URL`, else `REDIS_URL`, default
//! `redis://127.0.0.1:6390`; any backend's URL works, e.g. `etcd://127.0.0.1:2389` with
//! `--features etcd`, where `etcdctl elect -l NAME` shows the same leaders).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use lockkit::{Fence, LockClient};

/// What a leader's side effects go through: it keeps the highest term it accepted and refuses
/// smaller ones (in a database: `UPDATE ... WHERE term <= $term`).
#[derive(Default)]
struct Store {
    highest: Option<Fence>,
    log: Vec<String>,
}

impl Store {
    fn write(&mut self, term: Fence, entry: String) -> bool {
        if self.highest.is_some_and(|highest| term < highest) {
            return false;
        }
        self.highest = Some(term);
        self.log.push(entry);
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKKIT_URL")
        .or_else(|_| std::env::var("REDIS_URL"))
        .unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = LockClient::builder(&url).default_lease(Duration::from_secs(2)).connect().await?;
    let name = format!("example:leader:{:06x}", rand::random::<u32>() & 0xff_ffff);
    let store = Arc::new(Mutex::new(Store::default()));

    let mut observer = client.election(&name).poll_interval(Duration::from_millis(50)).observe();
    let watching = tokio::spawn(async move {
        loop {
            match observer.changed().await {
                Ok(Some(leader)) => println!("observer: {} leads (term {})", leader.value(), leader.term()),
                Ok(None) => println!("observer: nobody leads"),
                Err(e) => println!("observer: {e}"),
            }
        }
    });

    let mut candidates = Vec::new();
    for id in ["worker-a", "worker-b", "worker-c"] {
        let (election, store) = (client.election(&name), store.clone());
        candidates.push(tokio::spawn(async move {
            let leadership = election.campaign(id).await?;
            let term = leadership.term();
            println!("{id}: leading under term {term}");
            for step in 0..3 {
                tokio::select! {
                    cause = leadership.lost() => {
                        println!("{id}: deposed ({cause:?}), stopping");
                        return Ok(term);
                    }
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                let accepted = store.lock().unwrap().write(term, format!("{id} step {step}"));
                println!("{id}: write {step} under term {term}: {}", if accepted { "accepted" } else { "refused" });
            }
            leadership.resign().await?;
            println!("{id}: resigned");
            Ok::<_, lockkit::Error>(term)
        }));
    }
    let mut terms = Vec::new();
    for candidate in candidates {
        terms.push(candidate.await??);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    watching.abort();

    let first = *terms.iter().min().expect("three terms");
    let late = store.lock().unwrap().write(first, "a late write of the first leader".into());
    println!("a late write under the first term {first}: {}", if late { "accepted" } else { "refused" });
    println!("store log: {:?}", store.lock().unwrap().log);
    Ok(())
}
