//! `db-atomic`: no lock, no read; one conditional `UPDATE ... SET remaining = remaining - q
//! WHERE remaining >= q` per shard inside the commit. PostgreSQL's row lock does the exclusion.

use std::time::Instant;

use super::{Attempt, AttemptFuture, Ctx, Strategy, committed};
use crate::{
    domain::OrderRequest,
    domain::Sale,
    lab::per_request::planner::Plan,
    store::{CommitGuard, CommitPart, ShardGuard},
};

pub(super) struct DbAtomic;

impl Strategy for DbAtomic {
    fn attempt<'a>(&'a self, ctx: &'a Ctx, sale: &'a Sale, request: &'a OrderRequest, plan: &'a Plan, _: Instant) -> AttemptFuture<'a> {
        Box::pin(async move {
            let parts: Vec<CommitPart> = plan
                .parts
                .iter()
                .map(|p| CommitPart { shard: p.shard, take: p.take, new_remaining: 0, guard: ShardGuard::Unguarded })
                .collect();
            match committed(ctx.db.commit_order(&sale.sku, request, sale.spec.per_user_limit, &parts, CommitGuard::Atomic).await)? {
                // Refused means some shard had too little: find which, so the hints get corrected.
                Attempt::Refused => {
                    for part in &plan.parts {
                        let read = ctx.db.read_shard(&sale.sku, part.shard).await?;
                        if read.remaining < i64::from(part.take) {
                            return Ok(Attempt::Short { shard: part.shard, remaining: read.remaining });
                        }
                    }
                    Ok(Attempt::Refused)
                }
                attempt => Ok(attempt),
            }
        })
    }
}
