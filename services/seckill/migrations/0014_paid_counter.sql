-- The units paid per sale, counted where an order becomes paid, so the public live view (and the sale
-- page that reads it) shows reserved, paid and returned without reading an order: that view must not
-- be a way to run an aggregate over every order (the audit's, which is gated). With the shards and
-- stock_returns, one snapshot of this counter gives the rest: reserved = total - remaining - pending
-- returns - paid.
--
-- A sale's count is spread over eight slot rows (slot = order id % 8), so payments of one sale
-- mostly lock different rows rather than queueing on one.
CREATE TABLE sale_paid (
    -- A deleted sale takes its count with it (a reset deletes it with the orders).
    sku    text NOT NULL REFERENCES sales (sku) ON DELETE CASCADE,
    slot   smallint NOT NULL,
    units  bigint NOT NULL,
    PRIMARY KEY (sku, slot)
);

-- Orders paid before this migration. Only a sale with a payment window has reserved orders; the
-- others' orders are paid when bought, and the live view counts their sold units as paid.
INSERT INTO sale_paid (sku, slot, units)
SELECT o.sku, (o.id % 8)::smallint, sum(o.quantity)
  FROM orders o JOIN sales sa ON sa.sku = o.sku
 WHERE sa.payment_window IS NOT NULL AND o.state = 'paid'
 GROUP BY 1, 2;

-- seckill_settle as in 0013_order_lifecycle.sql, counting the units of the order it pays in the
-- transaction that pays it. Nothing else makes an order paid. (The test control that lets expiry end
-- paid orders, seckill_end_order's p_checked = false, leaves them counted: the audit shows it.)
CREATE OR REPLACE FUNCTION seckill_settle(p_order bigint, p_user text, p_to text, p_checked boolean, p_direct boolean)
RETURNS TABLE (sku text, quantity integer, state text, pay_by timestamptz, changed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_changed boolean := false;
    v_due boolean;
    v_sku text;
    v_quantity integer;
BEGIN
    -- The row lock orders this call with the sweeper and any other transition of the order.
    SELECT o.pay_by <= clock_timestamp(), o.sku, o.quantity INTO v_due, v_sku, v_quantity
      FROM orders o WHERE o.id = p_order AND o.user_id = p_user AND o.state = 'reserved' FOR UPDATE;
    IF FOUND THEN
        IF v_due THEN
            v_changed := seckill_end_order(p_order, 'expired', true, p_direct);
        ELSIF p_to = 'paid' THEN
            UPDATE orders o SET state = 'paid', settled_at = clock_timestamp() WHERE o.id = p_order;
            -- The constraint by name: `sku` alone would also name this function's result column.
            INSERT INTO sale_paid AS c (sku, slot, units) VALUES (v_sku, (p_order % 8)::smallint, v_quantity)
            ON CONFLICT ON CONSTRAINT sale_paid_pkey DO UPDATE SET units = c.units + EXCLUDED.units;
            v_changed := true;
        ELSE
            v_changed := seckill_end_order(p_order, p_to, p_checked, p_direct);
        END IF;
    END IF;
    RETURN QUERY SELECT o.sku, o.quantity, o.state, o.pay_by, v_changed FROM orders o WHERE o.id = p_order AND o.user_id = p_user;
END
$$;
