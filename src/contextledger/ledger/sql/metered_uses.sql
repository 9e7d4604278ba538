-- metered_uses: every structural use of a metered run (in-memory tables).
CREATE OR REPLACE VIEW metered_uses AS
SELECT uses.*
FROM uses
WHERE run_id IN (SELECT run_id FROM runs WHERE metered);
