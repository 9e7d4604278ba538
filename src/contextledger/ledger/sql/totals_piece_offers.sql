-- piece_offers over an archive's stored piece totals (schema.PIECE_TOTALS: one row per
-- commit, partition and piece): their sums, and the earliest first offer as first_seen
-- (packed as in piece_offers). Pieces a part never offered have no first_offer there.
CREATE OR REPLACE VIEW piece_offers AS
SELECT
    kind,
    piece_id,
    CAST(sum(offered) AS BIGINT) AS offered,
    CAST(sum(approx_tokens_spent) AS BIGINT) AS approx_tokens_spent,
    CAST(sum(runs_seen) AS BIGINT) AS runs_seen,
    min(first_offer) AS first_seen
FROM piece_totals
WHERE first_offer IS NOT NULL
GROUP BY kind, piece_id;
