-- seckill_expire_due as in 0015_expiry_reads_orders_due.sql, with its due list read first and its
-- orders locked one by one, so that no plan can walk every reserved order.
--
-- 0015 selected the orders to lock with `o.id IN (SELECT d.id FROM orders d WHERE d.state =
-- 'reserved' AND d.pay_by <= statement_timestamp() ORDER BY d.pay_by LIMIT p_limit) AND o.state =
-- 'reserved'`. Its plans are kept for the connection's life, and a plan made while orders_due was
-- empty (a sweeper starts with its instance, before the sale sells) drives that join from the
-- outside: a scan of orders_due for every reserved order, each probing the due list. Seen in
-- `scripts/bench.sh --only-capacity` with pg_stat_statements (track = all): 23 ms per sweep with
-- nothing due, 18 sweeps in an 8 s owned-shards cell, about 5% of PostgreSQL's time there. In psql,
-- a generic plan made on an empty orders_due, then 60 000 reserved orders not yet due: 121 321
-- shared buffers and 60 ms for a sweep that expires nothing. An owned sale's orders are all
-- reserved until paid, so the cost of every sweep grew with the sale.
--
-- Now the due orders are read alone, through orders_due (at most p_limit of them), ordered by
-- (sku, user_id, id), the order a batch locks buyers' counts in, and each is then locked by its
-- primary key, skipping one that another transaction holds (a payment, a cancellation, another
-- instance's sweep). seckill_end_order checks the state again under that lock, so an order paid
-- meanwhile is left alone, as before. The plans are generic and made with sequential scans off,
-- as the batch functions' are (0016), so they do not depend on the statistics of the moment: the
-- due list can only come from orders_due and the lock from orders_pkey. The test
-- `an_expiry_sweep_reads_the_due_orders_not_every_reserved_one` keeps it so.
--
-- The unchecked branch (the test control that also expires paid orders) is unchanged.
CREATE OR REPLACE FUNCTION seckill_expire_due(p_limit integer, p_checked boolean, p_direct boolean)
RETURNS TABLE (sku text, expired integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    r record;
    v_expired text[] := '{}';
BEGIN
    IF p_checked THEN
        FOR r IN
            SELECT d.id, d.sku
              FROM (SELECT o.id, o.sku, o.user_id FROM orders o
                     WHERE o.state = 'reserved' AND o.pay_by <= statement_timestamp()
                     ORDER BY o.pay_by LIMIT p_limit) AS d
             ORDER BY d.sku, d.user_id, d.id
        LOOP
            PERFORM FROM orders o WHERE o.id = r.id FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF seckill_end_order(r.id, 'expired', true, p_direct) THEN
                v_expired := v_expired || r.sku;
            END IF;
        END LOOP;
    ELSE
        -- The test control that also expires paid orders: paid orders are not in orders_due, so
        -- this one scans; it runs only in the tests that show what the state condition prevents.
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
