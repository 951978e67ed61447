-- seckill_commit_orders as in 0024_batches_answer_replays.sql (read the reasons there and in
-- the migrations it names), with one change: the buyers a batch locks, inserts and counts are
-- those of the orders taking part, not every order's. An order whose key is already used (a
-- replay, mostly) or whose quantity is above the limit on its own takes nothing and is answered
-- without its buyer's count; yet its buyer's row, which a replay's buyer always has, was locked,
-- and made the batch decide its buyers again from their counts (seckill_fit_limit, the union of
-- the two decisions, the update of the counts), as for a buyer who bought before.
--
-- In `make bench`'s moderate point (2000 arrivals/s, 5% of them replays), pg_stat_statements
-- (track = all) counted that path in 721 of 1640 batches: a batch of 11 orders carries a replay
-- 43% of the time (1 - 0.95^11). It cost those batches about 75 µs of execution (the fit 38,
-- its sort included, the count update 27, the union 10), and a row lock written to the WAL. In
-- the retry-storm cell half the orders are replays, and nearly every batch took it.
--
-- Same signature, same outcomes: instances of the previous release call it unchanged during a
-- rolling upgrade.

CREATE OR REPLACE FUNCTION seckill_commit_orders(
    p_sku text, p_generation bigint, p_limit integer, p_fenced boolean, p_sorted boolean,
    p_shards integer[], p_fences bigint[], p_committed integer[], p_leases timestamptz[],
    p_users text[], p_quantities integer[], p_keys text[],
    p_part_order integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint, shard integer, units integer, fence bigint, buyer text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_orders integer := coalesce(array_length(p_users, 1), 0);
    v_duplicate integer[];  -- orders whose key is already used
    -- Of those, the orders whose key a committed order holds, and that order's columns.
    v_earlier integer[];
    v_earlier_ids bigint[];
    v_earlier_buyers text[];
    v_earlier_quantities integer[];
    v_earlier_shards integer[];
    v_earlier_fences bigint[];
    v_accepted integer[];   -- orders within the limit, to insert
    v_ids bigint[];         -- their order ids, allocated before the insert so outcomes map back
    v_written bigint[];     -- the ids the insert wrote (a key committed meanwhile writes none)
    v_at timestamptz := now();
    v_fresh integer[];      -- orders within the limit if their users had bought nothing yet
    v_new text[];           -- users whose rows this batch inserted
    v_again integer[];      -- orders within the limit of the users who had bought before
    v_window interval;
    v_repeats boolean;      -- whether a buyer has two orders in the fold
    v_buyers integer;       -- distinct buyers of the batch
    v_folded_shards integer[];  -- shards whose pending returns this batch folds
    v_folded_units integer[];   -- and the units each gets back
BEGIN
    -- A reset sale refuses every batch decided against its previous generation. FOR SHARE
    -- serialises with a reset, which updates this row.
    SELECT sa.payment_window INTO v_window FROM sales sa WHERE sa.sku = p_sku AND sa.generation = p_generation FOR SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::integer, 'stale_sale'::text, NULL::bigint, NULL::integer, NULL::integer, NULL::bigint, NULL::text;
        RETURN;
    END IF;

    -- The fence: every shard of the batch must still carry the owner's token. The rows stay
    -- locked (ascending, the primary key's order) until commit, so no claim can slip in between
    -- this check and the stock write.
    IF p_fenced THEN
        RETURN QUERY
            SELECT NULL::integer, 'deposed'::text, NULL::bigint, x.s, NULL::integer, NULL::bigint, NULL::text
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
    IF EXISTS (SELECT FROM stock_returns r WHERE r.sku = p_sku AND r.shard = ANY (p_shards) AND r.applied_fence IS NULL) THEN
        SELECT coalesce(array_agg(f.shard), '{}'), coalesce(array_agg(f.units), '{}') INTO v_folded_shards, v_folded_units
          FROM seckill_fold_returns(p_sku, p_shards, p_fences) AS f;
    ELSE
        v_folded_shards := '{}';
        v_folded_units := '{}';
    END IF;

    -- Keys already used: by a committed order, whose columns are kept to answer with it, or by an
    -- earlier order of this batch. Orders above the limit on their own claim no key.
    -- One index probe per key (the LIMIT keeps the probe inside the loop: see 0018).
    SELECT coalesce(array_agg(d.n), '{}'),
           coalesce(array_agg(d.n) FILTER (WHERE hit.id IS NOT NULL), '{}'),
           coalesce(array_agg(hit.id) FILTER (WHERE hit.id IS NOT NULL), '{}'),
           coalesce(array_agg(hit.user_id) FILTER (WHERE hit.id IS NOT NULL), '{}'),
           coalesce(array_agg(hit.quantity) FILTER (WHERE hit.id IS NOT NULL), '{}'),
           coalesce(array_agg(hit.shard) FILTER (WHERE hit.id IS NOT NULL), '{}'),
           coalesce(array_agg(hit.fence) FILTER (WHERE hit.id IS NOT NULL), '{}')
      INTO v_duplicate, v_earlier, v_earlier_ids, v_earlier_buyers, v_earlier_quantities, v_earlier_shards, v_earlier_fences
      FROM (SELECT x.n::integer AS n, x.k, row_number() OVER (PARTITION BY x.k ORDER BY x.n) AS nth
              FROM unnest(p_keys, p_quantities) WITH ORDINALITY AS x(k, q, n)
             WHERE x.k IS NOT NULL AND x.q <= p_limit) AS d
      LEFT JOIN LATERAL (SELECT o.id, o.user_id, o.quantity, o.shard, o.fence FROM orders o
                          WHERE o.sku = p_sku AND o.idempotency_key = d.k LIMIT 1) AS hit ON true
     WHERE d.nth > 1 OR hit.id IS NOT NULL;

    -- Each order's fate if its buyer had bought nothing yet. Orders above the limit on their own
    -- and duplicates take no part. Each order taking part fits unless its buyer has another one
    -- in the batch: only then does the fold decide. The buyers of the orders taking part are
    -- counted here too: they are the batch's buyers from here on.
    SELECT coalesce(array_agg(x.n::integer), '{}'), count(DISTINCT x.u) < count(*), count(DISTINCT x.u)
      INTO v_fresh, v_repeats, v_buyers
      FROM unnest(p_users, p_quantities) WITH ORDINALITY AS x(u, q, n)
     WHERE x.q <= p_limit AND x.n <> ALL (v_duplicate);
    IF v_repeats THEN
        SELECT seckill_fit_limit(p_limit, coalesce(array_agg(x.n::integer), '{}'), coalesce(array_agg(x.u), '{}'),
                                 coalesce(array_agg(x.q), '{}'), coalesce(array_agg(0), '{}'))
          INTO v_fresh
          FROM unnest(p_users, p_quantities) WITH ORDINALITY AS x(u, q, n)
         WHERE x.q <= p_limit AND x.n <> ALL (v_duplicate);
    END IF;

    -- The buyers of the orders taking part, locked in one statement and one order: a new user's
    -- row is inserted with the units of its orders accepted above (exact: nobody had a row for
    -- it), an existing one is locked without being written (DO UPDATE ... WHERE false locks the
    -- conflicting row all the same, and returns nothing). A replay's buyer is not among them.
    WITH inserted AS (
        INSERT INTO user_purchases AS u (sku, user_id, bought)
        SELECT p_sku, x.u, coalesce(sum(x.q) FILTER (WHERE x.n = ANY (v_fresh)), 0)
          FROM unnest(p_users, p_quantities) WITH ORDINALITY AS x(u, q, n)
         WHERE x.q <= p_limit AND x.n <> ALL (v_duplicate)
         GROUP BY x.u
         ORDER BY CASE WHEN p_sorted THEN x.u END, min(x.n)
        ON CONFLICT (sku, user_id) DO UPDATE SET bought = u.bought WHERE false
        RETURNING u.user_id
    )
    SELECT coalesce(array_agg(i.user_id), '{}') INTO v_new FROM inserted i;

    -- The orders of users who had bought before are decided again, from their counts (locked
    -- above); a new user's orders keep the decision made for them.
    IF cardinality(v_new) = v_buyers THEN
        v_accepted := v_fresh;
    ELSE
        SELECT seckill_fit_limit(p_limit, coalesce(array_agg(x.n::integer), '{}'), coalesce(array_agg(x.u), '{}'),
                                 coalesce(array_agg(x.q), '{}'), coalesce(array_agg(up.bought), '{}'))
          INTO v_again
          FROM unnest(p_users, p_quantities) WITH ORDINALITY AS x(u, q, n)
          JOIN user_purchases up ON up.sku = p_sku AND up.user_id = x.u
         WHERE x.q <= p_limit AND x.n <> ALL (v_duplicate) AND x.u <> ALL (v_new);
        SELECT coalesce(array_agg(a.n ORDER BY a.n), '{}') INTO v_accepted
          FROM (SELECT f.n FROM unnest(v_fresh) AS f(n) WHERE p_users[f.n] = ANY (v_new)
                UNION ALL
                SELECT g.n FROM unnest(v_again) AS g(n)) AS a;
    END IF;

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

    -- Users' counts: a user who had bought before gains the units of its orders written now; a new
    -- user's row already counts its accepted orders, less one that wrote nothing (its key was
    -- committed by another batch meanwhile). A batch of new users whose orders all wrote has
    -- nothing to update here.
    IF cardinality(v_new) < v_buyers OR cardinality(v_written) < cardinality(v_accepted) THEN
        UPDATE user_purchases u SET bought = u.bought + t.delta
          FROM (SELECT p_users[a.n] AS user_id,
                       sum(CASE WHEN nu.u IS NULL AND a.id = ANY (v_written) THEN p_quantities[a.n]
                                WHEN nu.u IS NOT NULL AND a.id <> ALL (v_written) THEN -p_quantities[a.n]
                                ELSE 0 END)::integer AS delta
                  FROM unnest(v_accepted, v_ids) AS a(n, id)
                  LEFT JOIN unnest(v_new) AS nu(u) ON nu.u = p_users[a.n]
                 GROUP BY 1) AS t
         WHERE t.delta <> 0 AND u.sku = p_sku AND u.user_id = t.user_id;
    END IF;

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
                    WHEN e.n IS NOT NULL THEN 'earlier'
                    WHEN g.n = ANY (v_duplicate) OR a.id IS NOT NULL THEN 'duplicate'
                    ELSE 'user_limit' END,
               CASE WHEN a.id = ANY (v_written) THEN a.id ELSE e.id END,
               e.shard,
               e.quantity,
               e.fence,
               e.buyer
          FROM generate_series(1, v_orders) AS g(n)
          LEFT JOIN unnest(v_accepted, v_ids) AS a(n, id) ON a.n = g.n
          LEFT JOIN unnest(v_earlier, v_earlier_ids, v_earlier_buyers, v_earlier_quantities, v_earlier_shards, v_earlier_fences)
                    AS e(n, id, buyer, quantity, shard, fence) ON e.n = g.n;
    -- The owner adds what came back to its memory.
    IF cardinality(v_folded_shards) > 0 THEN
        RETURN QUERY
            SELECT NULL::integer, 'returned'::text, NULL::bigint, back.s, back.units, NULL::bigint, NULL::text
              FROM unnest(v_folded_shards, v_folded_units) AS back(s, units);
    END IF;
END
$$;
