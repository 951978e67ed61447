-- seckill_commit_batch goes. seckill_commit_orders (0024, then 0025) replaced it on the commit path,
-- and 0024 kept it only for instances built before 0024, which call it during a rolling upgrade.
-- No build since calls it. A rolling upgrade to this migration must therefore start from a build
-- of 0024 or 0025; from an older one, stop its instances first. Kept, the function would be a
-- second copy of the batch logic for a reader to tell apart, and one that every later change to
-- the tables would have to keep working.

DROP FUNCTION IF EXISTS seckill_commit_batch(
    text, bigint, integer, boolean, boolean, integer[], bigint[], integer[], timestamptz[],
    text[], integer[], text[], integer[], integer[], integer[]
);
