"""What the terminal and the web view both show, worded once: instants, durations,
an agenda row's parts, the scheduler's line, what to do about an alert. Imports the
gateway's instant types only: the CLI and the web view sit above it."""
