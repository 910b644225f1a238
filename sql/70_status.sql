-- What the shim checks at start-up, and what tells an operator whether scheduling is
-- happening: the lock holder and its heartbeat (the lock itself: 45_scheduler_lock.sql),
-- the overdue schedules, and a health answer no other login can fake.
-- Errors: SW002 a negative grace.

-- The migration this code was written for: the shim refuses to run when it differs
-- from the one it expects, and checks the ADR 0015 columns and enum value itself.
CREATE OR REPLACE FUNCTION scrinalia.schema_head()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0018_retry_of_restrict'::text $$;

-- Can this role run the scheduler (execute the tick)? The scheduler group, and the
-- operator and runner groups the ADR lets run it too.
CREATE OR REPLACE FUNCTION scrinalia.role_can_schedule(p_role oid)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT p_role IS NOT NULL
       AND has_function_privilege(p_role, 'scrinalia.tick(text[], timestamp with time zone[], text)', 'EXECUTE')
$$;

-- 0.2 grew scheduler_status() by the holder's role and the heartbeat (nothing of ours
-- calls it).
SELECT pg_temp.drop_when_result_lacks('scrinalia.scheduler_status()', 'holder_role');

-- Who holds the one-scheduler lock now (and whether that login can run the
-- scheduler at all), its last heartbeat, and when the last tick ran.
CREATE OR REPLACE FUNCTION scrinalia.scheduler_status()
RETURNS TABLE (lock_held boolean, holder_pid integer, holder_application text, holder_client inet,
               holder_backend_start timestamptz, last_tick_at timestamptz, last_tick_by text, ticks bigint,
               holder_role text, holder_is_scheduler boolean, heartbeat_at timestamptz,
               heartbeat_pid integer, heartbeat_by text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT h.pid IS NOT NULL, h.pid, a.application_name, a.client_addr, a.backend_start,
           st.last_tick_at, st.last_tick_by, st.ticks,
           a.usename::text, CASE WHEN h.pid IS NOT NULL THEN scrinalia.role_can_schedule(a.usesysid) END,
           st.heartbeat_at, st.heartbeat_pid, st.heartbeat_by
      FROM scrinalia.scheduler_state st
      LEFT JOIN (SELECT scrinalia.scheduler_lock_holder() AS pid) h ON true
      LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = h.pid
$$;

-- The one overdue rule: an enabled schedule whose due instant (or, unarmed, its last
-- save) lies before p_cut (now() less the grace). Set-aside schedules are counted
-- apart. One SQL expression, inlined where it is called, so that worker_metrics()
-- applies it to the schedules it reads anyway instead of reading them a second time.
CREATE OR REPLACE FUNCTION scrinalia.schedule_is_overdue(p_enabled boolean, p_arm_error text,
                                                         p_next_run_at timestamptz, p_updated_at timestamptz,
                                                         p_cut timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_enabled AND p_arm_error IS NULL
           AND coalesce(p_next_run_at, p_updated_at) OPERATOR(pg_catalog.<) p_cut
$$;

-- The enabled schedules due more than p_grace ago (default overdue_grace()):
-- schedule_is_overdue() for scheduler_health(), current_alerts() and the agenda.
CREATE OR REPLACE FUNCTION scrinalia.overdue_schedules(p_grace interval DEFAULT NULL)
RETURNS SETOF scrinalia.archive_worker_schedules
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT s.* FROM scrinalia.archive_worker_schedules s
     -- (a sub-select: computed once, not read from the settings again for every schedule)
     WHERE scrinalia.schedule_is_overdue(s.enabled, s.arm_error, s.next_run_at, s.updated_at,
                                         (SELECT now() - coalesce(p_grace, scrinalia.overdue_grace())))
$$;

-- The sessions, other than the scheduler's own two and the caller's, that hold what the
-- scheduler needs, and have for longer than p_held_for (default blocker_grace()): the
-- scheduler-state row, a due schedule's row, the slot of a worker owed a retry (see
-- enqueue), or a lock a scheduler session waits for. The tick skips what
-- they hold (nothing waits for them), so this is what names them. A row lock is found
-- through the row's xmax and the live transaction ids of pg_locks; two sharers of a
-- row (a MultiXact) are not. Since when: the transaction's start, when the owner may
-- read it (pg_read_all_stats), else the instant the held schedule was due.
CREATE OR REPLACE FUNCTION scrinalia.scheduler_blockers(p_held_for interval DEFAULT NULL)
RETURNS TABLE (pid integer, login text, state text, in_transaction_since timestamptz, holds text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    WITH xids AS (
        SELECT l.transactionid AS xid, l.pid FROM pg_catalog.pg_locks l
         WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
    ), sched AS (
        SELECT h.pid FROM (SELECT scrinalia.scheduler_lock_holder() AS pid) h WHERE h.pid IS NOT NULL
        UNION
        SELECT st.heartbeat_work_pid FROM scrinalia.scheduler_state st
         WHERE st.heartbeat_pid = scrinalia.scheduler_lock_holder() AND st.heartbeat_work_pid IS NOT NULL
    ), held AS (
        SELECT x.pid, 'the scheduler-state row' AS what, NULL::timestamptz AS needed_since
          FROM scrinalia.scheduler_state st JOIN xids x ON x.xid = st.xmax
        UNION ALL
        SELECT x.pid, 'the schedule of ' || s.worker_name, coalesce(s.next_run_at, s.updated_at)
          FROM scrinalia.archive_worker_schedules s JOIN xids x ON x.xid = s.xmax
         WHERE s.enabled
           AND (s.next_run_at IS NULL OR s.next_run_at <= now() OR s.next_run_at >= scrinalia.period_end())
        UNION ALL
        SELECT x.pid, format('the slot of %s (owed a retry)', w.worker_name), NULL
          FROM scrinalia.archive_worker_runs r
          JOIN scrinalia.archive_workers w ON w.worker_name = r.worker_name
          JOIN xids x ON x.xid = w.xmax
         WHERE r.retry_pending
        UNION ALL
        SELECT b.pid, format('a lock the scheduler''s pid %s waits for', s.pid), NULL
          FROM sched s CROSS JOIN LATERAL unnest(pg_catalog.pg_blocking_pids(s.pid)) b(pid)
    )
    SELECT h.pid, a.usename::text, a.state, a.xact_start,
           left(string_agg(DISTINCT h.what, ', ' ORDER BY h.what), 300)
      FROM held h
      LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = h.pid
     WHERE h.pid <> pg_backend_pid() AND h.pid NOT IN (SELECT sched.pid FROM sched)
     GROUP BY h.pid, a.usename, a.state, a.xact_start
    HAVING coalesce(a.xact_start, min(h.needed_since), '-infinity')
           <= now() - coalesce(p_held_for, scrinalia.blocker_grace())
     ORDER BY h.pid
$$;

-- Is scheduling happening? Healthy only when the lock is held by a login that can
-- run the scheduler, that holder's heartbeat is fresh (scheduler_stale_after()) and it
-- is scheduling (holder_not_scheduling()), no
-- enabled schedule is overdue beyond p_grace (default overdue_grace()) and none is
-- set aside for an error. `reason` says in words what is wrong (NULL when healthy).
CREATE OR REPLACE FUNCTION scrinalia.scheduler_health(p_grace interval DEFAULT NULL)
RETURNS TABLE (healthy boolean, reason text, holder_pid integer, holder_role text,
               holder_is_scheduler boolean, heartbeat_at timestamptz, heartbeat_age interval,
               overdue_schedules integer, oldest_overdue_since timestamptz,
               set_aside_schedules integer, checked_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    grace interval := coalesce(p_grace, scrinalia.overdue_grace());
    stale interval := scrinalia.scheduler_stale_after();
    st record;
    problems text[] := '{}';
    overdue_names text;
    aside_names text;
    blockers text;
    not_scheduling text;
BEGIN
    IF grace < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002', MESSAGE = format('scheduler_health takes a grace >= 0, not %s', grace);
    END IF;
    SELECT * INTO st FROM scrinalia.scheduler_status();
    holder_pid := st.holder_pid;
    holder_role := st.holder_role;
    holder_is_scheduler := st.holder_is_scheduler;
    heartbeat_at := st.heartbeat_at;
    heartbeat_age := CASE WHEN isfinite(st.heartbeat_at) THEN now() - st.heartbeat_at END;
    checked_at := now();

    IF holder_pid IS NULL THEN
        problems := problems || 'no scheduler holds the lock'::text;
    ELSIF NOT holder_is_scheduler THEN
        problems := problems || format('the scheduler lock is held by pid %s (role %s, application %L), a login that cannot run the scheduler: nothing ticks while it holds it',
                                       holder_pid, coalesce(st.holder_role, '?'), coalesce(st.holder_application, ''));
    ELSIF NOT scrinalia.holder_heartbeats(holder_pid) THEN
        -- a scheduler writes its heartbeat in the statement that gets the lock
        problems := problems || format('the scheduler lock is held by pid %s (role %s, application %L, connected at %s), which has written no heartbeat: not a scheduler, nothing ticks while it holds it%s',
                                       holder_pid, coalesce(st.holder_role, '?'), coalesce(st.holder_application, ''),
                                       st.holder_backend_start,
                                       CASE WHEN (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = st.holder_role)
                                            THEN ' (a superuser session: never ended by a standby, a DBA must end it)' ELSE '' END);
    ELSIF scrinalia.holder_last_seen(holder_pid) < now() - stale THEN
        problems := problems || format('the scheduler''s heartbeat is stale: last at %s by %s (pid %s), more than %s ago: frozen or cut off',
                                       st.heartbeat_at, coalesce(st.heartbeat_by, '?'), holder_pid, stale);
    ELSE
        not_scheduling := scrinalia.holder_not_scheduling(holder_pid);
        IF not_scheduling IS NOT NULL THEN
            problems := problems || format('the scheduler lock holder pid %s (role %s, application %L) is not scheduling: %s; a standby ends it',
                                           holder_pid, coalesce(st.holder_role, '?'),
                                           coalesce(st.holder_application, ''), not_scheduling);
        END IF;
    END IF;

    -- (a session holding what the tick needs: named after least(grace, blocker_grace()))
    SELECT string_agg(format('pid %s (login %s) %s since %s holds %s: what it holds waits until it ends',
                             b.pid, coalesce(b.login, '?'), coalesce(b.state, 'in a transaction'),
                             coalesce(b.in_transaction_since::text,
                                      'an unknown instant (the schema owner cannot read its session: pg_read_all_stats)'),
                             b.holds), '; ' ORDER BY b.pid)
      INTO blockers
      FROM scrinalia.scheduler_blockers(least(grace, scrinalia.blocker_grace())) b;
    IF blockers IS NOT NULL THEN
        problems := problems || blockers;
    END IF;

    SELECT count(*)::integer, min(coalesce(s.next_run_at, s.updated_at)),
           string_agg(s.worker_name, ', ' ORDER BY coalesce(s.next_run_at, s.updated_at)) FILTER (WHERE true)
      INTO overdue_schedules, oldest_overdue_since, overdue_names
      FROM scrinalia.overdue_schedules(grace) s;
    IF overdue_schedules > 0 THEN
        problems := problems || format('%s enabled schedule(s) overdue by more than %s (due since %s): %s',
                                       overdue_schedules, grace, oldest_overdue_since, left(overdue_names, 300));
    END IF;

    SELECT count(*)::integer, string_agg(format('%s (%s)', s.worker_name, left(s.arm_error, 120)), '; ' ORDER BY s.worker_name)
      INTO set_aside_schedules, aside_names
      FROM scrinalia.archive_worker_schedules s
     WHERE s.enabled AND s.arm_error IS NOT NULL;
    IF set_aside_schedules > 0 THEN
        problems := problems || format('%s schedule(s) set aside, the scheduler cannot compute them: %s',
                                       set_aside_schedules, left(aside_names, 500));
    END IF;

    healthy := cardinality(problems) = 0;
    reason := CASE WHEN healthy THEN NULL ELSE array_to_string(problems, '; ') END;
    RETURN NEXT;
END $$;

-- The release whose migrate installed this code (its package version, which migrate
-- puts in the transaction's scrinalia.installing_release setting): what `status` and
-- a DBA read to tell which release a database runs. sql/ applied by hand says
-- 'unknown'. The text is checked before it is quoted into the function's body.
DO $$
DECLARE
    v text := pg_catalog.current_setting('scrinalia.installing_release', true);
BEGIN
    IF v IS NULL OR v OPERATOR(pg_catalog.!~) '^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$' THEN
        v := 'unknown';
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION scrinalia.installed_release() RETURNS text LANGUAGE sql IMMUTABLE '
        'SET search_path = pg_catalog, pg_temp AS %L',
        pg_catalog.format('SELECT %L::text', v));
END $$;
GRANT EXECUTE ON FUNCTION scrinalia.installed_release()
   TO scrinalia_reader, scrinalia_operator, scrinalia_runner, scrinalia_scheduler;

-- Whether this database still grants CONNECT to PUBLIC (PostgreSQL's default): then any
-- login of the cluster can connect and take the scheduler's lock key, which only the
-- owner's privilege to end sessions removes again. docs/operate.md says how a DBA
-- closes it: REVOKE CONNECT ... FROM PUBLIC, GRANT CONNECT ... TO the groups.
CREATE OR REPLACE FUNCTION scrinalia.public_can_connect()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_database d,
               pg_catalog.aclexplode(coalesce(d.datacl, pg_catalog.acldefault('d', d.datdba))) a
         WHERE d.datname = pg_catalog.current_database() AND a.grantee = 0 AND a.privilege_type = 'CONNECT')
$$;

-- What the standbys cannot do in this install, or NULL: the schema's owner can end no
-- session (neither superuser nor member of pg_signal_backend), so a session that keeps
-- the scheduler lock without being a scheduler is never ended (a frozen scheduler is
-- still replaced: its sessions end themselves, limit_scheduler_session()); or it reads
-- no other login's session start (pg_read_all_stats), so a holder that heartbeats
-- without scheduling is not told apart (holder_not_scheduling()).
CREATE OR REPLACE FUNCTION scrinalia.takeover_grant_missing()
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT nullif(concat_ws('; ',
               CASE WHEN NOT pg_catalog.pg_has_role(r.oid, 'pg_signal_backend', 'USAGE') THEN
                   format('the owner of schema scrinalia, %s, can end no session (neither superuser nor member of pg_signal_backend): a standby cannot end a login that keeps the scheduler lock from it; as a superuser: GRANT pg_signal_backend TO %s',
                          n.nspowner::regrole, n.nspowner::regrole) END,
               CASE WHEN NOT pg_catalog.pg_has_role(r.oid, 'pg_read_all_stats', 'USAGE') THEN
                   format('the owner of schema scrinalia, %s, cannot read when another login''s session started (pg_read_all_stats): a lock holder that heartbeats but does not schedule is not ended; as a superuser: GRANT pg_read_all_stats TO %s',
                          n.nspowner::regrole, n.nspowner::regrole) END), '')
      FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
     WHERE n.nspname = 'scrinalia'
       AND NOT r.rolsuper
$$;
