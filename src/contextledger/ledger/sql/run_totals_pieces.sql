-- run_totals_pieces: the selected runs' stored run totals (schema.RUN_TOTALS, one row per
-- run and piece; every run of the commits holding a selected run, so joined with the
-- selected metered runs by run_order) added up in one pass, into one table the ledger
-- reads three times (a view would be scanned once for each). Each row is keyed by its
-- run's label set (the run's distinct labels, numbered; 0 for none), so one group-by by
-- piece and label set gives the counts and the outcome credit. Per piece, a row with a
-- null label holds the counts, the runs that offered it, and the first offer and first
-- use packed as piece_offers and piece_uses pack them; a row per label holds the
-- labelled runs that offered the piece and the earliest credit, packed as in
-- credit_piece_outcomes: run_order * 2^32 + the label's first row among the labels as
-- given (given_outcomes, numbered as outcome_rows numbers outcomes: only its order among
-- one run's labels counts, and a pair given twice counts once), in the earliest run
-- that offered the piece with the label. A temp table, made when the views are: only
-- for run totals.
CREATE OR REPLACE TEMP TABLE run_totals_pieces AS
WITH selected AS MATERIALIZED (
    SELECT run_id, run_order FROM runs WHERE metered
),
given AS (
    SELECT run_id, label, row_number() OVER () - 1 AS row_position
    FROM given_outcomes
),
run_labels AS MATERIALIZED (
    SELECT selected.run_order, given.label, given.row_position
    FROM given
    JOIN selected USING (run_id)
),
codes AS MATERIALIZED (
    SELECT label, row_number() OVER (ORDER BY label) AS code
    FROM (SELECT DISTINCT label FROM run_labels)
),
run_sets AS MATERIALIZED (
    SELECT run_order, list_sort(list(DISTINCT code)) AS codes
    FROM run_labels
    JOIN codes USING (label)
    GROUP BY run_order
),
label_sets AS MATERIALIZED (
    SELECT codes, row_number() OVER (ORDER BY codes) AS label_set
    FROM (SELECT DISTINCT codes FROM run_sets)
),
keyed AS MATERIALIZED (
    SELECT selected.run_order, coalesce(label_sets.label_set, 0) AS label_set
    FROM selected
    LEFT JOIN run_sets USING (run_order)
    LEFT JOIN label_sets USING (codes)
),
grouped AS MATERIALIZED (
    SELECT
        kind,
        piece_id,
        keyed.label_set,
        sum(offered) AS offered,
        sum(approx_tokens_spent) AS approx_tokens_spent,
        count(first_offer_seq) AS runs_seen,
        min(CAST(run_totals.run_order AS BIGINT) * 4294967296 + first_offer_seq) AS first_offer,
        sum(used) AS used,
        sum(used_tool_called) AS used_tool_called,
        sum(used_skill_activated) AS used_skill_activated,
        sum(used_answer_slice) AS used_answer_slice,
        sum(used_tool_executed) AS used_tool_executed,
        min(CAST(run_totals.run_order AS BIGINT) * 4294967296 + 2147483648 + first_use_seq)
            AS first_use
    FROM run_totals
    JOIN keyed ON keyed.run_order = run_totals.run_order
    GROUP BY kind, piece_id, keyed.label_set
),
counts AS (
    SELECT
        kind,
        piece_id,
        CAST(NULL AS VARCHAR) AS label,
        CAST(sum(offered) AS BIGINT) AS offered,
        CAST(sum(approx_tokens_spent) AS BIGINT) AS approx_tokens_spent,
        CAST(sum(runs_seen) AS BIGINT) AS runs_seen,
        min(first_offer) AS first_offer,
        CAST(sum(used) AS BIGINT) AS used,
        CAST(sum(used_tool_called) AS BIGINT) AS used_tool_called,
        CAST(sum(used_skill_activated) AS BIGINT) AS used_skill_activated,
        CAST(sum(used_answer_slice) AS BIGINT) AS used_answer_slice,
        CAST(sum(used_tool_executed) AS BIGINT) AS used_tool_executed,
        min(first_use) AS first_use,
        CAST(NULL AS BIGINT) AS runs,
        CAST(NULL AS BIGINT) AS first_credit
    FROM grouped
    GROUP BY kind, piece_id
),
members AS (
    SELECT label_set, label
    FROM (SELECT label_set, unnest(codes) AS code FROM label_sets)
    JOIN codes USING (code)
),
credited AS (
    SELECT
        grouped.kind,
        grouped.piece_id,
        members.label,
        CAST(sum(grouped.runs_seen) AS BIGINT) AS runs,
        min(grouped.first_offer // 4294967296) AS run_order
    FROM grouped
    JOIN members USING (label_set)
    WHERE grouped.runs_seen > 0
    GROUP BY grouped.kind, grouped.piece_id, members.label
),
positions AS (
    SELECT run_order, label, min(row_position) AS label_position
    FROM run_labels
    SEMI JOIN credited USING (run_order, label)
    GROUP BY run_order, label
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
        runs,
        credited.run_order * 4294967296 + positions.label_position AS first_credit
    FROM credited
    JOIN positions USING (run_order, label)
)
SELECT * FROM counts
UNION ALL
SELECT * FROM credit;
