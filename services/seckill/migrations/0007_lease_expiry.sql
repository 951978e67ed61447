-- Lease expiry next to every owned write, so that a checker can tell a write that landed after its
-- owner's own lease had run out (DESIGN: a paused owner's batch, held past its lease):
--   order_parts.lease_until  the owner's lease deadline for that shard's lock when it sent the
--                            batch (its own clock: the last confirmed grant or renewal, measured
--                            from when it was sent, less a drift margin; lockkit's
--                            `LockGuard::remaining`). Compare with orders.written_at.
--   fence_refusals           one row per shard of a batch the fence refused, with the same deadline
--                            and the time of the refusal (after the row lock). Rare: only a deposed
--                            owner writes here.
-- Nothing on the commit path reads either: the fence alone decides. A late write is harmless while
-- its fence is still the shard's newest claim; after a newer claim it must be refused, and the
-- owned-unfenced control is what accepts it.

ALTER TABLE order_parts ADD COLUMN lease_until timestamptz;

CREATE TABLE fence_refusals (
    sku          text NOT NULL REFERENCES sales (sku) ON DELETE CASCADE,
    shard        integer NOT NULL,
    fence        bigint NOT NULL,
    lease_until  timestamptz,
    refused_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX fence_refusals_by_shard ON fence_refusals (sku, shard);

DROP FUNCTION seckill_commit_batch(text, bigint, integer, boolean, integer[], bigint[], integer[],
    text[], integer[], text[], integer[], integer[], integer[]);

-- As in 0002, with p_leases (one per shard, aligned with p_shards) kept on each order part and in
-- the refusals.
CREATE FUNCTION seckill_commit_batch(
    p_sku text, p_generation bigint, p_limit integer, p_fenced boolean,
    p_shards integer[], p_fences bigint[], p_committed integer[], p_leases timestamptz[],
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
            INSERT INTO fence_refusals (sku, shard, fence, lease_until)
            SELECT p_sku, x.s, x.f, x.l FROM unnest(p_shards, p_fences, p_leases) AS x(s, f, l);
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

        INSERT INTO order_parts (order_id, sku, shard, quantity, fence, lease_until)
        SELECT v_id, p_sku, x.s, x.t, p_fences[array_position(p_shards, x.s)],
               p_leases[array_position(p_shards, x.s)]
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
