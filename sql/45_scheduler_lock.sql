-- The one-scheduler lock: a session advisory lock on scheduler_lock_key() that the
-- scheduler holds on a session of its own. Who holds it, the check that opens every
-- tick transaction, the holder's heartbeat (which only the holder's own session can
-- write), the standby's wait in the lock's queue, and ending a holder that keeps the
-- lock from a scheduler (not one, or a stale one) so that a standby can take over. The
-- numbers (heartbeat_interval, scheduler_stale_after) are in 05_policy.sql.
-- Before 70_status.sql: scheduler_status() reads scheduler_lock_holder() (and
-- evict_stale_scheduler() reads scheduler_status() when it runs).
-- Errors: SW031 not the scheduler lock holder; SW032 not the scheduler (check_scheduler_caller,
-- scheduler_heartbeat).

CREATE OR REPLACE FUNCTION scrinalia.scheduler_lock_key()
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 7305764011424514049::bigint $$;  -- 'scrinali' as bytes, fixed for ever

-- The pid of the session holding the scheduler's advisory lock in this database.
-- Any login can take any advisory lock key: the holder is not necessarily a scheduler.
-- This, session_is_owner() and is_scheduler_session() are PL/pgSQL, not SQL: each
-- transaction of the scheduler asks them (check_scheduler_caller), and a SQL function
-- with a SET clause is planned again at every call (its views' joins cost more to plan
-- than to run), where PL/pgSQL keeps its plans.
CREATE OR REPLACE FUNCTION scrinalia.scheduler_lock_holder()
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN (SELECT l.pid FROM pg_catalog.pg_locks l
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
               AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
               AND ((l.classid::bigint << 32) | l.objid::bigint) = scrinalia.scheduler_lock_key()
             LIMIT 1);
END $$;

-- Raises SW031 unless the scheduler lock is held by the session p_lock_pid: the first
-- statement of every tick transaction, so that a scheduler that was frozen (SIGSTOP)
-- and replaced meanwhile does not tick when it resumes.
CREATE OR REPLACE FUNCTION scrinalia.check_scheduler_lock(p_lock_pid integer)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE holder integer := scrinalia.scheduler_lock_holder();
BEGIN
    IF holder IS DISTINCT FROM p_lock_pid THEN
        RAISE EXCEPTION USING ERRCODE = 'SW031',
            MESSAGE = format('the scheduler lock is held by %s, not by pid %s',
                             coalesce('pid ' || holder, 'nobody'), p_lock_pid),
            HINT = 'this scheduler lost the lock: it must stop ticking and go back to standby';
    END IF;
END $$;

-- Whether this session's login is trusted beyond the groups: a superuser, or a member
-- of the schema's owner (who could write the tables, or replace these functions,
-- directly). The scheduler's fence below is against the groups, not against them.
CREATE OR REPLACE FUNCTION scrinalia.session_is_owner()
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user), false)
        OR pg_catalog.pg_has_role(session_user,
               (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'scrinalia'), 'MEMBER');
END $$;

