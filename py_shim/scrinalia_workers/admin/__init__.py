"""Admin work done by the owner or a DBA: migrate, the cluster-wide groups, the worker catalogue."""
