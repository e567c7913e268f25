"""
The wait for a job, in one place for the operator, the sensor and the trigger.

Three rooms, each depending only on the ones before it (and on the hook, models and exceptions;
nothing in ``hooks`` imports this package):

* :mod:`.outcome`: what the end of a wait means (the event payload, the task's failure, the summary);
* :mod:`.watch`: following one job (what was seen, when to poll next);
* :mod:`.poll`: the requests (poll, wait, find a workflow's job, reconnect, cancel), sync and async.

Imported lazily (inside methods), never at DAG-parse time.
"""
