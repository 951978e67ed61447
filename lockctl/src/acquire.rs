//! `lockctl acquire`: take a lock, hold it, release it, printing each event as a JSON line.

use std::{process::ExitCode, time::Duration};

use lockkit::LockClient;
use serde_json::json;

/// Exit code when the lock could not be acquired within the wait, or (Redlock) too few nodes
/// answered to decide.
const NOT_ACQUIRED: u8 = 3;

/// Acquires `name` (waiting up to `wait_ms`), holds it for `hold_ms` or until the lease is lost,
/// then releases it.
pub(crate) async fn acquire(
    client: &LockClient,
    name: &str,
    fixed_lease: Option<Duration>,
    wait_ms: u64,
    hold_ms: u64,
) -> lockkit::Result<ExitCode> {
    let mut request = client.acquire(name).wait(Duration::from_millis(wait_ms));
    if let Some(lease) = fixed_lease {
        request = request.lease(lease);
    }
    let guard = match request.await {
        Ok(guard) => guard,
        Err(e) if e.is_timeout() => {
            println!("{}", json!({"event": "not_acquired", "name": name, "reason": "held", "waited_ms": wait_ms}));
            return Ok(ExitCode::from(NOT_ACQUIRED));
        }
        Err(e) if e.is_no_quorum() => return Ok(no_quorum(name, &e)),
        Err(e) => return Err(e),
    };
    println!(
        "{}",
        json!({"event": "acquired", "name": name, "fence": guard.fence().get(), "waited_ms": guard.waited().as_millis() as u64})
    );
    let lost = tokio::select! {
        cause = guard.lost() => {
            println!("{}", json!({"event": "lost", "name": name, "cause": format!("{cause:?}")}));
            true
        }
        () = tokio::time::sleep(Duration::from_millis(hold_ms)) => false,
    };
    match guard.release().await {
        Ok(held) => println!("{}", json!({"event": "released", "name": name, "held": held})),
        // Lost already: the servers may still be out of reach; the lock is not ours either way.
        Err(e) if lost => {
            println!("{}", json!({"event": "released", "name": name, "held": false, "error": e.to_string()}))
        }
        Err(e) => return Err(e),
    }
    Ok(ExitCode::SUCCESS)
}

/// An acquire that could not start or decide because too few Redlock nodes answered.
pub(crate) fn no_quorum(name: &str, e: &lockkit::Error) -> ExitCode {
    println!("{}", json!({"event": "not_acquired", "name": name, "reason": "no_quorum", "error": e.to_string()}));
    ExitCode::from(NOT_ACQUIRED)
}
