-- The batch functions' plans, made safe on a database whose tables are empty when they are planned,
-- and one index entry fewer per order.
--
-- seckill_commit_batch and seckill_gate_write run with plan_cache_mode = force_generic_plan (see
-- 0001_schema.sql): each connection plans their statements on its first batch and keeps the plans.
-- On a new database, or one whose sales were deleted and whose tables autovacuum then truncated,
-- that first batch sees `orders` with no pages, where a sequential scan costs nothing, and the
-- batch's duplicate-key probe kept a sequential scan for the life of the connection: every later
-- batch read every order of every sale once per key, so the cost per order grew with the sale.
-- Measured by `make bench --only-capacity` on a fresh database: PostgreSQL 208 µs of CPU per
-- order, 1.9 ms per batch in that probe alone (auto_explain: Seq Scan on orders, 5941 rows removed
-- per key probed).
--
-- 1. The idempotency index covers every order: unique on (sku, idempotency_key), without the
--    partial predicate (NULL keys are distinct, so orders without a key are unaffected, and
--    ON CONFLICT (sku, idempotency_key) WHERE idempotency_key IS NOT NULL infers it still). It now
--    answers `WHERE sku = $1` too (the audit, a reset's and a deleted sale's deletes, the gate's
--    highest reference), which orders_by_sku did; that index goes. An order writes one index entry fewer, and a
--    plan made on an empty table has no second index on sku to pick for the key probe.
-- 2. The two functions plan with enable_seqscan off: every statement in them reads a table by its
--    key (the sale, the batch's shards, keys, users, references), and the arrays they unnest are
--    not tables, so the setting only takes away the plan that is cheap on an empty table and
--    ruinous on a full one.

CREATE UNIQUE INDEX orders_by_sale_key ON orders (sku, idempotency_key);
DROP INDEX orders_idempotency;
DROP INDEX orders_by_sku;

ALTER FUNCTION seckill_commit_batch(text, bigint, integer, boolean, boolean, integer[], bigint[], integer[], timestamptz[],
    text[], integer[], text[], integer[], integer[], integer[]) SET enable_seqscan = off;
ALTER FUNCTION seckill_gate_write(text, bigint[], bigint[], text[], integer[], text[], integer[], integer[], integer[])
    SET enable_seqscan = off;
