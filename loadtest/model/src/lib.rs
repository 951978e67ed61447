//! An exhaustive model check of seckill's owned-shards protocol, with [`stateright`].
//!
//! The chaos suite samples histories; a model checker visits every interleaving of every step
//! within a bound. This crate models the protocol **as the code implements it** (owners with
//! memory, the shard locks, the store, messages that are delayed, reordered and answered after
//! their sender moved on), checks the properties the service promises, and, as controls, finds
//! the counterexamples of the variants that each lack one protection.
//!
//! # Layout
//!
//! | module | concept |
//! |---|---|
//! | [`config`] | the [`Variant`] checked and the [`Bounds`] of the state space |
//! | [`state`] | store, lock service, hints, instances with their memory, buyers, the wire |
//! | [`action`] | the steps |
//! | [`model`] | which steps a state allows and what each does |
//! | [`properties`] | what must always hold, and what must be reachable |
//! | [`symmetry`] | instances are interchangeable: one state per renaming |
//! | [`report`] | running a check; counterexamples as readable traces |
//!
//! # Variants
//!
//! - [`Variant::Fixed`]: every batch result carries the fence it was sent under and lands only
//!   on the ownership with that fence; the loss watcher, the deposed and failed batch paths and
//!   `give_back` act only on the ownership with their fence. This is the code since the fix of
//!   issue 21, item 1 (memory keyed by `ShardClaim`). Passes within the bound.
//! - [`Variant::ShardKeyed`]: the bookkeeping before that fix (issue 21, item 1). The checker finds the
//!   interleaving in which `adopt()` of a re-claim runs before `committed()` of the old batch,
//!   which subtracts the batch's units a second time: memory falls below the store, and the
//!   shard is handed back as empty (hint 0) with stock left in the store: stranded.
//! - [`Variant::Unfenced`]: `owned-unfenced`, the batch write without `WHERE fence = t`. The
//!   checker finds a delayed batch of a deposed owner landing after the new owner's: oversold.
//! - [`Variant::RequeueUnchecked`]: `Fixed`, except that a deposed batch puts its orders on the
//!   shards that were not deposed back into the pending orders without asking whether the
//!   ownership they were reserved on is still there, as `batcher::commit`'s `Deposed` arm did
//!   before the fix. With batches over two shards the checker finds such an order in a newer
//!   ownership of its shard that never reserved it: memory offers a unit the store does not
//!   have, and the next batch writes the shard's stock below zero. The code keys that path by
//!   claim too: a requeued order keeps the claims it was reserved on, and `take_batch` sends it
//!   back to be decided again when one of them is no longer owned.
//!
//! # Properties
//!
//! Always: never oversold; sold + remaining = total; no acknowledged order that is not
//! committed (in the current generation: a reset wipes orders on purpose); no order committed
//! twice (orders carry no idempotency key, so only the protocol prevents it); an owner's memory
//! of a shard whose fence is the store's equals the store's row but for the units of its
//! pending orders and of a committed batch whose answer is on the wire, and its reserved count
//! equals the units of the orders it holds; no stock stranded at quiescence (when only faults can
//! happen, no buyer is left waiting). Sometimes, so that a passing check is known to have
//! reached where the properties are at stake: item 1's interleaving, a fence refusal, a sale sold
//! out. See [`properties`].
//!
//! # Bounds and reductions
//!
//! [`Bounds`] keeps the state space finite: fences stop at a maximum (states past it are not
//! explored), and data losses and resets are counted. `make test` checks three bounds (a reset,
//! a loss of the lock data, batches over two shards), each in under half a minute on a busy
//! two-core machine. Two reductions keep
//! them small, each sound because the things reduced are interchangeable:
//! - only the first waiting buyer acts (a waiting buyer has no order anywhere: not in memory,
//!   not on the wire, not committed);
//! - an exhaustive check visits each state once up to a renaming of the instances.
//!
//! Run a larger bound by hand with `cargo run -p owned-model --example check -- fixed 3 3 4 1 1`.
//!
//! # Which code each step stands for
//!
//! Paths are under `services/seckill/`. A change to one of these functions is a change to the
//! step beside it.
//!
//! | step ([`Action`]) | code |
//! |---|---|
//! | `Decide` | `src/owned/owner.rs` `SaleOwner::decide` and `reserve` (one unit, the usable shard with the least stock) |
//! | `SoldOut` | `src/owned/sell.rs`, the `OwnedAttempt::NoStock` arm: `is_sold_out` reads the store |
//! | `TakeShard` | `src/owned/placement.rs` `Placement::take_shard` up to the claim: `Hints::read` (rebuilt from the store when missing or of another generation, `src/selling/hints.rs`), candidates with a hint above 0 not owned here, `ShardLocks::try_lock_shard` (`src/selling/shard_locks.rs`; lockkit grants with the next fence); one acquisition per owner (`acquiring`) |
//! | `StoreClaim` | `migrations/0001_schema.sql` `seckill_claim`: `fence < t` and the sale's generation, sets `fence = t`, returns `remaining` |
//! | `ClaimAnswered` | `take_shard` after `Db::claim_shard` (`src/store/owners.rs`): `SaleOwner::adopt` when stock > 0; empty: `Surrendered { empty: true }`; refused: `ShardLocks::reseed_from_store` then release |
//! | `ClaimTimeout` | `owners.rs` `bounded` (`OwnerWriteError::Unanswered`) and `take_shard`'s `Err` arm: the guard is surrendered; the claim may still land |
//! | `SendBatch` | `src/owned/batcher.rs` `spawn`'s loop, `take_batch` (orders on shards no longer owned go back) and `commit` up to `Db::commit_batch` (`SaleOwner::batch_shards`: fence and committed stock per shard) |
//! | `StoreBatch` | `seckill_commit_orders` (`migrations/0025_replays_lock_no_buyer.sql`) (a refusal is counted in `fence_refusals`): `stale_sale` unless the generation matches; with `p_fenced`, `deposed` unless every shard carries the batch's fence (`FOR UPDATE`); else every order written and `remaining = committed - taken` under `fence = t` |
//! | `BatchAnswered` | `batcher::commit`'s match: `committed` (then `finished_shards`), the `Deposed` arm (`forget`, `give_back`, orders on other shards back to pending), the `StaleSale` arm (`SaleOwner::close`) |
//! | `BatchTimeout` | `commit`'s last `Err` arm: unknown fate, `forget(touched)`, every order answered `Failed` |
//! | `Expire` | a lease that lockkit's watchdog did not renew (`lockkit/src/watchdog.rs`), or a process paused past it |
//! | `NoticeLoss` | the loss watcher spawned by `SaleOwner::adopt` (`guard.lost()` then `forget`) |
//! | `Surrender` | `Placement::rebalance` with `SaleOwner::retire` and `surrender` (idle, retiring) and `release_surrendered` (hint 0 when empty, then the owner-checked `LockGuard::release`) |
//! | `DataLoss` | Redis restarting without its data: leases, the fence counter and the hints are gone |
//! | `Reset` | `src/store/sales.rs` `Db::put_sale`: new generation, stock restored, orders wiped, fences kept |
//! | `Refresh` | `src/owned/mod.rs` `OwnedShards::owner_for`: a request of the new generation closes the previous owner (`SaleOwner::close`) |
//!
//! Lease renewal is not a step: a lease that has not expired has been renewed. A guard whose
//! owner dropped it is not renewed, so its expiry counts as progress, not as a fault.
//!
//! # Where the model and the code could drift apart
//!
//! - **Atomic steps.** Each step above is atomic here. In the code, `committed()` and `adopt()`
//!   each take the owner's mutex once, so that holds; `take_shard`'s hint read, lock and claim
//!   are separate awaits, which the model collapses (another instance's steps can still fall
//!   between the lock and the claim's answer, which is what matters to item 1).
//! - **The store is one serial actor.** `seckill_claim` and `seckill_commit_orders` run as if one
//!   after the other, which the row locks (`FOR UPDATE` on `shards`) give for one shard's row.
//! - **Orders are one unit without an idempotency key and without a per-user limit.** Multi-shard
//!   orders (`reserve` gathering over several shards), `UserLimit` and `Duplicate` outcomes
//!   (which `committed()` gives back to memory, keyed by claim like the rest), and idempotent replays
//!   are not modelled.
//! - **Buyers retry at once.** A buyer sent back (`Decided::Retry`) may be decided again at any
//!   later step; request deadlines (`Busy`) and back-offs are not modelled, so a buyer never
//!   gives up while there is stock.
//! - **The batcher's next batch can wait.** `SendBatch` is a step of its own, so the checker may
//!   put any number of steps between an answer and the next batch. In the code `take_batch`
//!   follows `commit` at once but for the linger, which is the window in which the
//!   `RequeueUnchecked` counterexample (a claim completing between the two) can happen.
//! - **Left out of the batcher:** the linger, the lease margin (`outlasts`: batches held while
//!   the lease is short; the fence does not depend on it), `requeue` of batches that wrote
//!   nothing, and `take_batch`'s own `is_lost` check (the same as `NoticeLoss` before the batch).
//! - **Left out of placement:** `held_elsewhere`, `nothing_free`, database trouble (no shard
//!   taken for a lease after a failed write), heartbeats and fair shares (`Surrender` may hand
//!   back any shard with nothing reserved at any time, which covers them).
//! - **Hints and releases are synchronous.** `release_surrendered` writes hints and releases
//!   locks in a background task; here both happen in the step that surrenders, so a hint write
//!   landing late (issue 21, item 4) is only covered where the step order produces it.
//! - **The loss watcher** forgets its own ownership in every variant. Before the fix the code
//!   forgot by shard number, so a watcher already past its `select!` when its ownership was
//!   dropped could forget a newer ownership of the same shard; it forgets its `ShardClaim` now,
//!   as modelled, and that race is not a step of its own.
//! - **Reseeding** reads the store's fence and raises the counter in one step; in the code they
//!   are two round trips (a grant between them is refused by the store, which is safe).
//! - **One fence counter** for all shards: fences only need to grow per shard.
//! - **Time** is only order: lease lengths, bounds and timeouts are free choices of the checker.

pub mod action;
pub mod config;
pub mod model;
pub mod properties;
pub mod report;
pub mod state;
pub mod symmetry;

pub use action::Action;
pub use config::{Bounds, Variant};
pub use model::OwnedShardsModel;
pub use report::{CheckReport, Search, check};
