-- seckill_commit_batch as in 0013_order_lifecycle.sql (read the reasons there and in 0001_schema.sql),
-- with one statement changed: the probe for idempotency keys already used.
--
-- The probe was `WHERE d.nth > 1 OR EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND
-- o.idempotency_key = d.k)`. PostgreSQL may run such an EXISTS as a hashed subplan: it reads every
-- key of the sale once per batch into a hash table, instead of probing the batch's keys. The
-- function's plans are generic and kept for the connection's life (0001, 0016), and a connection
-- whose first batch met a sale with few orders kept the hashed plan. Every later batch then read
-- the whole sale's keys, so a batch cost more with every order sold, and bigger batches (a
-- slower box, a busier sale) made it worse. Seen with auto_explain (log_nested_statements) during
-- `scripts/bench.sh --only-capacity` on a fresh database: "Filter: ((d.nth > 1) OR (hashed
-- SubPlan 2))" over "Index Only Scan using orders_by_sale_key on orders o, Index Cond: (sku =
-- $1)", 10-12 ms per batch in that statement, and owned-shards at 225-368 µs of PostgreSQL CPU per
-- order at capacity instead of the 43 of the published run.
--
-- The probe is now a LEFT JOIN LATERAL with LIMIT 1: a subquery with a LIMIT is not pulled up or
-- hashed, so it runs once per key of the batch, an index probe on (sku, idempotency_key), whatever
-- the statistics were when the plan was made. Same answer: a key is a duplicate when an earlier
-- order of the batch has it or a committed order does.
--
-- CREATE OR REPLACE resets the function's settings to the ones it names, so it names both
-- (plan_cache_mode from 0001, enable_seqscan from 0016).
CREATE OR REPLACE FUNCTION seckill_commit_batch(
    p_sku text, p_generation bigint, p_limit integer, p_fenced boolean, p_sorted boolean,
    p_shards integer[], p_fences bigint[], p_committed integer[], p_leases timestamptz[],
    p_users text[], p_quantities integer[], p_keys text[],
    p_part_order integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint, created_at timestamptz, shard integer, units integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_orders integer := coalesce(array_length(p_users, 1), 0);
    v_duplicate integer[];  -- orders whose key is already used
    v_accepted integer[];   -- orders within the limit, to insert
    v_ids bigint[];         -- their order ids, allocated before the insert so outcomes map back
    v_written bigint[];     -- the ids the insert wrote (a key committed meanwhile writes none)
    v_at timestamptz := now();
    v_user text;
    v_bought integer;
    r record;
    v_window interval;
    v_folded_shards integer[];  -- shards whose pending returns this batch folds
    v_folded_units integer[];   -- and the units each gets back
BEGIN
    -- A reset sale refuses every batch decided against its previous generation. FOR SHARE
    -- serialises with a reset, which updates this row.
    SELECT sa.payment_window INTO v_window FROM sales sa WHERE sa.sku = p_sku AND sa.generation = p_generation FOR SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::integer, 'stale_sale'::text, NULL::bigint, NULL::timestamptz, NULL::integer, NULL::integer;
        RETURN;
    END IF;

    -- The fence: every shard of the batch must still carry the owner's token. The rows stay
    -- locked (ascending, the primary key's order) until commit, so no claim can slip in between
    -- this check and the stock write.
    IF p_fenced THEN
        RETURN QUERY
            SELECT NULL::integer, 'deposed'::text, NULL::bigint, NULL::timestamptz, x.s, NULL::integer
              FROM unnest(p_shards, p_fences) AS x(s, f)
              LEFT JOIN (SELECT sh.shard AS s, sh.fence AS f FROM shards sh
                          WHERE sh.sku = p_sku AND sh.shard = ANY (p_shards) ORDER BY sh.shard FOR UPDATE) AS cur USING (s)
             WHERE cur.f IS DISTINCT FROM x.f;
        IF FOUND THEN
            INSERT INTO fence_refusals (sku, shard, fence, lease_until)
            SELECT p_sku, x.s, x.f, x.l FROM unnest(p_shards, p_fences, p_leases) AS x(s, f, l);
            RETURN;
        END IF;
    END IF;

    -- Returns of cancelled and expired orders on the batch's shards: folded into the stock this
    -- batch writes, and marked applied by this same statement (see seckill_fold_returns).
    SELECT coalesce(array_agg(f.shard), '{}'), coalesce(array_agg(f.units), '{}') INTO v_folded_shards, v_folded_units
      FROM seckill_fold_returns(p_sku, p_shards, p_fences) AS f;

    -- Keys already used: by a committed order, or by an earlier order of this batch. Orders above
    -- the limit on their own claim no key.
    -- One index probe per key (the LIMIT keeps the probe inside the loop: see the header).
    SELECT coalesce(array_agg(d.n), '{}') INTO v_duplicate
      FROM (SELECT x.n, x.k, row_number() OVER (PARTITION BY x.k ORDER BY x.n) AS nth
              FROM unnest(p_keys, p_quantities) WITH ORDINALITY AS x(k, q, n)
             WHERE x.k IS NOT NULL AND x.q <= p_limit) AS d
      LEFT JOIN LATERAL (SELECT true AS used FROM orders o WHERE o.sku = p_sku AND o.idempotency_key = d.k LIMIT 1) AS hit ON true
     WHERE d.nth > 1 OR hit.used;

    -- Every user of the batch, locked in one statement and one order: a new user's row is
    -- inserted (bought 0), an existing one is locked without being written (DO UPDATE ... WHERE
    -- false locks the conflicting row all the same).
    INSERT INTO user_purchases AS u (sku, user_id, bought)
    SELECT p_sku, x.u, 0
      FROM unnest(p_users) WITH ORDINALITY AS x(u, n)
     GROUP BY x.u
     ORDER BY CASE WHEN p_sorted THEN x.u END, min(x.n)
    ON CONFLICT (sku, user_id) DO UPDATE SET bought = u.bought WHERE false;

    -- The per-user limit, exact: each user's orders in arrival order, each accepted while the
    -- user's units stay within the limit. A loop over rows, not statements.
    v_accepted := '{}';
    FOR r IN
        SELECT x.n, x.u, x.q, up.bought
          FROM unnest(p_users, p_quantities) WITH ORDINALITY AS x(u, q, n)
          JOIN user_purchases up ON up.sku = p_sku AND up.user_id = x.u
         WHERE x.q <= p_limit AND x.n <> ALL (v_duplicate)
         ORDER BY x.u, x.n
    LOOP
        IF v_user IS DISTINCT FROM r.u THEN
            v_user := r.u;
            v_bought := r.bought;
        END IF;
        IF v_bought + r.q <= p_limit THEN
            v_bought := v_bought + r.q;
            v_accepted := v_accepted || r.n::integer;
        END IF;
    END LOOP;

    -- The orders, in one statement, keys ascending. A key that another batch inserted and has
    -- not committed yet is waited for; once committed, this order writes nothing and is a
    -- duplicate.
    SELECT coalesce(array_agg(nextval('orders_id_seq')), '{}') INTO v_ids FROM unnest(v_accepted);
    WITH firsts AS (
        SELECT p.o, min(p.s) AS s FROM unnest(p_part_order, p_part_shard) AS p(o, s) GROUP BY p.o
    ), inserted AS (
        INSERT INTO orders AS o (id, sku, user_id, quantity, shard, fence, idempotency_key, state, pay_by)
        OVERRIDING SYSTEM VALUE
        SELECT a.id, p_sku, p_users[a.n], p_quantities[a.n], f.s, p_fences[array_position(p_shards, f.s)], p_keys[a.n],
               CASE WHEN v_window IS NULL THEN 'paid' ELSE 'reserved' END, v_at + v_window
          FROM unnest(v_accepted, v_ids) AS a(n, id)
          JOIN firsts f ON f.o = a.n
         ORDER BY CASE WHEN p_sorted THEN p_keys[a.n] END, a.n
        ON CONFLICT (sku, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING o.id
    )
    SELECT coalesce(array_agg(i.id), '{}') INTO v_written FROM inserted i;

    INSERT INTO order_parts (order_id, sku, shard, quantity, fence, lease_until)
    SELECT a.id, p_sku, p.s, p.t, b.f, b.l
      FROM unnest(v_accepted, v_ids) AS a(n, id)
      JOIN unnest(p_part_order, p_part_shard, p_part_take) AS p(o, s, t) ON p.o = a.n
      JOIN unnest(p_shards, p_fences, p_leases) AS b(s, f, l) ON b.s = p.s
     WHERE a.id = ANY (v_written);

    UPDATE user_purchases u SET bought = u.bought + t.q
      FROM (SELECT p_users[a.n] AS user_id, sum(p_quantities[a.n])::integer AS q
              FROM unnest(v_accepted, v_ids) AS a(n, id)
             WHERE a.id = ANY (v_written)
             GROUP BY 1) AS t
     WHERE u.sku = p_sku AND u.user_id = t.user_id;

    -- The stock, as an absolute value from the owner's memory plus the returns folded above,
    -- guarded by the fence.
    UPDATE shards sh SET remaining = x.committed - coalesce(t.taken, 0) + coalesce(back.units, 0)
      FROM unnest(p_shards, p_fences, p_committed) AS x(s, f, committed)
      LEFT JOIN unnest(v_folded_shards, v_folded_units) AS back(s, units) USING (s)
      LEFT JOIN (SELECT p.s, sum(p.t)::integer AS taken
                   FROM unnest(v_accepted, v_ids) AS a(n, id)
                   JOIN unnest(p_part_order, p_part_shard, p_part_take) AS p(o, s, t) ON p.o = a.n
                  WHERE a.id = ANY (v_written)
                  GROUP BY p.s) AS t USING (s)
     WHERE sh.sku = p_sku AND sh.shard = x.s AND (NOT p_fenced OR sh.fence = x.f);

    RETURN QUERY
        SELECT g.n::integer,
               CASE WHEN a.id = ANY (v_written) THEN 'ok'
                    WHEN p_quantities[g.n] > p_limit THEN 'user_limit'
                    WHEN g.n = ANY (v_duplicate) OR a.id IS NOT NULL THEN 'duplicate'
                    ELSE 'user_limit' END,
               CASE WHEN a.id = ANY (v_written) THEN a.id END,
               v_at,
               NULL::integer,
               NULL::integer
          FROM generate_series(1, v_orders) AS g(n)
          LEFT JOIN unnest(v_accepted, v_ids) AS a(n, id) ON a.n = g.n;
    -- The owner adds what came back to its memory.
    RETURN QUERY
        SELECT NULL::integer, 'returned'::text, NULL::bigint, v_at, back.s, back.units
          FROM unnest(v_folded_shards, v_folded_units) AS back(s, units);
END
$$;
