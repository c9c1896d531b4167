"""The pages of docs/reference/, each rendered from the product's own objects (``scripts/gen_reference.py``).

One module per page: ``chart_values`` (the chart's values.schema.json and values.yaml),
``attributes`` (the attribute schema of ``dra_driver.core.schema``), ``metrics`` (the daemons'
Prometheus registries, built in-process), ``events`` (Kubernetes Event reasons and the warning
and error log events, found in the daemons' code). ``markdown`` holds what the pages share.
"""
