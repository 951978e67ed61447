-- redis-gate: orders decided by a Lua script in Redis and written here later, in batches, by a
-- stream consumer. Additive only: code that predates this migration keeps working.
--   orders.gate_ref  the reference Redis handed the client at acknowledgement; unique per sale,
--                    so an entry written twice (a consumer claimed it from a crashed one that had
--                    already committed) lands once.

ALTER TABLE orders ADD COLUMN gate_ref bigint;
CREATE UNIQUE INDEX orders_gate_ref ON orders (sku, gate_ref) WHERE gate_ref IS NOT NULL;

-- Writes a batch of stream entries in one transaction. Redis already decided every entry (stock,
-- per-user limit, idempotency key); this only records them, so the audit shows what the gate did:
-- no stock or limit check here, and no CHECK on shards.remaining either.
--   entries  p_refs, p_generations, p_users, p_quantities, p_keys (NULL: none), one per entry;
--   parts    p_part_entry (1-based entry index), p_part_shard, p_part_take.
-- Returns one row per entry: 'written' (with the order id), 'duplicate' (its ref is already
-- there: written before), 'stale' (decided for an earlier generation of the sale: discarded), or
-- 'conflict' (its idempotency key belongs to another order: only after Redis lost its data).
-- Locks are taken in one order: the sale row (shared, serialising with a reset), the orders'
-- unique index entries, users ascending, shards ascending; so concurrent writers do not deadlock.
CREATE FUNCTION seckill_gate_write(
    p_sku text, p_refs bigint[], p_generations bigint[], p_users text[], p_quantities integer[], p_keys text[],
    p_part_entry integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    v_generation bigint;
    v_id bigint;
    v_first integer;
    v_written integer[] := '{}';
    v_ids bigint[] := '{}';
BEGIN
    SELECT sa.generation INTO v_generation FROM sales sa WHERE sa.sku = p_sku FOR SHARE;
    FOR i IN 1 .. coalesce(array_length(p_refs, 1), 0) LOOP
        IF v_generation IS DISTINCT FROM p_generations[i] THEN
            RETURN QUERY SELECT i, 'stale'::text, NULL::bigint;
            CONTINUE;
        END IF;
        SELECT min(x.s) INTO v_first FROM unnest(p_part_entry, p_part_shard) AS x(e, s) WHERE x.e = i;
        INSERT INTO orders AS o (sku, user_id, quantity, shard, fence, idempotency_key, gate_ref)
        VALUES (p_sku, p_users[i], p_quantities[i], v_first, 0, p_keys[i], p_refs[i])
        ON CONFLICT DO NOTHING
        RETURNING o.id INTO v_id;
        IF NOT FOUND THEN
            IF EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND o.gate_ref = p_refs[i]) THEN
                RETURN QUERY SELECT i, 'duplicate'::text, NULL::bigint;
            ELSE
                RETURN QUERY SELECT i, 'conflict'::text, NULL::bigint;
            END IF;
            CONTINUE;
        END IF;
        INSERT INTO order_parts (order_id, sku, shard, quantity, fence)
        SELECT v_id, p_sku, x.s, x.t, 0
          FROM unnest(p_part_entry, p_part_shard, p_part_take) AS x(e, s, t) WHERE x.e = i;
        v_written := v_written || i;
        v_ids := v_ids || v_id;
        RETURN QUERY SELECT i, 'written'::text, v_id;
    END LOOP;

    INSERT INTO user_purchases AS u (sku, user_id, bought)
    SELECT p_sku, x.u, sum(x.q)::integer
      FROM unnest(p_users, p_quantities) WITH ORDINALITY AS x(u, q, n)
     WHERE x.n = ANY (v_written)
     GROUP BY x.u ORDER BY x.u
    ON CONFLICT (sku, user_id) DO UPDATE SET bought = u.bought + EXCLUDED.bought;

    PERFORM 1 FROM shards sh WHERE sh.sku = p_sku
       AND sh.shard IN (SELECT op.shard FROM order_parts op WHERE op.order_id = ANY (v_ids))
     ORDER BY sh.shard FOR UPDATE;
    UPDATE shards sh SET remaining = sh.remaining - t.taken
      FROM (SELECT op.shard AS s, sum(op.quantity)::integer AS taken FROM order_parts op
             WHERE op.order_id = ANY (v_ids) GROUP BY op.shard) AS t
     WHERE sh.sku = p_sku AND sh.shard = t.s;
END
$$;
