-- run_totals_pieces: the selected runs' stored run totals (schema.RUN_TOTALS, one row per
-- run and piece; every run of the commits holding a selected run, so joined with the
-- selected metered runs by run_order) added up once, in one table the ledger reads three
-- times (a view would be scanned once for each). Per piece, a row with a null label holds
-- the counts, the runs that offered it, and the first offer and first use packed as
-- piece_offers and piece_uses pack them; a row per label holds the labelled runs that
-- offered the piece and the earliest credit, packed as in credit_piece_outcomes:
-- run_order * 2^32 + the label's first row among the labels as given (given_outcomes,
-- numbered as outcome_rows numbers outcomes: only its order among one run's labels
-- counts, and a pair given twice counts once). A temp table, made when the views are:
-- only for run totals.
CREATE OR REPLACE TEMP TABLE run_totals_pieces AS
WITH selected AS MATERIALIZED (
    SELECT run_id, run_order FROM runs WHERE metered
),
given AS (
    SELECT run_id, label, row_number() OVER () - 1 AS row_position
    FROM given_outcomes
),
run_labels AS (
    SELECT
        selected.run_order,
        given.label,
        min(given.row_position) AS label_position
    FROM given
    JOIN selected USING (run_id)
    GROUP BY selected.run_order, given.label
),
counts AS (
    SELECT
        kind,
        piece_id,
        CAST(NULL AS VARCHAR) AS label,
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
            AS first_use,
        CAST(NULL AS BIGINT) AS runs,
        CAST(NULL AS BIGINT) AS first_credit
    FROM run_totals
    JOIN selected ON selected.run_order = run_totals.run_order
    GROUP BY kind, piece_id
),
credit AS (
    SELECT
        kind,
        piece_id,
        label,
        NULL AS offered,
        NULL AS approx_tokens_spent,
        NULL AS runs_seen,
        NULL AS first_offer,
        NULL AS used,
        NULL AS used_tool_called,
        NULL AS used_skill_activated,
        NULL AS used_answer_slice,
        NULL AS used_tool_executed,
        NULL AS first_use,
        count(*) AS runs,
        min(CAST(run_totals.run_order AS BIGINT) * 4294967296 + label_position) AS first_credit
    FROM run_totals
    JOIN run_labels ON run_labels.run_order = run_totals.run_order
    WHERE first_offer_seq IS NOT NULL
    GROUP BY kind, piece_id, label
)
SELECT * FROM counts
UNION ALL
SELECT * FROM credit;
