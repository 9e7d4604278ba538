-- piece_uses: per piece, its structural uses in all and by signal (the reference's usedVia),
-- and its first use (see metered_uses).
CREATE OR REPLACE VIEW piece_uses AS
SELECT
    kind,
    piece_id,
    count(*) AS used,
    count(*) FILTER (WHERE signal = 'tool-called') AS used_tool_called,
    count(*) FILTER (WHERE signal = 'skill-activated') AS used_skill_activated,
    count(*) FILTER (WHERE signal = 'answer-slice(slot)') AS used_answer_slice,
    min(first_seen) AS first_seen
FROM metered_uses
GROUP BY kind, piece_id;
