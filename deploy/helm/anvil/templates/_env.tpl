{{/* Each service's own environment (services/<name>/service); empty values keep the service's
default. Every name here is read by the service's RegisterFlags. */}}

{{- define "anvil.env.registry" -}}
{{- $c := .Values.registry }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_REGISTRY_OFFLINE_AFTER" "value" $c.offlineAfter) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL" "value" $c.offlineSweepInterval) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_REGISTRY_SNAPSHOT_EVERY" "value" $c.snapshotEvery) }}
{{- end -}}

{{- define "anvil.env.revisions" -}}
{{- $c := .Values.revisions }}
- name: ANVIL_REVISIONS_ENCRYPTION_KEYS
  {{- include "anvil.credentialRef" (dict "root" . "id" "encryptionKeys") | nindent 2 }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_PUBLIC_URL" "value" (include "anvil.bootURL" .)) }}
{{- if and $c.agentURL (not $c.agentHash) }}
{{- fail "revisions.agentHash is required with revisions.agentURL: Ignition verifies every file it fetches (sha512-<hex> of the binary)" }}
{{- end }}
{{- if and $c.agentHash (not $c.agentURL) }}
{{- fail "revisions.agentHash goes only with revisions.agentURL: the boot service hashes the agent it serves" }}
{{- end }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_AGENT_URL" "value" $c.agentURL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_AGENT_HASH" "value" $c.agentHash) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_KUBERNETES_VERSIONS" "value" (join "," ($c.kubernetesVersions | default list))) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_REVISIONS_RENDER_CACHE_BYTES" "value" (int64 $c.renderCacheBytes)) }}
{{- end -}}

{{- define "anvil.env.rollout" -}}
{{- $c := .Values.rollout }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_ROLLOUT_LEASE_TTL" "value" $c.leaseTTL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_ROLLOUT_POLL" "value" $c.poll) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_ROLLOUT_REPLAN" "value" $c.replan) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_ROLLOUT_KUBE_QPS" "value" $c.kubeQPS) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_ROLLOUT_KUBE_BURST" "value" $c.kubeBurst) }}
{{- end -}}

{{- define "anvil.env.boot" -}}
{{- $c := .Values.boot }}
- name: ANVIL_BOOT_ADDR
  value: ":8081"
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_PUBLIC_URL" "value" $c.publicURL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_ASSET_BASE_URL" "value" $c.assetBaseURL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_ASSETS_DIR" "value" $c.assetsDir) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_SYSEXT_MIRROR" "value" $c.sysextMirror) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_KERNEL_ARGS" "value" $c.kernelArgs) }}
{{- if $c.signingKeys.existingSecret }}
- name: ANVIL_BOOT_SIGNING_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $c.signingKeys.existingSecret }}
      key: {{ $c.signingKeys.existingSecretKey }}
{{- end }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_TOKEN_TTL" "value" $c.bootTokenTTL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_IPXE_RETRY_INITIAL" "value" $c.ipxeRetryInitial) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_IPXE_RETRY_MAX" "value" $c.ipxeRetryMax) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_IGNITION_CACHE_BYTES" "value" (int64 $c.ignitionCacheBytes)) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_IGNITION_CACHE_TTL" "value" $c.ignitionCacheTTL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_INSTRUCTION_TTL" "value" $c.instructionTTL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_PREPARE_WORKERS" "value" (int $c.prepareWorkers)) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_IPXE_KNOWN_TTL" "value" $c.ipxeKnownTTL) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_IPXE_REPORT_INTERVAL" "value" $c.ipxeReportInterval) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_RECORD_CACHE_ENTRIES" "value" (int $c.recordCacheEntries)) }}
{{- if $c.tls.enabled }}
- name: ANVIL_BOOT_TLS_ADDR
  value: ":8443"
- name: ANVIL_BOOT_TLS_CERT
  value: /etc/anvil/tls/tls.crt
- name: ANVIL_BOOT_TLS_KEY
  value: /etc/anvil/tls/tls.key
{{- include "anvil.optEnv" (dict "name" "ANVIL_BOOT_TLS_PUBLIC_URL" "value" $c.tls.publicURL) }}
{{- if $c.tls.allowPlainSecrets }}
- name: ANVIL_BOOT_ALLOW_PLAIN_SECRETS
  value: "true"
{{- end }}
{{- end }}
{{- end -}}

{{- define "anvil.env.gateway" -}}
{{- $c := .Values.gateway }}
- name: ANVIL_GATEWAY_ADDR
  value: ":8080"
{{- if .Values.adminToken.hash }}
- name: ANVIL_ADMIN_TOKEN_HASH
  value: {{ .Values.adminToken.hash | quote }}
{{- else }}
- name: ANVIL_ADMIN_TOKEN
  {{- include "anvil.credentialRef" (dict "root" . "id" "adminToken") | nindent 2 }}
{{- end }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_GATEWAY_BODY_LIMIT" "value" (int64 $c.bodyLimit)) }}
{{- include "anvil.optEnv" (dict "name" "ANVIL_GATEWAY_IDEMPOTENCY_TTL" "value" $c.idempotencyTTL) }}
{{- /* The console shows operators the iPXE chain URL under the boot service's public URL. */}}
{{- include "anvil.optEnv" (dict "name" "ANVIL_CONSOLE_BOOT_URL" "value" (include "anvil.bootURL" .)) }}
{{- end -}}
