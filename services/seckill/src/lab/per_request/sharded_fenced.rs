//! `sharded-fenced`: shard locks for contention, fences for correctness.
//!
//! Under the lock, with its fence `t`, in one transaction (one round trip, one WAL flush): **claim**
//! each shard (`fence < t`, setting `fence = t`), read it, check it has enough, then write only
//! **where `fence = t`** (`seckill_commit` with guard `claim`). A holder whose lease ran out while
//! it paused cannot claim once a newer holder has: it sells nothing. A refused claim also re-seeds
//! the Redis fence counter from the store, which is how the service recovers by itself after
//! Redis lost its data.

use std::time::Instant;

use super::{Attempt, AttemptFuture, Ctx, Strategy, committed, under_shard_locks};
use crate::{
    domain::OrderRequest,
    domain::Sale,
    lab::per_request::planner::Plan,
    store::{CommitGuard, CommitPart, ShardGuard},
};

pub(super) struct ShardedFenced;

impl Strategy for ShardedFenced {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Ctx,
        sale: &'a Sale,
        request: &'a OrderRequest,
        plan: &'a Plan,
        deadline: Instant,
    ) -> AttemptFuture<'a> {
        Box::pin(async move {
            let attempt = under_shard_locks(ctx, sale, plan, deadline, async |held| {
                let parts: Vec<CommitPart> = plan
                    .parts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| CommitPart { shard: p.shard, take: p.take, new_remaining: 0, guard: ShardGuard::Fence(held.fence(i)) })
                    .collect();
                let db = ctx.db.critical_section();
                committed(db.commit_order(&sale.sku, request, sale.spec.per_user_limit, &parts, CommitGuard::Claim).await)
            })
            .await;
            if matches!(attempt, Ok(Attempt::Refused)) {
                metrics::counter!("seckill_fence_rejections_total").increment(1);
                ctx.db.record_fence_rejection(&sale.sku).await?;
                for part in &plan.parts {
                    ctx.locks.reseed_from_store(&ctx.db, &sale.sku, part.shard).await?;
                }
            }
            attempt
        })
    }
}
