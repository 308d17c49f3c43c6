"""PySpark data source and jobs (extra [spark])."""
