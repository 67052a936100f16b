"""The run's Prometheus: the scrape configuration (pure), the server process and the PromQL
queries that collect a run's figures."""
