//! The lock primitives beyond the plain lock: reentrant, fair, read-write, semaphore, multi-lock.
//! (Lock-delay is an option of the plain lock: [`Acquire::lock_delay`](crate::Acquire::lock_delay).)
//!
//! Each one here is only a constructor on [`LockClient`](crate::LockClient) that names what it
//! holds (`model::hold`); its scripts are in the Redis layer (`backend::redis`), and the acquire
//! loop, the [`LockGuard`](crate::LockGuard), the watchdog, fencing, metrics and errors are the
//! core's. Every key of a primitive shares the hash tag `{prefix:NAME}`, so each works on Redis
//! Cluster. None but the multi-lock and a leader's lock (which every backend keeps in its own
//! layout, see [`Election`](crate::Election)) runs on Redlock, ZooKeeper, etcd or PostgreSQL
//! ([`BackendKind::supports`](crate::BackendKind::supports)): there the acquire fails with
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) before any request.
//!
//! A name belongs to one primitive at a time: the same name used as a semaphore and as a lock are
//! two unrelated things, except that the plain lock, the reentrant lock's holder, the read-write
//! lock's writer and the fair lock's holder all occupy `{prefix:NAME}`, so they exclude each other.
//!
//! | file | what lives there |
//! |---|---|
//! | `reentrant` | [`LockClient::reentrant`](crate::LockClient::reentrant) |
//! | `fair` | [`LockClient::fair`](crate::LockClient::fair) |
//! | `read_write` | [`LockClient::read_write`](crate::LockClient::read_write), [`ReadWriteLock`](crate::ReadWriteLock), [`LockGuard::downgrade`](crate::LockGuard::downgrade) |
//! | `semaphore` | [`LockClient::semaphore`](crate::LockClient::semaphore) |
//! | `multi` | [`LockClient::multi`](crate::LockClient::multi), [`MultiGuard`](crate::MultiGuard) |

pub(crate) mod fair;
pub(crate) mod multi;
pub(crate) mod read_write;
pub(crate) mod reentrant;
pub(crate) mod semaphore;
