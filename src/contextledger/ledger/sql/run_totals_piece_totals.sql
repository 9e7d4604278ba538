-- piece_totals over an archive's stored run totals (schema.RUN_TOTALS: one row per run and
-- piece; every run of the commits holding a selected run) of the selected runs (joined
-- with runs by run_order), for a run-level filter (run ids, a label): their sums, the
-- runs that offered the piece, and the first offer and first use packed as piece_offers
-- and piece_uses pack them, so totals_piece_offers and totals_piece_uses read them as
-- they read the stored piece totals.
CREATE OR REPLACE VIEW piece_totals AS
SELECT
    kind,
    piece_id,
    CAST(sum(offered) AS BIGINT) AS offered,
    CAST(sum(approx_tokens_spent) AS BIGINT) AS approx_tokens_spent,
    count(first_offer_seq) AS runs_seen,
    min(CAST(run_totals.run_order AS BIGINT) * 4294967296 + first_offer_seq) AS first_offer,
    CAST(sum(used) AS BIGINT) AS used,
    CAST(sum(used_tool_called) AS BIGINT) AS used_tool_called,
    CAST(sum(used_skill_activated) AS BIGINT) AS used_skill_activated,
    CAST(sum(used_answer_slice) AS BIGINT) AS used_answer_slice,
    CAST(sum(used_tool_executed) AS BIGINT) AS used_tool_executed,
    min(CAST(run_totals.run_order AS BIGINT) * 4294967296 + 2147483648 + first_use_seq)
        AS first_use
FROM run_totals
JOIN runs ON runs.run_order = run_totals.run_order
WHERE runs.metered
GROUP BY kind, piece_id;
