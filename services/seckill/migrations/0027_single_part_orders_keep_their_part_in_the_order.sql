-- An order taken from one shard (almost every order: only the last units of a sale are gathered
-- from several) keeps its part in its own row. `orders` already held that part's shard, fence and
-- quantity (`shard`, `fence`, `quantity`); it gains the lease deadline (`lease_until`) and whether
-- the order was split over several shards (`split`). Only a split order writes part rows, all of
-- them, into `order_split_parts` (the table `order_parts` was). The view `order_parts` shows every
-- part of every order as the table did, so the audit, the lifecycle (seckill_end_order), the gate's
-- books and the chaos checker read it unchanged.
--
-- Why: an order's part row cost a heap insert and two index inserts (the primary key and
-- order_parts_by_shard), 3 of the 11 WAL records an order's rows wrote (docs/owned-shards.md), and a
-- statement of every batch. On a fresh database, one client looping seckill_commit_orders over
-- batches of 16 single-part orders (pgbench -M prepared, fresh buyers and keys on every call), the
-- batch without its parts insert cost PostgreSQL 1459 to 1691 µs against 1481 to 1970 with it, in
-- five alternating pairs (median difference 168 µs, about 10 µs per order). Built, the same loop
-- (3000 batches of 16, pg_stat_wal) wrote 9.47 WAL records and 1010 to 1044 bytes per order,
-- against 12.47 and 1236 to 1275 on a database migrated up to 0026.
--
-- Nothing loses a guarantee: `order_parts_by_shard` served only whole-sale reads (the gate's sold
-- units per shard, the chaos checker), which now read a sale's orders by `orders_by_sale_key`'s
-- leading `sku`; the split parts keep the index. A reset deletes a sale's split parts, and an
-- instance of an earlier release, which deletes from `order_parts`, reaches them through the
-- view's INSTEAD OF DELETE trigger during a rolling upgrade. Such an instance calls the functions
-- below by name and gets their new bodies.

ALTER TABLE order_parts RENAME TO order_split_parts;
ALTER INDEX order_parts_pkey RENAME TO order_split_parts_pkey;
ALTER INDEX order_parts_by_shard RENAME TO order_split_parts_by_shard;

-- `split` false: the order's one part is (shard, quantity, fence, lease_until) of its own row;
-- true: its parts are rows of order_split_parts, and its own lease_until stays NULL. lease_until is
-- what order_parts.lease_until was (the owner's lease deadline when it sent the batch; NULL for
-- the strategies without one). A constant default: adding the columns rewrites no row.
ALTER TABLE orders
    ADD COLUMN split boolean NOT NULL DEFAULT false,
    ADD COLUMN lease_until timestamptz;

-- One pass over the parts: an order of several is split, an order of one takes its part's
-- deadline. Orders with neither (one part, no deadline) are not rewritten.
WITH per_order AS (
    SELECT p.order_id, count(*) > 1 AS split, min(p.lease_until) AS lease_until FROM order_split_parts p GROUP BY p.order_id
)
UPDATE orders o SET split = po.split, lease_until = CASE WHEN NOT po.split THEN po.lease_until END
  FROM per_order po
 WHERE o.id = po.order_id AND (po.split OR po.lease_until IS NOT NULL);
DELETE FROM order_split_parts p USING orders o WHERE o.id = p.order_id AND NOT o.split;

CREATE VIEW order_parts AS
    SELECT o.id AS order_id, o.sku, o.shard, o.quantity, o.fence, o.lease_until FROM orders o WHERE NOT o.split
    UNION ALL
    SELECT p.order_id, p.sku, p.shard, p.quantity, p.fence, p.lease_until FROM order_split_parts p;

-- A deleted view row is a split part to delete; a single part goes with its order.
CREATE FUNCTION seckill_order_parts_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM order_split_parts p WHERE p.order_id = OLD.order_id AND p.shard = OLD.shard;
    RETURN OLD;
