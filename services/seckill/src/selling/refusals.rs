//! Answering an order the sale cannot complete. A request that carries an idempotency key may
//! have made its order before (a retry after a lost answer): that order is the answer, not the
//! refusal. So every refusal looks for it first, and a replay costs no lookup up front.

use super::{Catalog, InventoryError, Purchase};
use crate::{
    domain::{OrderRequest, Refusal, Sale},
    store::StoreError,
};

/// Why a family could not complete an order at all.
#[derive(Debug)]
pub enum BuyError {
    /// The per-user limit would be exceeded.
    UserLimit,
    /// A concurrent request with the same idempotency key won.
    DuplicateKey,
    /// Infrastructure or a bug.
    Api(InventoryError),
}

impl From<StoreError> for BuyError {
    fn from(e: StoreError) -> Self {
        Self::Api(e.into())
    }
}

impl From<InventoryError> for BuyError {
    fn from(e: InventoryError) -> Self {
        Self::Api(e)
    }
}

impl Catalog {
    /// The order already made under the request's idempotency key, if any
    /// (`idempotency_key_reused` if it was for something else).
    async fn earlier_order(&self, sale: &Sale, request: &OrderRequest) -> Result<Option<Purchase>, InventoryError> {
        let Some(key) = &request.idempotency_key else { return Ok(None) };
        match self.db().order_by_key(&sale.sku, key).await? {
            None => Ok(None),
            Some(prior) => Purchase::replay(request, prior).map(Some),
        }
    }

    /// Answers a request the sale cannot complete: the earlier order it replays, if any, else the
    /// refusal (a user limit; a duplicate key without an order is a bug; errors pass through).
    pub async fn refuse(&self, sale: &Sale, request: &OrderRequest, why: BuyError) -> Result<Purchase, InventoryError> {
        let refusal = match why {
            BuyError::UserLimit => Refusal::UserLimitReached.into(),
            BuyError::DuplicateKey => InventoryError::Bug("duplicate idempotency key without an order".into()),
            BuyError::Api(e) => return Err(e),
        };
        match self.earlier_order(sale, request).await? {
            Some(purchase) => Ok(purchase),
            None => Err(refusal),
        }
    }

    /// Answers `sold_out`, unless the request replays an earlier order.
    pub async fn refuse_sold_out(&self, sale: &Sale, request: &OrderRequest) -> Result<Purchase, InventoryError> {
        match self.earlier_order(sale, request).await? {
            Some(purchase) => Ok(purchase),
            None => Err(self.sold_out(sale, request.quantity.get()).await),
        }
    }
}
