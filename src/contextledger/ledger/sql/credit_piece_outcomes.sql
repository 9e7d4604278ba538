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
