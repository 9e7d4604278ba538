-- piece_offers: per piece, how often it was offered, its estimated token cost, the metered
-- runs that offered it, and its first offer. first_seen orders every offer and use the way
-- the reference inserted ledger rows, packed in one BIGINT: runs in run_order; within a
-- run, its offers (by seq) before its uses (by seq + 2^31; seq is below 2^31).
CREATE OR REPLACE VIEW piece_offers AS
WITH counted AS (
    SELECT
        kind,
        piece_id,
        count(*) AS offered,
        CAST(sum(approx_tokens) AS BIGINT) AS approx_tokens_spent
    FROM metered_offers
    GROUP BY kind, piece_id
),
firsts AS (
    SELECT
        kind,
        piece_id,
        count(*) AS runs_seen,
        arg_min(run_id, position) AS first_run,
        arg_min(seq, position) AS first_seq
    FROM first_offers
    GROUP BY kind, piece_id
)
SELECT
    kind,
    piece_id,
    offered,
    approx_tokens_spent,
    runs_seen,
    CAST(runs.run_order AS BIGINT) * 4294967296 + first_seq AS first_seen
FROM counted
JOIN firsts USING (kind, piece_id)
JOIN runs ON runs.run_id = firsts.first_run;
