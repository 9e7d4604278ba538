-- outcome_positions: each (run, label) pair once, with the 0-based row position of its
-- first row in the outcomes table: a pair listed twice still counts once. A window with an
-- empty OVER () over a single table keeps the table's row order (DuckDB's order
-- preservation), so the position is the row's place in the Arrow table.
CREATE OR REPLACE VIEW outcome_positions AS
WITH numbered AS (
    SELECT run_id, label, row_number() OVER () - 1 AS row_position
    FROM outcomes
)
SELECT run_id, label, min(row_position) AS label_position
FROM numbered
GROUP BY run_id, label;
