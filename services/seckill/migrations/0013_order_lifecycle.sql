-- The order lifecycle. An order of an owned sale is `reserved` when it is bought and stays so until
-- it is `paid`, or `cancelled` by its buyer, or `expired` when its payment window closes. The units
-- of a cancelled or expired order go back to the stock exactly once, and only through the shard's
-- current owner: an owner writes its shards' stock as an absolute value from memory, so a return
-- written to `shards` by anyone else would be overwritten by its next batch.
--
-- So a return is a row in stock_returns, written in the transaction that ends the order. The
-- owner folds its shards' pending returns into the stock in its next fenced batch, in the same
-- statement that marks them applied; a shard nobody owns has them folded by the claim that takes
-- it next. Nothing but a claim or a fenced batch writes returned units to a shard.
--
-- Numbered 13: versions 2 to 12 were the migrations squashed into 0001, and a database that applied
-- them has those versions recorded (services/seckill/src/store/migrate.rs).

-- NULL: the sale's orders are final when bought (the lab's strategies, which compare how a
-- purchase is protected, not what follows it).
ALTER TABLE sales ADD COLUMN payment_window interval;

ALTER TABLE orders
    ADD COLUMN state text NOT NULL DEFAULT 'paid' CHECK (state IN ('reserved', 'paid', 'cancelled', 'expired')),
    -- While reserved: when the payment window closes, on the database's clock.
    ADD COLUMN pay_by timestamptz,
    ADD COLUMN settled_at timestamptz;
-- The sweeper's work list: reserved orders by deadline.
CREATE INDEX orders_due ON orders (pay_by) WHERE state = 'reserved';

-- One row per part of an order that was cancelled or expired. The primary key is the "exactly
-- once": an order part returns its units at most once, whatever runs twice.
CREATE TABLE stock_returns (
    order_id       bigint NOT NULL,
    sku            text NOT NULL,
    shard          integer NOT NULL,
    quantity       integer NOT NULL CHECK (quantity > 0),
    returned_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- NULL while pending; then the fence of the owner whose claim or batch folded it into the stock.
    applied_fence  bigint,
    applied_at     timestamptz,
    PRIMARY KEY (order_id, shard)
);
CREATE INDEX stock_returns_pending ON stock_returns (sku, shard) WHERE applied_fence IS NULL;
-- The live view's count of returned units, and a reset's delete.
CREATE INDEX stock_returns_by_sku ON stock_returns (sku);

