"""The commands, by concern: each a function of the parsed arguments returning the exit code."""
