"""What crossed the fabric: link statistics, their one home (`linkstats`), and the exact KV pull
and all-to-all exchange times from the engines' logs (`transfers`)."""
