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
