-- The owner that claimed each shard last, for the live view and the sale page: the instance name
-- the claim came from, next to the fence it claimed with. Informational only: the fence alone
-- decides which writes land.

ALTER TABLE shards ADD COLUMN owner text;

DROP FUNCTION seckill_claim(text, bigint, integer, bigint);

-- As in 0002, and records the claiming instance as the shard's owner.
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
    IF NOT FOUND THEN
        UPDATE sales sa SET fence_rejections = sa.fence_rejections + 1
         WHERE sa.sku = p_sku AND sa.generation = p_generation
           AND EXISTS (SELECT 1 FROM shards s WHERE s.sku = p_sku AND s.shard = p_shard AND s.fence >= p_fence);
    END IF;
END
$$;
