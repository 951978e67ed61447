//! # etcd v3 (`etcd://`, feature `etcd`)
//!
//! `etcd://[user:password@]host:port,...`: the cluster's client endpoints, for example
//! `etcd://127.0.0.1:2389`. Building the feature needs `protoc` (etcd-client compiles etcd's
//! `.proto` files).
//!
//! ## Layout and interop
//!
//! etcd's own `concurrency.Mutex` layout: a key `NAME/<lease id>` per contender under a lease kept
//! alive by the watchdog, the oldest key holds, each waiter watches only its predecessor, so
//! `etcdctl lock NAME` and Go's mutex exclude us and we them. The name is the etcd key prefix
//! itself (no client prefix).
//!
//! ## What it guarantees
//!
//! Exclusion by Raft consensus (a majority of members). The fence is the key's create revision,
//! strictly increasing across holders, tools and restarts;
//! [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) cannot raise a
//! revision. A lease ends when etcd says the lease is gone (expired or revoked), or no keep-alive
//! is answered before the lease's local deadline; [`LockGuard::lost`](crate::LockGuard::lost)
//! fires then.
//!
//! Only the plain lock and the multi-lock (no primitives, no lock-delay). Pick it when etcd is
//! already your coordination store (Kubernetes-style deployments) or you need Go/etcdctl interop.
//! One pair costs 4 Raft writes synced to disk.
