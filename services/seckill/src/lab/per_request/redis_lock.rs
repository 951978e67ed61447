//! `redis-lock`: shard locks around the read-then-write, without fencing. Correct while every
//! holder finishes within its lease; a holder that pauses past it (GC, `SIGSTOP`, a slow network)
//! writes stale results over its successor's. The chaos suite shows it oversell.

use std::time::Instant;

use super::{Attempt, AttemptFuture, Ctx, Strategy, read_then_write, under_shard_locks};
use crate::{domain::OrderRequest, domain::Sale, lab::per_request::planner::Plan};

pub(super) struct RedisLock;

impl Strategy for RedisLock {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Ctx,
        sale: &'a Sale,
        request: &'a OrderRequest,
        plan: &'a Plan,
        deadline: Instant,
    ) -> AttemptFuture<'a> {
        Box::pin(under_shard_locks(ctx, sale, plan, deadline, async |held| {
            // The best a lock without fencing can do: check the lease before writing. There is
            // still a window between this check and the write.
            if held.any_lost() { Ok(Attempt::Refused) } else { read_then_write(&ctx.db.critical_section(), sale, request, plan).await }
        }))
    }
}
