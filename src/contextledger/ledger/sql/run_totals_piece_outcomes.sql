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
