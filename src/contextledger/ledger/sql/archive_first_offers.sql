-- first_offers over an archive: its first_in_run=true offer files (each row a piece's first
-- offer in its run). They list runs in run_order, each run's rows by seq, the files in
-- commit order, so a row's place (file, row in file) is its position.
CREATE OR REPLACE VIEW first_offers AS
SELECT
    run_id,
    kind,
    piece_id,
    seq,
    CAST(file_index AS BIGINT) * 1099511627776 + file_row_number AS position
FROM offers_first_in_run;
