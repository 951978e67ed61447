-- redis-gate's stream writer on the same footing as the owners' batch (0008): set-based, a fixed
-- number of statements per batch whatever its size, instead of a loop of statements per entry.
-- Same contract and outcomes as 0004's function; the comparison between the two designs is then
-- a comparison of designs, not of SQL.
--
-- Locks in one order, so concurrent writers do not deadlock: the sale row (shared, serialising
-- with a reset), the orders' unique index entries (references ascending), users ascending,
-- shards ascending.

DROP FUNCTION seckill_gate_write(text, bigint[], bigint[], text[], integer[], text[], integer[], integer[], integer[]);

-- Writes a batch of stream entries in one transaction. Redis already decided every entry (stock,
-- per-user limit, idempotency key); this only records them, so the audit shows what the gate did.
--   entries  p_refs, p_generations, p_users, p_quantities, p_keys (NULL: none), one per entry;
--   parts    p_part_entry (1-based entry index), p_part_shard, p_part_take.
-- Returns one row per entry: 'written' (with the order id), 'duplicate' (its ref is already
-- there: written before), 'stale' (decided for an earlier generation of the sale: discarded), or
-- 'conflict' (its idempotency key belongs to another order: only after Redis lost its data).
CREATE FUNCTION seckill_gate_write(
    p_sku text, p_refs bigint[], p_generations bigint[], p_users text[], p_quantities integer[], p_keys text[],
    p_part_entry integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_generation bigint;
    v_current integer[];  -- entries of the sale's current generation
    v_ids bigint[];       -- their order ids, allocated before the insert so outcomes map back
    v_written bigint[];   -- the ids the insert wrote
BEGIN
    SELECT sa.generation INTO v_generation FROM sales sa WHERE sa.sku = p_sku FOR SHARE;
    SELECT coalesce(array_agg(x.n::integer), '{}') INTO v_current
      FROM unnest(p_generations) WITH ORDINALITY AS x(g, n) WHERE x.g = v_generation;
    SELECT coalesce(array_agg(nextval('orders_id_seq')), '{}') INTO v_ids FROM unnest(v_current);

    WITH firsts AS (
        SELECT p.e, min(p.s) AS s FROM unnest(p_part_entry, p_part_shard) AS p(e, s) GROUP BY p.e
    ), inserted AS (
        INSERT INTO orders AS o (id, sku, user_id, quantity, shard, fence, idempotency_key, gate_ref)
        OVERRIDING SYSTEM VALUE
        SELECT c.id, p_sku, p_users[c.n], p_quantities[c.n], f.s, 0, p_keys[c.n], p_refs[c.n]
          FROM unnest(v_current, v_ids) AS c(n, id)
          JOIN firsts f ON f.e = c.n
         ORDER BY p_refs[c.n]
        ON CONFLICT DO NOTHING
        RETURNING o.id
    )
    SELECT coalesce(array_agg(i.id), '{}') INTO v_written FROM inserted i;

    INSERT INTO order_parts (order_id, sku, shard, quantity, fence)
    SELECT c.id, p_sku, p.s, p.t, 0
      FROM unnest(v_current, v_ids) AS c(n, id)
      JOIN unnest(p_part_entry, p_part_shard, p_part_take) AS p(e, s, t) ON p.e = c.n
     WHERE c.id = ANY (v_written);

    INSERT INTO user_purchases AS u (sku, user_id, bought)
    SELECT p_sku, p_users[c.n], sum(p_quantities[c.n])::integer
      FROM unnest(v_current, v_ids) AS c(n, id)
     WHERE c.id = ANY (v_written)
     GROUP BY 2 ORDER BY 2
    ON CONFLICT (sku, user_id) DO UPDATE SET bought = u.bought + EXCLUDED.bought;

    WITH taken AS (
        SELECT p.s, sum(p.t)::integer AS t
          FROM unnest(v_current, v_ids) AS c(n, id)
          JOIN unnest(p_part_entry, p_part_shard, p_part_take) AS p(e, s, t) ON p.e = c.n
         WHERE c.id = ANY (v_written)
         GROUP BY p.s
    ), locked AS (
        SELECT sh.shard FROM shards sh WHERE sh.sku = p_sku AND sh.shard IN (SELECT s FROM taken) ORDER BY sh.shard FOR UPDATE
    )
    UPDATE shards sh SET remaining = sh.remaining - taken.t
      FROM taken JOIN locked ON locked.shard = taken.s
     WHERE sh.sku = p_sku AND sh.shard = taken.s;

    RETURN QUERY
        SELECT g.n::integer,
               CASE WHEN c.id IS NULL THEN 'stale'
                    WHEN c.id = ANY (v_written) THEN 'written'
                    WHEN EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND o.gate_ref = p_refs[g.n]) THEN 'duplicate'
                    ELSE 'conflict' END,
               CASE WHEN c.id = ANY (v_written) THEN c.id END
          FROM generate_series(1, coalesce(array_length(p_refs, 1), 0)) AS g(n)
          LEFT JOIN unnest(v_current, v_ids) AS c(n, id) ON c.n = g.n;
END
$$;
