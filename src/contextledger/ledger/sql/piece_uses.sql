-- piece_uses: per piece, its structural uses in all and by signal (the reference's usedVia),
-- and its first use (first_seen as in piece_offers, after the run's offers).
CREATE OR REPLACE VIEW piece_uses AS
WITH counted AS (
    SELECT
        kind,
        piece_id,
        count(*) AS used,
        count(*) FILTER (WHERE signal = 'tool-called') AS used_tool_called,
        count(*) FILTER (WHERE signal = 'skill-activated') AS used_skill_activated,
        count(*) FILTER (WHERE signal = 'answer-slice(slot)') AS used_answer_slice,
        count(*) FILTER (WHERE signal = 'tool-executed') AS used_tool_executed
    FROM metered_uses
    GROUP BY kind, piece_id
),
firsts AS (
    SELECT
        kind,
        piece_id,
        arg_min(run_id, position) AS first_run,
        arg_min(seq, position) AS first_seq
    FROM first_uses
    GROUP BY kind, piece_id
)
SELECT
    kind,
    piece_id,
    used,
    used_tool_called,
    used_skill_activated,
    used_answer_slice,
    used_tool_executed,
    CAST(runs.run_order AS BIGINT) * 4294967296 + 2147483648 + first_seq AS first_seen
FROM counted
JOIN firsts USING (kind, piece_id)
JOIN runs ON runs.run_id = firsts.first_run;
