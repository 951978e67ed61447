//! `db-pessimistic`: `SELECT ... FOR UPDATE` of the plan's shards in a transaction, check, write,
//! commit. Exclusion by PostgreSQL row locks held for several round trips.

use std::time::Instant;

use super::{Attempt, AttemptFuture, Ctx, Strategy, committed, parts_after_reads};
use crate::{
    domain::OrderRequest,
    domain::{Sale, ShardId},
    lab::per_request::planner::Plan,
    store::{CommitGuard, StoreError, commit_order_on, lock_shards_for_update},
};

pub(super) struct DbPessimistic;

impl Strategy for DbPessimistic {
    fn attempt<'a>(&'a self, ctx: &'a Ctx, sale: &'a Sale, request: &'a OrderRequest, plan: &'a Plan, _: Instant) -> AttemptFuture<'a> {
        Box::pin(async move {
            let mut client = ctx.db.client().await?;
            let tx = client.transaction().await.map_err(StoreError::from)?;
            let shards: Vec<ShardId> = plan.parts.iter().map(|p| p.shard).collect();
            let reads = lock_shards_for_update(&tx, &sale.sku, &shards).await?;
            let parts = match parts_after_reads(plan, &reads) {
                Ok(parts) => parts,
                Err(short) => return Ok(short),
            };
            let attempt = committed(commit_order_on(&tx, &sale.sku, request, sale.spec.per_user_limit, &parts, CommitGuard::None).await)?;
            if matches!(attempt, Attempt::Bought(_)) {
                tx.commit().await.map_err(StoreError::from)?;
            }
            Ok(attempt)
        })
    }
}
