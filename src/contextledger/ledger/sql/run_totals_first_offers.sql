-- first_offers over an archive's stored run totals of the selected runs: a row per run and
-- piece it offered, the piece's first offer in the run, positioned as in first_offers
-- (for queries of the steps: the ledger credits the labels from run_totals_pieces).
CREATE OR REPLACE VIEW first_offers AS
SELECT
    run_totals.run_id,
    kind,
    piece_id,
    first_offer_seq AS seq,
    CAST(run_totals.run_order AS BIGINT) * 4294967296 + first_offer_seq AS position
FROM run_totals
JOIN runs ON runs.run_order = run_totals.run_order
WHERE first_offer_seq IS NOT NULL AND runs.metered;
