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
Environment shared by both daemons (the flags of dra_driver/appkit/flags.py); call with
(dict "ctx" $ "strategy" <mig strategy> "consumable" <bool>): the top-level mig.strategy and
sharing.consumable, or a node pool's (dra-gpu.nodePools). NODE_NAME is left to the caller: the
plugin takes it from the downward API, the controller from values.
*/}}
{{- define "dra-gpu.commonEnv" -}}
{{- $ctx := .ctx -}}
- name: DRIVER_NAME
  value: {{ $ctx.Values.driverName | quote }}
- name: LOG_LEVEL
  value: {{ $ctx.Values.logLevel | quote }}
- name: MIG_STRATEGY
  value: {{ .strategy | quote }}
{{- if and (eq .strategy "dynamic") $ctx.Values.mig.profiles }}
- name: MIG_PROFILES
  value: {{ join "," $ctx.Values.mig.profiles | quote }}
{{- end }}
{{- if and .consumable (eq .strategy "dynamic") }}
{{- fail "sharing.consumable cannot be combined with mig.strategy dynamic: a GPU is either carved into MIG devices or shared by capacity" }}
{{- end }}
- name: SHARING
  value: {{ ternary "consumable" "none" .consumable | quote }}
{{- with $ctx.Values.gpus.fake.profile }}
- name: FAKE_GPUS
  value: {{ . | quote }}
- name: FAKE_MIG_LATENCY
  value: {{ $ctx.Values.gpus.fake.migLatency | quote }}
{{- end }}
{{- if include "dra-gpu.nvml" $ctx }}
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
  # The layouts of dra_driver/core/driver_files.py (LAYOUTS), in its search order: the driver
  # root's own (a host install, or GKE's lib64/), then /usr/local/nvidia, the GPU Operator's
  # driver container and GKE's directory as a host root (driverRoot /) holds them.
  for dir in \
      usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu usr/lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu lib64 usr/lib lib \
      usr/local/nvidia/lib64 \
      run/nvidia/driver/usr/lib/x86_64-linux-gnu run/nvidia/driver/usr/lib/aarch64-linux-gnu run/nvidia/driver/usr/lib64 \
      run/nvidia/driver/lib/x86_64-linux-gnu run/nvidia/driver/lib/aarch64-linux-gnu run/nvidia/driver/lib64 \
      run/nvidia/driver/usr/lib run/nvidia/driver/lib \
      home/kubernetes/bin/nvidia/lib64; do
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

{{/*
Where the kubelet plugin finds the driver's user space for the claims' containers (NVML mode
only): the driver root as the plugin sees it, and its host path, which the CDI specs name.
*/}}
{{- define "dra-gpu.driverRootEnv" -}}
- name: DRIVER_ROOT
  value: /driver-root
- name: DRIVER_ROOT_HOST_PATH
  value: {{ .Values.gpus.nvml.driverRoot | quote }}
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

