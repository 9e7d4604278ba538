-- outcome_positions: the outcome labels with their 0-based row position in the outcomes
-- table. A window with an empty OVER () over a single table keeps the table's row order
-- (DuckDB's order preservation), so the position is the row's place in the Arrow table.
CREATE OR REPLACE VIEW outcome_positions AS
SELECT
    run_id,
    label,
    row_number() OVER () - 1 AS label_position
FROM outcomes;
