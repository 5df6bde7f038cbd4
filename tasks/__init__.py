"""Airflow adapters: thin @task functions that call benchcamp (dags -> tasks -> benchcamp).

Only this package and dags/ import airflow. Importing it is cheap: benchcamp's
heavy modules (engine, loadgen, mlflow, pandas) are imported inside the tasks.
"""