END
$$;
CREATE TRIGGER order_parts_deleted INSTEAD OF DELETE ON order_parts FOR EACH ROW EXECUTE FUNCTION seckill_order_parts_deleted();

CREATE OR REPLACE FUNCTION seckill_sale_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM order_split_parts WHERE sku = OLD.sku;
    DELETE FROM orders WHERE sku = OLD.sku;
    DELETE FROM user_purchases WHERE sku = OLD.sku;
    DELETE FROM stock_returns WHERE sku = OLD.sku;
    RETURN OLD;
END
$$;

-- The three functions that write orders, each as its last migration left it (0001, 0019, 0025;
-- read the reasons there) but for the parts: the order row says whether it is split, and only a
-- split order writes part rows. The batch functions name their settings again, since CREATE OR
-- REPLACE resets them.
CREATE OR REPLACE FUNCTION seckill_commit(
    p_sku text, p_user text, p_quantity integer, p_key text, p_limit integer,
    p_shards integer[], p_takes integer[], p_new_remaining integer[], p_guard text, p_guards bigint[]
) RETURNS TABLE (order_id bigint, created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    v_remaining integer;
    v_id bigint;
    v_at timestamptz;
BEGIN
    FOR i IN 1 .. array_length(p_shards, 1) LOOP
        IF p_guard = 'claim' THEN
            UPDATE shards SET fence = p_guards[i]
             WHERE sku = p_sku AND shard = p_shards[i] AND fence < p_guards[i]
            RETURNING remaining INTO v_remaining;
            IF FOUND AND v_remaining < p_takes[i] THEN
                RAISE EXCEPTION 'shard % of % has % left', p_shards[i], p_sku, v_remaining
                    USING ERRCODE = 'SK003', DETAIL = p_shards[i] || ':' || v_remaining;
            END IF;
            IF FOUND THEN
                UPDATE shards SET remaining = v_remaining - p_takes[i]
                 WHERE sku = p_sku AND shard = p_shards[i] AND fence = p_guards[i];
            END IF;
        ELSIF p_guard = 'version' THEN
            UPDATE shards SET remaining = p_new_remaining[i], version = version + 1
             WHERE sku = p_sku AND shard = p_shards[i] AND version = p_guards[i];
        ELSIF p_guard = 'atomic' THEN
            UPDATE shards SET remaining = remaining - p_takes[i]
             WHERE sku = p_sku AND shard = p_shards[i] AND remaining >= p_takes[i];
        ELSE
            UPDATE shards SET remaining = p_new_remaining[i]
             WHERE sku = p_sku AND shard = p_shards[i];
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'shard % of % refused the write (%)', p_shards[i], p_sku, p_guard
                USING ERRCODE = 'SK001';
        END IF;
    END LOOP;

    INSERT INTO user_purchases AS u (sku, user_id, bought) VALUES (p_sku, p_user, p_quantity)
    ON CONFLICT (sku, user_id) DO UPDATE SET bought = u.bought + p_quantity
     WHERE u.bought + p_quantity <= p_limit;
    IF NOT FOUND OR p_quantity > p_limit THEN
        RAISE EXCEPTION 'user % reached the limit of %', p_user, p_sku USING ERRCODE = 'SK002';
    END IF;

    INSERT INTO orders (sku, user_id, quantity, shard, fence, idempotency_key, split)
    VALUES (p_sku, p_user, p_quantity, p_shards[1],
            CASE WHEN p_guard = 'claim' THEN p_guards[1] ELSE 0 END, p_key, cardinality(p_shards) > 1)
    RETURNING orders.id, orders.created_at INTO v_id, v_at;

    IF cardinality(p_shards) > 1 THEN
        INSERT INTO order_split_parts (order_id, sku, shard, quantity, fence)
        SELECT v_id, p_sku, s, t, CASE WHEN p_guard = 'claim' THEN g ELSE 0 END
          FROM unnest(p_shards, p_takes, p_guards) AS x(s, t, g);
    END IF;

    RETURN QUERY SELECT v_id, v_at;
END$$;

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
    v_split bigint[];     -- of those, the orders taken from several shards
BEGIN
    SELECT sa.generation INTO v_generation FROM sales sa WHERE sa.sku = p_sku FOR SHARE;
    SELECT coalesce(array_agg(x.n::integer), '{}') INTO v_current
      FROM unnest(p_generations) WITH ORDINALITY AS x(g, n) WHERE x.g = v_generation;
    SELECT coalesce(array_agg(nextval('orders_id_seq')), '{}') INTO v_ids FROM unnest(v_current);

    WITH firsts AS (
        SELECT p.e, min(p.s) AS s, count(*) > 1 AS split FROM unnest(p_part_entry, p_part_shard) AS p(e, s) GROUP BY p.e
    ), inserted AS (
        INSERT INTO orders AS o (id, sku, user_id, quantity, shard, fence, idempotency_key, gate_ref, split)
        OVERRIDING SYSTEM VALUE
        SELECT c.id, p_sku, p_users[c.n], p_quantities[c.n], f.s, 0, p_keys[c.n], p_refs[c.n], f.split
          FROM unnest(v_current, v_ids) AS c(n, id)
          JOIN firsts f ON f.e = c.n
         ORDER BY p_refs[c.n]
        ON CONFLICT DO NOTHING
        RETURNING o.id, o.split
    )
    SELECT coalesce(array_agg(i.id), '{}'), coalesce(array_agg(i.id) FILTER (WHERE i.split), '{}')
      INTO v_written, v_split FROM inserted i;

    IF cardinality(v_split) > 0 THEN
        INSERT INTO order_split_parts (order_id, sku, shard, quantity, fence)
        SELECT c.id, p_sku, p.s, p.t, 0
          FROM unnest(v_current, v_ids) AS c(n, id)
          JOIN unnest(p_part_entry, p_part_shard, p_part_take) AS p(e, s, t) ON p.e = c.n
         WHERE c.id = ANY (v_split);
    END IF;

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
END$$;

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
    v_split bigint[];       -- of those, the orders taken from several shards
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
        SELECT p.o, min(p.s) AS s, count(*) > 1 AS split FROM unnest(p_part_order, p_part_shard) AS p(o, s) GROUP BY p.o
    ), inserted AS (
        INSERT INTO orders AS o (id, sku, user_id, quantity, shard, fence, idempotency_key, state, pay_by, split, lease_until)
        OVERRIDING SYSTEM VALUE
        SELECT a.id, p_sku, p_users[a.n], p_quantities[a.n], f.s, p_fences[array_position(p_shards, f.s)], p_keys[a.n],
               CASE WHEN v_window IS NULL THEN 'paid' ELSE 'reserved' END, v_at + v_window,
               f.split, CASE WHEN NOT f.split THEN p_leases[array_position(p_shards, f.s)] END
          FROM unnest(v_accepted, v_ids) AS a(n, id)
          JOIN firsts f ON f.o = a.n
         ORDER BY CASE WHEN p_sorted THEN p_keys[a.n] END, a.n
        ON CONFLICT (sku, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING o.id, o.split
    )
    SELECT coalesce(array_agg(i.id), '{}'), coalesce(array_agg(i.id) FILTER (WHERE i.split), '{}')
      INTO v_written, v_split FROM inserted i;

    -- The parts of the orders taken from several shards; an order from one keeps its part in its
    -- own row (above).
    IF cardinality(v_split) > 0 THEN
        INSERT INTO order_split_parts (order_id, sku, shard, quantity, fence, lease_until)
        SELECT a.id, p_sku, p.s, p.t, b.f, b.l
          FROM unnest(v_accepted, v_ids) AS a(n, id)
          JOIN unnest(p_part_order, p_part_shard, p_part_take) AS p(o, s, t) ON p.o = a.n
          JOIN unnest(p_shards, p_fences, p_leases) AS b(s, f, l) ON b.s = p.s
         WHERE a.id = ANY (v_split);
    END IF;

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
END$$;
