-- seckill_gate_write as in 0001_schema.sql (read the reasons there and in 0016), with one
-- expression changed: how an entry that wrote nothing learns that its reference is already there.
--
-- It was `WHEN EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND o.gate_ref = p_refs[g.n])`,
-- the same kind of probe as the commit batch's key probe that 0018 replaced, and it met the same
-- fate: PostgreSQL may run such an EXISTS as a hashed subplan, which reads every reference of the
-- sale into a hash table, and a connection whose first gate batch met a sale with few orders kept
-- that plan (generic plans, 0001 and 0016). Every later batch holding a duplicate entry (a
-- redelivered one, after a writer failed between its commit and its acknowledgement) then read the
-- whole sale. Measured on a fresh database, the plans made on its first gate batch, then 20 000
-- orders bulk-inserted: a gate batch of one duplicate entry touched 4212 shared buffers (18 ms);
-- with this probe, 12. The test `a_gate_batch_reads_its_own_references_not_every_order_of_the_sale`
-- keeps it so.
--
-- The probe is now a scalar subquery with LIMIT 1. PostgreSQL hashes EXISTS and IN subqueries, not
-- scalar ones, and the CASE runs it only for an entry that wrote nothing: one probe of
-- orders_gate_ref per such entry, and none for the entries a batch writes. Same answer: the entry
-- is a duplicate when an order carries its reference, else a conflict.
--
-- CREATE OR REPLACE resets the function's settings to the ones it names, so it names both
-- (plan_cache_mode from 0001, enable_seqscan from 0016).
CREATE OR REPLACE FUNCTION seckill_gate_write(
    p_sku text, p_refs bigint[], p_generations bigint[], p_users text[], p_quantities integer[], p_keys text[],
    p_part_entry integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
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
                    WHEN (SELECT true FROM orders o WHERE o.sku = p_sku AND o.gate_ref = p_refs[g.n] LIMIT 1) THEN 'duplicate'
                    ELSE 'conflict' END,
               CASE WHEN c.id = ANY (v_written) THEN c.id END
          FROM generate_series(1, coalesce(array_length(p_refs, 1), 0)) AS g(n)
          LEFT JOIN unnest(v_current, v_ids) AS c(n, id) ON c.n = g.n;
END
$$;
