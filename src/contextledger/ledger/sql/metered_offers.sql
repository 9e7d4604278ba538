-- metered_offers: every offer of a metered run (in-memory tables; see archive_metered_offers).
CREATE OR REPLACE VIEW metered_offers AS
SELECT offers.*
FROM offers
WHERE run_id IN (SELECT run_id FROM runs WHERE metered);
