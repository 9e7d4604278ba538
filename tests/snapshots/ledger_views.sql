-- metered_offers: the offers of metered runs, each with its run's input position.
-- first_seen orders every offer and use the way the reference inserted ledger rows:
-- runs in run_order; within a run, its offers (step 0, by seq) before its uses (step 1).
CREATE OR REPLACE VIEW metered_offers AS
SELECT
    offers.*,
    runs.run_order,
    {'run_order': runs.run_order, 'step': 0, 'seq': offers.seq} AS first_seen
FROM offers
JOIN runs USING (run_id)
WHERE runs.metered;

-- metered_uses: the structural uses of metered runs, ordered after the run's offers
-- (step 1) in first_seen, as in metered_offers.
CREATE OR REPLACE VIEW metered_uses AS
SELECT
    uses.*,
    runs.run_order,
    {'run_order': runs.run_order, 'step': 1, 'seq': uses.seq} AS first_seen
FROM uses
JOIN runs USING (run_id)
WHERE runs.metered;

-- outcome_positions: the outcome labels with their 0-based row position in the outcomes
-- table. A window with an empty OVER () over a single table keeps the table's row order
-- (DuckDB's order preservation), so the position is the row's place in the Arrow table.
CREATE OR REPLACE VIEW outcome_positions AS
SELECT
    run_id,
    label,
    row_number() OVER () - 1 AS label_position
FROM outcomes;

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

-- piece_uses: per piece, its structural uses in all and by signal (the reference's usedVia),
-- and its first use (see metered_uses).
CREATE OR REPLACE VIEW piece_uses AS
SELECT
    kind,
    piece_id,
    count(*) AS used,
    count(*) FILTER (WHERE signal = 'tool-called') AS used_tool_called,
    count(*) FILTER (WHERE signal = 'skill-activated') AS used_skill_activated,
    count(*) FILTER (WHERE signal = 'answer-slice(slot)') AS used_answer_slice,
    min(first_seen) AS first_seen
FROM metered_uses
GROUP BY kind, piece_id;

-- piece_outcomes: per piece, [{label, runs}] over the labelled metered runs that offered it
-- (association, not cause). A run's label is counted once per outcome row, as recordOutcome
-- does. Labels are listed in the order the reference recorded them: by the first
-- (run_order, label_position) that credited the label to the piece.
CREATE OR REPLACE VIEW piece_outcomes AS
WITH offered_in_run AS (
    SELECT DISTINCT run_id, run_order, kind, piece_id
    FROM metered_offers
),
credited AS (
    SELECT
        offered_in_run.kind,
        offered_in_run.piece_id,
        outcome_positions.label,
        count(*) AS runs,
        min({
            'run_order': offered_in_run.run_order,
            'label_position': outcome_positions.label_position
        }) AS first_credit
    FROM offered_in_run
    JOIN outcome_positions USING (run_id)
    GROUP BY offered_in_run.kind, offered_in_run.piece_id, outcome_positions.label
)
SELECT
    kind,
    piece_id,
    list({'label': label, 'runs': runs} ORDER BY first_credit) AS outcomes
FROM credited
GROUP BY kind, piece_id;

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
    runs_seen,
    outcomes,
    CASE WHEN offered > 0 THEN CAST(used AS DOUBLE) / CAST(offered AS DOUBLE) ELSE 0.0 END
        AS earn_rate,
    row_number() OVER (ORDER BY first_seen) - 1 AS insertion_order
FROM pieces
ORDER BY insertion_order;

-- ledger_rows: the ledger worst earn rate first, ties in insertion order (the reference's
-- stable sort); the rows and columns of compute_ledger(...).rows().
CREATE OR REPLACE VIEW ledger_rows AS
SELECT * EXCLUDE (insertion_order)
FROM ledger
ORDER BY earn_rate, insertion_order;
