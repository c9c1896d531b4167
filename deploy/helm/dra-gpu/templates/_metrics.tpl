{{/*
Where each daemon's /metrics listens and who may read it (dra_driver/obs/ports.py,
dra_driver/obs/scrape_auth.py): the env, mounts and volumes every daemon's pod template
includes. METRICS_PORT stays in each template (its own port value).

dra-gpu.metricsEnv: METRICS_ADDRESS (metrics.address, or the pod's IP from the downward API),
the token file and the TLS files, when metrics.enabled. Argument: the root context.
*/}}
{{- define "dra-gpu.metricsEnv" -}}
{{- $m := .Values.metrics -}}
{{- if $m.enabled -}}
{{- if and $m.tls.clientCA.secretName (not $m.tls.secretName) }}
{{- fail "metrics.tls.clientCA.secretName needs metrics.tls.secretName: client certificates are asked for over TLS" }}
{{- end }}
# Where /metrics listens: the pod's own IP unless metrics.address says otherwise (never every
# address by default).
- name: METRICS_ADDRESS
{{- if $m.address }}
  value: {{ $m.address | quote }}
{{- else }}
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- if $m.auth.tokenSecret.name }}
# Scrapes must send this token (Authorization: Bearer), else 401.
- name: METRICS_TOKEN_FILE
  value: /etc/dra-gpu/metrics-token/token
{{- end }}
{{- if $m.tls.secretName }}
- name: METRICS_TLS_CERT_FILE
  value: /etc/dra-gpu/metrics-tls/tls.crt
- name: METRICS_TLS_KEY_FILE
  value: /etc/dra-gpu/metrics-tls/tls.key
{{- end }}
{{- if $m.tls.clientCA.secretName }}
- name: METRICS_CLIENT_CA_FILE
  value: /etc/dra-gpu/metrics-client-ca/ca.crt
{{- end }}
{{- end }}
{{- end -}}

{{/*
dra-gpu.metricsMounts / dra-gpu.metricsVolumes: the token, TLS and client CA Secrets, read-only,
each key projected to a fixed file name. Empty when none is configured. Argument: the root context.
*/}}
{{- define "dra-gpu.metricsMounts" -}}
{{- $m := .Values.metrics -}}
{{- if $m.enabled -}}
{{- if $m.auth.tokenSecret.name }}
- name: metrics-token
  mountPath: /etc/dra-gpu/metrics-token
  readOnly: true
{{- end }}
{{- if $m.tls.secretName }}
- name: metrics-tls
  mountPath: /etc/dra-gpu/metrics-tls
  readOnly: true
{{- end }}
{{- if $m.tls.clientCA.secretName }}
- name: metrics-client-ca
  mountPath: /etc/dra-gpu/metrics-client-ca
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "dra-gpu.metricsVolumes" -}}
{{- $m := .Values.metrics -}}
{{- if $m.enabled -}}
{{- with $m.auth.tokenSecret.name }}
- name: metrics-token
  secret:
    secretName: {{ . }}
    items:
    - key: {{ $m.auth.tokenSecret.key }}
      path: token
{{- end }}
{{- with $m.tls.secretName }}
- name: metrics-tls
  secret:
    secretName: {{ . }}
    items:
    - key: tls.crt
      path: tls.crt
    - key: tls.key
      path: tls.key
{{- end }}
{{- with $m.tls.clientCA.secretName }}
- name: metrics-client-ca
  secret:
    secretName: {{ . }}
    items:
    - key: {{ $m.tls.clientCA.key }}
      path: ca.crt
{{- end }}
{{- end }}
{{- end -}}
