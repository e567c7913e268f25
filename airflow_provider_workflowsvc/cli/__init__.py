"""The provider's command line: ``airflow workflowsvc`` (Airflow 3.2+), or ``python -m`` this package."""
