-- first_uses over an archive: its first_in_run=true use files, positioned as first_offers.
CREATE OR REPLACE VIEW first_uses AS
SELECT
    run_id,
    kind,
    piece_id,
    seq,
    CAST(file_index AS BIGINT) * 1099511627776 + file_row_number AS position
FROM uses_first_in_run;
