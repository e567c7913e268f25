"""Developer scripts: the one-command demo and the local-Airflow harness shared with the e2e test."""
