-- metered_uses: the structural uses of metered runs, ordered after the run's offers
-- (step 1) in first_seen, as in metered_offers.
CREATE OR REPLACE VIEW metered_uses AS
SELECT
    uses.*,
    runs.run_order,
    {'run_order': runs.run_order, 'step': 1, 'seq': uses.seq} AS first_seen
FROM uses
JOIN runs USING (run_id)
WHERE runs.metered;
