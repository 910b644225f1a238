-- Retention: deleting old finished runs without breaking a retry chain.
-- A chain is a SCHEDULE attempt 1 and its retries (retry_of, at most max_attempts()
-- rows, whatever that is: the chain is walked, not joined a fixed number of times); since
-- retry_of is a foreign key, a chain goes whole or not at all, and only when every
-- row of it is terminal, finished before the cut-off and owes no retry. So a row a
-- live (QUEUED/RUNNING) retry points to, or one whose retry is still to be created
-- (retry_pending), is never deleted. Runs that nothing else references are chains
-- of one. Error: SW002 bad arguments.

-- Deletes at most p_batch runs (whole chains: a chain that would cross the limit
-- waits for the next call) and returns how many it deleted; call it again until it
-- returns 0. Oldest chains first.
CREATE OR REPLACE FUNCTION scrinalia.prune_runs(p_older_than interval, p_batch integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    cutoff timestamptz;
    n bigint;
BEGIN
    IF p_older_than IS NULL OR p_older_than < scrinalia.min_prune_age() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('prune_runs keeps at least one day of history, not %s',
                             coalesce(p_older_than::text, 'NULL')),
            HINT = 'pass an interval of 1 day or more, e.g. interval ''30 days''';
    END IF;
    IF p_batch IS NULL OR p_batch < scrinalia.max_attempts() OR p_batch > scrinalia.max_prune_batch() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('prune_runs takes a batch of %s to %s runs, not %s',
                             scrinalia.max_attempts(), scrinalia.max_prune_batch(), coalesce(p_batch::text, 'NULL')),
            HINT = format('a retry chain has up to %s runs and is deleted whole', scrinalia.max_attempts());
    END IF;
    cutoff := now() - p_older_than;

    WITH chains AS (
        -- Oldest roots first; each chain walked down through the unique retry_of
        -- index, however many attempts max_attempts() allows, and taken only when
        -- every row of it may go.
        SELECT c.ids, cardinality(c.ids) AS size
          FROM scrinalia.archive_worker_runs r1
         CROSS JOIN LATERAL (
                WITH RECURSIVE chain AS (
                    SELECT r1.run_id, true AS ok
                    UNION ALL
                    SELECT n.run_id, n.status = ANY (scrinalia.terminal_statuses())
                                     AND n.finished_at < cutoff AND NOT n.retry_pending
                      FROM chain p JOIN scrinalia.archive_worker_runs n ON n.retry_of = p.run_id
                )
                SELECT array_agg(chain.run_id) AS ids FROM chain HAVING bool_and(chain.ok)) c
         WHERE r1.retry_of IS NULL
           AND r1.status = ANY (scrinalia.terminal_statuses())
           AND r1.finished_at < cutoff AND NOT r1.retry_pending
         ORDER BY r1.run_id
         LIMIT p_batch
    ), counted AS (
        SELECT c.ids, sum(c.size) OVER (ORDER BY c.ids[1]) AS upto FROM chains c
    ), doomed AS (
        SELECT x.run_id FROM counted c CROSS JOIN LATERAL unnest(c.ids) AS x(run_id)
         WHERE c.upto <= p_batch
    )
    -- One statement for the whole chain: the foreign key is checked at its end.
    DELETE FROM scrinalia.archive_worker_runs r
     USING doomed d
     WHERE r.run_id = d.run_id
       -- the same rules again on the row as it is now, in case it changed meanwhile
       AND r.status = ANY (scrinalia.terminal_statuses())
       AND r.finished_at < cutoff AND NOT r.retry_pending;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- the deletes' deltas into the metrics' tallies now (86_tallies.sql), not at a scrape
    PERFORM scrinalia.fold_tallies();
    RETURN n;
END $$;

-- 90_roles.sql revokes EXECUTE from PUBLIC on every function; a grant to a named
-- role is not touched by that, so this one survives it.
GRANT EXECUTE ON FUNCTION scrinalia.prune_runs(interval, integer) TO scrinalia_operator;
