-- metered_offers: the offers of metered runs, each with its run's input position.
-- first_seen orders every offer and use the way the reference inserted ledger rows:
-- runs in run_order; within a run, its offers (step 0, by seq) before its uses (step 1).
CREATE OR REPLACE VIEW metered_offers AS
SELECT
    offers.*,
    runs.run_order,
    {'run_order': runs.run_order, 'step': 0, 'seq': offers.seq} AS first_seen
FROM offers
JOIN runs USING (run_id)
WHERE runs.metered;
