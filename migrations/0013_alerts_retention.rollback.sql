-- The alerts already announced and the chores' instants are lost: this release's
-- scheduler, back again, announces the current alerts once more and prunes at its
-- first pass. The release below neither reads nor writes them.
DROP TABLE scrinalia.scheduler_chores;
DROP TABLE scrinalia.announced_alerts;
