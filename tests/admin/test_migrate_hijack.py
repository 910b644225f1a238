"""Issue 9: migrate cannot be hijacked through objects planted in a writable schema.

A login in no scrinalia group, with CREATE on `public` (the default before PG 15, or
a DBA's GRANT), plants functions and operators that match the built-ins migrate uses
better than pg_catalog's own, and tables named like yoyo's. Each records that it ran
(as whoever called it) into a table the attacker can write. Migrate, as the superuser,
of a fresh database and of an existing one: none of them ran, migrate succeeded, and
no object of ours depends on anything in `public`.
"""

from __future__ import annotations

import psycopg
import pytest

from scrinalia_workers.admin import migrate as m

ATTACKER = "sw_attacker"

# Each body records the call (who ran it) and then answers like the built-in would.
PLANTS = r"""
CREATE TABLE public.hijack_hits (what text, by_role text DEFAULT current_user);
GRANT ALL ON public.hijack_hits TO PUBLIC;

CREATE FUNCTION public.hit(what text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.hijack_hits (what) VALUES (what) $$;

CREATE FUNCTION public.format(text, regprocedure) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('format(text, regprocedure)');
                RETURN pg_catalog.format($1, $2); END $$;
CREATE FUNCTION public.format(text, regclass) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('format(text, regclass)');
                RETURN pg_catalog.format($1, $2); END $$;
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('format(text, text)');
                RETURN pg_catalog.format($1, $2); END $$;
CREATE FUNCTION public.format(text, text, text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('format(text, text, text)');
                RETURN pg_catalog.format($1, $2, $3); END $$;
CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('lower(varchar)'); RETURN pg_catalog.lower($1); END $$;
CREATE FUNCTION public.concat(text, text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('concat(text, text)'); RETURN $1 || $2; END $$;
CREATE FUNCTION public.left(varchar, integer) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('left(varchar, integer)'); RETURN pg_catalog.left($1, $2); END $$;
CREATE FUNCTION public.quote_literal(varchar) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('quote_literal(varchar)'); RETURN pg_catalog.quote_literal($1); END $$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('now()'); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION public.jsonb_typeof(json) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('jsonb_typeof(json)'); RETURN pg_catalog.json_typeof($1); END $$;
CREATE FUNCTION public.pg_advisory_lock(integer) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('pg_advisory_lock(integer)'); END $$;
CREATE FUNCTION public.max(varchar) RETURNS varchar LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('max(varchar)'); RETURN $1; END $$;

CREATE FUNCTION public.eq_text(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('= (text, text)'); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.eq_text);
CREATE FUNCTION public.eq_name_text(name, varchar) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('= (name, varchar)');
                RETURN $1::text OPERATOR(pg_catalog.=) $2::text; END $$;
CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = varchar, FUNCTION = public.eq_name_text);
CREATE FUNCTION public.eq_regclass(regclass, regclass) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('= (regclass, regclass)');
                RETURN $1::oid OPERATOR(pg_catalog.=) $2::oid; END $$;
CREATE OPERATOR public.= (LEFTARG = regclass, RIGHTARG = regclass, FUNCTION = public.eq_regclass);
CREATE FUNCTION public.eq_regclass_text(regclass, text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('= (regclass, text)');
                RETURN $1::text OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR public.= (LEFTARG = regclass, RIGHTARG = text, FUNCTION = public.eq_regclass_text);
CREATE FUNCTION public.eq_oid_int(oid, integer) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('= (oid, integer)');
                RETURN $1 OPERATOR(pg_catalog.=) $2::oid; END $$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = public.eq_oid_int);
CREATE FUNCTION public.eq_char_text("char", text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('= ("char", text)');
                RETURN $1::text OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR public.= (LEFTARG = "char", RIGHTARG = text, FUNCTION = public.eq_char_text);

-- yoyo's bookkeeping tables, pre-created with a trigger that runs as whoever writes.
CREATE FUNCTION public.yoyo_trap() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN PERFORM public.hit('trigger on ' || TG_TABLE_NAME); RETURN NEW; END $$;
CREATE TABLE public.yoyo_lock (locked int DEFAULT 1 PRIMARY KEY, ctime timestamp, pid int NOT NULL);
CREATE TRIGGER trap BEFORE INSERT OR DELETE ON public.yoyo_lock
    FOR EACH ROW EXECUTE FUNCTION public.yoyo_trap();
CREATE TABLE public._yoyo_log (id varchar(36) PRIMARY KEY, migration_hash varchar(64),
    migration_id varchar(255), operation varchar(10), username varchar(255),
    hostname varchar(255), comment varchar(255), created_at_utc timestamp);
CREATE TRIGGER trap BEFORE INSERT ON public._yoyo_log
    FOR EACH ROW EXECUTE FUNCTION public.yoyo_trap();
-- and yoyo's record of what was applied, claiming the first migration is done
CREATE TABLE public._yoyo_migration (migration_hash varchar(64) PRIMARY KEY,
    migration_id varchar(255), applied_at_utc timestamp);
INSERT INTO public._yoyo_migration VALUES
    (encode(sha256('0001_ledger'::bytea), 'hex'), '0001_ledger', now());
CREATE TRIGGER trap BEFORE INSERT OR DELETE ON public._yoyo_migration
    FOR EACH ROW EXECUTE FUNCTION public.yoyo_trap();
GRANT ALL ON public.yoyo_lock, public._yoyo_log, public._yoyo_migration TO PUBLIC;
"""


