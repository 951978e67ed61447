-- seckill_expire_due as in 0013_order_lifecycle.sql, with its work list read from orders_due.
--
-- 0013 selected `state = 'reserved' AND pay_by <= clock_timestamp() ORDER BY sku, user_id, id`.
-- clock_timestamp() is volatile, so it cannot bound an index scan, and the planner answered the
-- ORDER BY from orders_by_sku: every sweep of every instance walked every order of every sale
-- (871 793 orders on the development database, every second), which showed as PostgreSQL CPU on
-- every request in `make bench`, `GET /healthz` included.
--
-- Now the due orders are found first, through orders_due (pay_by, reserved only) bounded by the
-- statement's start time, which is stable: a sweep expires an order at most one statement later
-- than the clock would, never earlier. Only then are they ordered by (sku, user_id, id), the order
-- a batch locks buyers' counts in, and locked, skipping those another transaction holds.
CREATE OR REPLACE FUNCTION seckill_expire_due(p_limit integer, p_checked boolean, p_direct boolean)
RETURNS TABLE (sku text, expired integer)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_expired text[] := '{}';
BEGIN
    IF p_checked THEN
        FOR r IN
            SELECT o.id, o.sku FROM orders o
             WHERE o.id IN (SELECT d.id FROM orders d
                             WHERE d.state = 'reserved' AND d.pay_by <= statement_timestamp()
                             ORDER BY d.pay_by LIMIT p_limit)
               AND o.state = 'reserved'
             ORDER BY o.sku, o.user_id, o.id
               FOR UPDATE SKIP LOCKED
        LOOP
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
