//! [`StoreError`]: what can go wrong talking to PostgreSQL, classified once, here. The HTTP edge
//! turns it into a status (`ApiError`), the store never does.

/// A PostgreSQL operation that did not complete.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database is away: no connection, a closed or broken one, shutting down, out of
    /// resources, or a lock holder's statement or lock timeout. Retrying later may succeed.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Every connection of the pool stayed in use for its whole wait: the statement was never
    /// sent. The database is up but saturated; retrying later may succeed.
    #[error("database saturated: {0}")]
    Saturated(String),
    /// Anything else: a bug or an unexpected state (the database's own message).
    #[error("database: {0}")]
    Unexpected(String),
    /// The database settings are wrong (a bad URL, a pool that cannot be built).
    #[error("database configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// Whether the database was away or saturated (retry later), as opposed to a bug or a
    /// configuration error.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Saturated(_))
    }

    /// Whether nothing was sent because no connection came free in time.
    pub fn is_saturated(&self) -> bool {
        matches!(self, Self::Saturated(_))
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        // Away: a closed connection, an I/O error on it, SQLSTATE classes 08 (connection
        // exception), 53 (insufficient resources) and 57 (operator intervention: shutdown,
        // restart, cannot connect now, and the statement_timeout of lock holders), and 55P03 (the
        // lock_timeout of lock holders). Anything else, with or without an SQLSTATE (a value that
        // does not convert, a protocol surprise), is unexpected.
        let io = std::error::Error::source(&e).is_some_and(|cause| cause.is::<std::io::Error>());
        let away =
            e.is_closed() || io || e.code().is_some_and(|code| matches!(&code.code()[..2], "08" | "53" | "57") || code.code() == "55P03");
        if away {
            Self::Unavailable(e.to_string())
        } else {
            Self::Unexpected(e.as_db_error().map_or_else(|| e.to_string(), ToString::to_string))
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => {
                Self::Saturated(format!("no connection came free: {e}"))
            }
            e => Self::Unavailable(format!("no database connection: {e}")),
        }
    }
}
