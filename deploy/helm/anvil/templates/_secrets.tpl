{{/*
The chart renders no Secret and draws no random value: two renders of the same values are the
same bytes, so a GitOps tool (Argo CD, Flux) never sees a difference that is not in Git. Every
credential the services cannot make themselves comes from a Secret you create (by hand, with
External Secrets, Sealed Secrets…): either the one named by the credential's own existingSecret
value, or the shared one named by the top-level existingSecret, under a fixed key. The boot
service's signing key is not among them: the boot service generates it into JetStream KV.
*/}}

{{/* The credentials this configuration needs, as YAML {items: [...]}. Each item: id, what it
is, the value that names its own Secret (value), the Secret and key it comes from (secret is
empty when nothing names one), its key in the shared Secret (sharedKey) and how to make it
(create: a kubectl create secret argument). */}}
{{- define "anvil.credentials" -}}
{{- $v := .Values -}}
{{- $shared := $v.existingSecret -}}
items:
{{- if not $v.adminToken.hash }}
  - id: adminToken
    what: "the bootstrap admin token"
    value: "adminToken.existingSecret (or only its SHA-256 in adminToken.hash)"
    secret: {{ $v.adminToken.existingSecret | default $shared | quote }}
    key: {{ ternary $v.adminToken.existingSecretKey "admin-token" (ne $v.adminToken.existingSecret "") | quote }}
    sharedKey: "admin-token"
    create: "--from-literal=admin-token=anvil_admin_$(openssl rand -hex 24)"
{{- end }}
  - id: encryptionKeys
    what: "the keys that seal cluster credentials (<id>:<base64 of 32 bytes>)"
    value: "revisions.encryptionKeys.existingSecret"
    secret: {{ $v.revisions.encryptionKeys.existingSecret | default $shared | quote }}
    key: {{ ternary $v.revisions.encryptionKeys.existingSecretKey "encryption-keys" (ne $v.revisions.encryptionKeys.existingSecret "") | quote }}
    sharedKey: "encryption-keys"
    create: "--from-literal=encryption-keys=k1:$(openssl rand -base64 32)"
{{- $creds := and (not $v.nats.bundled.enabled) (eq $v.nats.external.auth "creds") }}
{{- if or (include "anvil.natsPasswordAuth" .) $creds }}
{{- range $svc := splitList " " (include "anvil.services" $) }}
{{- $u := index $v.nats.users $svc }}
{{- $own := ne $u.existingSecret "" }}
  - id: nats-{{ $svc }}
{{- if $creds }}
    what: "the {{ $svc }} service's NATS .creds file"
    value: "nats.users.{{ $svc }}.existingSecret"
    secret: {{ $u.existingSecret | default $shared | quote }}
    key: {{ ternary $u.credsKey (printf "nats-%s-creds" $svc) $own | quote }}
    sharedKey: "nats-{{ $svc }}-creds"
    create: "--from-file=nats-{{ $svc }}-creds=<the {{ $svc }} user's .creds file>"
{{- else }}
    what: "the {{ $svc }} service's NATS password"
    value: "nats.users.{{ $svc }}.existingSecret"
    secret: {{ $u.existingSecret | default $shared | quote }}
    key: {{ ternary $u.passwordKey (printf "nats-%s-password" $svc) $own | quote }}
    sharedKey: "nats-{{ $svc }}-password"
    create: "--from-literal=nats-{{ $svc }}-password=$(openssl rand -hex 24)"
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.nats.bundled.enabled (gt (int $v.nats.bundled.replicas) 1) }}
  - id: natsRoutes
    what: "the password of the routes between the NATS servers"
    value: "nats.bundled.routes.existingSecret"
    secret: {{ $v.nats.bundled.routes.existingSecret | default $shared | quote }}
    key: {{ ternary $v.nats.bundled.routes.passwordKey "nats-routes-password" (ne $v.nats.bundled.routes.existingSecret "") | quote }}
    sharedKey: "nats-routes-password"
    create: "--from-literal=nats-routes-password=$(openssl rand -hex 24)"
{{- end }}
{{- end -}}

{{/* Fails, naming every credential nothing provides and the command that makes the shared
Secret, unless each credential this configuration needs comes from a Secret. Every template that
refers to a credential includes it first, so whichever Helm renders first gives this message. */}}
{{- define "anvil.requireSecrets" -}}
{{- $missing := list -}}
{{- range (include "anvil.credentials" . | fromYaml).items -}}
{{- if not .secret -}}
{{- $missing = append $missing . -}}
{{- end -}}
{{- end -}}
{{- if $missing -}}
{{- $lines := list "the chart makes no Secret (so that every render is the same, for GitOps); name the Secrets that hold these credentials:" -}}
{{- range $missing -}}
{{- $lines = append $lines (printf "  - %s: %s, or key %q of the Secret named by existingSecret" .what .value .sharedKey) -}}
{{- end -}}
{{- $lines = append $lines "For example, one Secret for all of them (README.md, \"Secrets\"; passwords of letters and digits only):" -}}
{{- $lines = append $lines (printf "  kubectl -n %s create secret generic anvil-secrets \\" .Release.Namespace) -}}
{{- range $i, $m := $missing -}}
{{- $lines = append $lines (printf "    %s%s" $m.create (ternary "" " \\" (eq (add1 $i) (len $missing)))) -}}
{{- end -}}
{{- $lines = append $lines "and install with --set existingSecret=anvil-secrets." -}}
{{- fail (join "\n" $lines) -}}
{{- end -}}
{{- end -}}

{{/* Where one credential comes from, as YAML {secret, key}; call with (dict "root" $ "id"
"adminToken"). Include anvil.requireSecrets first. */}}
{{- define "anvil.credential" -}}
{{- $id := .id -}}
{{- range (include "anvil.credentials" .root | fromYaml).items -}}
{{- if eq .id $id -}}
secret: {{ .secret | quote }}
key: {{ .key | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A valueFrom.secretKeyRef of one credential; call as anvil.credential. */}}
{{- define "anvil.credentialRef" -}}
{{- $c := include "anvil.credential" . | fromYaml -}}
valueFrom:
  secretKeyRef:
    name: {{ $c.secret }}
    key: {{ $c.key }}
{{- end -}}
