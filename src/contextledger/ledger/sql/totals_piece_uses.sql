-- piece_uses over an archive's stored piece totals: the sums of the parts that used the
-- piece, and the earliest first use as first_seen (packed as in piece_uses).
CREATE OR REPLACE VIEW piece_uses AS
SELECT
    kind,
    piece_id,
    CAST(sum(used) AS BIGINT) AS used,
    CAST(sum(used_tool_called) AS BIGINT) AS used_tool_called,
    CAST(sum(used_skill_activated) AS BIGINT) AS used_skill_activated,
    CAST(sum(used_answer_slice) AS BIGINT) AS used_answer_slice,
    CAST(coalesce(sum(used_tool_executed), 0) AS BIGINT) AS used_tool_executed,
    min(first_use) AS first_seen
FROM piece_totals
WHERE first_use IS NOT NULL
GROUP BY kind, piece_id;