{{/*
The node pools (nodePools), checked, as JSON: {"pools": [...], "exclude": [...]}. Each pool:
index, name, daemonSet (its DaemonSet's name), strategy and consumable (the pool's own or the
top-level value), select (the pool's one label requirement; selectText: it in words) and require
(the node affinity expressions of its DaemonSet). "exclude" is what the default DaemonSet requires: the negation of
every pool's requirement.

A node runs exactly one kubelet plugin: each pool is selected by ONE requirement (a
matchLabels entry, or a matchExpressions entry with In, NotIn, Exists or DoesNotExist), whose
exact negation is again one requirement (In <-> NotIn, Exists <-> DoesNotExist; NotIn and
DoesNotExist also match nodes without the label, as the negation must). Pool i's DaemonSet
requires its own requirement and the negation of every earlier pool's, so a node that two pools
select belongs to the first; the default DaemonSet requires the negation of all of them. A
selector with several requirements would negate to an OR of requirements, which the AND of the
other pools' exclusions would multiply out into a node affinity of exponential size: refused.
Usage: (include "dra-gpu.nodePools" . | fromJson).pools
*/}}
{{- define "dra-gpu.nodePools" -}}
{{- $negate := dict "In" "NotIn" "NotIn" "In" "Exists" "DoesNotExist" "DoesNotExist" "Exists" }}
{{- $prefix := printf "%s-kubelet-plugin" (include "dra-gpu.fullname" .) }}
{{- $pools := list }}
{{- $exclude := list }}
{{- $seen := dict }}
{{- if and .Values.nodePools (not .Values.kubeletPlugin.enabled) }}
{{- fail "nodePools needs kubeletPlugin.enabled: each pool is a kubelet plugin DaemonSet" }}
{{- end }}
{{- range $i, $p := .Values.nodePools | default list }}
{{- $where := printf "nodePools[%d] (%s)" $i $p.name }}
{{- if hasKey $seen $p.name }}
{{- fail (printf "%s: the name %q is taken by nodePools[%d]; every pool needs a name of its own (it names the pool's DaemonSet and labels its pods)" $where $p.name (get $seen $p.name)) }}
{{- end }}
{{- $_ := set $seen $p.name $i }}
{{- $ds := printf "%s-%s" $prefix $p.name }}
{{- if gt (len $ds) 63 }}
{{- fail (printf "%s: the pool's DaemonSet name %s is %d characters, more than 63; shorten the pool name (or the release name, or set fullnameOverride)" $where $ds (len $ds)) }}
{{- end }}
{{- /* The one requirement, as a node selector requirement. */}}
{{- $sel := $p.nodeSelector | default dict }}
{{- $reqs := list }}
{{- range $key, $value := get $sel "matchLabels" | default dict }}
{{- $reqs = append $reqs (dict "key" $key "operator" "In" "values" (list $value)) }}
{{- end }}
{{- range $j, $e := get $sel "matchExpressions" | default list }}
{{- $values := get $e "values" | default list }}
{{- if and (has $e.operator (list "In" "NotIn")) (not $values) }}
{{- fail (printf "%s: nodeSelector.matchExpressions[%d] (key %s): operator %s needs at least one value" $where $j $e.key $e.operator) }}
{{- end }}
{{- if and (has $e.operator (list "Exists" "DoesNotExist")) $values }}
{{- fail (printf "%s: nodeSelector.matchExpressions[%d] (key %s): operator %s takes no values" $where $j $e.key $e.operator) }}
{{- end }}
{{- $r := dict "key" $e.key "operator" $e.operator }}
{{- if $values }}
{{- $_ := set $r "values" (sortAlpha (uniq $values)) }}
{{- end }}
{{- $reqs = append $reqs $r }}
{{- end }}
{{- if ne (len $reqs) 1 }}
{{- fail (printf "%s: nodeSelector must hold exactly one label requirement (one matchLabels entry or one matchExpressions entry), not %d. Every other kubelet plugin DaemonSet must exclude the pool's nodes exactly, and node affinity can say \"not in this pool\" only for a single requirement. Select the pool with one label (e.g. matchLabels: {cloud.google.com/gke-nodepool: gpu-mig}, or one expression `key In [value, ...]`), and put what every plugin pod needs in kubeletPlugin.nodeSelector or kubeletPlugin.affinity" $where (len $reqs)) }}
{{- end }}
{{- $select := first $reqs }}
{{- $desc := printf "%s %s" $select.key $select.operator }}
{{- with get $select "values" }}
{{- $desc = printf "%s [%s]" $desc (join ", " .) }}
{{- end }}
{{- $not := deepCopy $select }}
{{- $_ := set $not "operator" (get $negate $select.operator) }}
{{- /* Two pools on the same label: the same requirement, or value sets that overlap, is a mistake. */}}
{{- range $pools }}
{{- if and (eq .select.key $select.key) (eq (toJson .select) (toJson $select)) }}
{{- fail (printf "%s: selects the same nodes (%s) as nodePools[%d] (%s); pools must not overlap (a node runs one kubelet plugin)" $where $desc (int .index) .name) }}
{{- end }}
{{- if and (eq .select.key $select.key) (eq .select.operator "In") (eq $select.operator "In") }}
{{- $common := list }}
{{- $earlier := .select.values }}
{{- range $select.values }}
{{- if has . $earlier }}{{ $common = append $common . }}{{ end }}
{{- end }}
{{- if $common }}
{{- fail (printf "%s: nodes labelled %s=%s are also selected by nodePools[%d] (%s); pools must not overlap (a node runs one kubelet plugin)" $where $select.key (first $common) (int .index) .name) }}
{{- end }}
{{- end }}
{{- end }}
{{- $strategy := dig "mig" "strategy" $.Values.mig.strategy $p }}
{{- $consumable := dig "sharing" "consumable" $.Values.sharing.consumable $p }}
{{- if and $consumable (eq $strategy "dynamic") }}
{{- fail (printf "%s: mig.strategy dynamic cannot be combined with sharing.consumable (%s): a GPU is either carved into MIG devices or shared by capacity; set sharing.consumable: false in the pool" $where (ternary "set in the pool" "the top-level value, which the pool inherits" (hasKey ($p.sharing | default dict) "consumable"))) }}
{{- end }}
{{- $pools = append $pools (dict "index" $i "name" $p.name "daemonSet" $ds "strategy" $strategy "consumable" $consumable "select" $select "selectText" $desc "require" (prepend $exclude $select)) }}
{{- $exclude = append $exclude $not }}
{{- end }}
{{- toJson (dict "pools" $pools "exclude" $exclude) }}
{{- end -}}

{{/*
Affinity of a kubelet plugin DaemonSet: kubeletPlugin.affinity with the node selector
requirements "exprs" added to every required node selector term (terms are ORed, a term's
expressions ANDed, so each term keeps its meaning and gains the pool's bounds), or one term of
"exprs" alone when there is none. An empty term matches no node and is kept as it is. Call with
(dict "affinity" <values> "exprs" <list>); renders YAML, nothing when there is no affinity.
*/}}
{{- define "dra-gpu.pluginAffinity" -}}
{{- $aff := deepCopy (.affinity | default dict) }}
{{- if .exprs }}
{{- $na := get $aff "nodeAffinity" | default dict }}
{{- $required := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
{{- $terms := list }}
{{- range get $required "nodeSelectorTerms" | default list }}
{{- if or (get . "matchExpressions") (get . "matchFields") }}
{{- $terms = append $terms (set . "matchExpressions" (concat (get . "matchExpressions" | default list) $.exprs)) }}
{{- else }}
{{- $terms = append $terms . }}
{{- end }}
{{- end }}
{{- if not $terms }}
{{- $terms = list (dict "matchExpressions" .exprs) }}
{{- end }}
{{- $_ := set $required "nodeSelectorTerms" $terms }}
{{- $_ = set $na "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ = set $aff "nodeAffinity" $na }}
{{- end }}
{{- with $aff }}
{{- toYaml . }}
{{- end }}
{{- end -}}
