"""The dra-gpu admission webhook app: rejects ResourceClaims and ResourceClaimTemplates with bad opaque configs.

``admission`` answers AdmissionReviews with the core's ``validate_claim_configs`` (the same
decoder the kubelet plugin uses at prepare), ``server`` serves it over HTTPS, ``main`` is the
``dra-gpu-webhook`` console script. Deployed by the Helm chart when ``webhook.enabled``.
"""
