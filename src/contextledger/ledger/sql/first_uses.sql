-- first_uses: one row per metered run and piece it used: the piece's first use in the run
-- (lowest seq), and its position, as in first_offers (in-memory tables).
CREATE OR REPLACE VIEW first_uses AS
SELECT
    run_id,
    kind,
    piece_id,
    min(seq) AS seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + min(seq) AS position
FROM uses
JOIN runs USING (run_id)
WHERE runs.metered
GROUP BY run_id, runs.run_order, kind, piece_id;
