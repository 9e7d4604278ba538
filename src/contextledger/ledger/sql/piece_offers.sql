-- piece_offers: per piece, how often it was offered, its estimated token cost, the distinct
-- metered runs that offered it, and its first offer (see metered_offers).
CREATE OR REPLACE VIEW piece_offers AS
SELECT
    kind,
    piece_id,
    count(*) AS offered,
    CAST(sum(approx_tokens) AS BIGINT) AS approx_tokens_spent,
    count(DISTINCT run_id) AS runs_seen,
    min(first_seen) AS first_seen
FROM metered_offers
GROUP BY kind, piece_id;
