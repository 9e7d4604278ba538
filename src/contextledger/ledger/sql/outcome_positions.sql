-- outcome_positions: each (run, label) pair once, with the 0-based row position of its
-- first row in the outcomes table (outcome_rows): a pair listed twice still counts once.
CREATE OR REPLACE VIEW outcome_positions AS
SELECT run_id, label, min(row_position) AS label_position
FROM outcome_rows
GROUP BY run_id, label;
