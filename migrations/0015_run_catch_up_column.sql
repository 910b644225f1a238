-- Whether a SCHEDULE attempt 1 is a catch-up (the tick created it after periods were
-- missed: one run for them all) is a column of the run, written by the tick with the
-- run. 0010 kept it in a table beside the ledger (archive_run_catch_ups): a column more
-- changes the result of every function returning the ledger's row, and an earlier
-- release's daemon calling one meanwhile fails ("cached plan must not change result
-- type", "structure of query does not match function result type") or gets a column
-- it never asked for. So the migration is two transactions (not one: yoyo commits each
-- statement of this file on its own), each one statement:
-- 1. Those functions stop returning the ledger's row type: they return
--    scrinalia.worker_run_v1, the ledger's row as it was before this column, and go on
--    returning it whatever columns the ledger gains. A function's result type cannot
--    change in place, so each one is renamed (its OID, body and grants kept: a caller
--    that resolved it meanwhile still runs it; the calls between them go to each
--    other's renamed form) and a function of its name, arguments and defaults
--    returning worker_run_v1 takes its place, granted as it was. That one first takes
--    its lock on the ledger, and only then starts the call of the renamed one: a call
--    that waited for step 2 is planned against the ledger step 2 left, and its row is
--    cut to worker_run_v1's columns. (Committed before step 2 takes the ledger, so
--    that no call of the release below still resolves the renamed one then.) The code
--    installed next replaces these in place; the renamed ones stay (see
--    99_drop_obsolete.sql). A fresh install has none of them yet. Run again after a
--    failed step 2, it finds nothing left to rename.
-- 2. The column, once the statements under way in the database have ended (a call
--    begun before step 1 committed runs the old body, and must reach the ledger before
--    the column does). NOT NULL DEFAULT false: a default PostgreSQL keeps in the catalog, no
--    rewrite of the ledger. The catch-ups 0010 recorded are moved in; the table stays,
--    written only by a tick of the code this migrate replaces (between this migration
--    and the code): what it inserts there is moved onto its run by the trigger below
--    (its function, sql/37_run_side_rows.sql, is created here first, then replaced in
--    place by the code).
-- depends: 0014_runner_stalls
-- transactional: false

DO $step1$
DECLARE
    f record;
    g record;
    renamed text;
    body text;
    cols text;  -- worker_run_v1's columns, of the renamed function's row r
    lock_first constant text := 'LOCK TABLE scrinalia.archive_worker_runs IN ROW EXCLUSIVE MODE;';
    call text;
