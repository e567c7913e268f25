"""
The operators. At module level they import only what DAG parsing needs (the Task SDK, the standard
library, the argument checks of ``_tasks``): hooks, models and pydantic are imported when a task runs.
"""
