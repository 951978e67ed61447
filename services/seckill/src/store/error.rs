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
    /// Another transaction held what this one needed: a deadlock, a serialization failure, or a
    /// lock wait past `lock_timeout`. PostgreSQL rolled the transaction back, so nothing of it
    /// was written; retrying may succeed.
    #[error("database contention: {0}")]
    Contended(String),
    /// Anything else: a bug or an unexpected state (the database's own message).
    #[error("database: {0}")]
    Unexpected(String),
    /// The database settings are wrong (a bad URL, a pool that cannot be built).
    #[error("database configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// Whether the database was away, saturated or contended (retry later), as opposed to a bug
    /// or a configuration error.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Saturated(_) | Self::Contended(_))
    }

    /// Whether the transaction lost to another one and was rolled back.
    pub fn is_contended(&self) -> bool {
        matches!(self, Self::Contended(_))
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
        // restart, cannot connect now, and the statement_timeout of lock holders). Contended:
        // 40P01 (deadlock), 40001 (serialization failure) and 55P03 (the lock_timeout of lock
        // holders). Anything else, with or without an SQLSTATE (a value that does not convert, a
        // protocol surprise), is unexpected.
        let io = std::error::Error::source(&e).is_some_and(|cause| cause.is::<std::io::Error>());
        let sqlstate = e.code().map(|code| code.code());
        if sqlstate.is_some_and(|code| matches!(code, "40P01" | "40001" | "55P03")) {
            return Self::Contended(e.as_db_error().map_or_else(|| e.to_string(), ToString::to_string));
        }
        let away = e.is_closed() || io || sqlstate.is_some_and(|code| matches!(&code[..2], "08" | "53" | "57"));
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
