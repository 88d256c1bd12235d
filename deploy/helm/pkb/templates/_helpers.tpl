{{- define "pkb.fullname" -}}
{{- printf "%s-pkb" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pkb.labels" -}}
app.kubernetes.io/name: pkb
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pkb.selector" -}}
app.kubernetes.io/name: pkb
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pkb.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{/* The Secret holding the TLS pair. */}}
{{- define "pkb.tlsSecret" -}}
{{- default (printf "%s-tls" (include "pkb.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}

{{- define "pkb.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "pkb.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "pkb.hasTokens" -}}
{{- if or .Values.auth.existingSecret .Values.auth.tokens }}true{{ end -}}
{{- end -}}

{{- define "pkb.seedSecret" -}}
{{- default (printf "%s-seed" (include "pkb.fullname" .)) .Values.secretSeed.existingSecret -}}
{{- end -}}

{{- define "pkb.hasSeed" -}}
{{- if or .Values.secretSeed.existingSecret .Values.secretSeed.value }}true{{ end -}}
{{- end -}}
