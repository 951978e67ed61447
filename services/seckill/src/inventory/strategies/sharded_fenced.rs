//! `sharded-fenced` (the default): shard locks for contention, fences for correctness.
//!
//! Under the lock, with its fence `t`: **claim** the shard (`fence <= t`, setting `fence = t`) and
//! read it in the same statement, check, then write only **where `fence = t`**. A holder whose
//! lease ran out while it paused either cannot claim (a newer fence was seen) or cannot write (a
//! newer holder claimed in between): it sells nothing. A refused claim also re-seeds the Redis
//! fence counter from the store, which is how the service recovers by itself after Redis lost its
//! data.

use std::time::Instant;

use super::{Attempt, AttemptFuture, BuyError, Ctx, Strategy, committed, parts_after_reads};
use crate::{
    domain::OrderRequest,
    inventory::planner::Plan,
    store::{CommitGuard, Sale},
};

pub(super) struct ShardedFenced;

impl Strategy for ShardedFenced {
    fn attempt<'a>(&'a self, ctx: &'a Ctx, sale: &'a Sale, request: &'a OrderRequest, plan: &'a Plan, deadline: Instant) -> AttemptFuture<'a> {
        Box::pin(async move {
            let held = match ctx.locks.lock(&sale.sku, plan, deadline).await? {
                Ok(held) => held,
                Err(shard) => return Ok(Attempt::Contended(shard)),
            };
            let attempt = claim_and_commit(ctx, sale, request, plan, &held).await;
            held.release().await;
            if matches!(attempt, Ok(Attempt::Refused)) {
                metrics::counter!("seckill_fence_rejections_total").increment(1);
                ctx.db.record_fence_rejection(&sale.sku).await?;
            }
            attempt
        })
    }
}

async fn claim_and_commit(
    ctx: &Ctx,
    sale: &Sale,
    request: &OrderRequest,
    plan: &Plan,
    held: &crate::inventory::shard_locks::HeldShards,
) -> Result<Attempt, BuyError> {
    let db = ctx.db.critical_section();
    let mut reads = Vec::with_capacity(plan.parts.len());
    for (i, part) in plan.parts.iter().enumerate() {
        match db.claim_shard(&sale.sku, part.shard, held.fence(i)).await? {
            Some(read) => reads.push(read),
            None => {
                ctx.locks.reseed_from_store(&db, &sale.sku, part.shard).await?;
                return Ok(Attempt::Refused);
            }
        }
    }
    let parts = match parts_after_reads(plan, &reads) {
        Ok(parts) => parts,
        Err(short) => return Ok(short),
    };
    committed(db.commit_order(&sale.sku, request, sale.spec.per_user_limit, &parts, CommitGuard::Fence).await)
}
