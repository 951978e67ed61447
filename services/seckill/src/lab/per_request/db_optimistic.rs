//! `db-optimistic`: read stock and version, write only where the version is unchanged; on a
//! conflict re-read and retry, at most `RETRIES` times, then report the shard as contended so the
//! purchase loop tries another.

use std::time::Instant;

use super::{Attempt, AttemptFuture, Ctx, Strategy, committed, parts_after_reads};
use crate::{domain::OrderRequest, domain::Sale, lab::per_request::planner::Plan, store::CommitGuard};

const RETRIES: usize = 5;

pub(super) struct DbOptimistic;

impl Strategy for DbOptimistic {
    fn attempt<'a>(&'a self, ctx: &'a Ctx, sale: &'a Sale, request: &'a OrderRequest, plan: &'a Plan, _: Instant) -> AttemptFuture<'a> {
        Box::pin(async move {
            for _ in 0..RETRIES {
                let mut reads = Vec::with_capacity(plan.parts.len());
                for part in &plan.parts {
                    reads.push(ctx.db.read_shard_versioned(&sale.sku, part.shard).await?);
                }
                let parts = match parts_after_reads(plan, &reads) {
                    Ok(parts) => parts,
                    Err(short) => return Ok(short),
                };
                match committed(ctx.db.commit_order(&sale.sku, request, sale.spec.per_user_limit, &parts, CommitGuard::Version).await)? {
                    Attempt::Refused => continue,
                    attempt => return Ok(attempt),
                }
            }
            Ok(Attempt::Contended(plan.parts[0].shard))
        })
    }
}
