-- Tallies: what the metrics count, kept as the ledger changes, so that a scrape reads
-- a row per series instead of counting a million finished runs.
--
-- The design. A run's QUEUED and RUNNING rows are few (one slot per worker) and are
-- counted live, through uq_worker_run_active. Only what depends on finished runs is
-- tallied: run_tally (finished runs per worker, status and trigger), retry_tally
-- (finished retries per worker) and latest_period_tally (each worker's latest finished
-- scheduled period, latest_finished_periods_of()). Triggers on the ledger see every
-- path that writes it, this release's functions, the previous release's and a hand's
-- alike; they only append to run_tally_delta, which has no index and no row two
-- sessions both write: the runner's finish and the tick's insert never wait on a
-- tally, and no shared row is written per run.
--  * INSERT: a row trigger, fired only for a row born finished or a retry (WHEN), so an
--    enqueue of a QUEUED run pays nothing but the WHEN.
--  * UPDATE, DELETE: statement triggers with transition tables, one INSERT ... SELECT
--    per statement (a 500-run finish_runs appends its 500 deltas in one go; a claim
--    or a heartbeat, live to live, appends none).
--  * TRUNCATE: empties the tallies.
-- A delta row is -1/+1 on a (worker, status, trigger, retry) key leaving or entering
-- the finished statuses, and period = true when the row is a SCHEDULE run whose
-- change can move its worker's latest finished period (a run finishing or coming
-- back, a retry owed or created, a chain relinked); runs = 0 is such a mark alone.
-- fold_tallies() adds the deltas in: in one transaction it deletes them (the ones its
-- snapshot sees; one committed later stays for the next fold), adds them to the tallies
-- and recomputes the periods of the workers marked, from a snapshot taken after that
-- delete, so a change it missed keeps its mark. One fold at a time (tally_fold, taken
-- with SKIP LOCKED: a second caller reads instead of waiting); nothing else deletes a
-- delta or writes a tally, so folding, finishing and pruning never wait on each other.
-- The readers (run_counts(), worker_metrics(), latest_finished_periods()) read
-- tally + the deltas not folded yet + the live rows, in one snapshot: the same answer
-- as counting the ledger, whether or not a fold ran. worker_metrics(), run_counts()
-- and prune_runs() fold first (not in a read-only transaction: there they only read).
-- Every migrate rebuilds the tallies from the ledger under a lock that holds writers
-- back (SHARE ROW EXCLUSIVE, a second or two per million runs): after a rollback and a
-- re-upgrade, or rows written with the triggers off (session_replication_role), no
-- drift survives a migrate (one that can take its locks in time: see the end of this
-- file).
-- Out of the model: a retry chain spanning two workers (the tick never makes one) marks
-- only the worker of the row that changed.

-- How late a scheduled run was enqueued: its creation after the instant it was due,
-- in seconds; unknown (NULL) when either instant is hand-written outside the periods'
-- range (an infinite one cannot be subtracted, and a lateness of millennia says
-- nothing). The one rule: the periods' tally and worker_metrics()'s read of a run.
-- One expression, no SET clause: inlined into the statement that calls it, so it names
-- every function and operator by its schema (tests/sql/test_roles.py checks it).
CREATE OR REPLACE FUNCTION scrinalia.lateness_seconds(p_created_at timestamptz, p_scheduled_for timestamptz)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_created_at OPERATOR(pg_catalog.>=) scrinalia.period_start()
                 AND p_created_at OPERATOR(pg_catalog.<) scrinalia.period_end()
                 AND p_scheduled_for OPERATOR(pg_catalog.>=) scrinalia.period_start()
                 AND p_scheduled_for OPERATOR(pg_catalog.<) scrinalia.period_end()
                THEN pg_catalog.date_part('epoch', p_created_at OPERATOR(pg_catalog.-) p_scheduled_for) END
$$;

-- 0.9 added the first attempt's lateness to what latest_finished_periods_of() returns
-- (nothing depends on it in the catalog: its callers are PL/pgSQL, and the fold below).
SELECT pg_temp.drop_when_result_lacks('scrinalia.latest_finished_periods_of(text[])', 'lateness_seconds');

