-- piece_totals over the selected runs' run totals, for a run-level filter (run ids, a
-- label): run_totals_pieces' counts, one row per piece, so totals_piece_offers and
-- totals_piece_uses read them as they read the stored piece totals.
CREATE OR REPLACE VIEW piece_totals AS
SELECT * EXCLUDE (label, runs, first_credit)
FROM run_totals_pieces
WHERE label IS NULL;
