{{/* The five services, in the order they are rendered. */}}
{{- define "anvil.services" -}}
registry revisions rollout boot gateway
{{- end -}}

{{- define "anvil.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or the release name when it already holds the chart's name. Kept short
enough that "<fullname>-revisions-<pod hash>" stays a valid name. */}}
{{- define "anvil.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "anvil.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every resource; call with (dict "root" $ "component" "registry"). */}}
{{- define "anvil.labels" -}}
helm.sh/chart: {{ include "anvil.chart" .root }}
{{ include "anvil.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: anvil
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "anvil.selectorLabels" -}}
app.kubernetes.io/name: {{ include "anvil.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* An image reference; call with (dict "root" $ "name" "anvil-registry" "tag" "" "digest" "").
With a digest the reference is <name>:<tag>@<digest>: the runtime pulls by digest, the tag stays
for people reading it. */}}
{{- define "anvil.image" -}}
{{- $v := .root.Values.image -}}
{{- $tag := .tag | default $v.tag | default .root.Chart.AppVersion -}}
{{- $repo := $v.repository | trimSuffix "/" -}}
{{- $ref := printf "%s:%s" .name $tag -}}
{{- if $v.registry -}}
{{- $ref = printf "%s/%s/%s:%s" ($v.registry | trimSuffix "/") $repo .name $tag -}}
{{- else if $repo -}}
{{- $ref = printf "%s/%s:%s" $repo .name $tag -}}
{{- end -}}
{{- if .digest -}}
{{- $ref = printf "%s@%s" $ref .digest -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "anvil.serviceAccountName" -}}
{{- $c := index .root.Values .component -}}
{{- if $c.serviceAccount.create -}}
{{- $c.serviceAccount.name | default (printf "%s-%s" (include "anvil.fullname" .root) .component) -}}
{{- else -}}
{{- $c.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The container port that serves /healthz and /readyz: the gateway and boot are probed on the
port they serve (the admin port has the same checks, but would not prove that port answers), the
others on their admin port. /metrics is on the admin port ("metrics") of every service. */}}
{{- define "anvil.healthPort" -}}
{{- if or (eq . "gateway") (eq . "boot") -}}http{{- else -}}metrics{{- end -}}
{{- end -}}

{{- define "anvil.natsName" -}}
{{- printf "%s-nats" (include "anvil.fullname" .) -}}
{{- end -}}

{{- define "anvil.natsURL" -}}
{{- if .Values.nats.bundled.enabled -}}
{{- printf "nats://%s.%s.svc:4222" (include "anvil.natsName" .) .Release.Namespace -}}
{{- else -}}
{{- required "nats.external.url is required when nats.bundled.enabled is false" .Values.nats.external.url -}}
{{- end -}}
{{- end -}}

{{/* Whether the services authenticate with a user name and password. */}}
{{- define "anvil.natsPasswordAuth" -}}
{{- if or .Values.nats.bundled.enabled (eq .Values.nats.external.auth "password") -}}true{{- end -}}
{{- end -}}

{{/* The boot service's public URL, for the revisions service too. */}}
{{- define "anvil.bootURL" -}}
{{- .Values.revisions.bootURL | default .Values.boot.publicURL -}}
{{- end -}}

{{/* The restricted Pod Security profile. */}}
{{- define "anvil.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "anvil.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Adds NAME=value to an env list only when value is not empty. */}}
{{- define "anvil.optEnv" -}}
{{- if and (ne (toString .value) "") (ne (toString .value) "0") }}
- name: {{ .name }}
  value: {{ toString .value | quote }}
{{- end }}
{{- end -}}
