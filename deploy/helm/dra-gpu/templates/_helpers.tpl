{{/*
Named templates shared by the chart's manifests. Nothing here renders on its own.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "dra-gpu.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every object name: fullnameOverride, else the release name when it already starts
with the chart name ("dra-gpu", "dra-gpu-test"), else "<release>-<chart>". Kept to 40
characters so that suffixes such as "-kubelet-plugin" stay within the 63-character limit.
*/}}
{{- define "dra-gpu.fullname" -}}
{{- $full := .Values.fullnameOverride -}}
{{- if not $full -}}
{{- $app := include "dra-gpu.name" . -}}
{{- $full = ternary .Release.Name (printf "%s-%s" .Release.Name $app) (hasPrefix $app .Release.Name) -}}
{{- end -}}
{{- $full | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "dra-gpu.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "dra-gpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dra-gpu
{{- end -}}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "kubelet-plugin"). */}}
{{- define "dra-gpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-gpu.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The kubelet plugin's ServiceAccount. */}}
{{- define "dra-gpu.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (printf "%s-kubelet-plugin" (include "dra-gpu.fullname" .)) -}}
{{- end -}}

{{/* The standalone controller's ServiceAccount (always created with the controller). */}}
{{- define "dra-gpu.controllerServiceAccountName" -}}
{{- printf "%s-controller" (include "dra-gpu.fullname" .) -}}
{{- end -}}

{{/* The container image reference. */}}
{{- define "dra-gpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* True (non-empty) when the daemons read real GPUs through NVML. */}}
{{- define "dra-gpu.nvml" -}}
{{- if not .Values.gpus.fake.profile -}}true{{- end -}}
{{- end -}}

{{/*
Container securityContext; call with (dict "ctx" $ "override" <values>): the override when
set, else privileged for NVML (GPU device nodes), else unprivileged with every capability
dropped for fake GPUs (root without capabilities can still write the root-owned host dirs).
*/}}
{{- define "dra-gpu.securityContext" -}}
{{- if .override -}}
{{- toYaml .override -}}
{{- else if include "dra-gpu.nvml" .ctx -}}
privileged: true
{{- else -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}

{{/*
Environment shared by both daemons (the flags of dra_driver/appkit/flags.py). NODE_NAME is
left to the caller: the plugin takes it from the downward API, the controller from values.
*/}}
{{- define "dra-gpu.commonEnv" -}}
- name: DRIVER_NAME
  value: {{ .Values.driverName | quote }}
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: MIG_STRATEGY
  value: {{ .Values.mig.strategy | quote }}
{{- if and .Values.sharing.consumable (eq .Values.mig.strategy "dynamic") }}
{{- fail "sharing.consumable cannot be combined with mig.strategy dynamic: a GPU is either carved into MIG devices or shared by capacity" }}
{{- end }}
- name: SHARING
  value: {{ ternary "consumable" "none" .Values.sharing.consumable | quote }}
{{- with .Values.gpus.fake.profile }}
- name: FAKE_GPUS
  value: {{ . | quote }}
- name: FAKE_MIG_LATENCY
  value: {{ $.Values.gpus.fake.migLatency | quote }}
{{- end }}
{{- if include "dra-gpu.nvml" . }}
# pynvml dlopens "libnvidia-ml.so.1"; the start script links the driver's copy here.
- name: LD_LIBRARY_PATH
  value: /run/dra-gpu/nvml
{{- end }}
{{- end -}}

{{/*
Container command in NVML mode: link libnvidia-ml.so.1 from the mounted driver root into a
private directory on LD_LIBRARY_PATH, then exec the daemon (argument: its name). Only that one
library is exposed, so the host's libc never shadows the image's. Fake mode runs the daemon
directly.
*/}}
{{- define "dra-gpu.nvmlCommand" -}}
- /bin/sh
- -ec
- |
  lib=
  for dir in usr/lib64 usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu usr/lib lib; do
    if [ -e "/driver-root/$dir/libnvidia-ml.so.1" ]; then lib="/driver-root/$dir/libnvidia-ml.so.1"; break; fi
  done
  if [ -z "$lib" ]; then
    echo "libnvidia-ml.so.1 not found under the driver root (host path {{ .ctx.Values.gpus.nvml.driverRoot }}); set gpus.nvml.driverRoot, or gpus.fake.profile for fake GPUs" >&2
    exit 1
  fi
  mkdir -p /run/dra-gpu/nvml
  ln -sf "$lib" /run/dra-gpu/nvml/libnvidia-ml.so.1
  exec {{ .daemon }}
{{- end -}}

{{/* Volume and mount of the driver root (NVML mode only). */}}
{{- define "dra-gpu.driverRootVolumes" -}}
- name: driver-root
  hostPath:
    path: {{ .Values.gpus.nvml.driverRoot }}
    type: Directory
- name: nvml-lib
  emptyDir: {}
{{- end -}}
{{- define "dra-gpu.driverRootMounts" -}}
- name: driver-root
  mountPath: /driver-root
  readOnly: true
  # The GPU Operator mounts its driver after this pod may have started.
  mountPropagation: HostToContainer
- name: nvml-lib
  mountPath: /run/dra-gpu
{{- end -}}
