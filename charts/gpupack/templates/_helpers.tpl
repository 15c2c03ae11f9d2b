{{/*
The namespace of gpupack's namespaced objects.
*/}}
{{- define "gpupack.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
{{- end }}

{{/*
An object's metadata: its name, then (not in the kustomize base, where kustomize sets them) its namespace and
the chart's labels. Arguments: root (the chart's context), name; optional namespace (a fixed one, such as
kube-system, kept in the kustomize base too), cluster (true for a cluster-scoped object), labels (more labels,
not in the kustomize base either: there the monitoring component adds the one its ServiceMonitors select by).
*/}}
{{- define "gpupack.metadata" -}}
{{- $root := .root -}}
name: {{ .name }}
{{- if .namespace }}
namespace: {{ .namespace }}
{{- else if not (or .cluster $root.Values.kustomize) }}
namespace: {{ include "gpupack.namespace" $root }}
{{- end }}
{{- if not $root.Values.kustomize }}
labels:
  helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version }}
  app.kubernetes.io/managed-by: {{ $root.Release.Service }}
  app.kubernetes.io/instance: {{ $root.Release.Name }}
  app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
  app.kubernetes.io/part-of: gpupack
  {{- with .labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
A gpupack container's image: the repository and, outside the kustomize base (whose `images:` tags it), the tag.
*/}}
{{- define "gpupack.image" -}}
{{- .Values.image.repository -}}
{{- if not .Values.kustomize }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ end -}}
{{- end }}

{{/*
The policy document: the values' `policy` with what the chart knows better written in, each only where it
differs from the policy's default (gpupack/core/policy.py: gpupackNamespace gpupack-system, scheduler.name and
scheduler.lease gpupack-system/gpupack-scheduler), so the default policy stays as short as the values.
*/}}
{{- define "gpupack.policy" -}}
{{- $policy := deepCopy (.Values.policy | default dict) -}}
{{- $namespace := include "gpupack.namespace" . -}}
{{- $given := get $policy "scheduler" | default dict -}}
{{- if or (hasKey $policy "gpupackNamespace") (hasKey $given "name") (hasKey $given "lease") }}
{{- fail "policy: leave out gpupackNamespace, scheduler.name and scheduler.lease: the chart writes them (from namespaceOverride or the release's namespace, scheduler.name and scheduler.mode)" }}
{{- end }}
{{- if ne $namespace "gpupack-system" }}
{{- $_ := set $policy "gpupackNamespace" $namespace }}
{{- end }}
{{- $scheduler := deepCopy (get $policy "scheduler" | default dict) -}}
{{- if eq .Values.scheduler.mode "main" }}
{{- $_ := set $scheduler "name" nil }}
{{- else }}
{{- if ne .Values.scheduler.name "gpupack-scheduler" }}
{{- $_ := set $scheduler "name" .Values.scheduler.name }}
{{- end }}
{{- if ne $namespace "gpupack-system" }}
{{- $_ := set $scheduler "lease" (dict "namespace" $namespace "name" "gpupack-scheduler") }}
{{- end }}
{{- end }}
{{- if $scheduler }}
{{- $_ := set $policy "scheduler" $scheduler }}
{{- end }}
{{- toYaml $policy }}
{{- end }}

{{/*
The GPU resources the extender is called for (managedResources takes no wildcards): whole GPUs, the time-sliced
replica and one per MIG profile. For the policy's default profiles the list is files/gpu-resources.yaml, which
charts/generate.py writes from the policy model; a policy with its own `migProfiles` or `timeSlicing` gets its own.
*/}}
{{- define "gpupack.gpuResources" -}}
{{- $policy := .Values.policy | default dict -}}
{{- if or (hasKey $policy "migProfiles") (hasKey $policy "timeSlicing") -}}
{{- $resources := list "nvidia.com/gpu" (dig "timeSlicing" "resourceName" "nvidia.com/gpu.shared" $policy) -}}
{{- $profiles := $policy.migProfiles | default (.Files.Get "files/gpu-resources.yaml" | fromYaml).migProfiles -}}
{{- range $profiles }}
{{- $resources = append $resources (printf "nvidia.com/mig-%s" .name) }}
{{- end }}
{{- toYaml (dict "resources" (uniq $resources)) }}
{{- else -}}
{{- .Files.Get "files/gpu-resources.yaml" }}
{{- end }}
{{- end }}

{{/*
The `extenders` entry of a KubeSchedulerConfiguration calling gpupack's extender at `url`, with `tls` (a
tlsConfig) when given. Arguments: root, url, tls, managed. With `managed`, the entry lists managedResources: the
main scheduler must call the extender only for GPU pods. The second scheduler only receives the pods the webhook
sends it, and calls the extender for each of them, pods sized through a GPU claim (no GPU resource) included.
*/}}
{{- define "gpupack.extenderEntry" -}}
- urlPrefix: {{ .url | quote }}
  filterVerb: filter
  prioritizeVerb: prioritize
  # Asked before any victim dies: keeps the candidates the pod would take, with the fewest, cheapest victims.
  preemptVerb: preempt
  # Final score = extender score (0..10) x weight x 10, added to the plugins' scores.
  weight: 5
  # The extender keeps its own watch cache: the scheduler sends node names only.
  nodeCacheCapable: true
  # Scheduling goes on without the extender if it is down (its verbs answer within milliseconds).
  ignorable: true
  httpTimeout: 2s
  {{- with .tls }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .managed }}
  # Called only for pods requesting a GPU resource (one entry per resource: no wildcards). Pods sized through a
  # GPU claim (policy dra.memorySizing) request none: kube-scheduler's own plugins place them.
  managedResources:
    {{- range (include "gpupack.gpuResources" .root | fromYaml).resources }}
    - {name: {{ . }}, ignoredByScheduler: false}
    {{- end }}
  {{- else }}
  # No managedResources: called for every pod of this scheduler, which the webhook only gives opted-in GPU pods,
  # pods sized through a GPU claim (no GPU resource to list) included.
  {{- end }}
{{- end }}

{{/*
The extenders snippet for the main scheduler (main mode): the Service's DNS name, TLS with the client
certificate from scheduler.clientCertDirectory.
*/}}
{{- define "gpupack.mainSchedulerExtenders" -}}
{{- $dir := .Values.scheduler.clientCertDirectory -}}
{{- $url := printf "https://gpupack-extender.%s.svc:8888" (include "gpupack.namespace" .) -}}
{{- $tls := dict "certFile" (printf "%s/client.crt" $dir) "keyFile" (printf "%s/client.key" $dir) "caFile" (printf "%s/ca.crt" $dir) -}}
extenders:
{{ include "gpupack.extenderEntry" (dict "root" . "url" $url "tls" $tls "managed" true) }}
{{- end }}

{{/*
Whether the chart issues certificates with cert-manager, and the issuer they come from.
*/}}
{{- define "gpupack.issuerRef" -}}
{{- if .Values.certificates.certManager.issuerRef -}}
{{- toYaml .Values.certificates.certManager.issuerRef }}
{{- else -}}
{kind: Issuer, name: gpupack-ca}
{{- end }}
{{- end }}
