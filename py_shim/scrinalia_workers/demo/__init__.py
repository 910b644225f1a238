"""The narrated demo (`scrinalia-workers demo`): its workers, handlers, seed and tidy-up."""
