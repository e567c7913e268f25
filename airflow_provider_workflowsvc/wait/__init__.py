"""
The wait for a job, in one place for the operator, the sensor and the triggers: :mod:`.outcome` (what an
end means), :mod:`.watch` (one job followed), :mod:`.poll` (the requests), :mod:`.source` (what tells the
waits of a connection that their jobs changed), :mod:`.jobs` (many jobs at once). Each room depends only
on those before it; nothing in ``hooks`` imports this package. Imported lazily, never at DAG-parse time.
"""
