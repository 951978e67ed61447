-- Real-time evidence of ownership, for operators and for the chaos suite's checker:
--   shard_claims       one row per successful owner claim (seckill_claim): which fence took the
--                      shard over, for whom, and when, on the server's clock after the row lock;
--   orders.written_at  when the order row was written (clock_timestamp(), not the transaction's
--                      start like created_at).
-- With them a checker can see a write that landed after a newer owner had claimed its shard: the
-- fence makes that impossible for owned-shards, and the owned-unfenced control does it under a
-- delayed batch. Claims are rare (one per change of owner); a sale's reset deletes its claims.

CREATE TABLE shard_claims (
    sku         text NOT NULL REFERENCES sales (sku) ON DELETE CASCADE,
    shard       integer NOT NULL,
    fence       bigint NOT NULL,
    owner       text,
    claimed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX shard_claims_by_shard ON shard_claims (sku, shard, claimed_at);

-- No rewrite of existing rows: they keep NULL, new rows get the time they were written.
ALTER TABLE orders ADD COLUMN written_at timestamptz;
ALTER TABLE orders ALTER COLUMN written_at SET DEFAULT clock_timestamp();

DROP FUNCTION seckill_claim(text, bigint, integer, bigint, text);

-- As in 0003, and logs the successful claim (after the UPDATE took the row lock, so after every
-- batch of the previous owner that held it had committed).
CREATE FUNCTION seckill_claim(p_sku text, p_generation bigint, p_shard integer, p_fence bigint, p_owner text)
RETURNS TABLE (remaining integer)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
        UPDATE shards s SET fence = p_fence, owner = p_owner
          FROM sales sa
         WHERE s.sku = p_sku AND s.shard = p_shard AND s.fence < p_fence
           AND sa.sku = s.sku AND sa.generation = p_generation
        RETURNING s.remaining;
    IF FOUND THEN
        INSERT INTO shard_claims (sku, shard, fence, owner) VALUES (p_sku, p_shard, p_fence, p_owner);
    ELSE
        UPDATE sales sa SET fence_rejections = sa.fence_rejections + 1
         WHERE sa.sku = p_sku AND sa.generation = p_generation
           AND EXISTS (SELECT 1 FROM shards s WHERE s.sku = p_sku AND s.shard = p_shard AND s.fence >= p_fence);
    END IF;
END
$$;
