-- metered_offers: every offer of a metered run (in-memory tables; see archive_metered_offers).
CREATE OR REPLACE VIEW metered_offers AS
SELECT offers.*
FROM offers
WHERE run_id IN (SELECT run_id FROM runs WHERE metered);

-- metered_uses: every structural use of a metered run (in-memory tables).
CREATE OR REPLACE VIEW metered_uses AS
SELECT uses.*
FROM uses
WHERE run_id IN (SELECT run_id FROM runs WHERE metered);

-- first_offers: one row per metered run and piece it offered: the piece's first offer in
-- the run (lowest seq), and its position, which orders these rows as the runs (run_order)
-- and each run's offers (seq) come (in-memory tables; see archive_first_offers).
CREATE OR REPLACE VIEW first_offers AS
SELECT
    run_id,
    kind,
    piece_id,
    min(seq) AS seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + min(seq) AS position
FROM offers
JOIN runs USING (run_id)
WHERE runs.metered
GROUP BY run_id, runs.run_order, kind, piece_id;

-- first_uses: one row per metered run and piece it used: the piece's first use in the run
-- (lowest seq), and its position, as in first_offers (in-memory tables).
CREATE OR REPLACE VIEW first_uses AS
SELECT
    run_id,
    kind,
    piece_id,
    min(seq) AS seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + min(seq) AS position
FROM uses
JOIN runs USING (run_id)
WHERE runs.metered
GROUP BY run_id, runs.run_order, kind, piece_id;

-- metered_offers over an archive: it stores the offers of metered runs only.
CREATE OR REPLACE VIEW metered_offers AS
SELECT * FROM offers;

-- metered_uses over an archive: it stores the uses of metered runs only.
CREATE OR REPLACE VIEW metered_uses AS
SELECT * FROM uses;

-- first_offers over an archive: its first_in_run=true offer files (each row a piece's first
-- offer in its run), positioned by run_order, then seq, as in first_offers. The files'
-- order is not relied on: a partition key can split one commit's runs across files.
CREATE OR REPLACE VIEW first_offers AS
SELECT
    run_id,
    kind,
    piece_id,
    seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + seq AS position
FROM offers_first_in_run
JOIN runs USING (run_id);

-- first_uses over an archive: its first_in_run=true use files, positioned as first_offers.
CREATE OR REPLACE VIEW first_uses AS
SELECT
    run_id,
    kind,
    piece_id,
    seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + seq AS position
FROM uses_first_in_run
JOIN runs USING (run_id);

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

