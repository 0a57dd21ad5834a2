-- the PostgreSQL table of orders.py: one row per customer and minute, upserted by that key
CREATE TABLE IF NOT EXISTS customer_minute_totals (
    customer    text        NOT NULL,
    minute      timestamptz NOT NULL,
    orders      integer     NOT NULL,
    total_cents bigint      NOT NULL,
    PRIMARY KEY (customer, minute)
);