-- Whether the session p_pid may act as the scheduler: it holds the scheduler lock, or
-- it is the work session that the current holder vouched for in its heartbeat
-- (scheduler_state.heartbeat_work_pid, which only the holder's own session writes,
-- while heartbeat_pid is the holder's pid), logged in as the same login as the holder.
-- A pid is only honoured while its voucher holds the lock: a holder that lost it
-- vouches for nothing. Pid reuse: the work session is the holder's own connection; when
-- it ends, the scheduler drops its lock session at its next statement, and a backend
-- that took over the same pid meanwhile must also be of the holder's login.
-- A holder that never heartbeats is 0.1.0's scheduler (it predates the vouch): while it
-- holds the lock, its work session (of its login, named as that release names it) is
-- its scheduler too, so that release keeps scheduling through a later migrate. That
-- login could act from the lock session anyway; a holder that heartbeats since its
-- session began vouches by its heartbeat alone.
CREATE OR REPLACE FUNCTION scrinalia.is_scheduler_session(p_pid integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN (
        WITH h AS (SELECT scrinalia.scheduler_lock_holder() AS pid)
        SELECT coalesce(h.pid = p_pid, false) OR EXISTS (
            SELECT 1 FROM scrinalia.scheduler_state st
             -- (not the view: its joins are not needed here. A NULL pid reads every
             -- session: the pids are compared again)
             CROSS JOIN pg_catalog.pg_stat_get_activity(h.pid) ha
             CROSS JOIN pg_catalog.pg_stat_get_activity(p_pid) wa
             WHERE ha.pid = h.pid AND wa.pid = p_pid
               AND wa.usesysid = ha.usesysid AND wa.datid = ha.datid
               AND ((st.heartbeat_pid = h.pid AND st.heartbeat_work_pid = p_pid)
                    -- (backend_start is NULL to an owner without pg_read_all_stats: a heartbeat
                    -- of the holder's pid then counts as its own)
                    OR (NOT coalesce(st.heartbeat_pid = h.pid
                                     AND st.heartbeat_at >= coalesce(ha.backend_start, '-infinity'), false)
                        AND ha.application_name = 'scrinalia-scheduler lock'
                        AND wa.application_name = 'scrinalia-scheduler')))
          FROM h);
END $$;

-- The guard at the start of every function that decides for the scheduler (the tick,
-- setting aside, the retries, the reaper): raises SW032 unless the calling session is
-- the scheduler (is_scheduler_session) or the schema's owner by hand (session_is_owner,
-- in a session that is not a scheduler process's).
-- A group grant is permission to run the scheduler process, not to act as one from any
-- connection: holding the lock is what makes a session the scheduler. The scheduler
-- process is held to that whoever it logs in as: logged in as the owner, a process that
-- lost its lock between its tick's lock check and its decision would decide that chunk
-- beside the new holder. Its sessions name themselves (scrinalia-scheduler ...); a
-- session that names itself so is not trusted as the owner by hand.
CREATE OR REPLACE FUNCTION scrinalia.check_scheduler_caller(p_function text)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    IF scrinalia.is_scheduler_session(pg_backend_pid())
       OR (scrinalia.session_is_owner()
           AND current_setting('application_name') NOT LIKE 'scrinalia-scheduler%') THEN
        RETURN;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'SW032',
        MESSAGE = format('%s: pid %s (login %s) is not the scheduler: only the session holding the scheduler lock, or the work session its heartbeat names, may call it',
                         p_function, pg_backend_pid(), session_user),
        HINT = 'run the scheduler process (scrinalia-scheduler): it takes the lock and vouches for its work session';
END $$;

-- Writes the heartbeat of this session, the lock holder, vouching for p_work_pid.
-- A refresh of a row that already names this session and p_work_pid is not waited for
-- (a transaction holding the row must not hang the lock session: scheduler_health()
-- names it; the holder's own tick holds it between chunks). A row that does not name
-- them yet (a new holder, its work session vouched for the first time) is waited for,
-- at most max_tick_ahead() + heartbeat_interval(): the tick of a holder that died may
-- hold it that long. So a holder is known as one once this returns, and its work
-- session is vouched for before its first pass; a row held longer (by hand) leaves
-- the heartbeat unrecorded, which the scheduler reads back before it says it holds
-- the lock (scheduler_health() names that transaction).
CREATE OR REPLACE FUNCTION scrinalia.write_heartbeat(p_name text, p_work_pid integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    previous text := current_setting('lock_timeout');
    named boolean;
BEGIN
    SELECT st.heartbeat_pid = pg_backend_pid() AND st.heartbeat_work_pid IS NOT DISTINCT FROM p_work_pid
           AND st.heartbeat_at <= now()  -- (from the future: a hand write, holder_last_seen() ignores it)
      INTO named FROM scrinalia.scheduler_state st;
    IF coalesce(named, false) THEN
        UPDATE scrinalia.scheduler_state st
           SET heartbeat_at = now(), heartbeat_by = scrinalia.check_actor('name', p_name)
         WHERE st.id = (SELECT x.id FROM scrinalia.scheduler_state x
                         WHERE x.heartbeat_at <= now() - scrinalia.heartbeat_interval()
                           FOR NO KEY UPDATE SKIP LOCKED);
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout',
                       (extract(epoch FROM scrinalia.max_tick_ahead() + scrinalia.heartbeat_interval()) * 1000)::bigint::text,
                       true);
    BEGIN
        UPDATE scrinalia.scheduler_state st
           SET heartbeat_at = now(), heartbeat_pid = pg_backend_pid(), heartbeat_work_pid = p_work_pid,
               heartbeat_by = scrinalia.check_actor('name', p_name);
    EXCEPTION WHEN lock_not_available THEN
        NULL;  -- not recorded: the scheduler sees it (scheduler_status().heartbeat_pid) and tries again
    END;
    PERFORM set_config('lock_timeout', previous, true);
END $$;

-- Whether p_work_pid may be vouched for by this session: a live session of this
-- database, of the same login, not this one, and no other than the one this same
-- holder already vouched for (a holder keeps its work session while it holds the
-- lock: its tenure is counted from that session's start, holder_not_scheduling()).
CREATE OR REPLACE FUNCTION scrinalia.check_work_session(p_work_pid integer)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_stat_activity w
         WHERE w.pid = p_work_pid AND w.pid <> pg_backend_pid()
           AND w.usesysid = (SELECT u.usesysid FROM pg_catalog.pg_stat_activity u WHERE u.pid = pg_backend_pid())
           AND w.datid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())) THEN
        RAISE EXCEPTION USING ERRCODE = 'SW032',
            MESSAGE = format('scheduler_heartbeat: the work session %s is not a live session of login %s in this database',
                             coalesce('pid ' || p_work_pid, 'NULL'), session_user),
            HINT = 'a scheduler''s heartbeat names the other session of its own that ticks (p_work_pid)';
    END IF;
    IF EXISTS (SELECT 1 FROM scrinalia.scheduler_state st
                WHERE st.heartbeat_pid = pg_backend_pid() AND st.heartbeat_work_pid <> p_work_pid) THEN
        RAISE EXCEPTION USING ERRCODE = 'SW032',
            MESSAGE = format('scheduler_heartbeat: pid %s already vouched for its work session: it cannot name pid %s instead',
                             pg_backend_pid(), p_work_pid),
            HINT = 'a scheduler whose work session ended gives up the lock and takes it again';
    END IF;
END $$;

-- Called by the scheduler on its lock session before every pass: true when this
-- session holds the lock, and then the heartbeat is recorded (write_heartbeat(): at
-- most once per heartbeat_interval()). p_work_pid is the session it ticks on, which
-- this vouches for (is_scheduler_session, check_work_session). Only the lock holder's
-- own session can write it, so no other login can fake a live scheduler: any other
-- session gets SW032, and so does a holder that names no work session of its own (a
-- login that took the key and heartbeats, ticking nothing). The schema's owner
-- (session_is_owner) may heartbeat with no work session.
CREATE OR REPLACE FUNCTION scrinalia.scheduler_heartbeat(p_name text, p_work_pid integer DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE holder integer := scrinalia.scheduler_lock_holder();
BEGIN
    IF holder IS DISTINCT FROM pg_backend_pid() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW032',
            MESSAGE = format('scheduler_heartbeat: pid %s does not hold the scheduler lock (%s does)',
                             pg_backend_pid(), coalesce('pid ' || holder, 'nobody')),
            HINT = 'only the scheduler lock holder heartbeats; a scheduler that gets this lost the lock';
    END IF;
    IF NOT (scrinalia.session_is_owner() AND p_work_pid IS NULL) THEN
        PERFORM scrinalia.check_work_session(p_work_pid);
    END IF;
    PERFORM scrinalia.write_heartbeat(p_name, p_work_pid);
    RETURN true;
END $$;

-- When the lock holder p_holder_pid last showed it is alive: its heartbeat when it has
-- written one, else when it connected (a scheduler heartbeats right after taking the
-- lock). Older than scheduler_stale_after(): stale, for scheduler_health() and
-- evict_stale_scheduler() alike.
CREATE OR REPLACE FUNCTION scrinalia.holder_last_seen(p_holder_pid integer)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    -- (a heartbeat from the future is no sign of life: only a hand write makes one, and
    -- it would keep a frozen holder from ever being stale)
    SELECT CASE WHEN st.heartbeat_pid = p_holder_pid AND st.heartbeat_at <= clock_timestamp()
                THEN st.heartbeat_at ELSE a.backend_start END
      FROM scrinalia.scheduler_state st
      LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = p_holder_pid
$$;

-- Whether the lock holder p_holder_pid is a scheduler: its own session wrote the
-- heartbeat (take_scheduler_lock() writes it in the statement that gets the lock), or
-- is writing it now: its transaction holds, or waits for, the scheduler-state row,
-- which only the holder's heartbeat and the tick (from another session) may lock. So a
-- new holder is not called "not a scheduler" in the instant between the lock granted
-- and its heartbeat committed.
CREATE OR REPLACE FUNCTION scrinalia.holder_heartbeats(p_holder_pid integer)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT coalesce(bool_or(st.heartbeat_pid = p_holder_pid), false)
        OR EXISTS (SELECT 1 FROM scrinalia.scheduler_state st JOIN pg_catalog.pg_locks l
                       ON l.locktype = 'transactionid' AND l.transactionid = st.xmax
                    WHERE l.pid = p_holder_pid AND l.granted)
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                    WHERE l.pid = p_holder_pid AND NOT l.granted
                      AND (l.relation = 'scrinalia.scheduler_state'::regclass
                           OR (l.locktype = 'transactionid'
                               AND l.transactionid IN (SELECT st.xmax FROM scrinalia.scheduler_state st))))
      FROM scrinalia.scheduler_state st
$$;

-- Why the lock holder p_holder_pid, which heartbeats, is not scheduling (NULL when it
-- is, or when that cannot be told): an enabled schedule, not set aside, its row locked
-- by no transaction, due for longer than scheduler_stale_after() while this holder
-- held the lock, and still not handled. A scheduler handles a due schedule at its
-- instant. The holder's tenure is counted from the start of the work session its
-- heartbeat vouches for (a scheduler opens it once it has the lock, and keeps it:
-- check_work_session()); the owner reads it only with pg_read_all_stats, else NULL.
CREATE OR REPLACE FUNCTION scrinalia.holder_not_scheduling(p_holder_pid integer)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    WITH h AS (
        SELECT w.backend_start AS since, st.heartbeat_work_pid AS work_pid
          FROM scrinalia.scheduler_state st
          JOIN pg_catalog.pg_stat_activity w ON w.pid = st.heartbeat_work_pid
         WHERE st.heartbeat_pid = p_holder_pid AND w.backend_start IS NOT NULL
    )
    SELECT format('schedule %s has been due since %s, more than %s, while pid %s held the lock (vouching for work session pid %s since %s), and it is not handled: the holder heartbeats but does not schedule',
                  s.worker_name, coalesce(s.next_run_at, s.updated_at), scrinalia.scheduler_stale_after(),
                  p_holder_pid, h.work_pid, h.since)
      FROM h, scrinalia.archive_worker_schedules s
     WHERE s.enabled AND s.arm_error IS NULL
       AND (s.next_run_at IS NULL OR s.next_run_at <= now())
       AND greatest(coalesce(s.next_run_at, s.updated_at), h.since) <= now() - scrinalia.scheduler_stale_after()
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                        WHERE l.locktype = 'transactionid' AND l.granted AND l.transactionid = s.xmax)
     ORDER BY coalesce(s.next_run_at, s.updated_at), s.worker_name
     LIMIT 1
$$;

-- Sets the session limit p_setting (a server setting in milliseconds) to p_limit for
-- this session, where the server has it: idle_session_timeout and
-- client_connection_check_interval came in PostgreSQL 14. Whether it was set. The one
-- home of the version guard and the conversion for the limit_scheduler_* functions.
CREATE OR REPLACE FUNCTION scrinalia.set_session_limit(p_setting text, p_limit interval)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_setting IN ('idle_session_timeout', 'client_connection_check_interval')
       AND current_setting('server_version_num')::integer < 140000 THEN
        RETURN false;
    END IF;
    PERFORM set_config(p_setting, (extract(epoch FROM p_limit) * 1000)::bigint::text, false);
    RETURN true;
END $$;

-- The scheduler's sessions end themselves when idle (or idle inside a transaction)
-- longer than scheduler_stale_after() + heartbeat_interval() + twice p_margin (the
-- longest the process waits between two statements: its --max-sleep or
-- --standby-retry): a frozen holder frees the lock, and the schedule rows its tick
-- session may hold, with no privilege to end a session. Where a standby may end
-- sessions, it ends a frozen holder first (at scheduler_stale_after()). (13 has only
-- the limit inside a transaction.)
CREATE OR REPLACE FUNCTION scrinalia.limit_scheduler_session(p_margin interval)
RETURNS interval
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    idle interval := scrinalia.scheduler_stale_after() + scrinalia.heartbeat_interval()
                     + 2 * least(greatest(coalesce(p_margin, interval '0'), interval '0'), interval '1 hour');
BEGIN
    PERFORM scrinalia.set_session_limit('idle_session_timeout', idle);
    -- a killed standby's lock session waits in the lock's queue inside a statement,
    -- where the server reads nothing from the client: checked each second, it leaves
    -- the queue soon after the process died, not when it gets the lock
    PERFORM scrinalia.set_session_limit('client_connection_check_interval', interval '1 second');
    PERFORM scrinalia.set_session_limit('idle_in_transaction_session_timeout', idle);
    RETURN idle;
END $$;

-- The holder's lock session ends itself when idle longer than holder_idle_limit()
-- (idle_session_timeout): a frozen holder frees the lock that soon after its last
-- statement, with no privilege to end a session, and the standby waiting first in the
-- lock's queue gets it. The scheduler calls it once it holds the lock, and from then on
-- sends a statement on that session far more often than the limit, from a thread of
-- its own, while its process runs (a long pass included). PostgreSQL 13 has no
-- idle_session_timeout: there the limit is idle_in_transaction_session_timeout, and the
-- scheduler keeps its lock session inside a transaction (each of its statements
-- followed by COMMIT and BEGIN in one message, so that the session is never idle
-- outside one), to the same effect. Returns the limit.
CREATE OR REPLACE FUNCTION scrinalia.limit_scheduler_lock_session()
RETURNS interval
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE idle interval := scrinalia.holder_idle_limit();
BEGIN
    IF NOT scrinalia.set_session_limit('idle_session_timeout', idle) THEN
        PERFORM scrinalia.set_session_limit('idle_in_transaction_session_timeout', idle);
    END IF;
    RETURN idle;
END $$;

-- The holder's work session ends itself when idle inside a transaction longer than
-- holder_idle_limit() (idle_in_transaction_session_timeout): a holder frozen inside a
-- tick transaction frees that chunk's schedule rows that soon, and the new holder ticks
-- them. The scheduler calls it on its work session once it holds the lock; the one long
-- wait of that session inside a transaction, the cron work of a chunk, is kept from the
-- limit by the keepalive thread. Returns the limit.
CREATE OR REPLACE FUNCTION scrinalia.limit_scheduler_work_session()
RETURNS interval
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE idle interval := scrinalia.holder_idle_limit();
BEGIN
    PERFORM scrinalia.set_session_limit('idle_in_transaction_session_timeout', idle);
    RETURN idle;
END $$;

-- The standby's attempt at the lock: waits in the lock's queue at most p_wait (so that
-- when the holder goes, this session is first in line: a later pg_try_advisory_lock
-- of anyone fails while a request waits ahead of it), and, once granted, writes the
-- heartbeat in the same statement (write_heartbeat(), waiting for the state row a
-- dead holder's tick may still hold), so that no committed moment shows this session
-- holding the lock without being known as a scheduler. p_work_pid may be NULL: the
-- scheduler opens its work session once it has the lock, and its next heartbeat vouches
-- for it (until then no other session of it may decide; a holder that never does goes
-- stale). False when the wait ran out. A session that holds the lock already is
-- refused (SW032): taking it again would refresh a heartbeat that vouches for nothing.
CREATE OR REPLACE FUNCTION scrinalia.take_scheduler_lock(p_name text, p_wait interval, p_work_pid integer DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE previous text := current_setting('lock_timeout');
BEGIN
    IF scrinalia.scheduler_lock_holder() IS NOT DISTINCT FROM pg_backend_pid() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW032',
            MESSAGE = format('take_scheduler_lock: pid %s holds the scheduler lock already', pg_backend_pid()),
            HINT = 'a holder heartbeats (scheduler_heartbeat), naming its work session';
    END IF;
    IF p_work_pid IS NOT NULL THEN
        PERFORM scrinalia.check_work_session(p_work_pid);
    END IF;
    PERFORM set_config('lock_timeout',
                       greatest(1, least(3600000, extract(epoch FROM p_wait) * 1000))::bigint::text, true);
    BEGIN
        PERFORM pg_advisory_lock(scrinalia.scheduler_lock_key());
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', previous, true);
        RETURN false;
    END;
    PERFORM set_config('lock_timeout', previous, true);
    PERFORM scrinalia.write_heartbeat(p_name, p_work_pid);
    RETURN true;
END $$;

-- Ends the session of a lock holder that keeps the scheduler from the lock, so that
-- a standby (waiting first in the lock's queue) takes it:
-- - at once, a holder that is not a scheduler (its session never wrote the heartbeat):
--   when it is idle, or when the caller saw this same pid holding it last time
--   (p_seen_pid; a scheduler writes its heartbeat in the statement that got the lock);
-- - a scheduler whose heartbeat is older than scheduler_stale_after() (frozen: SIGSTOP,
--   a hung host), with its tick session recorded by that heartbeat;
-- - a holder that heartbeats but does not schedule (holder_not_scheduling()), with the
--   work session its heartbeat vouches for.
-- Never a superuser's session (PostgreSQL's own rule for pg_signal_backend): the
-- reason names it for a DBA. It ends no other session. Needs the schema's owner to be
-- a superuser or a member of pg_signal_backend; without it the reason says so.
CREATE OR REPLACE FUNCTION scrinalia.evict_lock_holder(p_seen_pid integer)
RETURNS TABLE (evicted boolean, holder_pid integer, holder_role text, reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    stale interval := scrinalia.scheduler_stale_after();
    st record;
    act record;
    scheduler boolean;
    idle_reason text;
    work_pid integer;
BEGIN
    evicted := false;
    SELECT * INTO st FROM scrinalia.scheduler_status();
    holder_pid := st.holder_pid;
    holder_role := st.holder_role;
    IF holder_pid IS NULL THEN
        reason := 'nobody holds the lock';
        RETURN NEXT; RETURN;
    END IF;
    IF holder_pid = pg_backend_pid() THEN
        reason := 'this session holds the lock';
        RETURN NEXT; RETURN;
    END IF;
    SELECT a.state, r.rolsuper INTO act
      FROM pg_catalog.pg_stat_activity a LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
     WHERE a.pid = holder_pid;
    scheduler := scrinalia.holder_heartbeats(holder_pid);
    -- (an owner without pg_read_all_stats sees no state of other logins' sessions: NULL,
    -- taken as idle; a scheduler's heartbeat is there before anyone sees it idle)
    IF NOT scheduler AND act.state IS NOT DISTINCT FROM 'active' AND holder_pid IS DISTINCT FROM p_seen_pid THEN
        reason := format('pid %s (role %s) holds the lock and has written no heartbeat yet: ended at the next look unless it does',
                         holder_pid, holder_role);
        RETURN NEXT; RETURN;
    END IF;
    IF scheduler AND scrinalia.holder_last_seen(holder_pid) >= now() - stale THEN
        idle_reason := scrinalia.holder_not_scheduling(holder_pid);
        IF idle_reason IS NULL THEN
            reason := format('the holder is alive: heartbeat at %s', st.heartbeat_at);
            RETURN NEXT; RETURN;
        END IF;
    END IF;
    IF act.rolsuper THEN
        reason := format('cannot end the session of pid %s (%s): it is superuser %s''s, never ended from here; a DBA must end it (SELECT pg_terminate_backend(%s))',
                         holder_pid, CASE WHEN idle_reason IS NOT NULL THEN 'not scheduling'
                                          WHEN scheduler THEN 'a stale scheduler' ELSE 'not a scheduler' END,
                         holder_role, holder_pid);
        RETURN NEXT; RETURN;
    END IF;
    -- read before the holder ends: the standby queued behind it then writes its own heartbeat
    SELECT w.heartbeat_work_pid INTO work_pid FROM scrinalia.scheduler_state w WHERE w.heartbeat_pid = holder_pid;
    BEGIN
        evicted := pg_terminate_backend(holder_pid);
        IF evicted AND scheduler THEN
            -- its tick session may sit in a transaction holding schedule rows
            PERFORM pg_terminate_backend(x.pid)
               FROM pg_catalog.pg_stat_activity x JOIN pg_catalog.pg_roles r ON r.oid = x.usesysid
              WHERE x.pid = work_pid AND x.usename = st.holder_role AND NOT r.rolsuper;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        evicted := false;
        reason := format('cannot end the session of pid %s (role %s, %s): the owner of the scrinalia schema needs membership in pg_signal_backend (GRANT pg_signal_backend TO %s, by a superuser) (%s)',
                         holder_pid, st.holder_role,
                         CASE WHEN idle_reason IS NOT NULL THEN 'not scheduling'
                              WHEN scheduler THEN 'a stale scheduler' ELSE 'not a scheduler' END,
                         (SELECT n.nspowner::regrole::text FROM pg_catalog.pg_namespace n WHERE n.nspname = 'scrinalia'),
                         SQLERRM);
        RETURN NEXT; RETURN;
    END;
    reason := CASE WHEN NOT evicted THEN format('pid %s was gone already', holder_pid)
                   WHEN idle_reason IS NOT NULL THEN format('ended the session of pid %s (role %s): %s',
                                                            holder_pid, st.holder_role, idle_reason)
                   WHEN scheduler THEN format('ended the session of stale holder pid %s (role %s; last heartbeat %s)',
                                              holder_pid, st.holder_role, st.heartbeat_at)
                   ELSE format('ended the session of pid %s (role %s, application %L): it held the lock without being a scheduler',
                               holder_pid, st.holder_role, coalesce(st.holder_application, '')) END;
    RETURN NEXT;
END $$;

-- The form of earlier releases: evict_lock_holder() without a pid seen before.
CREATE OR REPLACE FUNCTION scrinalia.evict_stale_scheduler()
RETURNS TABLE (evicted boolean, holder_pid integer, holder_role text, reason text)
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$ SELECT * FROM scrinalia.evict_lock_holder(NULL) $$;
