-- first_offers: one row per metered run and piece it offered: the piece's first offer in
-- the run (lowest seq), and its position, which orders these rows as the runs (run_order)
-- and each run's offers (seq) come (in-memory tables; see archive_first_offers).
CREATE OR REPLACE VIEW first_offers AS
SELECT
    run_id,
    kind,
    piece_id,
    min(seq) AS seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + min(seq) AS position
FROM offers
JOIN runs USING (run_id)
WHERE runs.metered
GROUP BY run_id, runs.run_order, kind, piece_id;
