//! `lockctl elect`: campaign in a leader election (or only watch it), printing one JSON line per
//! change, and resign cleanly on Ctrl-C or SIGTERM.

use std::process::ExitCode;

use lockkit::{Leader, LockClient};
use serde_json::{Value, json};

/// Exit code when leadership was lost (the lease could not be renewed in time).
const LOST: u8 = 4;

/// With a `value`: campaigns, printing `follower` (with the current leader) each time another
/// candidate starts leading, then `leader` (with this candidate's term) once it leads, and on a
/// signal `resigned`, or `lost` when the lease is lost. Without one: prints `follower` on every
/// change of leader (`null`: nobody leads) until a signal.
pub(crate) async fn elect(client: &LockClient, name: &str, value: Option<String>) -> lockkit::Result<ExitCode> {
    let election = client.election(name);
    let mut observer = election.observe();
    let shutdown = shutdown();
    tokio::pin!(shutdown);
    let Some(value) = value else {
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(ExitCode::SUCCESS),
                leader = observer.changed() => println!("{}", follower(name, &leader?)),
            }
        }
    };
    let campaign = election.campaign(value.clone());
    tokio::pin!(campaign);
    let leadership = loop {
        tokio::select! {
            // Our own grant first: the observer must not report this candidate as someone else.
            biased;
            leadership = &mut campaign => break leadership?,
            // Dropping the campaign leaves its place in the queue (finished by the caller's flush).
            () = &mut shutdown => {
                println!("{}", json!({"event": "stopped", "name": name}));
                return Ok(ExitCode::SUCCESS);
            }
            // A candidate follows someone: a moment with nobody leading is its own campaign's turn
            // coming (or another's), not a change worth a line. Nor is a leader with this
            // candidate's own value: on etcd the watch shows this candidate's key leading a round
            // trip before its campaign returns (the value names the candidate; two candidates
            // sharing one cannot tell each other apart anyway).
            leader = observer.changed() => if let Some(leader) = leader?.filter(|l| l.value() != value.as_str()) {
                println!("{}", follower(name, &Some(leader)));
            },
        }
    };
    println!("{}", json!({"event": "leader", "name": name, "value": value, "term": leadership.term().get()}));
    tokio::select! {
        cause = leadership.lost() => {
            println!("{}", json!({"event": "lost", "name": name, "cause": format!("{cause:?}")}));
            // Not ours any more; this only cleans up what may be left (harmless if nothing is).
            let _ = leadership.resign().await;
            Ok(ExitCode::from(LOST))
        }
        () = &mut shutdown => {
            let held = leadership.resign().await?;
            println!("{}", json!({"event": "resigned", "name": name, "held": held}));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A `follower` line: who leads now (`null`: nobody).
fn follower(name: &str, leader: &Option<Leader>) -> Value {
    let leader = leader.as_ref().map(|l| json!({"value": l.value(), "term": l.term().get()}));
    json!({"event": "follower", "name": name, "leader": leader})
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM. The handlers are installed by this call, not at the
/// first poll: a signal that arrives before the future is polled (between printing `leader` and
/// waiting) resigns rather than kills the process.
fn shutdown() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT handler can be installed");
    let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler can be installed");
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
}