BEGIN
    IF pg_catalog.to_regtype('scrinalia.worker_run_v1') IS NULL THEN
        CREATE TYPE scrinalia.worker_run_v1 AS (
            run_id            bigint,
            worker_name       text,
            status            scrinalia.run_status,
            trigger           scrinalia.run_trigger,
            request           jsonb,
            config            jsonb,
            config_sources    jsonb,
            requested_by      text,
            lease_owner       text,
            lease_token       uuid,
            lease_expires_at  timestamptz,
            lease_duration    interval,
            heartbeat_at      timestamptz,
            created_at        timestamptz,
            started_at        timestamptz,
            finished_at       timestamptz,
            error             text,
            error_fingerprint text,
            duration          interval,
            attempt           integer,
            retry_of          bigint,
            not_before        timestamptz,
            scheduled_for     timestamptz,
            retry_pending     boolean
        );
    END IF;
    SELECT pg_catalog.string_agg('r.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(a.attname), ', '
                                 ORDER BY a.attnum)
      INTO cols
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) (SELECT t.typrelid FROM pg_catalog.pg_type t
                                               WHERE t.oid OPERATOR(pg_catalog.=) 'scrinalia.worker_run_v1'::pg_catalog.regtype)
       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    FOR f IN SELECT p.oid, p.proname, p.proretset, p.pronargs, p.proacl,
                    pg_catalog.pg_get_function_arguments(p.oid) AS args,
                    pg_catalog.pg_get_function_identity_arguments(p.oid) AS ident
               FROM pg_catalog.pg_proc p
              WHERE p.prorettype OPERATOR(pg_catalog.=) 'scrinalia.archive_worker_runs'::pg_catalog.regtype
                AND p.proname NOT LIKE '%\_before\_0015'
    LOOP
        renamed := f.proname OPERATOR(pg_catalog.||) '_before_0015';
        EXECUTE pg_catalog.format('ALTER FUNCTION scrinalia.%I(%s) RENAME TO %I', f.proname, f.ident, renamed);
        call := pg_catalog.format('scrinalia.%I(%s) r', renamed,
                    (SELECT pg_catalog.string_agg('$' OPERATOR(pg_catalog.||) i, ', ')
                       FROM pg_catalog.generate_series(1, f.pronargs) i));
        -- (as its definer: the lock needs a right on the ledger its callers lack)
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION scrinalia.%I(%s) RETURNS %s scrinalia.worker_run_v1 LANGUAGE plpgsql VOLATILE'
            ' SECURITY DEFINER SET search_path = pg_catalog, scrinalia, pg_temp AS %L',
            f.proname, f.args, CASE WHEN f.proretset THEN 'SETOF' ELSE '' END,
            CASE WHEN f.proretset
                 THEN pg_catalog.format('BEGIN %s RETURN QUERY SELECT %s FROM %s; END', lock_first, cols, call)
                 ELSE pg_catalog.format('DECLARE v scrinalia.worker_run_v1; BEGIN %s SELECT %s INTO v FROM %s;'
                                        ' RETURN v; END', lock_first, cols, call)
            END);
        IF f.proacl IS NOT NULL THEN  -- (NULL: the default, as the new function's)
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION scrinalia.%I(%s) FROM PUBLIC', f.proname, f.ident);
            FOR g IN SELECT a.grantee FROM pg_catalog.aclexplode(f.proacl) a
                      WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
            LOOP
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION scrinalia.%I(%s) TO %s', f.proname, f.ident,
                                          CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                               ELSE pg_catalog.quote_ident(g.grantee::pg_catalog.regrole::pg_catalog.text) END);
            END LOOP;
        END IF;
    END LOOP;
    -- The renamed ones call each other by name (claim_next calls claim_runs, rerun
    -- enqueue), expecting the ledger's row: they call each other's renamed form.
    FOR f IN SELECT p.oid, p.proname FROM pg_catalog.pg_proc p
              WHERE p.prorettype OPERATOR(pg_catalog.=) 'scrinalia.archive_worker_runs'::pg_catalog.regtype
    LOOP
        body := pg_catalog.pg_get_functiondef(f.oid);
        FOR g IN SELECT pg_catalog.left(p.proname, -pg_catalog.length('_before_0015')) AS name
                   FROM pg_catalog.pg_proc p
                  WHERE p.prorettype OPERATOR(pg_catalog.=) 'scrinalia.archive_worker_runs'::pg_catalog.regtype
        LOOP
            body := pg_catalog.regexp_replace(body, '(scrinalia\.)?\m' OPERATOR(pg_catalog.||) g.name
                                                    OPERATOR(pg_catalog.||) '(\s*\()',
                                              'scrinalia.' OPERATOR(pg_catalog.||) g.name
                                                    OPERATOR(pg_catalog.||) '_before_0015\2', 'g');
        END LOOP;
        EXECUTE body;
    END LOOP;
END $step1$;

DO $step2$
DECLARE
    since constant timestamptz := pg_catalog.statement_timestamp();
    polls integer := 0;
BEGIN
    -- A call of the release below that began before step 1 committed still runs the
    -- renamed function's old body: it must reach the ledger before the column does.
    -- So first the statements under way in this database wait to end (bounded: one
    -- that runs on is none of those calls, and must not hold the upgrade back).
    LOOP
        PERFORM pg_catalog.pg_stat_clear_snapshot();
        EXIT WHEN polls OPERATOR(pg_catalog.>=) 500 OR NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_stat_activity a
             WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
               AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
               AND a.backend_type OPERATOR(pg_catalog.=) 'client backend'
               AND a.state OPERATOR(pg_catalog.=) 'active'
               AND a.query_start OPERATOR(pg_catalog.<) since);
        PERFORM pg_catalog.pg_sleep(0.01);
        polls := polls OPERATOR(pg_catalog.+) 1;
    END LOOP;
    LOCK TABLE scrinalia.archive_worker_runs IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE scrinalia.archive_worker_runs ADD COLUMN IF NOT EXISTS catch_up boolean NOT NULL DEFAULT false;

    UPDATE scrinalia.archive_worker_runs r SET catch_up = true
      FROM scrinalia.archive_run_catch_ups c WHERE c.run_id = r.run_id;
    DELETE FROM scrinalia.archive_run_catch_ups;

    CREATE OR REPLACE FUNCTION scrinalia.run_catch_up_noted()
    RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, scrinalia, pg_temp
    AS $$
    BEGIN
        UPDATE scrinalia.archive_worker_runs r SET catch_up = true
          FROM new_rows n WHERE n.run_id = r.run_id AND NOT r.catch_up;
        DELETE FROM scrinalia.archive_run_catch_ups c USING new_rows n WHERE c.run_id = n.run_id;
        RETURN NULL;
    END $$;

    DROP TRIGGER IF EXISTS run_catch_up_noted ON scrinalia.archive_run_catch_ups;
    CREATE TRIGGER run_catch_up_noted AFTER INSERT ON scrinalia.archive_run_catch_ups
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.run_catch_up_noted();
END $step2$;
