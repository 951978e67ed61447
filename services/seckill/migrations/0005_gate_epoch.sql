-- redis-gate: an epoch per sale, raised every time its Redis keys are seeded. The order
-- references handed out after a seed start at epoch << 32, above every reference handed out
-- before it, also those that were lost with Redis before they reached PostgreSQL: a reference
-- is never handed out twice, so it names one order.

ALTER TABLE sales ADD COLUMN gate_epoch bigint NOT NULL DEFAULT 0;
