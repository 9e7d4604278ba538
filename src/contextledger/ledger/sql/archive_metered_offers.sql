-- metered_offers over an archive: it stores the offers of metered runs only.
CREATE OR REPLACE VIEW metered_offers AS
SELECT * FROM offers;
