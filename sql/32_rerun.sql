-- Re-running an ended run by hand: a MANUAL run of the same worker with the same
-- request, linked to it (archive_run_reruns: the history's rerun_of and rerun_by). It
-- goes through enqueue(), so it is held to every rule of a manual run: the catalogue
-- and the request as they are now (a request the catalogue no longer accepts is
-- refused, SW002), its config resolved anew, the one slot (SW010 while a run or an
-- owed retry holds it), and, MANUAL, never retried (ADR 0015).
-- Errors: SW011 no such run, or one not ended (QUEUED/RUNNING).

CREATE OR REPLACE FUNCTION scrinalia.rerun(p_run_id bigint, p_requested_by text DEFAULT NULL)
RETURNS scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    src scrinalia.archive_worker_runs;
    run scrinalia.worker_run_v1;
BEGIN
    -- KEY SHARE: prune_runs cannot delete it before the link to it is written
    SELECT * INTO src FROM scrinalia.archive_worker_runs r WHERE r.run_id = p_run_id FOR KEY SHARE;
    IF NOT FOUND OR src.status IN ('QUEUED', 'RUNNING') THEN
        RAISE EXCEPTION USING ERRCODE = 'SW011',
            MESSAGE = format('run #%s cannot be re-run: %s', coalesce(p_run_id::text, 'NULL'),
                             CASE WHEN src.run_id IS NULL THEN 'no such run'
                                  ELSE format('it is %s', src.status) END),
            HINT = 'only an ended run (SUCCEEDED, FAILED, INTERRUPTED, CANCELLED) can be re-run';
    END IF;
    run := scrinalia.enqueue(src.worker_name, src.request, 'MANUAL', p_requested_by);
    INSERT INTO scrinalia.archive_run_reruns (run_id, rerun_of) VALUES (run.run_id, src.run_id);
    RETURN run;
END $$;
