"""Load generation: Locust users, arrival shapes and workload profiles (to come)."""
