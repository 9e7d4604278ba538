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
