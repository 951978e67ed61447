-- Owned shards: an instance that holds a shard's lock owns the shard's stock in memory and
-- commits its decided orders in batches. Two functions:
--   seckill_claim        the new owner takes the row over with its fence and reads the stock;
--   seckill_commit_batch one transaction for everything an owner decided since its last batch.
-- Expected outcomes (user limit, duplicate key, a deposed owner, a reset sale) come back as
-- values: nothing here raises for them, so refused orders write nothing to the server's log.

-- Claims a shard for the owner of fence p_fence: only if every earlier claim had a smaller
-- fence (strict: an equal fence is a repeat handed out after Redis lost its counters), and only
-- for the current generation of the sale. Returns the shard's stock, or no row when refused; a
-- claim refused by a newer fence is counted in sales.fence_rejections here, so one that arrives
-- late, with nobody left waiting for its answer, is counted too.
CREATE FUNCTION seckill_claim(p_sku text, p_generation bigint, p_shard integer, p_fence bigint)
RETURNS TABLE (remaining integer)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
        UPDATE shards s SET fence = p_fence
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

-- Commits a batch of orders decided by the owner of the shards p_shards (fences p_fences).
--   p_committed[i]  the stock of p_shards[i] as the owner last wrote it; the new stock is this
--                   minus the units of the accepted orders, written as an absolute value.
--   p_fenced        true for owned-shards. false only for the owned-unfenced control: the
--                   stock write then lacks its `fence = t` predicate, and nothing else changes.
--   orders          p_users, p_quantities, p_keys (NULL: no idempotency key), one per order;
--   parts           p_part_order (1-based order index), p_part_shard, p_part_take.
-- Returns one row per order (ord, 'ok' with its id and time | 'user_limit' | 'duplicate'), or,
-- when nothing was written, one row per deposed shard (ord NULL, 'deposed', shard) or a single
-- 'stale_sale' row (the sale was reset since the owner loaded it).
CREATE FUNCTION seckill_commit_batch(
    p_sku text, p_generation bigint, p_limit integer, p_fenced boolean,
    p_shards integer[], p_fences bigint[], p_committed integer[],
    p_users text[], p_quantities integer[], p_keys text[],
    p_part_order integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint, created_at timestamptz, shard integer)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    v_id bigint;
    v_at timestamptz;
    v_first integer;
    v_ids bigint[] := '{}';
BEGIN
    -- A reset sale refuses every batch decided against its previous generation. FOR SHARE
    -- serialises with a reset, which updates this row.
    PERFORM 1 FROM sales sa WHERE sa.sku = p_sku AND sa.generation = p_generation FOR SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::integer, 'stale_sale'::text, NULL::bigint, NULL::timestamptz, NULL::integer;
        RETURN;
    END IF;

    -- The fence: every shard of the batch must still carry the owner's token. The rows stay
    -- locked until commit, so no claim can slip in between this check and the stock write.
    IF p_fenced THEN
        RETURN QUERY
            SELECT NULL::integer, 'deposed'::text, NULL::bigint, NULL::timestamptz, x.s
              FROM unnest(p_shards, p_fences) AS x(s, f)
              LEFT JOIN (SELECT sh.shard AS s, sh.fence AS f FROM shards sh
                          WHERE sh.sku = p_sku AND sh.shard = ANY (p_shards) FOR UPDATE) AS cur USING (s)
             WHERE cur.f IS DISTINCT FROM x.f;
        IF FOUND THEN
            UPDATE sales sa SET fence_rejections = sa.fence_rejections + 1 WHERE sa.sku = p_sku;
            RETURN;
        END IF;
    END IF;

    FOR i IN 1 .. coalesce(array_length(p_users, 1), 0) LOOP
        IF p_quantities[i] > p_limit THEN
            RETURN QUERY SELECT i, 'user_limit'::text, NULL::bigint, NULL::timestamptz, NULL::integer;
            CONTINUE;
        END IF;
        INSERT INTO user_purchases AS u (sku, user_id, bought) VALUES (p_sku, p_users[i], p_quantities[i])
        ON CONFLICT (sku, user_id) DO UPDATE SET bought = u.bought + p_quantities[i]
         WHERE u.bought + p_quantities[i] <= p_limit;
        IF NOT FOUND THEN
            RETURN QUERY SELECT i, 'user_limit'::text, NULL::bigint, NULL::timestamptz, NULL::integer;
            CONTINUE;
        END IF;

        SELECT min(x.s) INTO v_first
          FROM unnest(p_part_order, p_part_shard) AS x(o, s) WHERE x.o = i;
        INSERT INTO orders AS o (sku, user_id, quantity, shard, fence, idempotency_key)
        VALUES (p_sku, p_users[i], p_quantities[i], v_first,
                p_fences[array_position(p_shards, v_first)], p_keys[i])
        ON CONFLICT (sku, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING o.id, o.created_at INTO v_id, v_at;
        IF NOT FOUND THEN
            -- The key was used by an earlier order (here or elsewhere): undo the count above.
            UPDATE user_purchases u SET bought = u.bought - p_quantities[i]
             WHERE u.sku = p_sku AND u.user_id = p_users[i];
            RETURN QUERY SELECT i, 'duplicate'::text, NULL::bigint, NULL::timestamptz, NULL::integer;
            CONTINUE;
        END IF;

        INSERT INTO order_parts (order_id, sku, shard, quantity, fence)
        SELECT v_id, p_sku, x.s, x.t, p_fences[array_position(p_shards, x.s)]
          FROM unnest(p_part_order, p_part_shard, p_part_take) AS x(o, s, t) WHERE x.o = i;
        v_ids := v_ids || v_id;
        RETURN QUERY SELECT i, 'ok'::text, v_id, v_at, NULL::integer;
    END LOOP;

    -- The stock, as an absolute value from the owner's memory, guarded by the fence.
    UPDATE shards sh SET remaining = x.committed - coalesce(t.taken, 0)
      FROM unnest(p_shards, p_fences, p_committed) AS x(s, f, committed)
      LEFT JOIN (SELECT op.shard AS s, sum(op.quantity)::integer AS taken FROM order_parts op
                  WHERE op.order_id = ANY (v_ids) GROUP BY op.shard) AS t USING (s)
     WHERE sh.sku = p_sku AND sh.shard = x.s AND (NOT p_fenced OR sh.fence = x.f);
END
$$;