-- The latest finished scheduled period of each of p_workers that has one, with every
-- attempt's run id (a period is finished when no attempt of it is QUEUED/RUNNING and
-- no retry is owed) and how late its attempt 1 was enqueued (lateness_seconds(): the
-- tick's last run, worker_metrics() reads it here). Latest by run id: the tick creates a
-- worker's periods in their order. A few index probes per schedule, no walk of the
-- history: its newest finished attempt 1 (ix_worker_runs_finished), then that attempt's
-- retry and the retry's retry (uq_worker_run_retry_of), the whole chain when attempts
-- rise 1, 2, 3 as the tick makes them. Only a worker whose newest period is still open
-- (a retry owed or under way), or whose chain was written by hand otherwise, walks its
-- history below that attempt.
CREATE OR REPLACE FUNCTION scrinalia.latest_finished_periods_of(p_workers text[])
RETURNS TABLE (worker_name text, scheduled_for timestamptz, run_ids bigint[], attempts integer,
               last_status scrinalia.run_status, last_error text, finished_at timestamptz,
               lateness_seconds double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH periods AS (
        SELECT s.worker_name, h.run_id, h.scheduled_for,
               scrinalia.lateness_seconds(h.created_at, h.scheduled_for) AS lateness,
               array_remove(ARRAY[h.run_id, r2.run_id, r3.run_id], NULL) AS run_ids,
               coalesce(r3.attempt, r2.attempt, h.attempt) AS attempts,
               CASE WHEN r3.run_id IS NOT NULL THEN r3.status WHEN r2.run_id IS NOT NULL THEN r2.status
                    ELSE h.status END AS last_status,
               CASE WHEN r3.run_id IS NOT NULL THEN r3.error WHEN r2.run_id IS NOT NULL THEN r2.error
                    ELSE h.error END AS last_error,
               CASE WHEN r3.run_id IS NOT NULL THEN r3.finished_at WHEN r2.run_id IS NOT NULL THEN r2.finished_at
                    ELSE h.finished_at END AS finished_at,
               (h.retry_pending OR coalesce(r2.retry_pending OR r2.status IN ('QUEUED', 'RUNNING'), false)
                OR coalesce(r3.retry_pending OR r3.status IN ('QUEUED', 'RUNNING'), false)) AS open,
               -- (attempts rising along the chain, which ends at r3: else the walk below decides)
               (r3.run_id IS NULL OR (r3.attempt > r2.attempt AND r4.run_id IS NULL)) AS plain
          FROM (SELECT DISTINCT x.worker_name FROM unnest(p_workers) AS x(worker_name)) s
         CROSS JOIN LATERAL (
            SELECT a1.run_id, a1.scheduled_for, a1.created_at, a1.attempt, a1.status, a1.error, a1.finished_at,
                   a1.retry_pending
              FROM scrinalia.archive_worker_runs a1
             WHERE a1.worker_name = s.worker_name AND a1.attempt = 1 AND a1.scheduled_for IS NOT NULL
               AND a1.status NOT IN ('QUEUED', 'RUNNING')
             ORDER BY a1.run_id DESC
             LIMIT 1
         ) h
          -- (OFFSET 0 keeps each a probe of the retry index: merged, a join reads every retry)
          LEFT JOIN LATERAL (
            SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
              FROM scrinalia.archive_worker_runs r WHERE r.retry_of = h.run_id OFFSET 0) r2 ON true
          LEFT JOIN LATERAL (
            SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
              FROM scrinalia.archive_worker_runs r WHERE r.retry_of = r2.run_id OFFSET 0) r3 ON true
          LEFT JOIN LATERAL (
            SELECT r.run_id FROM scrinalia.archive_worker_runs r WHERE r.retry_of = r3.run_id OFFSET 0) r4 ON true
    )
    SELECT p.worker_name, p.scheduled_for, p.run_ids, p.attempts, p.last_status, p.last_error, p.finished_at,
           p.lateness
      FROM periods p
     WHERE p.plain AND NOT p.open
    UNION ALL
    SELECT p.worker_name, w.scheduled_for, w.run_ids, w.attempts, w.last_status, w.last_error, w.finished_at,
           w.lateness
      FROM periods p
     CROSS JOIN LATERAL (
        SELECT a1.scheduled_for, c.run_ids, c.attempts, c.last_status, c.last_error, c.finished_at,
               scrinalia.lateness_seconds(a1.created_at, a1.scheduled_for) AS lateness
          FROM scrinalia.archive_worker_runs a1
         CROSS JOIN LATERAL (
            WITH RECURSIVE chain AS (
                SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
                  FROM scrinalia.archive_worker_runs r WHERE r.run_id = a1.run_id
                UNION ALL
                SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
                  FROM scrinalia.archive_worker_runs r JOIN chain ON r.retry_of = chain.run_id
            )
            SELECT array_agg(chain.run_id ORDER BY chain.attempt) AS run_ids,
                   max(chain.attempt) AS attempts,
                   (array_agg(chain.status ORDER BY chain.attempt DESC))[1] AS last_status,
                   (array_agg(chain.error ORDER BY chain.attempt DESC))[1] AS last_error,
                   (array_agg(chain.finished_at ORDER BY chain.attempt DESC))[1] AS finished_at,
                   bool_or(chain.retry_pending OR chain.status IN ('QUEUED', 'RUNNING')) AS open
              FROM chain
         ) c
         WHERE a1.worker_name = p.worker_name AND a1.attempt = 1 AND a1.scheduled_for IS NOT NULL
           AND a1.status NOT IN ('QUEUED', 'RUNNING')
           AND (a1.run_id < p.run_id OR (a1.run_id = p.run_id AND NOT p.plain))
           AND NOT c.open
         ORDER BY a1.run_id DESC
         LIMIT 1
     ) w
     WHERE NOT p.plain OR p.open;
END
$$;

CREATE OR REPLACE FUNCTION scrinalia.tally_insert_row()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    INSERT INTO scrinalia.run_tally_delta (status, trigger, retry, runs, period, worker_names)
    VALUES (NEW.status, NEW.trigger, NEW.retry_of IS NOT NULL,
            CASE WHEN NEW.status IN ('QUEUED', 'RUNNING') THEN 0 ELSE 1 END, NEW.trigger = 'SCHEDULE',
            ARRAY[NEW.worker_name]);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION scrinalia.tally_update_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
-- (a transition table has no statistics: planned for one row, the old and new rows of
-- a 500-run claim were joined by a nested loop, 250,000 comparisons)
SET enable_nestloop = off
AS $$
BEGIN
    INSERT INTO scrinalia.run_tally_delta (status, trigger, retry, runs, period, worker_names)
    WITH c AS (
        SELECT o.worker_name AS ow, o.status AS os, o.trigger AS ot, o.retry_of IS NOT NULL AS oretry,
               n.worker_name AS nw, n.status AS ns, n.trigger AS nt, n.retry_of IS NOT NULL AS nretry,
               o.status NOT IN ('QUEUED', 'RUNNING') AS ofin, n.status NOT IN ('QUEUED', 'RUNNING') AS nfin,
               (o.worker_name, o.status, o.trigger, o.retry_of IS NULL)
                   IS DISTINCT FROM (n.worker_name, n.status, n.trigger, n.retry_of IS NULL) AS moved,
               'SCHEDULE' IN (o.trigger, n.trigger)
                   AND (o.status NOT IN ('QUEUED', 'RUNNING') OR n.status NOT IN ('QUEUED', 'RUNNING')
                        OR (o.retry_pending, o.retry_of, o.worker_name, o.attempt, o.scheduled_for)
                           IS DISTINCT FROM (n.retry_pending, n.retry_of, n.worker_name, n.attempt, n.scheduled_for))
                   AS period
          FROM old_rows o JOIN new_rows n ON n.run_id = o.run_id
         -- (a claim, a heartbeat, a release: live to live, a SCHEDULE run's chain unchanged)
         WHERE o.status NOT IN ('QUEUED', 'RUNNING') OR n.status NOT IN ('QUEUED', 'RUNNING')
            OR o.trigger <> n.trigger OR o.worker_name <> n.worker_name
            OR (o.trigger = 'SCHEDULE' AND (o.retry_pending, o.retry_of, o.attempt, o.scheduled_for)
                    IS DISTINCT FROM (n.retry_pending, n.retry_of, n.attempt, n.scheduled_for))
    )
    -- a row per (status, trigger, retry, runs, period): the pair's old key leaving the
    -- finished counts, its new key entering them, and the marks of its workers' periods
    -- when no count carries them
    SELECT u.status, u.trigger, u.retry, u.runs, u.period, array_agg(u.worker_name)
      FROM (SELECT c.ow, c.os, c.ot, c.oretry, -1, c.period FROM c WHERE c.ofin AND c.moved
            UNION ALL
            SELECT c.nw, c.ns, c.nt, c.nretry, 1, c.period FROM c WHERE c.nfin AND c.moved
            UNION ALL
            SELECT c.nw, c.ns, c.nt, c.nretry, 0, true FROM c WHERE c.period AND NOT (c.nfin AND c.moved)
            UNION ALL
            SELECT c.ow, c.os, c.ot, c.oretry, 0, true FROM c
             WHERE c.period AND c.ow <> c.nw AND NOT (c.ofin AND c.moved)
           ) AS u (worker_name, status, trigger, retry, runs, period)
     GROUP BY 1, 2, 3, 4, 5;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION scrinalia.tally_delete_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
BEGIN
    INSERT INTO scrinalia.run_tally_delta (status, trigger, retry, runs, period, worker_names)
    SELECT o.status, o.trigger, o.retry_of IS NOT NULL,
           CASE WHEN o.status IN ('QUEUED', 'RUNNING') THEN 0 ELSE -1 END, o.trigger = 'SCHEDULE',
           array_agg(o.worker_name)
      FROM old_rows o
     WHERE o.status NOT IN ('QUEUED', 'RUNNING') OR o.trigger = 'SCHEDULE'
     GROUP BY 1, 2, 3, 4, 5;
    RETURN NULL;
END
$$;

-- Every tally and delta gone (the caller holds tally_fold): a TRUNCATE of the ledger,
-- and a rebuild before it counts afresh.
CREATE OR REPLACE FUNCTION scrinalia.clear_tallies()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    DELETE FROM scrinalia.run_tally_delta;
    DELETE FROM scrinalia.run_tally;
    DELETE FROM scrinalia.retry_tally;
    DELETE FROM scrinalia.latest_period_tally;
END
$$;

CREATE OR REPLACE FUNCTION scrinalia.tally_truncate_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM scrinalia.tally_fold FOR UPDATE;
    PERFORM scrinalia.clear_tallies();
    RETURN NULL;
END
$$;

-- Adds the deltas into the tallies (see the top of this file). Skipped, and harmless to
-- skip, in a read-only transaction (a standby, a read-only login) or while another
-- session folds.
CREATE OR REPLACE FUNCTION scrinalia.fold_tallies()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
DECLARE
    marked text[];
    entries bigint;
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RETURN;
    END IF;
    PERFORM 1 FROM scrinalia.tally_fold FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    WITH deleted AS (
        DELETE FROM scrinalia.run_tally_delta RETURNING status, trigger, retry, runs, period, worker_names
    ), d AS (
        SELECT x.worker_name, e.status, e.trigger, e.retry, e.runs, e.period
          FROM deleted e CROSS JOIN LATERAL unnest(e.worker_names) AS x(worker_name)
    ), counts AS (
        INSERT INTO scrinalia.run_tally AS t (worker_name, status, trigger, runs)
        SELECT d.worker_name, d.status, d.trigger, sum(d.runs) FROM d WHERE d.runs <> 0
         GROUP BY 1, 2, 3 HAVING sum(d.runs) <> 0
        ON CONFLICT (worker_name, status, trigger) DO UPDATE SET runs = t.runs + excluded.runs
    ), retries AS (
        INSERT INTO scrinalia.retry_tally AS t (worker_name, retries)
        SELECT d.worker_name, sum(d.runs) FROM d WHERE d.retry AND d.runs <> 0
         GROUP BY 1 HAVING sum(d.runs) <> 0
        ON CONFLICT (worker_name) DO UPDATE SET retries = t.retries + excluded.retries
    )
    SELECT array_agg(DISTINCT d.worker_name) FILTER (WHERE d.period), count(*) INTO marked, entries FROM d;
    IF marked IS NOT NULL THEN
        -- A bulk change (a load of history, a first import) outgrows the ledger's
        -- statistics until autovacuum samples it, and the periods' probes below are
        -- planned from them: planned on an empty ledger's, each worker's probe may read
        -- a whole index. Sampled first then, never waiting for a vacuum or another
        -- sample under way (SKIP_LOCKED).
        IF entries > scrinalia.fold_sample_threshold(
                         (SELECT c.reltuples FROM pg_catalog.pg_class c
                           WHERE c.oid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass)) THEN
            ANALYZE (SKIP_LOCKED) scrinalia.archive_worker_runs;
        END IF;
        -- (a new statement, a newer snapshot than the delete's: see the top of this file)
        DELETE FROM scrinalia.latest_period_tally t WHERE t.worker_name = ANY (marked);
        INSERT INTO scrinalia.latest_period_tally
        SELECT * FROM scrinalia.latest_finished_periods_of(marked);
    END IF;
END
$$;

-- The tallies from the ledger as it is, under a lock that holds the ledger's writers
-- back (not its readers): by the migrate that installs the triggers, and by the owner
-- as the cure for tallies that drifted (runs written with the triggers off). The lock
-- waits tally_rebuild_lock_wait() for the writers under way, not for ever: writers
-- queue behind it. Nor while a fold holds tally_fold (a caller's transaction left open
-- after worker_metrics()): waiting would hold the ledger's writers for as long as that
-- session likes. Either way it fails, saying why, and changes nothing.
CREATE OR REPLACE FUNCTION scrinalia.rebuild_tallies()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
DECLARE
    previous text := pg_catalog.current_setting('lock_timeout');
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout',
                                  (extract(epoch FROM scrinalia.tally_rebuild_lock_wait()) * 1000)::bigint::text, true);
    BEGIN
        LOCK TABLE scrinalia.archive_worker_runs IN SHARE ROW EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'the metrics'' tallies were not rebuilt: the ledger stayed locked by a writer for %; run it again',
                        scrinalia.tally_rebuild_lock_wait()
              USING ERRCODE = 'lock_not_available';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', previous, true);
    PERFORM 1 FROM scrinalia.tally_fold FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the metrics'' tallies were not rebuilt: a session holds their fold (a transaction left open after worker_metrics() or run_counts()); run it again once that session ends'
              USING ERRCODE = 'lock_not_available';
    END IF;
    PERFORM scrinalia.clear_tallies();
    -- the counts below plan a probe per worker from the ledger's statistics: a ledger
    -- restored or bulk-loaded has none, or an empty table's, and then each probe may
    -- read a whole index; our lock holds autovacuum's sample back, so take one here
    ANALYZE scrinalia.archive_worker_runs;
    INSERT INTO scrinalia.run_tally (worker_name, status, trigger, runs)
    SELECT r.worker_name, r.status, r.trigger, count(*) FROM scrinalia.archive_worker_runs r
     WHERE r.status NOT IN ('QUEUED', 'RUNNING') GROUP BY 1, 2, 3;
    INSERT INTO scrinalia.retry_tally (worker_name, retries)
    SELECT r.worker_name, count(*) FROM scrinalia.archive_worker_runs r
     WHERE r.retry_of IS NOT NULL AND r.status NOT IN ('QUEUED', 'RUNNING') GROUP BY 1;
    INSERT INTO scrinalia.latest_period_tally
    SELECT * FROM scrinalia.latest_finished_periods_of(ARRAY(
        SELECT DISTINCT r.worker_name FROM scrinalia.archive_worker_runs r WHERE r.trigger = 'SCHEDULE'));
END
$$;

-- The triggers, made when one is missing (the first migrate of 0009, or the one after
-- a rollback: what was written meanwhile no trigger saw), with the rebuild, under the
-- rebuild's lock; a migrate that finds them installed leaves the ledger's writers alone.
-- A lock not had in time fails the migrate, which can be run again.
DO $$
BEGIN
    IF (SELECT count(*) = 4 FROM pg_catalog.pg_trigger
         WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
           AND tgname IN ('tally_insert', 'tally_update', 'tally_delete', 'tally_truncate')) THEN
        RETURN;
    END IF;
    -- first: its lock (the one CREATE TRIGGER takes) holds every writer back until the
    -- migrate commits, so no run is written between the rebuild and the triggers
    PERFORM scrinalia.rebuild_tallies();
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
                      AND tgname = 'tally_insert') THEN
        CREATE TRIGGER tally_insert AFTER INSERT ON scrinalia.archive_worker_runs
            FOR EACH ROW WHEN (NEW.status NOT IN ('QUEUED', 'RUNNING') OR NEW.retry_of IS NOT NULL)
            EXECUTE FUNCTION scrinalia.tally_insert_row();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
                      AND tgname = 'tally_update') THEN
        CREATE TRIGGER tally_update AFTER UPDATE ON scrinalia.archive_worker_runs
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.tally_update_statement();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
                      AND tgname = 'tally_delete') THEN
        CREATE TRIGGER tally_delete AFTER DELETE ON scrinalia.archive_worker_runs
            REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.tally_delete_statement();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
                      AND tgname = 'tally_truncate') THEN
        CREATE TRIGGER tally_truncate AFTER TRUNCATE ON scrinalia.archive_worker_runs
            FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.tally_truncate_statement();
    END IF;
END
$$;
