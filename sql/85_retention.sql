-- Retention: deleting old finished runs without breaking a retry chain.
-- A chain is a SCHEDULE attempt 1 and its retries (retry_of, at most max_attempts()
-- rows, whatever that is: the chain is walked, not joined a fixed number of times); since
-- retry_of is a foreign key, a chain goes whole or not at all, and only when every
-- row of it is terminal, finished before the cut-off and owes no retry. So a row a
-- live (QUEUED/RUNNING) retry points to, or one whose retry is still to be created
-- (retry_pending), is never deleted. Runs that nothing else references are chains
-- of one. Error: SW002 bad arguments.

-- Deletes at most p_batch runs finished before p_cutoff (whole chains: a chain that
-- would cross the limit waits for the next call) and returns how many it deleted; call
-- it again until it returns 0. Oldest chains first; only the chains whose first run's
-- id is in [p_from, p_to) when given (NULL: no bound), so that a call reads a bounded
-- stretch of the ledger. A row another session holds locked is skipped with its whole
-- chain (SKIP LOCKED): a prune never waits on a row.
CREATE OR REPLACE FUNCTION scrinalia.prune_runs_before(p_cutoff timestamptz, p_batch integer,
                                                       p_from bigint, p_to bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
DECLARE
    roots bigint[];
    ids bigint[];
    n bigint;
    from_id bigint := p_from;
    last_root bigint;
    n_roots bigint;
BEGIN
    -- The oldest p_batch roots of the stretch, and their chains walked down through the
    -- unique retry_of index all at once, level by level, however many attempts
    -- max_attempts() allows; a chain is taken only when every row of it may go. When
    -- none of those roots' chains may go yet, the next p_batch roots are tried, so
    -- that a call deletes nothing only when nothing in its stretch may go.
    LOOP
        WITH RECURSIVE candidates AS MATERIALIZED (
            SELECT r1.run_id
              FROM scrinalia.archive_worker_runs r1
             WHERE r1.retry_of IS NULL
               AND (from_id IS NULL OR r1.run_id >= from_id) AND (p_to IS NULL OR r1.run_id < p_to)
               AND r1.status = ANY (scrinalia.terminal_statuses())
               AND r1.finished_at < p_cutoff AND NOT r1.retry_pending
             ORDER BY r1.run_id
             LIMIT p_batch
        ), chain AS (
            SELECT c.run_id AS root, c.run_id, true AS ok FROM candidates c
            UNION ALL
            -- (each retry looked up by key, OFFSET 0: not a join planned without
            -- knowing how few rows a level has, which may scan the whole ledger)
            SELECT p.root, n.run_id, n.ok
              FROM chain p
             CROSS JOIN LATERAL (SELECT r.run_id, r.status = ANY (scrinalia.terminal_statuses())
                                                  AND r.finished_at < p_cutoff AND NOT r.retry_pending AS ok
                                   FROM scrinalia.archive_worker_runs r
                                  WHERE r.retry_of = p.run_id OFFSET 0) n
        ), chains AS (
            SELECT ch.root, array_agg(ch.run_id) AS ids, count(*) AS size
              FROM chain ch GROUP BY ch.root HAVING bool_and(ch.ok)
        ), counted AS (
            SELECT c.root, c.ids, sum(c.size) OVER (ORDER BY c.root) AS upto FROM chains c
        )
        -- (both arrays in one order, run_id's: they are read as pairs)
        SELECT s.roots, s.ids, k.last_root, k.n_roots
          FROM (SELECT array_agg(c.root ORDER BY x.run_id) AS roots, array_agg(x.run_id ORDER BY x.run_id) AS ids
                  FROM counted c CROSS JOIN LATERAL unnest(c.ids) AS x(run_id)
                 WHERE c.upto <= p_batch) s,
               (SELECT max(c.run_id) AS last_root, count(*) AS n_roots FROM candidates c) k
          INTO roots, ids, last_root, n_roots;
        EXIT WHEN ids IS NOT NULL OR n_roots < p_batch;
        from_id := last_root + 1;
    END LOOP;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;

    WITH locked AS (
        -- the same rules again on the row as it is now, in case it changed meanwhile
        SELECT r.run_id FROM scrinalia.archive_worker_runs r
         WHERE r.run_id = ANY (ids)
           AND r.status = ANY (scrinalia.terminal_statuses())
           AND r.finished_at < p_cutoff AND NOT r.retry_pending
           FOR UPDATE SKIP LOCKED
    ), whole AS (
        SELECT e.root FROM unnest(roots, ids) AS e(root, run_id)
          LEFT JOIN locked l ON l.run_id = e.run_id
         GROUP BY e.root HAVING bool_and(l.run_id IS NOT NULL)
    )
    -- One statement for the whole chain: the foreign key is checked at its end.
    DELETE FROM scrinalia.archive_worker_runs r
     USING unnest(roots, ids) AS d(root, run_id)
     WHERE r.run_id = d.run_id AND d.root IN (SELECT w.root FROM whole w);
    GET DIAGNOSTICS n = ROW_COUNT;
    -- the deletes' deltas into the metrics' tallies now (86_tallies.sql), not at a scrape
    PERFORM scrinalia.fold_tallies();
    RETURN n;
END $$;

-- Deletes at most p_batch runs older than p_older_than (prune_runs_before) and returns
-- how many it deleted; call it again until it returns 0.
CREATE OR REPLACE FUNCTION scrinalia.prune_runs(p_older_than interval, p_batch integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
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
    RETURN scrinalia.prune_runs_before(now() - p_older_than, p_batch, NULL, NULL);
END $$;

-- The retention the scheduler keeps: RUN_RETENTION in scrinalia.settings, an interval
-- (at least min_prune_age()) or 'off'; no row: default_run_retention(). NULL: off (a
-- value that does not read as an interval is off too: when in doubt, delete nothing).
CREATE OR REPLACE FUNCTION scrinalia.run_retention()
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text;
    keep interval;
BEGIN
    SELECT st.value INTO v FROM scrinalia.settings st WHERE st.name = 'RUN_RETENTION';
    IF NOT FOUND THEN
        RETURN scrinalia.default_run_retention();
    END IF;
    BEGIN
        keep := v::interval;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        RETURN NULL;
    END;
    RETURN greatest(keep, scrinalia.min_prune_age());
END $$;

-- Sets the retention (the owner and the operator group, which may prune_runs by hand
-- anyway): an interval of at least min_prune_age(), else SW002; NULL turns it off (the
-- scheduler then deletes nothing). Returns the retention now in force (NULL: off).
CREATE OR REPLACE FUNCTION scrinalia.set_run_retention(p_retention interval)
RETURNS interval
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    IF p_retention < scrinalia.min_prune_age() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('invalid retention %s: at least %s', p_retention, scrinalia.min_prune_age()),
            HINT = 'NULL turns the retention off';
    END IF;
    INSERT INTO scrinalia.settings (name, value) VALUES ('RUN_RETENTION', coalesce(p_retention::text, 'off'))
    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now();
    RETURN scrinalia.run_retention();
END $$;

-- One batch of the retention, for the scheduler's pass: its p_batch_no-th call this
-- pass. No row when nothing is to be done (off, or the last sweep began less than
-- retention_interval() ago); else starts a sweep when none is under way (its cut-off:
-- now() minus the retention). A sweep walks the ledger in id order, a stretch of
-- retention_batch() runs a batch (prune_position: where the next one begins), so a
-- batch reads a bounded part of the ledger and never the whole of it: it deletes the
-- whole chains that begin in its stretch and finished before the cut-off
-- (prune_runs_before). The sweep is over at the end of the ledger, or at a run created
-- at the cut-off or later (ids follow the creation, and a run finishes after it is
-- created: none after it can be due). Says whether to call again this pass (more: not
-- over, fewer than retention_batches_per_pass() batches, and no schedule due now, whose
-- tick goes first), and whether the sweep finished. A batch that waits for a lock
-- longer than chore_lock_timeout() deletes nothing and is tried again at the next
-- pass.
CREATE OR REPLACE FUNCTION scrinalia.prune_expired_runs(p_batch_no integer)
RETURNS TABLE (removed bigint, cutoff timestamptz, more boolean, finished boolean, sweep_removed bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    keep interval := scrinalia.run_retention();
    ch scrinalia.scheduler_chores;
    first_id bigint;
    first_created timestamptz;
    next_id bigint;
    n bigint := 0;
    timed_out boolean := false;
    old_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM scrinalia.check_scheduler_caller('prune_expired_runs');
    SELECT * INTO ch FROM scrinalia.scheduler_chores;
    -- (a start in the future, a clock that went back, does not hold a sweep back)
    IF ch.prune_cutoff IS NULL
       AND (keep IS NULL
            OR (ch.prune_started_at > now() - scrinalia.retention_interval() AND ch.prune_started_at <= now())) THEN
        RETURN;
    END IF;
    -- (no wait on a lock for long: not on a run's row, nor on this row should a session
    -- hold it; the statements below fail then, and the next pass tries again)
    PERFORM set_config('lock_timeout', scrinalia.chore_lock_timeout(), true);
    IF keep IS NULL THEN  -- turned off during a sweep: it ends here
        UPDATE scrinalia.scheduler_chores SET prune_cutoff = NULL, prune_position = NULL;
        PERFORM set_config('lock_timeout', old_timeout, true);
        RETURN;
    END IF;
    IF ch.prune_cutoff IS NULL THEN
        ch.prune_cutoff := now() - keep;
        ch.prune_started_at := now();
        ch.prune_removed := 0;
        ch.prune_position := NULL;
    END IF;
    -- this batch's stretch: from the first run at the position, retention_batch() runs
    -- (through the primary key: a bounded read), up to the first run of the next one
    SELECT r.run_id, r.created_at INTO first_id, first_created
      FROM scrinalia.archive_worker_runs r
     WHERE r.run_id >= coalesce(ch.prune_position, -9223372036854775808)
     ORDER BY r.run_id LIMIT 1;
    IF first_id IS NOT NULL AND first_created < ch.prune_cutoff THEN
        SELECT r.run_id INTO next_id
          FROM scrinalia.archive_worker_runs r
         WHERE r.run_id >= first_id
         ORDER BY r.run_id OFFSET scrinalia.retention_batch() LIMIT 1;
        BEGIN
            -- (every chain that begins in the stretch fits: none waits for a next call)
            n := scrinalia.prune_runs_before(ch.prune_cutoff, scrinalia.retention_batch() * scrinalia.max_attempts(),
                                             first_id, next_id);
        EXCEPTION WHEN lock_not_available THEN
            timed_out := true;
        END;
        IF NOT timed_out THEN
            ch.prune_position := next_id;
        END IF;
    END IF;
    removed := n;
    cutoff := ch.prune_cutoff;
    sweep_removed := ch.prune_removed + n;
    finished := NOT timed_out AND (first_id IS NULL OR first_created >= ch.prune_cutoff OR next_id IS NULL);
    more := NOT finished AND NOT timed_out AND p_batch_no < scrinalia.retention_batches_per_pass()
            AND NOT EXISTS (SELECT 1 FROM scrinalia.archive_worker_schedules s
                             WHERE s.enabled AND s.arm_error IS NULL AND s.next_run_at <= clock_timestamp());
    IF finished THEN
        UPDATE scrinalia.scheduler_chores
           SET prune_cutoff = NULL, prune_position = NULL, prune_started_at = ch.prune_started_at, prune_removed = 0,
               pruned_at = now(), pruned_cutoff = ch.prune_cutoff, pruned_runs = sweep_removed;
    ELSE
        UPDATE scrinalia.scheduler_chores
           SET prune_cutoff = ch.prune_cutoff, prune_position = ch.prune_position,
               prune_started_at = ch.prune_started_at, prune_removed = sweep_removed;
    END IF;
    PERFORM set_config('lock_timeout', old_timeout, true);
    RETURN NEXT;
END $$;

-- What status says of the retention: the one in force (NULL: off), the last sweep
-- finished (when, its cut-off, how many runs it removed) and the one under way.
CREATE OR REPLACE FUNCTION scrinalia.retention_status()
RETURNS TABLE (retention interval, pruned_at timestamptz, pruned_cutoff timestamptz, pruned_runs bigint,
               sweep_cutoff timestamptz, sweep_started_at timestamptz, sweep_removed bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT scrinalia.run_retention(), c.pruned_at, c.pruned_cutoff, c.pruned_runs,
           c.prune_cutoff, CASE WHEN c.prune_cutoff IS NOT NULL THEN c.prune_started_at END,
           CASE WHEN c.prune_cutoff IS NOT NULL THEN c.prune_removed END
      FROM scrinalia.scheduler_chores c
$$;

-- 90_roles.sql revokes EXECUTE from PUBLIC on every function; a grant to a named
-- role is not touched by that, so this one survives it.
GRANT EXECUTE ON FUNCTION scrinalia.prune_runs(interval, integer) TO scrinalia_operator;
