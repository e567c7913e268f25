"""Apache Airflow provider for the Workflow Service."""

__version__ = "0.1.0"