-- The key behind each order's secret (an HMAC of the order, handed to its buyer at purchase):
-- generated here, so every instance of one database shares it without configuration.
CREATE TABLE service_keys (
    name  text PRIMARY KEY,
    key   bytea NOT NULL
);
INSERT INTO service_keys (name, key)
VALUES ('order_secret', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- Ends a reserved order as p_to ('cancelled' or 'expired') and records its return, in the caller's
-- transaction: the order's parts become pending returns and its units leave its buyer's count, so
-- the buyer may buy again. False when the order was not reserved (paid, or already ended): then
-- nothing changes. p_checked = false is the control that drops the state condition, so a paid
-- order can be expired and its units sold twice. p_direct = true is the control that adds the
-- units to the shard at once, outside the owner (`remaining = remaining + q`), where the owner's
-- next absolute write loses them.
CREATE FUNCTION seckill_end_order(p_order bigint, p_to text, p_checked boolean, p_direct boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_sku text;
    v_user text;
    v_quantity integer;
BEGIN
    UPDATE orders o SET state = p_to, settled_at = clock_timestamp()
     WHERE o.id = p_order AND (o.state = 'reserved' OR (NOT p_checked AND o.state = 'paid'))
    RETURNING o.sku, o.user_id, o.quantity INTO v_sku, v_user, v_quantity;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_direct THEN
        UPDATE shards s SET remaining = s.remaining + p.quantity
          FROM order_parts p WHERE p.order_id = p_order AND s.sku = p.sku AND s.shard = p.shard;
        INSERT INTO stock_returns (order_id, sku, shard, quantity, applied_fence, applied_at)
        SELECT p.order_id, p.sku, p.shard, p.quantity, 0, clock_timestamp() FROM order_parts p WHERE p.order_id = p_order
        ON CONFLICT DO NOTHING;
    ELSE
        INSERT INTO stock_returns (order_id, sku, shard, quantity)
        SELECT p.order_id, p.sku, p.shard, p.quantity FROM order_parts p WHERE p.order_id = p_order
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE user_purchases u SET bought = u.bought - v_quantity WHERE u.sku = v_sku AND u.user_id = v_user;
    RETURN true;
END
$$;

-- A buyer's transition of its order: p_to 'paid' (only while the window is open, on this
-- database's clock) or 'cancelled'. A reserved order whose window has closed is expired here and
-- then, as the sweeper would. Answers the order afterwards and whether this call changed it
-- (expiring it included); no row when the order does not exist for that user.
CREATE FUNCTION seckill_settle(p_order bigint, p_user text, p_to text, p_checked boolean, p_direct boolean)
RETURNS TABLE (sku text, quantity integer, state text, pay_by timestamptz, changed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_changed boolean := false;
    v_due boolean;
BEGIN
    -- The row lock orders this call with the sweeper and any other transition of the order.
    SELECT o.pay_by <= clock_timestamp() INTO v_due
      FROM orders o WHERE o.id = p_order AND o.user_id = p_user AND o.state = 'reserved' FOR UPDATE;
    IF FOUND THEN
        IF v_due THEN
            v_changed := seckill_end_order(p_order, 'expired', true, p_direct);
        ELSIF p_to = 'paid' THEN
            UPDATE orders o SET state = 'paid', settled_at = clock_timestamp() WHERE o.id = p_order;
            v_changed := true;
        ELSE
            v_changed := seckill_end_order(p_order, p_to, p_checked, p_direct);
        END IF;
    END IF;
    RETURN QUERY SELECT o.sku, o.quantity, o.state, o.pay_by, v_changed FROM orders o WHERE o.id = p_order AND o.user_id = p_user;
END
$$;

-- The sweeper: expires up to p_limit reserved orders whose window has closed, skipping orders
-- another transaction holds (a payment in flight, another sweeper). Any instance may run it, as
-- often as it likes: an order already ended is not reserved any more, so a late or repeated
-- sweep changes nothing. Orders are taken in (sku, user) order, so the buyers' counts are locked
-- in the same ascending order a batch takes them in. Answers the SKUs whose stock came back.
CREATE FUNCTION seckill_expire_due(p_limit integer, p_checked boolean, p_direct boolean)
RETURNS TABLE (sku text, expired integer)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_expired text[] := '{}';
BEGIN
    -- Two loops rather than one WHERE with `OR NOT p_checked`: a cached plan of that cannot use
    -- orders_due, and scans every order of every sale each round.
    IF p_checked THEN
        FOR r IN
            SELECT o.id, o.sku FROM orders o
             WHERE o.state = 'reserved' AND o.pay_by <= clock_timestamp()
             ORDER BY o.sku, o.user_id, o.id
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED
        LOOP
            IF seckill_end_order(r.id, 'expired', true, p_direct) THEN
                v_expired := v_expired || r.sku;
            END IF;
        END LOOP;
    ELSE
        FOR r IN
            SELECT o.id, o.sku FROM orders o
             WHERE o.state IN ('reserved', 'paid') AND o.pay_by <= clock_timestamp()
             ORDER BY o.sku, o.user_id, o.id
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED
        LOOP
            IF seckill_end_order(r.id, 'expired', false, p_direct) THEN
                v_expired := v_expired || r.sku;
            END IF;
        END LOOP;
    END IF;
    RETURN QUERY SELECT x.s, count(*)::integer FROM unnest(v_expired) AS x(s) GROUP BY x.s;
END
$$;

-- Folds the pending returns of p_shard into its stock for the claim p_fence, in one statement
-- (the same snapshot marks and sums them: a return committed meanwhile stays pending for the
-- next fold). Returns the units folded. Only called with the shard's row locked by a claim or a
-- fenced batch of that fence.
CREATE FUNCTION seckill_fold_returns(p_sku text, p_shards integer[], p_fences bigint[])
RETURNS TABLE (shard integer, units integer)
LANGUAGE sql AS $$
    WITH applied AS (
        UPDATE stock_returns r SET applied_fence = x.f, applied_at = clock_timestamp()
          FROM unnest(p_shards, p_fences) AS x(s, f)
         WHERE r.sku = p_sku AND r.shard = x.s AND r.applied_fence IS NULL
        RETURNING r.shard, r.quantity
    )
    SELECT a.shard, sum(a.quantity)::integer FROM applied a GROUP BY a.shard
$$;

-- seckill_claim, now folding the shard's pending returns into the stock it hands the new owner.
CREATE OR REPLACE FUNCTION seckill_claim(p_sku text, p_generation bigint, p_shard integer, p_fence bigint, p_owner text)
RETURNS TABLE (remaining integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_remaining integer;
    v_folded integer;
BEGIN
    UPDATE shards s SET fence = p_fence, owner = p_owner
      FROM sales sa
     WHERE s.sku = p_sku AND s.shard = p_shard AND s.fence < p_fence
       AND sa.sku = s.sku AND sa.generation = p_generation
    RETURNING s.remaining INTO v_remaining;
    IF FOUND THEN
        INSERT INTO shard_claims (sku, shard, fence, owner) VALUES (p_sku, p_shard, p_fence, p_owner);
        SELECT coalesce(sum(f.units), 0) INTO v_folded FROM seckill_fold_returns(p_sku, ARRAY[p_shard], ARRAY[p_fence]) AS f;
        IF v_folded > 0 THEN
            UPDATE shards s SET remaining = s.remaining + v_folded WHERE s.sku = p_sku AND s.shard = p_shard;
        END IF;
        RETURN QUERY SELECT v_remaining + v_folded;
    ELSE
        UPDATE sales sa SET fence_rejections = sa.fence_rejections + 1
         WHERE sa.sku = p_sku AND sa.generation = p_generation
           AND EXISTS (SELECT 1 FROM shards s WHERE s.sku = p_sku AND s.shard = p_shard AND s.fence >= p_fence);
    END IF;
END
$$;

-- Its result gains a column, which CREATE OR REPLACE cannot do.
DROP FUNCTION seckill_commit_batch(text, bigint, integer, boolean, boolean, integer[], bigint[], integer[], timestamptz[],
    text[], integer[], text[], integer[], integer[], integer[]);

-- seckill_commit_batch as in 0001_schema.sql (read the reasons there), plus the lifecycle: it folds
-- its shards' pending returns into the stock it writes, answering a 'returned' row per shard with the
-- units so the owner adds them to its memory, and writes an owned sale's orders reserved until pay_by.
CREATE FUNCTION seckill_commit_batch(
    p_sku text, p_generation bigint, p_limit integer, p_fenced boolean, p_sorted boolean,
    p_shards integer[], p_fences bigint[], p_committed integer[], p_leases timestamptz[],
    p_users text[], p_quantities integer[], p_keys text[],
    p_part_order integer[], p_part_shard integer[], p_part_take integer[]
) RETURNS TABLE (ord integer, outcome text, order_id bigint, created_at timestamptz, shard integer, units integer)
LANGUAGE plpgsql AS $$
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
    SELECT coalesce(array_agg(d.n), '{}') INTO v_duplicate
      FROM (SELECT x.n, x.k, row_number() OVER (PARTITION BY x.k ORDER BY x.n) AS nth
              FROM unnest(p_keys, p_quantities) WITH ORDINALITY AS x(k, q, n)
             WHERE x.k IS NOT NULL AND x.q <= p_limit) AS d
     WHERE d.nth > 1 OR EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND o.idempotency_key = d.k);

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

ALTER FUNCTION seckill_commit_batch(text, bigint, integer, boolean, boolean, integer[], bigint[], integer[], timestamptz[],
    text[], integer[], text[], integer[], integer[], integer[]) SET plan_cache_mode = force_generic_plan;

-- A deleted sale takes its returns with it too.
CREATE OR REPLACE FUNCTION seckill_sale_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM order_parts WHERE sku = OLD.sku;
    DELETE FROM orders WHERE sku = OLD.sku;
    DELETE FROM user_purchases WHERE sku = OLD.sku;
    DELETE FROM stock_returns WHERE sku = OLD.sku;
    RETURN OLD;
END
$$;
