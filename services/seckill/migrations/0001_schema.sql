-- The sale, its shards, its orders. Table and column names of `shards` and `orders` are a
-- contract: audits read them directly.

CREATE TABLE sales (
    sku                 text PRIMARY KEY,
    total               integer NOT NULL CHECK (total >= 0),
    shard_count         integer NOT NULL CHECK (shard_count > 0),
    per_user_limit      integer NOT NULL CHECK (per_user_limit > 0),
    max_per_order       integer NOT NULL CHECK (max_per_order > 0),
    strategy            text NOT NULL,
    -- Changes on every create/reset, so instances notice a reset through Redis hints.
    generation          bigint NOT NULL,
    -- Claims or writes refused because a newer fence had been seen: stale lock holders.
    fence_rejections    bigint NOT NULL DEFAULT 0,
    -- Smallest quantity ever refused as sold out; stock at or above it is "stranded".
    min_refused_quantity integer,
    created_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shards (
    sku        text NOT NULL REFERENCES sales (sku) ON DELETE CASCADE,
    shard      integer NOT NULL CHECK (shard >= 0),
    initial    integer NOT NULL CHECK (initial >= 0),
    -- No CHECK (remaining >= 0): the unprotected strategies must be able to show what they do.
    remaining  integer NOT NULL,
    -- Highest fencing token seen: claims need fence < token, writes need fence = token.
    fence      bigint NOT NULL DEFAULT 0,
    -- Compare-and-set version for the optimistic strategy.
    version    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (sku, shard)
);

CREATE TABLE orders (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku             text NOT NULL REFERENCES sales (sku) ON DELETE CASCADE,
    user_id         text NOT NULL,
    quantity        integer NOT NULL CHECK (quantity > 0),
    -- The (first) shard the order was taken from and its fence (0 when unfenced).
    shard           integer NOT NULL,
    fence           bigint NOT NULL,
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX orders_idempotency ON orders (sku, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX orders_by_sku ON orders (sku);

-- How an order's units were taken: one row per shard. Almost every order has exactly one part;
-- the last units of a sale may be gathered from several shards.
CREATE TABLE order_parts (
    order_id  bigint NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    sku       text NOT NULL,
    shard     integer NOT NULL,
    quantity  integer NOT NULL CHECK (quantity > 0),
    fence     bigint NOT NULL,
    PRIMARY KEY (order_id, shard)
);
CREATE INDEX order_parts_by_shard ON order_parts (sku, shard);

-- Units bought per user, for the per-user limit (checked atomically with the order).
CREATE TABLE user_purchases (
    sku      text NOT NULL REFERENCES sales (sku) ON DELETE CASCADE,
    user_id  text NOT NULL,
    bought   integer NOT NULL,
    PRIMARY KEY (sku, user_id)
);

-- Commits one order in one round trip and one transaction; all or nothing.
--   p_guard = 'claim'   : the fenced read-modify-write in one transaction: claim each shard
--                         (fence < p_guards[i], setting fence = p_guards[i]), read it, check
--                         it has p_takes[i], write only WHERE fence = p_guards[i]. The claim is
--                         strict: a grant claims once, and an equal fence can only be a repeat
--                         handed out after Redis lost its counters, which must be refused (the
--                         service then re-seeds the counter above it).
--   p_guard = 'version' : each shard written only WHERE version = p_guards[i] (optimistic)
--   p_guard = 'none'    : written blindly (what an unfenced lock or no lock does)
--   p_guard = 'atomic'  : remaining = remaining - take WHERE remaining >= take (no read before)
-- p_new_remaining holds the values computed by the caller (ignored for 'atomic').
-- Errors: SK001 guard rejected (stale fence / version moved / stock short for 'atomic'),
--         SK003 stock short for 'claim' (DETAIL 'shard:remaining'),
--         SK002 per-user limit, 23505 idempotency key already used.
CREATE FUNCTION seckill_commit(
    p_sku text, p_user text, p_quantity integer, p_key text, p_limit integer,
    p_shards integer[], p_takes integer[], p_new_remaining integer[],
    p_guard text, p_guards bigint[]
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

    INSERT INTO orders (sku, user_id, quantity, shard, fence, idempotency_key)
    VALUES (p_sku, p_user, p_quantity, p_shards[1],
            CASE WHEN p_guard = 'claim' THEN p_guards[1] ELSE 0 END, p_key)
    RETURNING orders.id, orders.created_at INTO v_id, v_at;

    INSERT INTO order_parts (order_id, sku, shard, quantity, fence)
    SELECT v_id, p_sku, s, t, CASE WHEN p_guard = 'claim' THEN g ELSE 0 END
      FROM unnest(p_shards, p_takes, p_guards) AS x(s, t, g);

    RETURN QUERY SELECT v_id, v_at;
END
$$;
