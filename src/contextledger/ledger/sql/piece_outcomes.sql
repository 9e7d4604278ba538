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
