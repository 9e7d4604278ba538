-- first_offers over an archive: its first_in_run=true offer files (each row a piece's first
-- offer in its run), positioned by run_order, then seq, as in first_offers. The files'
-- order is not relied on: a partition key can split one commit's runs across files.
CREATE OR REPLACE VIEW first_offers AS
SELECT
    run_id,
    kind,
    piece_id,
    seq,
    CAST(runs.run_order AS BIGINT) * 4294967296 + seq AS position
FROM offers_first_in_run
JOIN runs USING (run_id);
