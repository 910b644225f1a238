-- The stalls reported are lost (a runner of this release, back again, reports a stall
-- anew when it meets one). The release below neither reads nor writes them.
DROP TABLE scrinalia.runner_stalls;