@pytest.fixture
def attacked_db(admin, empty_db_dsn):
    """A fresh database whose `public` any login may create in, with the plants in it."""
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ATTACKER,)).fetchone():
        admin.execute(f"CREATE ROLE {ATTACKER} LOGIN")
    with psycopg.connect(empty_db_dsn, autocommit=True) as su:
        su.execute("GRANT CREATE, USAGE ON SCHEMA public TO PUBLIC")
    attacker_dsn = psycopg.conninfo.make_conninfo(empty_db_dsn, user=ATTACKER)
    with psycopg.connect(attacker_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
        conn.execute(PLANTS)
        # the plants do work: resolution picks them over pg_catalog where they match better
        conn.execute("SELECT format('%s', 'pg_class'::regclass)")
        assert conn.execute("SELECT count(*) FROM public.hijack_hits").fetchone()[0] == 1
        conn.execute("DELETE FROM public.hijack_hits")
    return empty_db_dsn


def _hits(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT what, by_role FROM public.hijack_hits ORDER BY 1").fetchall()


def _ours_depending_on_public(dsn: str) -> list[str]:
    """Objects in our schemas bound to anything in `public` (a view, a default, a body)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute("""
            SELECT DISTINCT pg_describe_object(d.classid, d.objid, d.objsubid)
              FROM pg_depend d
              JOIN pg_namespace pub ON pub.nspname = 'public'
             WHERE d.refobjid IN (SELECT oid FROM pg_proc WHERE pronamespace = pub.oid
                                  UNION ALL SELECT oid FROM pg_operator WHERE oprnamespace = pub.oid
                                  UNION ALL SELECT oid FROM pg_class WHERE relnamespace = pub.oid)
               AND pg_describe_object(d.classid, d.objid, d.objsubid) LIKE '%scrinalia%'""")
        ]


def test_migrate_of_a_fresh_database_runs_nothing_planted_in_public(attacked_db):
    assert m.migrate(attacked_db, create_groups=True) == m.head_ids()
    assert _hits(attacked_db) == []
    assert _ours_depending_on_public(attacked_db) == []
    with psycopg.connect(attacked_db, autocommit=True) as conn:
        # yoyo's bookkeeping is in a schema of ours, not in the attacker's tables
        assert conn.execute("SELECT count(*) FROM public.yoyo_lock").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM public._yoyo_log").fetchone()[0] == 0


def test_re_migrate_and_rollback_run_nothing_planted_in_public(attacked_db):
    assert m.migrate(attacked_db, create_groups=True) == m.head_ids()
    assert m.migrate(attacked_db) == []  # re-installs every function and view
    assert m.rollback(attacked_db, count=1) == [m.head_ids()[-1]]
    assert m.migrate(attacked_db) == [m.head_ids()[-1]]
    assert _hits(attacked_db) == []
    assert _ours_depending_on_public(attacked_db) == []


def test_code_installed_by_migrate_binds_built_ins_whatever_the_callers_path(attacked_db):
    """A view or function created by migrate resolves names at its creation, under the
    pinned path: a client with `public` first on its path still gets the built-ins."""
    m.migrate(attacked_db, create_groups=True)
    with psycopg.connect(attacked_db, autocommit=True) as conn:
        conn.execute("SET search_path = public, pg_catalog")
        conn.execute("SELECT * FROM scrinalia.worker_agenda")
        conn.execute("SELECT scrinalia.register_worker('w1', '{}', '{}', '{}', '{}')")
        conn.execute("SELECT * FROM scrinalia.enqueue('w1', '{}', 'CLI', 'me')")
    assert _hits(attacked_db) == []


def test_a_bookkeeping_schema_pre_created_by_another_login_is_refused(attacked_db, admin):
    """A login given CREATE on the database creates our bookkeeping schema first, to own
    what migrate would put there: migrate refuses, naming it, and changes nothing."""
    dbname = psycopg.conninfo.conninfo_to_dict(attacked_db)["dbname"]
    admin.execute(f'GRANT CREATE ON DATABASE "{dbname}" TO {ATTACKER}')
    with psycopg.connect(psycopg.conninfo.make_conninfo(attacked_db, user=ATTACKER), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {m.BOOKKEEPING_SCHEMA}")
    with pytest.raises(m.ConfigError, match=f"schema {m.BOOKKEEPING_SCHEMA} is owned by {ATTACKER}"):
        m.migrate(attacked_db, create_groups=True)
    with psycopg.connect(attacked_db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'scrinalia'").fetchone()[0] == 0
        assert (
            conn.execute(f"SELECT count(*) FROM pg_tables WHERE schemaname = '{m.BOOKKEEPING_SCHEMA}'").fetchone()[0]
            == 0
        )
    assert _hits(attacked_db) == []
