-- What the files of sql/ use while migrate installs them, in its session only
-- (pg_temp: nothing of it stays in the schema, and no other session can call it).

-- A function whose result grew a column cannot be replaced in place: when the one
-- installed does not return p_column yet, it is dropped, and the file that calls this
-- creates the new one in this same transaction (a client sees the old or the new one).
-- p_function: a signature written in sql/, never input.
CREATE OR REPLACE FUNCTION pg_temp.drop_when_result_lacks(p_function text, p_column text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE old pg_catalog.regprocedure := pg_catalog.to_regprocedure(p_function);
BEGIN
    IF old IS NOT NULL
       AND pg_catalog.strpos(pg_catalog.pg_get_function_result(old), p_column) OPERATOR(pg_catalog.=) 0 THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', old);
    END IF;
END $$;
