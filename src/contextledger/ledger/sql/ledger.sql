-- ledger: one row per (kind, piece) in insertion order, the rows of compute_ledger(...).frame.
-- insertion_order is the row's 0-based place in that order: the piece's first offer or use
-- (runs in run_order; within a run, offers by seq, then uses by seq).
-- earn_rate = used / offered as DOUBLE, 0 when the piece was never offered.
CREATE OR REPLACE VIEW ledger AS
WITH pieces AS (
    SELECT
        piece_id AS id,
        kind,
        coalesce(piece_offers.offered, 0) AS offered,
        coalesce(piece_offers.approx_tokens_spent, 0) AS approx_tokens_spent,
        coalesce(piece_uses.used, 0) AS used,
        coalesce(piece_uses.used_tool_called, 0) AS used_tool_called,
        coalesce(piece_uses.used_skill_activated, 0) AS used_skill_activated,
        coalesce(piece_uses.used_answer_slice, 0) AS used_answer_slice,
        coalesce(piece_uses.used_tool_executed, 0) AS used_tool_executed,
        coalesce(piece_offers.runs_seen, 0) AS runs_seen,
        coalesce(piece_outcomes.outcomes, []) AS outcomes,
        least(piece_offers.first_seen, piece_uses.first_seen) AS first_seen
    FROM piece_offers
    FULL JOIN piece_uses USING (kind, piece_id)
    LEFT JOIN piece_outcomes USING (kind, piece_id)
)
SELECT
    id,
    kind,
    offered,
    approx_tokens_spent,
    used,
    used_tool_called,
    used_skill_activated,
    used_answer_slice,
    used_tool_executed,
    runs_seen,
    outcomes,
    CASE WHEN offered > 0 THEN CAST(used AS DOUBLE) / CAST(offered AS DOUBLE) ELSE 0.0 END
        AS earn_rate,
    row_number() OVER (ORDER BY first_seen) - 1 AS insertion_order
FROM pieces
ORDER BY insertion_order;
