-- outcome_rows: the outcomes table's rows, each with its 0-based row position. A window
-- with an empty OVER () over a single table keeps the table's row order (DuckDB's order
-- preservation), so the position is the row's place in the Arrow table. DuckDB only:
-- Spark keeps no row order, so it registers these rows numbered by the archive's explicit
-- keys (file, row in file) instead (contextledger.jobs.spark.views).
CREATE OR REPLACE VIEW outcome_rows AS
SELECT run_id, label, row_number() OVER () - 1 AS row_position
FROM outcomes;
