{{/* Names and labels of the ticker Deployment (ticker.*): `progress-control sidecar` on its own,
watching the broker for topics whose producers run no sidecar. */}}

{{/* Name of the Deployment, its Service, PodDisruptionBudget and ServiceMonitor. */}}
{{- define "progress-control.ticker.name" -}}
{{- include "progress-control.fullname" . | trunc 49 | trimSuffix "-" }}-ticker
{{- end -}}

{{/* Labels selecting the ticker's pods. */}}
{{- define "progress-control.ticker.selectorLabels" -}}
{{ include "progress-control.selectorLabels" . }}
app.kubernetes.io/component: ticker
{{- end -}}
