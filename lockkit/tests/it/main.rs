//! lockkit against a real Redis (`make services` starts one; `REDIS_URL` points elsewhere), and
//! against Redlock masters and a Redis Cluster that the tests start themselves (`servers`).
//! One test binary; each module is one behaviour a user relies on.

mod launched;
mod pgbouncer;
#[cfg(feature = "postgres")]
mod postgres_server;
mod sentinel_servers;
mod servers;
mod support;
#[cfg(any(feature = "zookeeper", feature = "etcd", feature = "postgres"))]
mod waiters;

mod cancel;
mod capabilities;
mod cluster;
mod election;
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_server;
mod eviction;
mod fencing;
mod interop;
mod lease;
mod mutual_exclusion;
mod operations;
mod postgres;
mod primitives;
mod redlock;
mod run;
mod sentinel;
mod waiting;
mod zookeeper;
mod zookeeper_proxy;
#[cfg(feature = "zookeeper")]
mod zookeeper_server;
