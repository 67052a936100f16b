"""The lab's Grafana dashboards as code: panel definitions kept as data, rendered to the JSON
committed in `grafana/dashboards/`. Not an installed package: `python grafana/build.py`.

Modules: `panels` (the dashboard model, label matchers and PromQL helpers), `render` (the model
to Grafana's dashboard JSON), one module per dashboard (`serving_dashboard`, `fabric_dashboard`,
`kv_alltoall_dashboard`) and `build` (the registry of dashboards and the command line).
"""
