-- ledger_rows: the ledger worst earn rate first, ties in insertion order (the reference's
-- stable sort); the rows and columns of compute_ledger(...).rows().
CREATE OR REPLACE VIEW ledger_rows AS
SELECT * EXCLUDE (insertion_order)
FROM ledger
ORDER BY earn_rate, insertion_order;
