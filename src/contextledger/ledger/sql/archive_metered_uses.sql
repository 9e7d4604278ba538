-- metered_uses over an archive: it stores the uses of metered runs only.
CREATE OR REPLACE VIEW metered_uses AS
SELECT * FROM uses;