-- piece_uses: per piece, its structural uses in all and by signal (the reference's usedVia),
-- and its first use (first_seen as in piece_offers, after the run's offers).
CREATE OR REPLACE VIEW piece_uses AS
WITH counted AS (
    SELECT
        kind,
        piece_id,
        count(*) AS used,
        count(*) FILTER (WHERE signal = 'tool-called') AS used_tool_called,
        count(*) FILTER (WHERE signal = 'skill-activated') AS used_skill_activated,
        count(*) FILTER (WHERE signal = 'answer-slice(slot)') AS used_answer_slice,
        count(*) FILTER (WHERE signal = 'tool-executed') AS used_tool_executed
    FROM metered_uses
    GROUP BY kind, piece_id
),
firsts AS (
    SELECT
        kind,
        piece_id,
        arg_min(run_id, position) AS first_run,
        arg_min(seq, position) AS first_seq
    FROM first_uses
    GROUP BY kind, piece_id
)
SELECT
    kind,
    piece_id,
    used,
    used_tool_called,
    used_skill_activated,
    used_answer_slice,
    used_tool_executed,
    CAST(runs.run_order AS BIGINT) * 4294967296 + 2147483648 + first_seq AS first_seen
FROM counted
JOIN firsts USING (kind, piece_id)
JOIN runs ON runs.run_id = firsts.first_run;

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

-- piece_uses over an archive's stored piece totals: the sums of the parts that used the
-- piece, and the earliest first use as first_seen (packed as in piece_uses).
CREATE OR REPLACE VIEW piece_uses AS
SELECT
    kind,
    piece_id,
    CAST(sum(used) AS BIGINT) AS used,
    CAST(sum(used_tool_called) AS BIGINT) AS used_tool_called,
    CAST(sum(used_skill_activated) AS BIGINT) AS used_skill_activated,
    CAST(sum(used_answer_slice) AS BIGINT) AS used_answer_slice,
    CAST(coalesce(sum(used_tool_executed), 0) AS BIGINT) AS used_tool_executed,
    min(first_use) AS first_seen
FROM piece_totals
WHERE first_use IS NOT NULL
GROUP BY kind, piece_id;

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

-- piece_totals over the selected runs' run totals, for a run-level filter (run ids, a
-- label): run_totals_pieces' counts, one row per piece, so totals_piece_offers and
-- totals_piece_uses read them as they read the stored piece totals.
CREATE OR REPLACE VIEW piece_totals AS
SELECT * EXCLUDE (label, runs, first_credit)
FROM run_totals_pieces
WHERE label IS NULL;

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

-- piece_outcomes over the selected runs' run totals: run_totals_pieces' credit, per piece
-- [{label, runs}], earliest credit first (the lists piece_outcomes gives from the rows).
CREATE OR REPLACE VIEW piece_outcomes AS
SELECT
    kind,
    piece_id,
    list({'label': label, 'runs': runs} ORDER BY first_credit) AS outcomes
FROM run_totals_pieces
WHERE label IS NOT NULL
GROUP BY kind, piece_id;

-- piece_outcomes over an archive's stored label credit (schema.LABEL_CREDIT: per commit,
-- partition, piece and label, the labelled runs and the earliest credit, packed as
-- run_order * 2^32 + the label's place among the run's labels), added up with the credit
-- of the first offers it does not cover (uncredited_offers), counted as piece_outcomes
-- counts them: the same lists, in the same order.
CREATE OR REPLACE VIEW piece_outcomes AS
WITH uncredited AS (
    SELECT
        uncredited_offers.kind,
        uncredited_offers.piece_id,
        outcome_positions.label,
        count(*) AS runs,
        min(CAST(runs.run_order AS BIGINT) * 4294967296 + outcome_positions.label_position)
            AS first_credit
    FROM uncredited_offers
    JOIN runs USING (run_id)
    JOIN outcome_positions USING (run_id)
    GROUP BY uncredited_offers.kind, uncredited_offers.piece_id, outcome_positions.label
),
credited AS (
    SELECT kind, piece_id, label, runs, first_credit FROM label_credit
    UNION ALL
    SELECT kind, piece_id, label, runs, first_credit FROM uncredited
),
summed AS (
    SELECT
        kind,
        piece_id,
        label,
        CAST(sum(runs) AS BIGINT) AS runs,
        min(first_credit) AS first_credit
    FROM credited
    GROUP BY kind, piece_id, label
)
SELECT
    kind,
    piece_id,
    list({'label': label, 'runs': runs} ORDER BY first_credit) AS outcomes
FROM summed
GROUP BY kind, piece_id;

-- outcome_rows: the outcomes table's rows, each with its 0-based row position. A window
-- with an empty OVER () over a single table keeps the table's row order (DuckDB's order
-- preservation), so the position is the row's place in the Arrow table. DuckDB only:
-- Spark keeps no row order, so it registers these rows numbered by the archive's explicit
-- keys (file, row in file) instead (contextledger.jobs.spark.views).
CREATE OR REPLACE VIEW outcome_rows AS
SELECT run_id, label, row_number() OVER () - 1 AS row_position
FROM outcomes;

-- outcome_positions: each (run, label) pair once, with the 0-based row position of its
-- first row in the outcomes table (outcome_rows): a pair listed twice still counts once.
CREATE OR REPLACE VIEW outcome_positions AS
SELECT run_id, label, min(row_position) AS label_position
FROM outcome_rows
GROUP BY run_id, label;

-- piece_outcomes: per piece, [{label, runs}] over the labelled metered runs that offered it
-- (association, not cause). A (run, label) pair is counted once, however often it is given. Labels are listed in the order the reference recorded them: by the first
-- (run_order, label_position) that credited the label to the piece; a piece's first_offers
-- rows are one per run, so their position orders them by run_order.
CREATE OR REPLACE VIEW piece_outcomes AS
WITH credited AS (
    SELECT
        first_offers.kind,
        first_offers.piece_id,
        outcome_positions.label,
        count(*) AS runs,
        min({
            'position': first_offers.position,
            'label_position': outcome_positions.label_position
        }) AS first_credit
    FROM first_offers
    JOIN outcome_positions USING (run_id)
    GROUP BY first_offers.kind, first_offers.piece_id, outcome_positions.label
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

-- ledger_rows: the ledger worst earn rate first, ties in insertion order (the reference's
-- stable sort); the rows and columns of compute_ledger(...).rows().
CREATE OR REPLACE VIEW ledger_rows AS
SELECT * EXCLUDE (insertion_order)
FROM ledger
ORDER BY earn_rate, insertion_order;
