//! The one error type of lockkit, with predicates instead of many public variants.

use std::{error::Error as StdError, fmt, time::Duration};

use crate::LeaseLoss;

/// What went wrong, coarsely. Match on it, or better, use the predicates on [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The lock was still held by someone else when the wait ran out.
    Timeout,
    /// The lease ended (expired, deleted or taken over) before the operation ran.
    LeaseLost,
    /// Redis could not be reached or did not answer in time. Retrying may help.
    Unavailable,
    /// Redlock: fewer than a majority of its nodes answered, so nothing was decided (and no node
    /// keeps a key for the attempt). Retrying may help once nodes return.
    NoQuorum,
    /// Redis answered with an error that retrying will not fix (wrong type, script error, ACL).
    Redis,
    /// A lock name that cannot be used (empty, too long, or containing `{`/`}`).
    InvalidName,
    /// A bad configuration value (URL, pool size, durations), or a server set up in a way that
    /// lockkit cannot be safe on (an eviction policy that may drop its keys).
    Config,
    /// The backend cannot do this at all (a primitive or lock-delay that only Redis keeps, a
    /// fence that a revision or zxid cannot be raised to, a pattern on advisory locks). Retrying
    /// never helps; another backend may.
    Unsupported,
}

/// An error from lockkit.
///
/// ```
/// # async fn demo(client: lockkit::LockClient) {
/// use std::time::Duration;
/// match client.lock("orders", Duration::from_millis(200)).await {
///     Ok(guard) => { let _ = guard.release().await; }
///     Err(e) if e.is_timeout() => println!("busy, try later"),
///     Err(e) if e.is_retryable() => println!("the lock servers did not answer, try later: {e}"),
///     Err(e) if e.is_unsupported() => panic!("this backend does not keep this lock: {e}"),
///     Err(e) => panic!("{e}"),
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// Why the lease ended, when this error reports a loss that the lease itself observed (the
    /// work under [`LockGuard::run`](crate::LockGuard::run) was stopped by it).
    loss: Option<LeaseLoss>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

/// `Result` with lockkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), loss: None, source: None }
    }

    pub(crate) fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn timeout(name: &str, waited: Duration) -> Self {
        Self::new(ErrorKind::Timeout, format!("lock {name:?} still held after waiting {waited:?}"))
    }

    pub(crate) fn lease_lost(name: &str) -> Self {
        Self::new(ErrorKind::LeaseLost, format!("lease of lock {name:?} was lost"))
    }

    /// The lease of `name` was lost (for `cause`) while work ran under it, and the work was
    /// dropped.
    pub(crate) fn work_stopped(name: &str, cause: LeaseLoss) -> Self {
        let mut error = Self::new(
            ErrorKind::LeaseLost,
            format!("lease of lock {name:?} was lost ({}) and the work under it was stopped", cause.label()),
        );
        error.loss = Some(cause);
        error
    }

    /// `server` (the backend, or one of its nodes) gave no answer to `what` within `after`.
    pub(crate) fn unanswered(server: impl fmt::Display, what: &str, after: Duration) -> Self {
        Self::new(ErrorKind::Unavailable, format!("{server} did not answer {what} within {after:?}"))
    }

    /// What a backend refuses to do, whoever asks and however often.
    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    pub(crate) fn no_quorum(what: &str, answered: usize, quorum: usize, nodes: usize, silent: &[&str]) -> Self {
        Self::new(
            ErrorKind::NoQuorum,
            format!(
                "{answered} of {nodes} redlock nodes answered {what}, {quorum} needed (silent: {})",
                silent.join(", ")
            ),
        )
    }

    /// The coarse category of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The lock stayed held by someone else for the whole wait.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// The lease had already ended: the caller no longer owns the lock.
    pub fn is_lost(&self) -> bool {
        self.kind == ErrorKind::LeaseLost
    }

    /// Why the lease was lost, when the error came from the lease's own loss signal (the work
    /// under [`LockGuard::run`](crate::LockGuard::run) or
    /// [`LockClient::with_lock`](crate::LockClient::with_lock) was stopped by it). `None` for
    /// every other error, including a loss found by an operation such as an extension.
    pub fn lease_loss(&self) -> Option<LeaseLoss> {
        self.loss
    }

    /// Redis was unreachable or slow (on Redlock: too few nodes answered); the same call may
    /// succeed later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::NoQuorum)
    }

    /// Redlock could not reach a majority of its nodes.
    pub fn is_no_quorum(&self) -> bool {
        self.kind == ErrorKind::NoQuorum
    }

    /// This backend cannot do what was asked (see [`ErrorKind::Unsupported`]): not retryable.
    pub fn is_unsupported(&self) -> bool {
        self.kind == ErrorKind::Unsupported
    }

    /// Trying again (after a pause) may succeed: timeouts and unavailability.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Timeout | ErrorKind::Unavailable | ErrorKind::NoQuorum)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        let kind = if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::TryAgain
                        | redis::ServerErrorKind::BusyLoading
                        | redis::ServerErrorKind::MasterDown
                        | redis::ServerErrorKind::ClusterDown
                )
            ) {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Redis
        };
        Error::new(kind, "redis error").with_source(e)
    }
}

impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Self {
        Error::new(ErrorKind::Redis, "unexpected redis reply").with_source(e)
    }
}

impl From<deadpool_redis::PoolError> for Error {
    fn from(e: deadpool_redis::PoolError) -> Self {
        Error::new(ErrorKind::Unavailable, "no redis connection available").with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_follow_the_kind() {
        let t = Error::timeout("a", Duration::from_millis(5));
        assert!(t.is_timeout() && t.is_retryable() && !t.is_lost());
        let l = Error::lease_lost("a");
        assert!(l.is_lost() && !l.is_retryable() && l.lease_loss().is_none());
        let stopped = Error::work_stopped("a", crate::LeaseLoss::Expired);
        assert!(stopped.is_lost() && !stopped.is_retryable());
        assert_eq!(stopped.lease_loss(), Some(crate::LeaseLoss::Expired));
        let u = Error::unanswered(crate::BackendKind::Redis, "acquire", Duration::from_secs(1));
        assert!(u.is_unavailable() && u.is_retryable());
        assert!(t.to_string().contains("\"a\""));
        let refused = Error::unsupported("no lock-delay here");
        assert!(refused.is_unsupported() && !refused.is_retryable() && !refused.is_unavailable());
    }

    #[test]
    fn an_unanswered_error_names_the_backend_that_did_not_answer() {
        let etcd = Error::unanswered(crate::BackendKind::Etcd, "a lease renewal", Duration::from_secs(2));
        assert!(etcd.to_string().starts_with("etcd did not answer a lease renewal"), "{etcd}");
        assert!(!etcd.to_string().contains("redis"), "{etcd}");
    }
}
