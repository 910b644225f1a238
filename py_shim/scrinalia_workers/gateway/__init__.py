"""Connections, start-up checks and the named statements the daemons and the CLI run."""
