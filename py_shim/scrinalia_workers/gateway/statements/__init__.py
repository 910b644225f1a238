"""Every statement the daemons, the CLI, admin work and the demo send, named, one module per process.

Each is a constant whose name says what it asks; the SQL it sends is a call of the
SQL API (sql/) or a read of one of its views, so a psql user can run the same."""
