-- Revoke what these groups hold in this database; drop a group only where no other
-- database of the cluster still grants it something.
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['scrinalia_reader', 'scrinalia_operator',
                             'scrinalia_runner', 'scrinalia_scheduler']
    LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('DROP OWNED BY %I', r);
            BEGIN
                EXECUTE format('DROP ROLE %I', r);
            EXCEPTION WHEN dependent_objects_still_exist THEN
                NULL;
            END;
        END IF;
    END LOOP;
END $$;
