//! `none`: read, then write, no lock. Concurrent buyers read the same stock and each write their
//! own result, so more orders are accepted than stock existed. The control of every comparison.

use std::time::Instant;

use super::{AttemptFuture, Ctx, Strategy, read_then_write};
use crate::{domain::OrderRequest, domain::Sale, lab::per_request::planner::Plan};

pub(super) struct NoLock;

impl Strategy for NoLock {
    fn attempt<'a>(&'a self, ctx: &'a Ctx, sale: &'a Sale, request: &'a OrderRequest, plan: &'a Plan, _: Instant) -> AttemptFuture<'a> {
        Box::pin(read_then_write(&ctx.db, sale, request, plan))
    }
}
